"""Sightings carried to a standby in the active planner's signed journal
(llm_planner_node/ros/failover.py): over DDS the standby records them in its own memory, once
each; a changed sighting does not verify."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros


def test_a_standby_records_the_sightings_of_the_active_planners_journal(ros_context, tmp_path):
    from types import SimpleNamespace

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.serialization import deserialize_message, serialize_message
    from timely_fleet.msg import PlannerJournal

    from llm_planner_node.ros.failover import FailoverLink, journal_problem, sign_journal
    from llm_planner_node.ros.memory_server import sighting_msg
    from llm_planner_node.service.failover_role import JournalOut
    from llm_planner_node.service.memory import FleetMemory, Sighting
    from timely_robot.link.signing import Counter, RobotKey

    key = RobotKey("planner", "k1", b"m" * 32)
    standby_memory = FleetMemory(tmp_path / "memory_llm_planner_standby.sqlite")

    def make(name, role, on_sightings=None):
        node = rclpy.create_node(name, context=ros_context)
        return node, FailoverLink(node, 3.0, key, Counter(), SimpleNamespace(term=1, role=role,
                                                                            on_higher_term=lambda t, n: None),
                                  on_sightings=on_sightings)

    (na, active), (ns, standby) = (make("memory_active", "active"),
                                   make("memory_standby", "standby", standby_memory.record_many))
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (na, ns):
        ex.add_node(n)

    def spin_until(pred, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not pred():
            ex.spin_once(timeout_sec=0.05)
        return pred()

    t = float(int(time.time())) - 2.5  # a wall time the message's sec and nanosec hold exactly
    cat = Sighting("tello_1", "cat", 0.87, (1.2, 0.4, 1.0), t, "a" * 32)
    cup = Sighting("base_1", "cup", None, None, t + 1.5, "")
    try:
        assert spin_until(lambda: active._journal_pub.get_subscription_count() >= 2)
        assert active.publish_now(JournalOut(1, True, (), sightings=(cat,)))  # a snapshot: only new sightings
        assert active.publish_now(JournalOut(1, False, (), sightings=(cup,)))  # a delta with no goal changed
        assert spin_until(lambda: len(standby_memory.labels()) == 2)
        assert standby_memory.last("cats") == [cat] and standby_memory.last("cup") == [cup]
        assert active.stats.sightings == 2 and standby.drops == {} and standby.replica.sequence == 2

        msg = sign_journal(PlannerJournal(node=active.name, term=1, sequence=3, sightings=[sighting_msg(cat)]),
                           key, Counter())
        got = deserialize_message(serialize_message(msg), PlannerJournal)
        assert journal_problem(got, key) is None
        got.sightings[0].x = 9.0  # somewhere else
        assert journal_problem(got, key) == "journal signature does not verify"
    finally:
        ex.shutdown()
        for n, lk in ((na, active), (ns, standby)):
            lk.destroy()
            n.destroy_node()
        standby_memory.close()


def test_what_the_active_planners_robot_found_reaches_the_standby_planners_memory_file(ros_context, tmp_path):
    """Two planner nodes as `timely-fleet up` and `up --standby` make them (security off): a goal
    on the active one whose scan finds the cat; the standby's own file holds the sighting."""
    from dataclasses import replace

    from llm_planner_node.config.params import parse_params
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"},
                                       "memory": {"path": str(tmp_path / "active.sqlite")}},
                           "security": {"mode": "off"},
                           "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]})
    standby = replace(params, planner=replace(params.planner, standby=True,
                                              memory=replace(params.planner.memory,
                                                             path=str(tmp_path / "standby.sqlite"))))
    with running_fleet(params, time_scale=0.05, context=ros_context) as active, \
            running_fleet(standby, context=ros_context, adapters=False) as follower:
        link = active.planner.failover.link
        deadline = time.monotonic() + 30
        while link.followers() == 0 and time.monotonic() < deadline:  # the standby announced itself
            time.sleep(0.05)
        assert link.followers() == 1
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            handle = client.send("d1", "look for the cat")
            res = handle.result(60)
        client.destroy()
        assert res.status == 0, res.message
        assert ("scan(cat)", "True") in [(a.skill, a.value) for a in res.answers]
        seen = active.planner.memory.last("cat")  # the scan's segment, and goto's (it reached the cat)
        assert seen and {s.robot_id for s in seen} == {"d1"} and {s.goal_id for s in seen} == {handle.goal_id}
        deadline = time.monotonic() + 10
        while follower.planner.memory.last("cat") != seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert follower.planner.memory.last("cat") == seen
        assert follower.planner.memory.path == str(tmp_path / "standby.sqlite")
