"""Any robot's ROS actions by declaration (``adapter: ros``), over real ROS: the Nav2 simulator's
actions declared as a base's skills in the fleet YAML alone (no Python), planned and executed as
`timely-fleet up` runs them; the same goals end as through ``adapter: nav2``
(tests/e2e/test_base_over_ros.py): at the kitchen SUCCEEDED with the measured pose there, inside
the shelf ROBOT_FAILED with Nav2's own message; a declared server that does not exist keeps the
robot from being offered, naming the skill and the server."""

from __future__ import annotations

import math

import pytest
import yaml
from testkit import wait_until

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
SUCCEEDED, ROBOT_FAILED = 0, 4
ROBOT = yaml.safe_load("""
id: base_2
kind: base
adapter: ros
places: {dock: [2, 2], kitchen: [16, 3], shelf: [7, 5]}
skills:
  go_to:
    alias: gt
    description: drive to a named place
    args: [{name: place, type: str}]
    action: nav2_msgs/action/NavigateToPose
    server: /base_2/navigate_to_pose
    goal:
      pose.header.frame_id: map
      pose.header.stamp: {now: true}
      pose.pose.position.x: {place_x: place}
      pose.pose.position.y: {place_y: place}
      pose.pose.orientation: {place_yaw_quaternion: place}
    success: {field: error_code, equals: 0}
    error: error_msg
    max_s: 120
  turn_cw:
    alias: tc
    description: turn in place clockwise
    args: [{name: degrees, type: int, min: 1, max: 360, unit: degrees}]
    action: nav2_msgs/action/Spin
    server: /base_2/spin
    goal:
      target_yaw: {arg: degrees, radians: true, scale: -1}
      time_allowance: {seconds: 30}
    success: {field: error_code, equals: 0}
    error: error_msg
    motion: {rotation_deg: degrees}
""")


def fleet_params(tmp_path, robot):
    from llm_planner_node.config.params import parse_params

    return parse_params({"planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 10.0},
                         "security": {"mode": "sign", "keystore": str(tmp_path / "keys")}, "robots": [robot]})


@pytest.fixture(scope="module")
def declared_base(ros_module_context, tmp_path_factory):
    from geometry_msgs.msg import PoseWithCovarianceStamped
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, QoSProfile

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet
    from robot_adapters.sim.nav2_sim import Nav2Sim

    ctx = ros_module_context
    poses: list = []
    with Nav2Sim(ctx, "base_2", time_scale=0.25), \
            running_fleet(fleet_params(tmp_path_factory.mktemp("declared"), ROBOT), time_scale=0.25, context=ctx) as f:
        client, watch = GoalClient(ctx), Node("declared_watcher", context=ctx)
        watch.create_subscription(PoseWithCovarianceStamped, "/base_2/amcl_pose",
                                  lambda m: poses.append((m.pose.pose.position.x, m.pose.pose.position.y)),
                                  QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        with spinning(client.node, ctx), spinning(watch, ctx):
            assert client.wait_for_server(30), client.wait_problem
            assert wait_until(lambda: poses, 10)
            f.client, f.poses = client, poses
            yield f
        client.destroy()
        watch.destroy_node()


def test_a_declared_go_to_reaches_the_kitchen_as_the_nav2_adapter_does(declared_base):
    res = declared_base.client.send("base_2", "gt,kitchen;", tuf=NORMAL).result(120)
    assert res.status == SUCCEEDED, res.message
    assert wait_until(lambda: math.dist(declared_base.poses[-1], (16.0, 3.0)) <= 0.3, 3), declared_base.poses[-1]


def test_a_declared_go_to_inside_the_shelf_fails_with_nav2s_own_message(declared_base):
    res = declared_base.client.send("base_2", "gt,shelf;", tuf=NORMAL).result(60)
    assert res.status == ROBOT_FAILED, res.message
    # Nav2's own error_msg (as upstream's planner words it), which the declaration names
    assert "/base_2/navigate_to_pose aborted go_to(shelf): Goal Coordinates of(7.00, 5.00) was in lethal cost" \
        in res.message, res.message


def test_a_declared_turn_runs_and_costs_its_declared_rotation(declared_base):
    res = declared_base.client.send("base_2", "tc,90;", tuf=NORMAL).result(60)
    assert res.status == SUCCEEDED, res.message


def test_a_declared_server_that_is_not_there_keeps_the_robot_out_naming_skill_and_server(ros_context, tmp_path):
    from llm_planner_node.up import running_fleet
    from timely_robot.errors import CommandError

    robot = {**ROBOT, "id": "base_9", "skills": {"turn_cw": {**ROBOT["skills"]["turn_cw"], "server": "/nowhere/spin"}}}
    with pytest.raises(CommandError, match=r"robot base_9: skill turn_cw: no action server /nowhere/spin "
                                           r"\(nav2_msgs/action/Spin\) answers within"):
        with running_fleet(fleet_params(tmp_path, robot), context=ros_context):
            pass
