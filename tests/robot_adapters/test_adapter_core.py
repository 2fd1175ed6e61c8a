"""AdapterCore without ROS: timeouts, MiniSpec text, fleets of hundreds of simulated robots."""

from __future__ import annotations

import threading
import time

from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.skills import INDY7_ARM, TELLO_MINISPEC as T
from robot_adapters.adapter_core import STATE_DONE, STATE_FAILED, SegmentIn
from robot_adapters.adapter_core import AdapterCore
from robot_adapters.executor import SimulatedExecutor
from robot_adapters.sim.sim_fleet import SimFleet

from adapter_testkit import Hangs
from testkit import wait_until


def test_skill_timeout_reports_failed_and_stops_robot():
    events = []
    ex = Hangs()
    core = AdapterCore("d", ex, events.append, time_scale=0.01, skill_timeout_margin_s=1.0).start()
    try:
        core.submit(SegmentIn("g", 0, skills=[("mf", ["100"])], final=True))
        assert wait_until(lambda: any(e.state == STATE_FAILED for e in events))
        failed = [e for e in events if e.state == STATE_FAILED][0]
        assert "timeout" in failed.error and ex.stopped.is_set()
    finally:
        core.shutdown()


def test_minispec_text_runs_through_interpreter_and_feeds_model():
    events = []
    model = ExecutionTimeModel()
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.01)
    core = AdapterCore("d", ex, events.append, model=model).start()
    try:
        core.submit(SegmentIn("g", 0, text="to;_1=iv,cat;?_1==True{2{tc,45}};",
                              skills=[("to", []), ("iv", ["cat"]), ("tc", ["45"])]))  # as the planner declares
        core.submit(SegmentIn("g", 1, text="mf,_9;", skills=[("mf", ["_9"])], final=True))
        assert wait_until(lambda: any(e.state in (STATE_DONE, STATE_FAILED) and e.sequence == 1 for e in events))
        done = [e for e in events if e.state == STATE_DONE]
        assert done[0].skill_names == ["takeoff", "is_visible", "turn_cw", "turn_cw"]
        failed = [e for e in events if e.state == STATE_FAILED]
        assert failed and "_9" in failed[0].error  # undefined variable at run time
        assert model.observations == 4
    finally:
        core.shutdown()


def test_three_hundred_simulated_robots_in_one_process():
    fleet = SimFleet(drones=200, arms=80, chat=20, time_scale=0.002, seed=1)
    events = []
    lock = threading.Lock()

    def pub(e):
        with lock:
            events.append(e)

    for c in fleet.build(lambda rid: pub):
        c.start()
    try:
        t0 = time.monotonic()
        for c in fleet.cores:
            if c.robot_kind == "arm":
                segs = [[("move_to", ["300", "0", "200"]), ("pick", ["cup"])], [("place", ["cup", "bin"])]]
            elif c.robot_kind == "chat":
                segs = [[("say", ["hello there"])], [("say", ["how can I help"])]]
            else:
                segs = [[("to", [])], [("mf", ["100"]), ("tc", ["90"])]]
            for i in (1, 0):  # out of order on purpose
                c.submit(SegmentIn("g", i, skills=segs[i], final=i == 1))
        ok = wait_until(lambda: sum(1 for e in events if e.state == STATE_DONE) == 2 * len(fleet.cores), 60)
        assert ok, sum(1 for e in events if e.state == STATE_DONE)
        assert time.monotonic() - t0 < 60
        for rid in ("sim_drone_7", "sim_arm_3", "sim_chat_0"):
            assert [e.sequence for e in events if e.robot_id == rid and e.state == STATE_DONE] == [0, 1]
        assert not any(e.state == STATE_FAILED for e in events)
    finally:
        for c in fleet.cores:
            c.shutdown(timeout=1)


def test_fleet_speed_change_is_visible_in_measured_durations():
    fleet = SimFleet(drones=1, time_scale=0.01, seed=3)
    call = T.validate("mf", [300])
    rng_a = fleet.truth.sample("sim_drone_0", "drone", [call], __import__("numpy").random.default_rng(0))
    fleet.set_speed("sim_drone_0", 0.5)
    rng_b = fleet.truth.sample("sim_drone_0", "drone", [call], __import__("numpy").random.default_rng(0))
    assert rng_b > 1.6 * rng_a
    assert INDY7_ARM.id == "indy7_arm"


