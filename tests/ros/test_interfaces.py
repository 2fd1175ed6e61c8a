"""The package's own generated interfaces work over real rclpy (action + topic round trips)."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros


def _spin_until(executor, predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=0.05)
    return predicate()


def test_plan_task_action_roundtrip_with_feedback_and_result(ros_context):
    from rclpy.action import ActionClient, ActionServer
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import SegmentReport, Skill

    server_node = Node("plan_server", context=ros_context)
    client_node = Node("plan_client", context=ros_context)
    seen_goals = []

    def execute(goal_handle):
        goal = goal_handle.request
        seen_goals.append(goal)
        reports = []
        for i, text in enumerate(["tc,90;", "mf,100;"]):
            fb = PlanTask.Feedback(index=i, text=text, queue_s=0.01 * i, generation_s=0.02, final=i == 1)
            fb.skills = [Skill(name="turn_cw" if i == 0 else "move_forward",
                               arg_names=["degrees" if i == 0 else "distance"],
                               arg_values=["90" if i == 0 else "100"])]
            goal_handle.publish_feedback(fb)
            reports.append(SegmentReport(index=i, text=text, skills=fb.skills, dispatch_s=0.1 * (i + 1)))
            time.sleep(0.05)
        goal_handle.succeed()
        return PlanTask.Result(
            status=PlanTask.Result.STATUS_SUCCEEDED,
            message="ok",
            plan_text="tc,90;mf,100;",
            segments=reports,
            response_time_s=0.15,
            robot_waiting_s=0.2,
            time_utility=goal.beta,
        )

    server = ActionServer(server_node, PlanTask, "plan_task_test", execute)
    client = ActionClient(client_node, PlanTask, "plan_task_test")
    executor = MultiThreadedExecutor(num_threads=2, context=ros_context)
    executor.add_node(server_node)
    executor.add_node(client_node)
    try:
        assert _spin_until(executor, lambda: client.server_is_ready())
        feedback = []
        goal = PlanTask.Goal(robot_id="tello_1", robot_kind="drone", task_type="find_cat",
                             instruction="look for the cat", ert_s=0.2, alpha=-6.67, beta=2.0,
                             skill_set="tello_minispec", max_tokens=64)
        send_future = client.send_goal_async(goal, feedback_callback=lambda m: feedback.append(m.feedback))
        assert _spin_until(executor, send_future.done)
        handle = send_future.result()
        assert handle.accepted
        result_future = handle.get_result_async()
        assert _spin_until(executor, result_future.done)
        result = result_future.result().result
    finally:
        executor.shutdown()
        server.destroy()
        client.destroy()

    assert seen_goals[0].robot_id == "tello_1" and seen_goals[0].alpha == pytest.approx(-6.67)
    assert [f.index for f in feedback] == [0, 1]
    assert feedback[1].final and not feedback[0].final
    assert feedback[0].skills[0].name == "turn_cw" and feedback[0].skills[0].arg_values == ["90"]
    assert result.status == PlanTask.Result.STATUS_SUCCEEDED
    assert result.plan_text == "tc,90;mf,100;"
    assert [s.text for s in result.segments] == ["tc,90;", "mf,100;"]
    assert result.segments[1].dispatch_s == pytest.approx(0.2)
    assert result.time_utility == pytest.approx(2.0)


def test_robot_status_roundtrip_on_topic(ros_context):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from timely_fleet.msg import RobotStatus

    node = Node("status_rt", context=ros_context)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    received: list[RobotStatus] = []
    node.create_subscription(RobotStatus, "robot_status_test", received.append, qos)
    pub = node.create_publisher(RobotStatus, "robot_status_test", qos)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(node)
    msg = RobotStatus(robot_id="arm_3", goal_id="g1", sequence=2, state=RobotStatus.STATE_FAILED,
                      current_skill="pick", progress=0.5, elapsed_s=1.25, predicted_remaining_s=0.75,
                      skill_names=["move_to", "pick"], skill_durations_s=[0.8, 0.45],
                      error="gripper did not close")
    try:
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            pub.publish(msg)  # repeat until discovery has matched the pair
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()
        node.destroy_node()
    assert received, "RobotStatus never arrived"
    got = received[0]
    assert (got.robot_id, got.goal_id, got.sequence, got.state) == ("arm_3", "g1", 2, RobotStatus.STATE_FAILED)
    assert list(got.skill_names) == ["move_to", "pick"]
    assert list(got.skill_durations_s) == pytest.approx([0.8, 0.45])
    assert got.error == "gripper did not close"
    # measured state left unset reads "not measured", never a battery at 0 % or a link 0 s old
    assert (got.battery_pct, got.temperature_c, got.height_cm, got.link_age_s) == (-1, -1, -1, -1)
    assert RobotStatus.STATE_DONE == 3


def test_every_end_kind_has_its_own_action_status():
    """One map from the core's EndKind to the action result status, total and one-to-one over the
    ends of a goal (REPLANNED ends a generation, never a goal: the goal goes on)."""
    from timely_fleet.action import PlanTask

    from llm_planner_node.ros.goal_client import STATUS_NAMES
    from llm_planner_node.core.task_model import EndKind
    from llm_planner_node.ros.messages import STATUS_OF

    goal_ends = set(EndKind) - {EndKind.REPLANNED}
    assert set(STATUS_OF) == goal_ends
    assert len(set(STATUS_OF.values())) == len(goal_ends)
    assert PlanTask.Result.STATUS_REJECTED not in STATUS_OF.values()  # refusals are not ends of the core
    assert {STATUS_NAMES[v] for v in STATUS_OF.values()} >= {"SUCCEEDED", "TIMEOUT", "TRUNCATED", "SHED",
                                                                  "REPLAN_REFUSED", "NOT_ACHIEVED"}


def test_a_result_says_which_call_did_not_achieve_its_action_and_why_it_ended_machine_readably():
    """PlanTask results over the generated types: NOT_ACHIEVED lists the calls in ``unachieved``;
    ``reason`` is a Rejection's RejectReason (at intake, or a plan refused before dispatch), else
    the core's end."""
    from timely_fleet.action import PlanTask

    from timely_robot.outcomes import ActionStatus, RejectReason, Rejection
    from llm_planner_node.ros.messages import build_result, rejected_result
    from timely_tools.sim.workload import goal_for
    from tests.core.test_planner import _executed, _planner, _run_engine

    assert PlanTask.Result.STATUS_NOT_ACHIEVED == ActionStatus.NOT_ACHIEVED == 10
    clock, engine, planner, _sink, _ = _planner("vllm")
    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    res = build_result(_executed(planner, clock, rid, "drone3", [("goto(person)", "False")]))
    assert (res.status, res.reason) == (PlanTask.Result.STATUS_NOT_ACHIEVED, "not_achieved")
    assert [(a.segment, a.skill, a.value) for a in res.unachieved] == [(2, "goto(person)", "False")]
    assert res.message == "plan executed, but goto(person) answered False: did not reach it (not in view)"
    assert [a.skill for a in res.answers] == ["goto(person)"]

    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    res = build_result(_executed(planner, clock, rid, "drone3", [("scan(person)", "False")]))
    assert (res.status, res.reason, list(res.unachieved)) == (PlanTask.Result.STATUS_SUCCEEDED, "succeeded", [])

    planner.segment_check = lambda req, seg: Rejection(RejectReason.SUBSTITUTED, "the plan looks for a dog")
    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    res = build_result(planner.requests[rid])
    assert (res.status, res.reason, res.message) == (PlanTask.Result.STATUS_INVALID_PLAN, "substituted",
                                                     "the plan looks for a dog")

    res = rejected_result(Rejection(RejectReason.ROBOT_BUSY, "robot d1 runs goal 1234"))
    assert (res.status, res.reason) == (PlanTask.Result.STATUS_REJECTED, "robot_busy")


