"""The segment delivery protocol without ROS (llm_planner_node/service/delivery.py): hand-worked timelines."""

from __future__ import annotations

from llm_planner_node.service.delivery import SegmentDelivery


def test_unacknowledged_segments_are_resent_every_ack_timeout_at_most_max_resends_times():
    d = SegmentDelivery(ack_timeout_s=1.0, max_resends=2, silence_timeout_s=30.0)
    d.open("g", "r1", now=0.0)
    d.sent("g", 0, "seg0", now=0.0)
    d.sent("g", 1, "seg1", now=0.5)
    assert d.due(0.9) == ([], [])
    assert d.due(1.0) == ([("r1", "seg0")], [])           # seg0 1 s old, seg1 0.5 s
    d.heard("g", 1, now=1.2)                                # seg1 acknowledged
    assert d.due(2.0) == ([("r1", "seg0")], [])           # second re-send of seg0
    assert d.due(3.0) == ([], [])                          # max_resends = 2 reached
    assert d.resends == 2


def test_silence_is_reported_only_while_the_adapter_owes_a_report():
    d = SegmentDelivery(silence_timeout_s=5.0)
    d.open("g", "r1", now=0.0)
    d.heard("g", 0, now=2.0)
    assert d.silent(6.9, {"g": True}) == []
    assert d.silent(7.1, {"g": True}) == [("g", 7.1 - 2.0)]
    assert d.silent(7.1, {"g": False}) == []


def test_the_silence_clock_starts_when_the_robot_first_owes_a_report_not_at_goal_arrival():
    # bench faults: a goal queued 5 s for the engine was dispatched at t=5.2, the robot reported
    # at once, and the goal still ended "no status for 5.3 s" (the clock had run since arrival)
    d = SegmentDelivery(silence_timeout_s=5.0)
    d.open("g", "r1", now=0.0)
    d.sent("g", 0, "seg0", now=5.2)
    assert d.silent(5.3, {"g": True}) == []
    assert d.silent(10.3, {"g": True}) == [("g", 10.3 - 5.2)]
    d.heard("g", 0, now=6.0, finished=True)        # segment 0 done; the robot waits for segment 1
    d.sent("g", 1, "seg1", now=20.0)                # 14 s later (generation), owed from now on
    assert d.silent(24.0, {"g": True}) == []
    d.sent("g", 2, "seg2", now=24.5)                # seg1 still unfinished: the clock keeps running
    assert d.silent(25.1, {"g": True}) == [("g", 25.1 - 20.0)]


def test_a_stop_is_resent_until_confirmed_by_that_robot_and_given_up_after_max_resends():
    d = SegmentDelivery(ack_timeout_s=1.0, max_resends=2)
    d.open("g", "r1", now=0.0)
    d.stop("g", "r1", "stop-g", now=0.0)
    assert d.due(1.0) == ([("r1", "stop-g")], [])
    assert not d.stop_confirmed("g", "r2")                 # another robot cannot confirm it
    assert d.due(2.0) == ([("r1", "stop-g")], [])
    assert d.due(3.0) == ([], [("g", "r1", 3)])            # given up: counted, reported once
    assert d.stops_unconfirmed == 1 and d.stops_pending() == 0
    d.stop("h", "r1", "stop-h", now=5.0)
    assert d.stop_confirmed("h", "r1") and d.stops_pending() == 0
    assert d.due(10.0) == ([], [])


def test_a_quiet_robot_that_owes_a_report_is_probed_with_its_oldest_unfinished_segment():
    """A DONE lost on the way (flooded reader): the robot acknowledged segments 0 and 1, finished 0,
    then nothing for ack_timeout -> segment 1 is re-sent (the adapter answers with its status);
    no probe while it reports, none for a goal that owes nothing."""
    d = SegmentDelivery(ack_timeout_s=1.0, max_resends=3, silence_timeout_s=30.0)
    d.open("g", "r1", now=0.0)
    d.sent("g", 0, "seg0", now=0.0)
    d.sent("g", 1, "seg1", now=0.1)
    d.heard("g", 0, now=0.2)
    d.heard("g", 1, now=0.3)
    d.heard("g", 0, now=0.5, finished=True)
    assert d.due(1.2, {"g": True}) == ([], [])            # quiet for 0.7 s only
    assert d.due(1.6, {"g": False}) == ([], [])           # owes nothing: no probe
    assert d.due(1.6, {"g": True}) == ([("r1", "seg1")], [])
    assert d.due(2.0, {"g": True}) == ([], [])            # one probe per ack_timeout
    d.heard("g", 1, now=2.1, finished=True)
    assert d.due(5.0, {"g": True}) == ([], [])            # everything finished: nothing to ask
    assert d.probes == 1


def test_a_report_for_a_later_segment_probes_an_earlier_one_that_never_reported_finished():
    d = SegmentDelivery(ack_timeout_s=1.0)
    d.open("g", "r1", now=0.0)
    for k in range(3):
        d.sent("g", k, f"seg{k}", now=0.0)
        d.heard("g", k, now=0.1)
    d.heard("g", 0, now=0.5, finished=True)
    assert d.probe_gap("g", 2, now=0.9) is None           # segment 1 sent 0.9 s ago: not yet
    assert d.probe_gap("g", 2, now=1.2) == ("r1", "seg1")  # robot is on 2, 1 never reported DONE
    assert d.probe_gap("g", 2, now=1.5) is None           # once per ack_timeout
    assert d.probe_gap("g", 1, now=3.0) is None           # nothing before 1 is missing
