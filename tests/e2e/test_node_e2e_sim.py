"""The planning node end to end over real ROS: action goals in, segments to real adapter nodes,
robot status back, results out. Engine: the calibrated simulated engine in real time (the same
scenarios run on real vLLM in test_node_e2e_vllm.py)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import fleet_with_client

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
URGENT = (0.2, -6.67, 2.0)


def fleet_params(**planner):
    from llm_planner_node.config.params import parse_params

    return parse_params({
        "planner": {"policy": "timelyllm", "engine": {"kind": "sim"}, "robot_timeout_s": 2.0, **planner},
        "robots": [
            {"id": "d1", "kind": "drone", "adapter": "sim"},
            {"id": "d2", "kind": "drone", "adapter": "sim"},
            {"id": "a1", "kind": "arm", "adapter": "sim"},
            {"id": "ext1", "kind": "drone", "adapter": "external"},
        ],
    })


@pytest.fixture
def fleet(ros_context):

    with fleet_with_client(fleet_params(), ros_context, time_scale=0.05) as f:
        yield f


def record(node, msg_type, topic, qos=None):
    from timely_robot.link.ros import STATUS_QOS

    got: list[tuple[float, object]] = []
    node.create_subscription(msg_type, topic, lambda m: got.append((time.monotonic(), m)), qos or STATUS_QOS)
    return got


def record_segments(node, robot_id):
    """Segments and stops the planner sends ``robot_id``: on the shared ``/robot_segments`` topic
    (the planner's default), picked by ``robot_id``; the lease's heartbeats are left out."""
    from timely_fleet.msg import SkillSegment

    from timely_robot.link.rules import HEARTBEAT_SEQUENCE
    from timely_robot.link.ros import SHARED_SEGMENT_QOS

    got: list[tuple[float, object]] = []

    def on_segment(m):
        if m.robot_id == robot_id and not (m.sequence == HEARTBEAT_SEQUENCE and not m.cancel):
            got.append((time.monotonic(), m))

    node.create_subscription(SkillSegment, "/robot_segments", on_segment, SHARED_SEGMENT_QOS)
    return got


def test_mixed_urgency_goals_segments_in_order_and_urgent_first(fleet):
    from timely_fleet.msg import RobotStatus

    statuses = record(fleet.client.node, RobotStatus, "/robot_status")
    seg_d1 = record_segments(fleet.client.node, "d1")
    time.sleep(0.5)  # let the subscriptions match
    normal = fleet.client.send("d1", "look for the cat", tuf=NORMAL, task_type="drone-normal")
    time.sleep(0.05)
    urgent = fleet.client.send("d2", "avoid injuring the person in front of you", tuf=URGENT,
                               task_type="drone-urgent")
    rn, ru = normal.result(30), urgent.result(30)
    assert rn.status == 0 and ru.status == 0, (rn.message, ru.message)
    # feedback: one per segment, in order, the first long before the plan was complete
    assert [f.index for f in normal.feedback] == list(range(len(rn.segments))) and len(rn.segments) >= 3
    assert normal.feedback[-1].final and not normal.feedback[0].final
    assert rn.segments[0].dispatch_s < rn.segments[-1].generation_end_s
    # the urgent goal's first segment went out before the normal plan was fully generated
    urgent_first = urgent.sent_at + ru.segments[0].dispatch_s
    normal_generated = normal.sent_at + rn.segments[-1].generation_end_s
    assert urgent_first < normal_generated
    # segments reached the adapter in order and executed in order
    assert [m.sequence for _, m in seg_d1 if not m.cancel][: len(rn.segments)] == list(range(len(rn.segments)))
    done = [m.sequence for _, m in statuses if m.robot_id == "d1" and m.state == RobotStatus.STATE_DONE]
    assert done == list(range(len(rn.segments)))
    for k, s in enumerate(rn.segments):  # timing record is consistent (Result = DESIGN.md metrics)
        assert s.queued_s <= s.generation_start_s <= s.generation_end_s <= s.dispatch_s
        assert s.dispatch_s <= s.execution_start_s <= s.execution_end_s
        if k:
            assert s.execution_start_s >= rn.segments[k - 1].execution_end_s - 1e-6
    assert rn.response_time_s == pytest.approx(rn.segments[0].execution_start_s)
    assert 0 < ru.time_utility <= URGENT[2] and 0 < rn.time_utility <= NORMAL[2]


def test_cancel_mid_plan_stops_generation_and_tells_the_adapter(fleet):
    seg_a1 = record_segments(fleet.client.node, "a1")
    time.sleep(0.5)
    h = fleet.client.send("a1", "desk cleaning", tuf=NORMAL, task_type="arm")
    deadline = time.monotonic() + 10
    while not h.feedback and time.monotonic() < deadline:
        time.sleep(0.01)
    assert h.feedback, "no segment before cancel"
    fleet.client.cancel(h)
    res = h.result(10)
    assert res.status == 2 and "cancel" in res.message  # STATUS_CANCELLED
    assert h.action_status() == 5  # action_msgs GoalStatus.STATUS_CANCELED
    time.sleep(0.3)
    cancels = [m for _, m in seg_a1 if m.cancel]
    assert cancels, "the adapter was not told to stop"
    n_plan = 11  # the desk-cleaning plan has 11 segments; the cancel came after the first
    assert len([m for _, m in seg_a1 if not m.cancel]) < n_plan
    # the robot is free again: a new goal for it is accepted and completes
    again = fleet.client.send("a1", "stack the red, blue and green boxes", tuf=NORMAL, task_type="arm").result(30)
    assert again.status == 0, again.message


@pytest.mark.parametrize("goal, reason", [
    (dict(robot_id="ghost"), "unknown robot 'ghost'"),
    (dict(ert_s=0.0), "ert_s must be > 0"),
    (dict(alpha=0.5), "alpha must be <= 0"),
    (dict(beta=0.0), "beta must be > 0"),
    (dict(ert_s=1e308), "ert_s must be > 0 and <= 86400 seconds, got 1e+308"),
    (dict(alpha=-1e308), "alpha must be <= 0 (utility cannot grow with lateness) and >= -1e+06, got -1e+308"),
    (dict(beta=1e308), "beta must be > 0 and <= 1e+06, got 1e+308"),
    (dict(robot_id="r" * 100_000), "robot_id has 100000 characters, the limit is 64"),
    (dict(instruction="   "), "instruction is empty"),
    (dict(instruction="x" * 5000), "the limit is 2000"),
    (dict(robot_kind="arm"), "is a drone, not a arm"),
    (dict(skill_set="indy7_arm"), "runs skill set 'tello_minispec'"),
    (dict(skill_set="no_such_set"), "unknown skill set"),
])
def test_invalid_goals_end_at_once_with_their_reason(fleet, goal, reason):
    from timely_fleet.action import PlanTask

    base = dict(robot_id="d1", robot_kind="drone", task_type="t", instruction="look for the cat",
                ert_s=1.0, alpha=-2.0, beta=1.0, skill_set="", max_tokens=0)
    base.update(goal)
    g = PlanTask.Goal(**base)
    h = fleet.client.send(g.robot_id, g.instruction, robot_kind=g.robot_kind, skill_set=g.skill_set,
                          tuf=(g.ert_s, g.alpha, g.beta))
    res = h.result(10)
    assert res.status == PlanTask.Result.STATUS_REJECTED
    assert reason in res.message
    assert h.action_status() == 6  # ABORTED: ROS 2 rejection cannot carry a reason


def test_second_goal_for_a_busy_robot_is_rejected(fleet):
    first = fleet.client.send("a1", "desk cleaning", tuf=NORMAL)
    time.sleep(0.2)
    second = fleet.client.send("a1", "stack the red, blue and green boxes", tuf=NORMAL).result(10)
    assert second.status == 1 and "still executing goal" in second.message
    assert first.result(60).status == 0


def test_adapter_that_dies_mid_plan_aborts_the_goal_with_a_reason(fleet, ros_context):
    from rclpy.executors import SingleThreadedExecutor
    from timely_fleet.msg import RobotStatus

    from timely_robot.execution_time import ExecutionTimeModel
    from timely_robot.skills import TELLO_MINISPEC
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_node import AdapterNode
    from robot_adapters.sim.sim_fleet import SampledExecutor

    adapter = AdapterNode("ext1_adapter", context=ros_context)
    # slow robot (time_scale 1): the plan is still executing when the adapter dies
    adapter.add_robot(AdapterCore("ext1", SampledExecutor("ext1", "drone", TELLO_MINISPEC,
                                                          ExecutionTimeModel(online=False), 0),
                                  adapter.status_publisher("ext1")))
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(adapter)
    statuses = record(fleet.client.node, RobotStatus, "/robot_status")
    time.sleep(0.5)
    h = fleet.client.send("ext1", "look for the cat", tuf=NORMAL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(m.robot_id == "ext1" and m.state == RobotStatus.STATE_EXECUTING
                                                  for _, m in statuses):
        ex.spin_once(timeout_sec=0.05)
    assert any(m.robot_id == "ext1" for _, m in statuses), "adapter never reported"
    for core in adapter.cores.values():  # the adapter process dies (kill -9): nothing more reaches the bus
        core.publish = lambda ev: None
    adapter.shutdown_robots()
    ex.shutdown()
    adapter.destroy_node()
    t_dead = time.monotonic()
    res = h.result(20)
    assert res.status == 6, res.message  # STATUS_TIMEOUT
    assert "ext1 sent no status" in res.message
    assert time.monotonic() - t_dead < 10  # robot_timeout_s = 2 s, not forever


def test_engine_failure_ends_affected_goals_and_the_node_keeps_serving(ros_context):
    """The engine dies mid-generation (its step raises): every goal it was serving ends with
    STATUS_ENGINE_FAILED and the reason, the node builds a new engine and serves the next goal."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.sim_engine import RealtimeSimEngine
    from llm_planner_node.up import running_fleet

    class DiesOnce(RealtimeSimEngine):
        died = False

        def step(self):
            if self._running and not DiesOnce.died:
                DiesOnce.died = True
                raise RuntimeError("CUDA error: device lost")
            return super().step()

    with running_fleet(fleet_params(), time_scale=0.05, context=ros_context,
                       engine=DiesOnce(WallClock())) as f:
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            first = client.send("d1", "look for the cat", tuf=NORMAL).result(20)
            assert first.status == 5 and "device lost" in first.message  # STATUS_ENGINE_FAILED
            assert not isinstance(f.planner.service.planner.engine, DiesOnce)  # restarted from the factory
            second = client.send("d1", "look for the cat", tuf=NORMAL).result(20)
            assert second.status == 0, second.message
        client.destroy()


def test_an_engine_that_cannot_be_rebuilt_refuses_goals_with_the_reason(ros_context, monkeypatch):
    """The engine dies and its factory cannot build another (no device): the goal it served ends
    STATUS_ENGINE_FAILED, the next goal is refused at once (STATUS_REJECTED) saying why, and the
    node stays up, reporting the engine down on /diagnostics."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

    import llm_planner_node.engines.factory as factory
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.sim_engine import RealtimeSimEngine
    from llm_planner_node.up import running_fleet

    class Dies(RealtimeSimEngine):
        def step(self):
            if self._running:
                raise RuntimeError("CUDA error: device lost")
            return super().step()

    def no_device(planner_params, clock):
        def build():
            raise RuntimeError("no CUDA device")
        return build

    monkeypatch.setattr(factory, "engine_factory", no_device)
    with running_fleet(fleet_params(), time_scale=0.05, context=ros_context, engine=Dies(WallClock())):
        client = GoalClient(ros_context)
        diags = []
        client.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            first = client.send("d1", "look for the cat", tuf=NORMAL).result(20)
            assert first.status == 5, first.message  # STATUS_ENGINE_FAILED
            assert first.message == ("inference engine failed: CUDA error: device lost; "
                                     "rebuilding it failed: no CUDA device")
            t0 = time.monotonic()
            second = client.send("d2", "look for the cat", tuf=NORMAL).result(20)
            assert second.status == 1  # STATUS_REJECTED
            assert second.message == ("the inference engine is down (CUDA error: device lost; rebuilding it "
                                      "failed: no CUDA device): no goal can be planned until it restarts")
            assert time.monotonic() - t0 < 5
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not any(
                    s.level == DiagnosticStatus.ERROR and s.message.startswith("engine down")
                    for d in diags for s in d.status):
                time.sleep(0.1)
            assert any(s.level == DiagnosticStatus.ERROR and s.message.startswith("engine down")
                       for d in diags for s in d.status)
        client.destroy()


def test_segments_are_resent_to_an_adapter_that_missed_them(fleet, ros_context):
    """Segment topics are volatile: an adapter that starts after a segment was published never
    sees it, so the planner re-sends unacknowledged segments until the adapter answers."""
    from rclpy.executors import SingleThreadedExecutor

    from timely_robot.execution_time import ExecutionTimeModel
    from timely_robot.skills import TELLO_MINISPEC
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_node import AdapterNode
    from robot_adapters.sim.sim_fleet import SampledExecutor

    published = record_segments(fleet.client.node, "ext1")
    time.sleep(0.5)
    h = fleet.client.send("ext1", "look for the cat", tuf=NORMAL)
    deadline = time.monotonic() + 10
    while not published and time.monotonic() < deadline:
        time.sleep(0.01)
    assert published, "nothing dispatched"
    time.sleep(0.3)  # the first segment is out and nobody acknowledged it
    adapter = AdapterNode("late_adapter", context=ros_context)
    adapter.add_robot(AdapterCore("ext1", SampledExecutor("ext1", "drone", TELLO_MINISPEC,
                                                          ExecutionTimeModel(online=False), 0, time_scale=0.05),
                                  adapter.status_publisher("ext1"), time_scale=0.05))
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(adapter)
    try:
        while not h.done and time.monotonic() < deadline + 20:
            ex.spin_once(timeout_sec=0.05)
        res = h.result(1)
    finally:
        adapter.shutdown_robots()
        ex.shutdown()
        adapter.destroy_node()
    assert res.status == 0, res.message
    seq0 = [m for _, m in published if m.sequence == 0 and not m.cancel]
    assert len(seq0) >= 2, "segment 0 was never re-sent"


def test_diagnostics_report_policy_counters_and_queue(fleet):
    from timely_fleet.msg import PlannerStats

    stats = record(fleet.client.node, PlannerStats, "/planner/stats", 10)
    ok = fleet.client.send("d1", "look for the cat", tuf=NORMAL).result(30)
    bad = fleet.client.send("ghost", "look for the cat", tuf=NORMAL).result(10)
    assert ok.status == 0 and bad.status == 1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(m.goals_rejected >= 1 and m.goals_succeeded >= 1
                                                  for _, m in stats):
        time.sleep(0.1)
    last = stats[-1][1]
    assert last.policy == "timelyllm"
    assert last.goals_succeeded >= 1 and last.goals_rejected >= 1
    assert last.active_goals == 0 and last.queued == 0 and last.running == 0
    assert 0.0 <= last.kv_free_fraction <= 1.0 and last.kv_free_fraction > 0.9
    assert any(m.tokens_per_s > 0 for _, m in stats)  # the goal's tokens show up in the rate
    assert all(m.tokens_per_s >= 0 for _, m in stats)  # finished goals never make it negative


def test_many_concurrent_goals_do_not_exhaust_the_executor(ros_context):
    """More simultaneous goals than executor threads: waiting goals must not block the status
    and goal callbacks (the execute callbacks wait without holding a thread)."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.up import running_fleet

    n = 12
    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                           "robots": [{"id": f"r{i}", "kind": "drone"} for i in range(n)]})
    with running_fleet(params, time_scale=0.05, context=ros_context):
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            handles = [client.send(f"r{i}", "look for the cat", tuf=NORMAL) for i in range(n)]
            results = [h.result(60) for h in handles]
        client.destroy()
    assert [r.status for r in results] == [0] * n, [r.message for r in results if r.status]
