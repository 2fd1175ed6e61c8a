"""The planning node over real ROS with real vLLM (CPU) and the shipped planner model."""

from __future__ import annotations

import time

import pytest

from tests.conftest import fleet_with_client

pytestmark = [pytest.mark.ros, pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("vllm")

NORMAL = (1.0, -2.0, 1.0)
URGENT = (0.2, -6.67, 2.0)


@pytest.fixture(scope="module")
def vllm_engine():
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.vllm_engine import VllmEngine
    from llm_planner_node.config.params import EngineParams

    eng = VllmEngine(EngineParams(kind="vllm", model="embedded", max_model_len=512, kv_cache_gib=0.0625),
                     WallClock())
    yield eng
    eng.close()


@pytest.fixture
def fleet(ros_context, vllm_engine):
    from llm_planner_node.config.params import parse_params

    params = parse_params({
        "planner": {"policy": "timelyllm", "engine": {"kind": "vllm"}, "robot_timeout_s": 10.0},
        "robots": [{"id": "d1", "kind": "drone"}, {"id": "d2", "kind": "drone"},
                   {"id": "a1", "kind": "arm"}],
    })
    with fleet_with_client(params, ros_context, time_scale=0.05, engine=vllm_engine) as f:
        yield f


def test_urgent_drone_goal_is_served_while_a_long_arm_plan_generates(fleet):
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import STATUS_QOS

    statuses = []
    fleet.client.node.create_subscription(RobotStatus, "/robot_status", statuses.append, STATUS_QOS)
    time.sleep(0.5)
    arm = fleet.client.send("a1", "clean the desk", tuf=NORMAL, task_type="arm")
    time.sleep(0.05)
    drone = fleet.client.send("d2", "avoid injuring the person in front of you", tuf=URGENT, task_type="drone-urgent")
    ra, rd = arm.result(120), drone.result(120)
    assert ra.status == 0 and rd.status == 0, (ra.message, rd.message)
    # the model's plans (desk cleaning has 9 statements; the drone plan several)
    assert len(ra.segments) >= 5 and len(rd.segments) >= 2
    assert ra.plan_text.startswith("home();")
    # feedback arrives segment by segment, long before the arm plan is complete
    assert [f.index for f in arm.feedback] == list(range(len(ra.segments)))
    assert arm.feedback_times[0] < arm.sent_at + ra.segments[-1].generation_end_s
    # the urgent drone was not queued behind the arm plan: it started generating before the arm
    # plan was fully generated (with nothing else waiting the arm plan streams on, planner.admission
    # improved; its segments still go to the robot one by one, as they appear)
    assert drone.sent_at + rd.segments[0].generation_start_s < arm.sent_at + ra.segments[-1].generation_end_s
    assert rd.segments[0].dispatch_s < rd.segments[-1].generation_end_s
    # every segment executed, in order, on its robot
    for rid, res in (("a1", ra), ("d2", rd)):
        done = [m.sequence for m in statuses if m.robot_id == rid and m.state == RobotStatus.STATE_DONE]
        assert done == list(range(len(res.segments)))
    # the result's utility is Eq. 1 at its response time: min(beta, alpha (t - ERT) + beta)
    # (whether it is > 0 depends on this machine's speed: bench live measures that, not a test)
    ert, alpha, beta = URGENT
    assert rd.time_utility == pytest.approx(min(beta, alpha * (rd.response_time_s - ert) + beta), abs=1e-9)


def test_cancel_mid_plan_on_vllm(fleet):
    h = fleet.client.send("a1", "sort the fruits and vegetables into baskets", tuf=NORMAL)
    deadline = time.monotonic() + 60
    while not h.feedback and time.monotonic() < deadline:
        time.sleep(0.01)
    assert h.feedback
    fleet.client.cancel(h)
    res = h.result(30)
    assert res.status == 2 and res.message
    after = fleet.client.send("d1", "look for the cat", tuf=NORMAL).result(60)
    assert after.status == 0, after.message  # the node keeps serving


@pytest.mark.parametrize("policy", ["trail", "ltr"])
def test_length_aware_policies_run_in_the_node_with_their_real_predictors(ros_context, vllm_engine, policy):
    """trail and ltr in the live node use the planner model's hidden-state probe / ranker."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.predictors.ltr_ranker import LTRPredictor
    from llm_planner_node.predictors.trail_probe import TrailProbePredictor
    from llm_planner_node.up import running_fleet

    params = parse_params({"planner": {"policy": policy, "engine": {"kind": "vllm"}},
                           "robots": [{"id": "d1", "kind": "drone"}, {"id": "d2", "kind": "drone"}]})
    with running_fleet(params, time_scale=0.05, context=ros_context, engine=vllm_engine) as f:
        want = TrailProbePredictor if policy == "trail" else LTRPredictor
        assert isinstance(f.planner.service.planner.predictor, want)
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            a = client.send("d1", "look for the cat", tuf=NORMAL)
            b = client.send("d2", "evade the dog chasing you", tuf=URGENT)
            ra, rb = a.result(60), b.result(60)
        client.destroy()
    assert ra.status == 0 and rb.status == 0, (ra.message, rb.message)


def test_policy_without_a_live_predictor_is_refused_with_a_reason(ros_context, vllm_engine):
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.up import running_fleet

    params = parse_params({"planner": {"policy": "lamps", "engine": {"kind": "vllm"}},
                           "robots": [{"id": "d1", "kind": "drone"}]})
    with pytest.raises(ValueError, match="only the simulated engine provides"):
        with running_fleet(params, context=ros_context, engine=vllm_engine):
            pass
