"""The ``plan_mission`` action over DDS (llm_planner_node/ros/mission_server.py), from a plain
rclpy action client with the generated interfaces: the planner chooses the robot from the
fleet's declarations, the task runs as a goal on the simulated engine, and the result says who,
why and how the task's goal ended; an impossible mission says why, robot by robot."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros

ROBOTS = [{"id": "drone_1", "kind": "drone", "adapter": "sim"},  # perception unknown
          {"id": "arm_1", "kind": "arm", "adapter": "sim", "objects": ["apple", "cup"]},
          {"id": "base_1", "kind": "base", "adapter": "sim", "places": {"kitchen": [16, 3], "lab": [17, 17]},
           "perception": {"source": "topic", "topic": "/base_1/detections", "classes": ["person", "box"]}}]


@pytest.fixture
def mission_client(ros_context):
    from rclpy.action import ActionClient
    from rclpy.node import Node
    from timely_fleet.action import PlanMission

    from llm_planner_node.config.params import parse_params
    from llm_planner_node.ros.goal_client import spinning
    from llm_planner_node.up import running_fleet

    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}}, "robots": ROBOTS})
    with running_fleet(params, time_scale=0.05, context=ros_context):
        node = Node("mission_test_client", context=ros_context)
        client = ActionClient(node, PlanMission, "plan_mission")
        with spinning(node, ros_context):
            assert client.wait_for_server(timeout_sec=30)
            yield client
        client.destroy()
        node.destroy_node()


def send(client, instruction, **fields):
    from timely_fleet.action import PlanMission

    feedback = []
    sent = client.send_goal_async(PlanMission.Goal(instruction=instruction, ert_s=1.0, alpha=-2.0, beta=1.0, **fields),
                                  feedback_callback=lambda m: feedback.append(m.feedback))
    handle = _done(sent, 30)
    assert handle.accepted
    return _done(handle.get_result_async(), 90).result, feedback


def _done(future, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not future.done():
        assert time.monotonic() < deadline, "no answer from the planner"
        time.sleep(0.02)
    return future.result()


def test_a_mission_goes_to_the_robot_whose_declarations_cover_it_and_succeeds(mission_client):
    from timely_fleet.action import PlanMission

    res, feedback = send(mission_client, "look for the box in the lab")  # a base trace of the simulated engine
    assert res.status == PlanMission.Result.STATUS_SUCCEEDED, res.message
    [task] = res.tasks
    assert task.robot_id == "base_1" and task.status == 0 and len(task.goal_id) == 32
    assert task.allocated_why.startswith("base_1 (base): able and free")
    assert "gt(lab);" in task.plans[0]
    assert [(f.event, f.robot_id) for f in feedback][:1] == [("allocated", "base_1")]


def test_an_impossible_mission_is_refused_saying_why_robot_by_robot(mission_client):
    from timely_fleet.action import PlanMission

    res, _ = send(mission_client, "find the cat")
    assert res.status == PlanMission.Result.STATUS_IMPOSSIBLE and res.reason == "impossible"
    assert "drone_1 declares nothing it can perceive" in res.message
    assert "base_1 cannot perceive 'cat'" in res.message and "arm_1 cannot perceive 'cat'" in res.message
    res, _ = send(mission_client, "look for the box in the lab", robot_ids=["nobody"])
    assert res.status == PlanMission.Result.STATUS_REJECTED and res.message.startswith("no robot nobody in the fleet")