def test_minispec_goal_over_several_segments_reports_each_segment_separately():
    """Regression: the per-goal interpreter must run each segment's calls under that segment's
    sequence number and report that segment's own measured durations (not the first one's)."""
    from robot_adapters.adapter_core import STATE_EXECUTING

    events = []
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.02)
    core = AdapterCore("d", ex, events.append).start()
    try:
        core.submit(SegmentIn("g", 0, text="tc,90;", skills=[("tc", ["90"])]))
        core.submit(SegmentIn("g", 1, text="mf,100;mu,50;", skills=[("mf", ["100"]), ("mu", ["50"])]))
        core.submit(SegmentIn("g", 2, text="tp;", skills=[("tp", [])], final=True))
        assert wait_until(lambda: sum(e.state == STATE_DONE for e in events) == 3)
    finally:
        core.shutdown()
    done = {e.sequence: e for e in events if e.state == STATE_DONE}
    assert [list(done[k].skill_names) for k in (0, 1, 2)] == [["turn_cw"], ["move_forward", "move_up"], ["take_picture"]]
    assert all(len(done[k].skill_durations_s) == len(done[k].skill_names) for k in done)
    executing = [(e.sequence, e.current_skill) for e in events if e.state == STATE_EXECUTING]
    assert executing == [(0, "turn_cw"), (1, "move_forward"), (1, "move_up"), (2, "take_picture")]


def test_a_newer_goal_completes_a_plan_whose_last_segment_was_not_flagged_final():
    """The planner sends one plan per robot at a time and cannot always flag the last segment:
    the next goal's segments must not wait forever behind the finished plan."""
    events = []
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.01)
    core = AdapterCore("d", ex, events.append).start()
    try:
        core.submit(SegmentIn("g1", 0, skills=[("tc", ["90"])]))
        core.submit(SegmentIn("g1", 1, skills=[("mf", ["100"])]))  # last segment, final=False
        assert wait_until(lambda: sum(e.state == STATE_DONE for e in events) == 2)
        core.submit(SegmentIn("g2", 0, skills=[("mu", ["50"])]))
        assert wait_until(lambda: any(e.goal_id == "g2" and e.state == STATE_DONE for e in events), timeout=3)
        # but a goal whose own next segment is missing still blocks (strict order within a goal)
        core.submit(SegmentIn("g3", 1, skills=[("md", ["50"])]))
        time.sleep(0.3)
        assert not any(e.goal_id == "g3" and e.state == STATE_DONE for e in events)
    finally:
        core.shutdown()


def test_a_fleet_runs_on_one_event_loop_without_a_thread_per_robot_or_skill():
    """200 simulated robots executing at once add no thread per robot, none per skill
    (skills are timers on the process's adapter event loop)."""
    from robot_adapters.event_loop import default_loop

    default_loop().call_soon(lambda: None)  # the loop thread exists before counting
    time.sleep(0.05)
    before = threading.active_count()
    fleet = SimFleet(drones=200, time_scale=0.01, seed=2)
    events = []
    peak = [0]
    for c in fleet.build(lambda rid: events.append):
        c.start()
    try:
        for c in fleet.cores:
            c.submit(SegmentIn("g", 0, skills=[("mf", ["100"]), ("tc", ["90"])], final=True))
        deadline = time.monotonic() + 30
        while sum(e.state == STATE_DONE for e in list(events)) < 200 and time.monotonic() < deadline:
            peak[0] = max(peak[0], threading.active_count())
            time.sleep(0.005)
        assert sum(e.state == STATE_DONE for e in list(events)) == 200
        assert peak[0] - before <= 2, (before, peak[0])
    finally:
        for c in fleet.cores:
            c.shutdown(timeout=1)


def test_the_segment_started_hook_hears_each_segment_once_and_a_failing_observer_does_not_stop_the_robot():
    from robot_adapters.adapter_core import HOOKS

    events, started = [], []

    def boom(core, seg):
        raise RuntimeError("observer bug")

    observers = [lambda core, seg: started.append((core.robot_id, seg.goal_id, seg.sequence)), boom]
    HOOKS.segment_started.extend(observers)
    core = AdapterCore("d", SimulatedExecutor("d", "drone", T, lambda c: 0.01), events.append).start()
    try:
        core.submit(SegmentIn("g", 0, skills=[("tc", ["45"])]))
        core.submit(SegmentIn("g", 1, skills=[("tc", ["45"])], final=True))
        core.submit(SegmentIn("g", 1, skills=[("tc", ["45"])], final=True))  # a duplicate is not executed
        assert wait_until(lambda: sum(e.state == STATE_DONE for e in events) == 2)
        assert started == [("d", "g", 0), ("d", "g", 1)]
    finally:
        core.shutdown()
        for fn in observers:
            HOOKS.segment_started.remove(fn)