def test_a_robot_status_with_a_pose_survives_the_wire_signed_and_every_field_is_signed(tmp_path):
    """The adapter's status (timely_robot.link.ros.status_to_msg) with the robot's pose, signed,
    serialized and read back as the planner does (verification, ros.status_reader.status_in); and
    no field of RobotStatus is left out of the signature (a field added later without signing it
    fails here)."""
    import array

    from rclpy.serialization import deserialize_message, serialize_message
    from timely_fleet.msg import RobotStatus, SkillAnswer

    from llm_planner_node.ros.status_reader import status_in
    from robot_adapters.adapter_core import StatusEvent
    from timely_robot.link.ros import status_to_msg
    from timely_robot.link.signing import Keystore, LinkSigner, LinkVerifier, status_msg_fields

    store = Keystore(tmp_path / "keys")
    store.ensure(["tello_1"])
    ev = StatusEvent("tello_1", "g1", 2, 3, skill_names=["move_forward"], skill_durations_s=[2.5],
                     answers=[("is_visible(cat)", "True")], return_value="True", scene=["cat x:0.5 y:0.5"],
                     pose=(1.25, -0.5, 0.8, 1.5))
    msg = LinkSigner(store).sign_status(status_to_msg(ev, RobotStatus))
    got = deserialize_message(serialize_message(msg), RobotStatus)
    assert LinkVerifier(store).check_status(got) is None
    assert (got.has_pose, got.x_m, got.y_m, got.z_m, got.yaw_rad) == (True, 1.25, -0.5, 0.8, 1.5)
    assert status_in(got).pose == (1.25, -0.5, 0.8, 1.5)
    assert status_in(deserialize_message(serialize_message(status_to_msg(StatusEvent("tello_1", "g1", 2, 3),
                                                                         RobotStatus)), RobotStatus)).pose is None

    def changed(value):
        if isinstance(value, bool):
            return not value
        if isinstance(value, (int, float)):
            return value + 1
        if isinstance(value, str):
            return value + "x"
        if isinstance(value, array.array):
            return array.array(value.typecode, [*value, 1.0])
        if isinstance(value, list):
            return [*value, SkillAnswer(segment=9, skill="s", value="v") if value and isinstance(value[0], SkillAnswer)
                    else "x"]
        if hasattr(value, "sec"):
            return type(value)(sec=value.sec + 1, nanosec=value.nanosec)
        raise AssertionError(f"no change for {type(value).__name__}")

    signed = status_msg_fields(got)
    for name in RobotStatus.get_fields_and_field_types():
        if name in ("key_id", "counter", "mac"):
            continue
        other = deserialize_message(serialize_message(got), RobotStatus)
        setattr(other, name, changed(getattr(other, name)))
        assert status_msg_fields(other) != signed, f"RobotStatus.{name} is not signed"


