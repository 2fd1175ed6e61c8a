"""The planner as ROS 2 users meet it: declared parameters behind the standard
parameter services, ``--ros-args -p`` / ``--params-file`` overrides, namespaces, the lifecycle,
standard ``/diagnostics`` and the node's clock. Every check uses an independent rclpy node and
the standard interfaces (rcl_interfaces, lifecycle_msgs, diagnostic_msgs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from testkit import wait_until

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[2]
NORMAL = (1.0, -2.0, 1.0)


def fleet(robots=("d1",), **planner):
    from llm_planner_node.config.params import parse_params

    return parse_params({"planner": {"engine": {"kind": "sim"}, **planner},
                         "robots": [{"id": r, "kind": "drone", "adapter": "sim"} for r in robots]})


def call(node, client, request, timeout=10.0):
    """Call a service from a test thread while another thread spins ``node``."""
    assert client.wait_for_service(timeout_sec=timeout), f"no service {client.srv_name}"
    fut = client.call_async(request)
    deadline = time.monotonic() + timeout
    while not fut.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fut.done(), f"{client.srv_name} did not answer"
    return fut.result()


def param_services(node, target="/llm_planner"):
    from rcl_interfaces.srv import GetParameters, ListParameters, SetParameters

    return (node.create_client(ListParameters, f"{target}/list_parameters"),
            node.create_client(GetParameters, f"{target}/get_parameters"),
            node.create_client(SetParameters, f"{target}/set_parameters"))


def test_parameters_are_declared_listed_read_and_set_through_the_parameter_services(ros_context):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import GetParameters, ListParameters, SetParameters

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet(("d1", "d2")), time_scale=0.05, context=ros_context) as f:
        client = GoalClient(ros_context)
        lst, get, setp = param_services(client.node)
        with spinning(client.node, ros_context):
            names = call(client.node, lst, ListParameters.Request()).result.names
            for name in ("policy", "engine.kind", "engine.kv_cache_gib", "batching.mode", "robot_timeout_s",
                         "max_tokens", "tuf_presets.urgent.ert_s", "robots.ids", "robots.d2.kind", "params_file"):
                assert name in names, name
            got = call(client.node, get, GetParameters.Request(names=["engine.kind", "robot_timeout_s"])).values
            assert got[0].string_value == "sim" and got[1].double_value == 30.0

            def set_one(name, value):
                v = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value) \
                    if isinstance(value, float) else ParameterValue(type=ParameterType.PARAMETER_STRING,
                                                                    string_value=value)
                return call(client.node, setp, SetParameters.Request(
                    parameters=[Parameter(name=name, value=v)])).results[0]

            ok = set_one("robot_timeout_s", 7.5)
            assert ok.successful, ok.reason
            assert wait_until(lambda: f.planner.service.delivery.silence_timeout_s == 7.5)
            bad = set_one("robot_timeout_s", -1.0)
            assert not bad.successful and "robot_timeout_s" in bad.reason and "> 0" in bad.reason
            ro = set_one("engine.kind", "vllm")
            assert not ro.successful and "read-only" in ro.reason
            after = call(client.node, get, GetParameters.Request(names=["robot_timeout_s", "engine.kind"])).values
            assert after[0].double_value == 7.5 and after[1].string_value == "sim"
        client.destroy()


class Up:
    """`timely-fleet up` as its own process."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "llm_planner_node.cli", "up", *args], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)

    def stop(self) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.stdout.read()


