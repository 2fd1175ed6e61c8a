"""Planner terms over real ROS (fencing): two real planner nodes, of terms 1 and 2, and one real
adapter on the signed link. Once the adapter has heard the term-2 planner, nothing the term-1
planner sends (segments, re-sends, heartbeats, the stop at its goal's end) reaches the robot, and
each is counted; the term-1 planner commands the robot again only after raising its term above 2.
An independent node watches ``robot_segments``, ``/robot_status`` and ``/diagnostics``."""

from __future__ import annotations

import time

import pytest
from testkit import wait_until

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
SUCCEEDED = 0
STALE = "stale planner term"


def fleet_params(tmp_path, term):
    from llm_planner_node.config.params import parse_params

    return parse_params({"planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 1.5, "term": term},
                         "security": {"mode": "sign", "keystore": str(tmp_path / "keys"), "lease_s": 30.0},
                         "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]})


def test_the_adapter_obeys_only_the_highest_planner_term(ros_context, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    from timely_fleet.msg import RobotStatus, SkillSegment

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from timely_robot.link.ros import SEGMENTS_TOPIC, SHARED_SEGMENT_QOS, STATUS_QOS
    from llm_planner_node.up import running_fleet

    # the term-1 planner with the adapter; the term-2 planner in its own namespace (its own action
    # server), publishing its robot messages on the adapter's topic
    with running_fleet(fleet_params(tmp_path, 1), time_scale=0.01, context=ros_context) as old, \
            running_fleet(fleet_params(tmp_path, 2), context=ros_context, adapters=False, namespace="standby",
                          ros_args=["-r", f"{SEGMENTS_TOPIC}:=/{SEGMENTS_TOPIC}"]) as new:
        core = old.adapters.cores["d1"]
        client = GoalClient(ros_context)
        sent: list = []  # every planner message on the wire, as (monotonic time, message)
        client.node.create_subscription(SkillSegment, f"/{SEGMENTS_TOPIC}",
                                        lambda m: sent.append((time.monotonic(), m)), SHARED_SEGMENT_QOS)
        statuses: list = []
        client.node.create_subscription(RobotStatus, "/robot_status", statuses.append, STATUS_QOS)
        roles: list = []
        client.node.create_subscription(DiagnosticArray, "/diagnostics", lambda a: roles.extend(
            (s.name, s.message) for s in a.status if s.name.endswith(": role")), 10)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            # before the takeover the term-1 planner commands the robot
            res = client.send("d1", "tc,90;", tuf=NORMAL).result(20)
            assert res.status == SUCCEEDED, res.message
            assert core.term == 1
            # the term-2 planner speaks to the robot (a heartbeat, as a planner taking over would)
            new.planner.ports.heartbeat("0" * 32, "d1")
            assert wait_until(lambda: core.term == 2, 5), core.term
            fenced_at = time.monotonic()
            # the term-1 planner's next goal: its segment, re-sends and the stop at the goal's end
            h = client.send("d1", "tc,90;", tuf=NORMAL)
            res = h.result(20)
            assert res.status != SUCCEEDED, res.message
            assert wait_until(lambda: any(m.goal_id == h.goal_id and m.cancel for _t, m in sent), 5)
            stale = [m for t, m in sent if t > fenced_at and m.term == 1]
            assert {m.goal_id for m in stale} == {h.goal_id} and any(m.cancel for m in stale)
            assert wait_until(lambda: old.adapters.link_drops.get(STALE, 0) == sum(
                1 for t, m in sent if t > fenced_at and m.term == 1), 5), (old.adapters.link_drops, len(stale))
            # none of it reached the robot: no status of that goal from the adapter, on the wire or in the core
            assert not any(s.goal_id == h.goal_id for s in statuses)
            assert not any(e.goal_id == h.goal_id for e in core.events)
            assert core.stale_term_drops == old.adapters.link_drops[STALE]
            # the term-1 planner raises its term above 2: it commands the robot again
            old.planner.failover.set_term(3)
            with pytest.raises(ValueError):
                old.planner.failover.set_term(3)
            res = client.send("d1", "tc,90;", tuf=NORMAL).result(20)
            assert res.status == SUCCEEDED, res.message
            assert core.term == 3
            assert wait_until(lambda: ("llm_planner: role", "active, term 3") in roles, 3), roles[-4:]
        client.destroy()


def test_security_mode_off_applies_the_term_rule_too(ros_context):
    """Unsigned (``security.mode: off``: the adapter has no verifier): a message of a stale term is
    dropped and counted all the same."""
    from timely_robot.link.rules import HEARTBEAT_SEQUENCE
    from timely_robot.skills import TELLO_MINISPEC as T
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_node import AdapterNode
    from timely_robot.link.ros import make_segment_msg
    from robot_adapters.executor import SimulatedExecutor

    node = AdapterNode("terms_off", context=ros_context)
    try:
        core = node.add_robot(AdapterCore("d1", SimulatedExecutor("d1", "drone", T, lambda c: 0.01),
                                          node.status_publisher("d1")))
        node._deliver(make_segment_msg("a" * 32, "d1", HEARTBEAT_SEQUENCE, term=2), core)
        node._deliver(make_segment_msg("b" * 32, "d1", 0, [T.validate("tc", [90])], final=True, term=1), core)
        node._deliver(make_segment_msg("b" * 32, "d1", 0, cancel=True, term=1), core)
        assert core.term == 2 and node.link_drops == {STALE: 2} and core.stale_term_drops == 2
        assert not any(e.goal_id == "b" * 32 for e in core.events)
    finally:
        node.shutdown_robots()
        node.destroy_node()