def test_the_planner_places_a_robot_from_its_signed_idle_report_and_not_from_a_forged_one(tmp_path):
    """An idle robot's report with its pose, as the adapter builds and signs it, read by the
    planner's status reader (ros/status_reader.py) into the service's RobotPoses, placed by the
    robot's origin; an unsigned report places nothing."""
    import math

    from rclpy.serialization import serialize_message
    from timely_fleet.msg import RobotStatus

    from llm_planner_node.config.params import parse_params
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.sim_engine import RealtimeSimEngine
    from llm_planner_node.ros.status_reader import StatusReader
    from llm_planner_node.service.planner_service import PlannerService
    from robot_adapters.adapter_core import STATE_IDLE, StatusEvent
    from timely_robot.link.ros import status_to_msg
    from timely_robot.link.signing import Keystore, LinkSigner, LinkVerifier

    class Ports:
        def log(self, level, text):
            pass

    store = Keystore(tmp_path / "keys")
    store.ensure(["base_1", "base_2"])
    params = parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": [
        {"id": "base_1", "kind": "base", "adapter": "sim", "origin": {"x": 5.0, "yaw_deg": 90}},
        {"id": "base_2", "kind": "base", "adapter": "sim"}]})
    svc = PlannerService(params, Ports(), engine=RealtimeSimEngine(WallClock()))
    try:
        reader = StatusReader(svc, LinkVerifier(store))
        report = StatusEvent("base_1", "", 0, STATE_IDLE, pose=(2.0, 0.0, 0.0, 0.0))
        reader.on_raw(serialize_message(LinkSigner(store).sign_status(status_to_msg(report, RobotStatus))))
        x, y, z = svc.poses.fleet_position("base_1")
        assert math.isclose(x, 5.0, abs_tol=1e-9) and (y, z) == (2.0, 0.0)  # 2 m along its x: the fleet's +y
        forged = StatusEvent("base_2", "", 0, STATE_IDLE, pose=(9.0, 9.0, 0.0, 0.0))
        reader.on_raw(serialize_message(status_to_msg(forged, RobotStatus)))  # unsigned
        assert svc.poses.fleet_position("base_2") is None
        assert svc.status_drops["link: idle report not verified"] == 1
    finally:
        svc.close()