def test_ros_args_p_and_params_file_override_the_yaml(ros_context, tmp_path):
    from rcl_interfaces.srv import GetParameters

    from llm_planner_node.ros.goal_client import GoalClient, spinning

    fleet_yaml = tmp_path / "fleet.yaml"
    fleet_yaml.write_text(yaml.safe_dump({"planner": {"engine": {"kind": "sim"}, "max_tokens": 100},
                                          "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]}))
    ros_file = tmp_path / "ros.yaml"
    ros_file.write_text(yaml.safe_dump({"llm_planner": {"ros__parameters": {"max_tokens": 64,
                                                                            "network_latency_s": 0.008}}}))
    up = Up("--params", str(fleet_yaml), "--ros-args", "-p", "robot_timeout_s:=12.5", "--params-file", str(ros_file))
    client = GoalClient(ros_context)
    try:
        _lst, get, _set = param_services(client.node)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(60), "planner did not come up"
            vals = call(client.node, get, GetParameters.Request(
                names=["robot_timeout_s", "max_tokens", "network_latency_s", "engine.kind"])).values
            assert (vals[0].double_value, vals[1].integer_value, vals[2].double_value, vals[3].string_value) == \
                (12.5, 64, 0.008, "sim")
            res = client.send("d1", "look for the cat").result(60)  # and the node still serves goals
            assert res.status == 0, res.message
    finally:
        client.destroy()
        out = up.stop()
    assert "Traceback" not in out


def test_two_planners_in_their_own_namespaces_share_a_domain_without_cross_talk(ros_context):
    from timely_fleet.msg import RobotStatus

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from timely_robot.link.ros import STATUS_QOS
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet(("a1",)), time_scale=0.05, namespace="fleet_a"), \
            running_fleet(fleet(("b1",)), time_scale=0.05, namespace="fleet_b"):
        ca, cb = GoalClient(ros_context, namespace="fleet_a"), GoalClient(ros_context, namespace="fleet_b")
        seen = {"fleet_a": [], "fleet_b": []}
        for ns, c in (("fleet_a", ca), ("fleet_b", cb)):
            c.node.create_subscription(RobotStatus, "robot_status", lambda m, ns=ns: seen[ns].append(m.robot_id),
                                       STATUS_QOS)
        with spinning(ca.node, ros_context), spinning(cb.node, ros_context):
            assert ca.wait_for_server(20) and cb.wait_for_server(20)
            ra = ca.send("a1", "look for the cat").result(60)
            rb = cb.send("b1", "look for the cat").result(60)
            wrong = ca.send("b1", "look for the cat").result(20)
        ca.destroy()
        cb.destroy()
    assert ra.status == 0 and rb.status == 0, (ra.message, rb.message)
    assert wrong.status == 1 and "unknown robot 'b1'" in wrong.message
    assert set(seen["fleet_a"]) == {"a1"} and set(seen["fleet_b"]) == {"b1"}


def test_a_destroyed_planner_leaves_no_action_server_behind_even_while_still_referenced(ros_context):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    client = GoalClient(ros_context, namespace="gone")
    with running_fleet(fleet(("d1",)), time_scale=0.05, namespace="gone") as f:
        kept = f.planner  # held on, as a failed test's traceback holds its planner
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
    assert kept is not None
    # a plan_task left discoverable would make every later client take a dead planner for a live one
    assert wait_until(lambda: not client.client.server_is_ready(), 10)
    client.destroy()


def test_a_fenced_planner_sends_its_robots_nothing(ros_context):
    from timely_fleet.msg import SkillSegment

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from timely_robot.link.ros import SEGMENTS_TOPIC, SHARED_SEGMENT_QOS
    from llm_planner_node.up import running_fleet

    client = GoalClient(ros_context, namespace="fenced")
    got = []
    client.node.create_subscription(SkillSegment, SEGMENTS_TOPIC, got.append, SHARED_SEGMENT_QOS)
    with running_fleet(fleet(("d1",)), time_scale=0.05, namespace="fenced", adapters=False) as f, \
            spinning(client.node, ros_context):
        planner = f.planner

        assert wait_until(lambda: (planner.ports.heartbeat("a" * 32, "d1"),
                                   any(m.goal_id == "a" * 32 for m in got))[1], 10)
        planner.failover.fence("another planner took over")  # as a higher term's journal does
        planner.ports.heartbeat("b" * 32, "d1")
        time.sleep(0.5)
        assert not any(m.goal_id == "b" * 32 for m in got)  # its robots are the other planner's now
    client.destroy()


def test_lifecycle_inactive_refuses_goals_deactivate_ends_goals_in_flight(ros_context):
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState, GetState

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet(("d1",)), time_scale=1.0, context=ros_context):
        client = GoalClient(ros_context)
        change = client.node.create_client(ChangeState, "/llm_planner/change_state")
        state = client.node.create_client(GetState, "/llm_planner/get_state")
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            assert call(client.node, state, GetState.Request()).current_state.label == "active"
            inflight = client.send("d1", "look for the cat")  # real time: still executing below
            assert wait_until(lambda: inflight.feedback, 10)
            r = call(client.node, change, ChangeState.Request(
                transition=Transition(id=Transition.TRANSITION_DEACTIVATE)))
            assert r.success
            ended = inflight.result(10)
            assert ended.status == 2 and ended.message == "planner deactivated", ended.message
            refused = client.send("d1", "look for the cat").result(10)
            assert refused.status == 1 and "not active" in refused.message
            assert call(client.node, state, GetState.Request()).current_state.label == "inactive"
            assert call(client.node, change, ChangeState.Request(
                transition=Transition(id=Transition.TRANSITION_ACTIVATE))).success
            again = client.send("d1", "check the book on the cabinet").result(90)
            assert again.status == 0, again.message
        client.destroy()


def test_diagnostics_go_to_error_when_the_engine_dies_and_back_to_ok_after_restart(ros_context):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

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

    levels: list[tuple[float, int, str]] = []
    with running_fleet(fleet(("d1",)), time_scale=0.05, context=ros_context, engine=DiesOnce(WallClock())):
        client = GoalClient(ros_context)

        def on_diag(msg):
            for st in msg.status:
                if st.name == "llm_planner: engine":
                    levels.append((time.monotonic(), int.from_bytes(st.level, "little")
                                   if isinstance(st.level, bytes) else int(st.level), st.message))
        client.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            assert wait_until(lambda: levels, 5) and levels[-1][1] == 0  # OK before
            first = client.send("d1", "look for the cat").result(30)
            assert first.status == 5  # ENGINE_FAILED
            assert wait_until(lambda: any(lv == 2 for _t, lv, _m in levels), 5), levels
            t_err = next(t for t, lv, _m in levels if lv == 2)
            assert "device lost" in next(m for _t, lv, m in levels if lv == 2)
            assert wait_until(lambda: any(t > t_err and lv == 0 for t, lv, _m in levels), 5), levels
        client.destroy()
    assert DiagnosticStatus.ERROR == b"\x02" or DiagnosticStatus.ERROR == 2


def test_stamps_follow_clock_with_use_sim_time(ros_context):
    from builtin_interfaces.msg import Time
    from rosgraph_msgs.msg import Clock
    from timely_fleet.msg import GoalRecord, GoalResult

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from timely_robot.link.ros import STATUS_QOS
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet(("d1",)), time_scale=0.05, context=ros_context,
                       ros_args=["-p", "use_sim_time:=true"]):
        client = GoalClient(ros_context)
        clock_pub = client.node.create_publisher(Clock, "/clock", 10)
        records, results = [], []
        client.node.create_subscription(GoalRecord, "planner/goals", records.append, STATUS_QOS)
        client.node.create_subscription(GoalResult, "planner/results", results.append, STATUS_QOS)
        sim_t = [1000.0]

        def tick():
            sim_t[0] += 0.1
            sec = int(sim_t[0])
            clock_pub.publish(Clock(clock=Time(sec=sec, nanosec=int((sim_t[0] - sec) * 1e9))))
        client.node.create_timer(0.02, tick)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            time.sleep(0.5)
            res = client.send("d1", "look for the cat").result(30)
            assert res.status == 0, res.message
            assert wait_until(lambda: records and results, 5)
        client.destroy()
    for stamp in (records[0].stamp, results[0].stamp):
        assert 1000 <= stamp.sec < 1000 + 10_000, stamp  # /clock time, not the wall clock (~1.8e9)
