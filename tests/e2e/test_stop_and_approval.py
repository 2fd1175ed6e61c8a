"""Operator stop and approval over real ROS (the safety-envelope issue), with independent clients:
plain rclpy service clients and subscriptions on the generated interfaces (goals through the
project's GoalClient). The scripted engine writes the instruction as the plan, so a test chooses
exactly which skills a plan calls.

- ``planner/stop_robots``: a busy robot's goal ends CANCELLED with the operator's name and its
  adapter reports IDLE ``stopped: ...``; a second stop is accepted with nothing to stop; a wrong
  secret and an unknown robot are refused with one sentence; every stop shows on /diagnostics;
- a fleet of 60 simulated drones, each running a goal: ``all`` stops every one (each goal
  CANCELLED, every adapter reports stopped); the answer's latency is printed, not asserted;
- ``planner/approve``: a plan with a marked skill waits (feedback says so) while other goals go
  on; approve -> SUCCEEDED; deny -> CANCELLED "denied by operator ..." and the robot stops; no
  answer -> CANCELLED "approval timed out after ..." and the robot stops; unmarked plans are not
  held.
"""

from __future__ import annotations

import hashlib
import time

import pytest
from testkit import wait_until

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
SUCCEEDED, CANCELLED = 0, 2
OPERATOR_SECRET = "operator-secret-for-stop-tests"
LONG_PLAN = "d,3000;" * 6  # six 3 s hovers: busy for a while at any time scale used here


def wait_future(fut, timeout=10.0):
    assert wait_until(fut.done, timeout), "no answer from the planner"
    return fut.result()


def params(tmp_path, robots, mode="sign"):
    from llm_planner_node.config.params import parse_params

    return parse_params({
        "planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 10.0},
        "security": {"mode": mode, "keystore": str(tmp_path / "keys"),
                     "cancel_operator_keys_sha256": hashlib.sha256(OPERATOR_SECRET.encode()).hexdigest()},
        "robots": robots})


class Operator:
    """An independent operator node: the two services, /robot_status and /diagnostics."""

    def __init__(self, ctx):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.node import Node
        from timely_fleet.msg import RobotStatus
        from timely_fleet.srv import ApproveSegment, StopRobots

        from timely_robot.link.ros import STATUS_QOS, STATUS_TOPIC

        self.StopRobots, self.ApproveSegment = StopRobots, ApproveSegment
        self.node = Node("test_operator", context=ctx)
        self.stop_cli = self.node.create_client(StopRobots, "planner/stop_robots")
        self.approve_cli = self.node.create_client(ApproveSegment, "planner/approve")
        self.statuses: list = []
        self.diagnostics: list = []
        self.node.create_subscription(RobotStatus, STATUS_TOPIC, self.statuses.append, STATUS_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 10)

    def ready(self):
        return self.stop_cli.wait_for_service(timeout_sec=20) and self.approve_cli.wait_for_service(timeout_sec=20)

    def stop(self, robots=(), everyone=False, secret=OPERATOR_SECRET, operator="alice"):
        req = self.StopRobots.Request(robot_ids=list(robots), all=everyone, operator_name=operator, secret=secret)
        t0 = time.monotonic()
        res = wait_future(self.stop_cli.call_async(req), 20)
        return res, time.monotonic() - t0

    def decide(self, goal_id, approve, secret=OPERATOR_SECRET, operator="bob"):
        req = self.ApproveSegment.Request(goal_id=goal_id, approve=approve, operator_name=operator, secret=secret)
        return wait_future(self.approve_cli.call_async(req))

    def stopped(self, robot_id):
        """The adapter's IDLE 'stopped: ...' reports for a robot."""
        return [s.error for s in list(self.statuses) if s.robot_id == robot_id and s.state == 0
                and s.error.startswith("stopped:")]

    def operator_diagnostics(self):
        return [s for a in list(self.diagnostics) for s in a.status if s.name.endswith(": operator")]


@pytest.fixture
def fleet(ros_context, tmp_path):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    robots = [{"id": "d1", "kind": "drone", "approval": {"skills": ["land"], "timeout_s": 60}},
              {"id": "d2", "kind": "drone"},
              {"id": "d3", "kind": "drone", "approval": {"skills": ["land", "goto"], "timeout_s": 1.5}},
              {"id": "a1", "kind": "arm", "approval": {"all": True}}]
    with running_fleet(params(tmp_path, robots), time_scale=0.2, context=ros_context) as f:
        client = GoalClient(ros_context)
        op = Operator(ros_context)
        with spinning(client.node, ros_context), spinning(op.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            assert op.ready()
            f.client, f.op = client, op
            yield f
        client.destroy()
        op.node.destroy_node()


def executing(f, h):
    return wait_until(lambda: any(s.goal_id == h.goal_id and s.state == 2 for s in list(f.op.statuses)), 15)


def test_stop_of_a_busy_robot_ends_its_goal_with_the_operators_name_and_the_robot_stops(fleet):
    h = fleet.client.send("d2", LONG_PLAN, tuf=NORMAL)
    assert executing(fleet, h), "the robot never started"
    res, dt = fleet.op.stop(["d2"])
    print(f"stop of one busy robot answered in {dt * 1000:.0f} ms")
    assert res.accepted and list(res.stopped) == ["d2"], res.message
    assert res.message == "stopped by operator alice: 1 robot(s) stopped, their goals cancelled"
    r = h.result(20)
    assert r.status == CANCELLED and r.message == "stopped by operator alice", r.message
    assert h.action_status() == 5  # CANCELED, as a ROS cancel ends
    assert wait_until(lambda: fleet.op.stopped("d2"), 10), "the adapter never reported the robot stopped"
    # idempotent: nothing left to stop; the robot is halted again all the same
    res2, _ = fleet.op.stop(["d2"])
    assert res2.accepted and list(res2.stopped) == [], res2.message
    assert res2.message == "nothing to stop: no goal in flight on the 1 robot(s); each was sent a halt"
    # the stop is on /diagnostics and in the planner's operator record
    assert wait_until(lambda: any("operator alice stopped 1 robot(s): 1 goal(s) cancelled" in v.value
                                  for s in fleet.op.operator_diagnostics() for v in s.values), 5)
    counters = fleet.planner.service.operator.counters
    assert counters["stops"] == 2 and counters["robots_stopped"] == 1


def test_a_stop_without_an_operators_secret_or_for_an_unknown_robot_is_refused(fleet):
    h = fleet.client.send("d2", LONG_PLAN, tuf=NORMAL)
    assert executing(fleet, h)
    res, _ = fleet.op.stop(["d2"], secret="guess")
    assert not res.accepted and list(res.stopped) == []
    assert res.message == "refused: the secret is not an operator's (security.cancel_operator_keys_sha256)"
    res, _ = fleet.op.stop(["d2"], secret="")
    assert not res.accepted and res.message.startswith("refused: the secret is not an operator's")
    res, _ = fleet.op.stop(["d2", "zz9"])
    assert not res.accepted
    assert res.message == "unknown robot 'zz9' (configured robots: d1, d2, d3, a1); nothing was stopped"
    assert not h.done, "a refused stop stopped the goal"
    assert fleet.planner.service.operator.counters["refused"] == 2
    assert wait_until(lambda: any(v.value.startswith("stop by 'alice' refused")
                                  for s in fleet.op.operator_diagnostics() for v in s.values), 5)
    fleet.op.stop(["d2"])
    assert h.result(20).status == CANCELLED


def test_a_marked_skill_waits_for_approval_while_other_goals_go_on_then_runs_when_approved(fleet):
    held = fleet.client.send("d1", "tc,10;lnd;", tuf=NORMAL)
    assert wait_until(lambda: held.feedback and not held.feedback[-1].skills, 15), "no approval notice"
    notice = held.feedback[-1]
    assert notice.index == 1 and notice.text.startswith("waiting for approval of segment 1: lnd"), notice.text
    assert held.goal_id in notice.text  # what to approve
    assert [f.index for f in held.feedback] == [0, 1]
    # the hold blocks neither the scheduler nor other robots
    other = fleet.client.send("d2", "tc,10;tc,10;", tuf=NORMAL).result(30)
    assert other.status == SUCCEEDED, other.message
    assert not held.done
    assert wait_until(lambda: any("1 goal(s) waiting for approval: d1 segment 1" in s.message
                                  for s in fleet.op.operator_diagnostics()), 5)
    res = fleet.op.decide(held.goal_id[:8], True)  # 8 hex digits are enough
    assert res.accepted and res.message == f"segment 1 of goal {held.goal_id[:8]} (robot d1) approved by bob"
    r = held.result(30)
    assert r.status == SUCCEEDED, r.message
    assert len(r.segments) == 2 and r.segments[1].text.strip() == "lnd;"
    assert held.feedback[-1].index == 1 and held.feedback[-1].skills[0].name == "land"
    # a repeated answer (a lost reply re-sent) gets the first one's answer; the goal is gone
    again = fleet.op.decide(held.goal_id, True)
    assert again.accepted and "already approved by bob" in again.message
    assert not fleet.op.decide(held.goal_id, False).accepted


def test_a_denied_segment_ends_the_goal_with_the_operators_name_and_stops_the_robot(fleet):
    h = fleet.client.send("d1", "tc,10;lnd;", tuf=NORMAL)
    assert wait_until(lambda: h.feedback and not h.feedback[-1].skills, 15)
    res = fleet.op.decide(h.goal_id, False, operator="carol")
    assert res.accepted, res.message
    r = h.result(20)
    assert r.status == CANCELLED and r.message == "denied by operator carol: segment 1 (lnd;)", r.message
    assert h.action_status() == 5
    assert wait_until(lambda: any(s.goal_id == h.goal_id and s.state == 0 and s.error.startswith("stopped:")
                                  for s in list(fleet.op.statuses)), 10), "the robot was not stopped"
    # the land was never sent to the robot
    assert not any(s.goal_id == h.goal_id and s.sequence == 1 and s.state in (2, 3) for s in list(fleet.op.statuses))


def test_an_unanswered_segment_times_out_ends_the_goal_and_stops_the_robot(fleet):
    h = fleet.client.send("d3", "g,bottle;tc,10;", tuf=NORMAL)  # the first segment already waits
    r = h.result(20)
    assert r.status == CANCELLED, r.message
    assert r.message.startswith("approval timed out after 1.5 s: segment 0 (g,bottle;)"), r.message
    assert [f.index for f in h.feedback] == [0] and not h.feedback[0].skills
    assert wait_until(lambda: any(s.goal_id == h.goal_id and s.error.startswith("stopped:")
                                  for s in list(fleet.op.statuses)), 10), "the robot was not stopped"
    counters = fleet.planner.service.operator.counters
    assert counters["approval_timeouts"] == 1 and counters["approval_requests"] == 1


def test_unmarked_plans_are_not_held_and_all_marks_every_segment(fleet):
    r = fleet.client.send("d1", "tc,10;tc,10;", tuf=NORMAL).result(30)  # d1 marks only land
    assert r.status == SUCCEEDED, r.message
    h = fleet.client.send("a1", "home();pick(cup);", tuf=NORMAL)  # a1: all
    for k in (0, 1):
        assert wait_until(lambda k=k: any(not f.skills and f.index == k for f in h.feedback), 15), k
        assert fleet.op.decide(h.goal_id, True).accepted
    r = h.result(30)
    assert r.status == SUCCEEDED, r.message
    assert fleet.planner.service.operator.counters["approvals"] == 2


def test_stop_all_of_60_busy_drones(ros_context, tmp_path):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    n = 60
    robots = [{"id": f"d{i}", "kind": "drone"} for i in range(n)]
    with running_fleet(params(tmp_path, robots), time_scale=0.5, context=ros_context) as f:
        client = GoalClient(ros_context)
        op = Operator(ros_context)
        with spinning(client.node, ros_context), spinning(op.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            assert op.ready()
            handles = [client.send(f"d{i}", LONG_PLAN, tuf=NORMAL) for i in range(n)]
            assert wait_until(lambda: all(any(s.goal_id == h.goal_id and s.state == 2 for s in list(op.statuses))
                                          for h in handles), 60), "not every robot started"
            res, dt = op.stop(everyone=True)
            print(f"stop --all of {n} busy drones answered in {dt * 1000:.0f} ms")
            assert res.accepted and sorted(res.stopped) == sorted(f"d{i}" for i in range(n)), res.message
            results = [h.result(30) for h in handles]
            assert all(r.status == CANCELLED and r.message == "stopped by operator alice" for r in results)
            assert wait_until(lambda: all(op.stopped(f"d{i}") for i in range(n)), 20), \
                [f"d{i}" for i in range(n) if not op.stopped(f"d{i}")]
            res2, dt2 = op.stop(everyone=True)
            print(f"second stop --all (nothing to stop) answered in {dt2 * 1000:.0f} ms")
            assert res2.accepted and list(res2.stopped) == []
        client.destroy()
        op.node.destroy_node()


def test_with_security_off_no_secret_is_needed(ros_context, tmp_path):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    with running_fleet(params(tmp_path, [{"id": "d1", "kind": "drone"}], mode="off"), time_scale=0.2,
                       context=ros_context) as f:
        client = GoalClient(ros_context)
        op = Operator(ros_context)
        with spinning(client.node, ros_context), spinning(op.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            assert op.ready()
            h = client.send("d1", LONG_PLAN, tuf=NORMAL)
            assert wait_until(lambda: any(s.goal_id == h.goal_id and s.state == 2 for s in list(op.statuses)), 15)
            res, _ = op.stop(["d1"], secret="", operator="")
            assert res.accepted and list(res.stopped) == ["d1"], res.message
            assert h.result(20).message == "stopped by operator unnamed"
        client.destroy()
        op.node.destroy_node()
