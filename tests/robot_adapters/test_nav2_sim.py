"""The Nav2 simulator as a client of a real Nav2 stack sees it: plain rclpy action clients, topics and
services with Nav2's own interfaces (interfaces/nav2_msgs), no code of the simulator's."""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager

import pytest
from testkit import wait_until

pytestmark = pytest.mark.ros

FAST = 0.05  # time scale: twenty times real time
STEADY = 0.1  # ten times: for the tests that stop the robot mid-way (margin for a loaded machine)


class Client:
    """An independent Nav2 client: its own node and executor, recording odom and amcl_pose."""

    def __init__(self, ctx, namespace: str = "") -> None:
        from geometry_msgs.msg import PoseWithCovarianceStamped, TwistStamped
        from nav_msgs.msg import Odometry
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import DurabilityPolicy, QoSProfile

        self.ctx, self.ns = ctx, namespace
        self.node = Node("nav2_test_client", namespace=namespace, context=ctx)
        self.odom: list = []
        self.amcl: list = []
        self.node.create_subscription(Odometry, "odom", self.odom.append, 10)
        self.node.create_subscription(PoseWithCovarianceStamped, "amcl_pose", self.amcl.append,
                                      QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.cmd_vel = self.node.create_publisher(TwistStamped, "cmd_vel", 10)
        self.initialpose = self.node.create_publisher(PoseWithCovarianceStamped, "initialpose", 10)
        self.clients: dict = {}
        self.ex = SingleThreadedExecutor(context=ctx)
        self.ex.add_node(self.node)
        self.thread = threading.Thread(target=self.ex.spin, daemon=True)
        self.thread.start()

    def action(self, action_type, name: str):
        from rclpy.action import ActionClient

        if name not in self.clients:
            self.clients[name] = ActionClient(self.node, action_type, name)
            assert self.clients[name].wait_for_server(timeout_sec=15), name
        return self.clients[name]

    def send(self, action_type, name: str, goal, feedback: list | None = None):
        """The accepted (or rejected) goal handle."""
        fut = self.action(action_type, name).send_goal_async(
            goal, feedback_callback=None if feedback is None else (lambda m: feedback.append(m.feedback)))
        assert wait_until(fut.done, 10)
        return fut.result()

    @staticmethod
    def result(handle, timeout: float = 20.0):
        fut = handle.get_result_async()
        assert wait_until(fut.done, timeout)
        return fut.result().status, fut.result().result

    def run(self, action_type, name: str, goal, feedback: list | None = None, timeout: float = 20.0):
        handle = self.send(action_type, name, goal, feedback)
        assert handle.accepted
        return self.result(handle, timeout)

    def get_state(self, server: str):
        from lifecycle_msgs.srv import GetState

        cli = self.node.create_client(GetState, f"{server}/get_state")
        assert cli.wait_for_service(timeout_sec=10)
        fut = cli.call_async(GetState.Request())
        assert wait_until(fut.done, 10)
        return fut.result().current_state

    def pose(self):
        """(x, y, yaw) of the last odom message, once one came."""
        assert wait_until(lambda: self.odom, 10)
        p = self.odom[-1].pose.pose
        return p.position.x, p.position.y, _yaw(p.orientation)

    def still(self, s: float = 0.3, timeout: float = 3.0) -> bool:
        """The robot stands (within ``timeout``): odom the same over ``s`` s, with zero velocity."""
        def standing() -> bool:
            a = self.pose()
            time.sleep(s)
            b = self.pose()
            return math.dist(a[:2], b[:2]) < 1e-9 and a[2] == b[2] and self.odom[-1].twist.twist.linear.x == 0.0
        return wait_until(standing, timeout)

    def close(self) -> None:
        self.ex.shutdown()
        self.node.destroy_node()


def _yaw(q) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def _pose(x: float, y: float, yaw: float = 0.0, frame: str = "map"):
    from geometry_msgs.msg import PoseStamped

    ps = PoseStamped()
    ps.header.frame_id = frame
    ps.pose.position.x, ps.pose.position.y = x, y
    ps.pose.orientation.z, ps.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    return ps


def _nav_goal(x: float, y: float, yaw: float = 0.0):
    from nav2_msgs.action import NavigateToPose

    return NavigateToPose.Goal(pose=_pose(x, y, yaw))


@contextmanager
def nav2(ctx, namespace: str = "", **kw):
    from robot_adapters.sim.nav2_sim import Nav2Sim

    sim = Nav2Sim(ctx, namespace, time_scale=kw.pop("time_scale", FAST), **kw).start()
    client = Client(ctx, namespace)
    try:
        yield client
    finally:
        client.close()
        sim.stop()


def test_navigate_to_pose_drives_around_the_shelf_to_the_goal(ros_context):
    from action_msgs.msg import GoalStatus
    from nav2_msgs.action import NavigateToPose

    from robot_adapters.sim.nav2_sim import DEFAULT_OBSTACLES

    with nav2(ros_context) as c:
        feedback: list = []
        status, result = c.run(NavigateToPose, "navigate_to_pose", _nav_goal(10.0, 8.0, math.pi / 2), feedback)
        assert status == GoalStatus.STATUS_SUCCEEDED
        assert result.error_code == NavigateToPose.Result.NONE and result.error_msg == ""
        assert wait_until(lambda: math.dist(c.pose()[:2], (10.0, 8.0)) < 0.1 and abs(c.pose()[2] - math.pi / 2) < 0.05, 2)
        assert wait_until(lambda: math.dist((c.amcl[-1].pose.pose.position.x, c.amcl[-1].pose.pose.position.y),
                                            (10.0, 8.0)) < 0.1, 5)
        assert c.amcl[-1].header.frame_id == "map" and c.odom[-1].header.frame_id == "odom"
        assert c.odom[-1].child_frame_id == "base_link"
        # the shelf (x 6-8, y < 12) lies between the dock and the hall: the robot went round it
        assert max(m.pose.pose.position.y for m in c.odom) > 12.0
        shelf = DEFAULT_OBSTACLES[0]
        assert all(shelf.distance(m.pose.pose.position.x, m.pose.pose.position.y) > 0.2 for m in c.odom)
        left = [f.distance_remaining for f in feedback]
        assert len(left) > 5 and left[0] > 15.0 and left[-1] < 1.0
        assert all(b <= a + 1e-3 for a, b in zip(left, left[1:]))
        times = [f.navigation_time.sec + f.navigation_time.nanosec * 1e-9 for f in feedback]
        assert times == sorted(times) and times[-1] > 20.0  # simulated seconds: ~18 m at 0.5 m/s
        assert any(f.estimated_time_remaining.sec > 0 for f in feedback)
        assert all(f.number_of_recoveries == 0 and f.current_pose.header.frame_id == "map" for f in feedback)


def test_cancel_mid_way_ends_canceled_and_the_robot_stops(ros_context):
    from action_msgs.msg import GoalStatus
    from nav2_msgs.action import NavigateToPose

    with nav2(ros_context, time_scale=STEADY) as c:
        feedback: list = []
        handle = c.send(NavigateToPose, "navigate_to_pose", _nav_goal(3.0, 17.0), feedback)
        assert handle.accepted
        assert wait_until(lambda: feedback and feedback[-1].distance_remaining < feedback[0].distance_remaining - 2.0, 10)
        cancel = handle.cancel_goal_async()
        assert wait_until(cancel.done, 5)
        status, _ = c.result(handle)
        assert status == GoalStatus.STATUS_CANCELED
        assert c.still() and math.dist(c.pose()[:2], (3.0, 17.0)) > 3.0


def test_unreachable_goals_end_with_the_planners_codes(ros_context):
    from action_msgs.msg import GoalStatus
    from nav2_msgs.action import ComputePathToPose, NavigateToPose

    with nav2(ros_context) as c:
        for (x, y), code in (((7.0, 5.0), ComputePathToPose.Result.GOAL_OCCUPIED),  # inside the shelf
                             ((25.0, 5.0), ComputePathToPose.Result.GOAL_OUTSIDE_MAP)):
            status, result = c.run(NavigateToPose, "navigate_to_pose", _nav_goal(x, y))
            assert status == GoalStatus.STATUS_ABORTED
            assert result.error_code == code and result.error_msg, (x, y, result)
        assert c.still(0.1) and math.dist(c.pose()[:2], (2.0, 2.0)) < 1e-6


def test_compute_path_avoids_the_obstacle_and_fails_when_the_goal_is_enclosed(ros_context):
    from action_msgs.msg import GoalStatus
    from nav2_msgs.action import ComputePathToPose

    from robot_adapters.sim.nav2_sim import DEFAULT_OBSTACLES, Rect

    box = (Rect(16, 8, 18, 8.2), Rect(16, 9.8, 18, 10), Rect(16, 8, 16.2, 10), Rect(17.8, 8, 18, 10))
    with nav2(ros_context, obstacles=DEFAULT_OBSTACLES + box) as c:
        status, result = c.run(ComputePathToPose, "compute_path_to_pose", ComputePathToPose.Goal(goal=_pose(10.0, 2.0)))
        assert status == GoalStatus.STATUS_SUCCEEDED and result.error_code == ComputePathToPose.Result.NONE
        poses = [(p.pose.position.x, p.pose.position.y) for p in result.path.poses]
        assert result.path.header.frame_id == "map" and len(poses) > 50
        assert math.dist(poses[0], (2.0, 2.0)) < 1e-6 and math.dist(poses[-1], (10.0, 2.0)) < 1e-6
        shelf = DEFAULT_OBSTACLES[0]
        assert all(shelf.distance(x, y) >= 0.25 for x, y in poses)  # none inside, the robot's radius clear
        assert all(math.dist(a, b) < 0.21 for a, b in zip(poses, poses[1:]))

        goal = ComputePathToPose.Goal(goal=_pose(17.0, 9.0), start=_pose(10.0, 8.0), use_start=True)
        status, result = c.run(ComputePathToPose, "compute_path_to_pose", goal)
        assert status == GoalStatus.STATUS_ABORTED
        assert result.error_code == ComputePathToPose.Result.NO_VALID_PATH and result.error_msg
        assert not result.path.poses
        status, result = c.run(ComputePathToPose, "compute_path_to_pose", ComputePathToPose.Goal(goal=_pose(13.0, 13.0)))
        assert result.error_code == ComputePathToPose.Result.GOAL_OCCUPIED


def test_spin_turns_by_the_angle(ros_context):
    from action_msgs.msg import GoalStatus
    from nav2_msgs.action import Spin

    with nav2(ros_context) as c:
        yaw0 = c.pose()[2]
        feedback: list = []
        status, result = c.run(Spin, "spin", Spin.Goal(target_yaw=math.pi / 2), feedback)
        assert status == GoalStatus.STATUS_SUCCEEDED and result.error_code == Spin.Result.NONE
        assert wait_until(lambda: abs(c.pose()[2] - yaw0 - math.pi / 2) < 0.01, 2)
        turned = [f.angular_distance_traveled for f in feedback]
        assert turned and turned == sorted(turned) and turned[-1] <= math.pi / 2 + 1e-3
        assert result.total_elapsed_time.sec >= 1  # simulated: 90 degrees at <= 1 rad/s


def test_drive_on_heading_and_backup_towards_a_near_wall_fail_collision_ahead(ros_context):
    from action_msgs.msg import GoalStatus
    from geometry_msgs.msg import Point
    from nav2_msgs.action import BackUp, DriveOnHeading

    with nav2(ros_context, start=(5.0, 5.0, 0.0)) as c:  # facing the shelf, 1 m away (0.75 m to touch)
        feedback: list = []
        status, result = c.run(DriveOnHeading, "drive_on_heading",
                               DriveOnHeading.Goal(target=Point(x=2.0), speed=0.2), feedback)
        assert status == GoalStatus.STATUS_ABORTED
        assert result.error_code == DriveOnHeading.Result.COLLISION_AHEAD
        assert result.error_msg == "drive_on_heading failed:Collision Ahead - Exiting DriveOnHeading"
        assert c.still(0.1)
        x = c.pose()[0]
        assert 5.0 < x < 5.75
        status, result = c.run(DriveOnHeading, "drive_on_heading", DriveOnHeading.Goal(target=Point(x=1.0), speed=-0.2))
        assert result.error_code == DriveOnHeading.Result.INVALID_INPUT
        # backing up 1 m away from the shelf is clear; then, turned round, backing 2 m towards it is not
        status, result = c.run(BackUp, "backup", BackUp.Goal(target=Point(x=1.0), speed=0.3))
        assert status == GoalStatus.STATUS_SUCCEEDED
        assert wait_until(lambda: abs(c.pose()[0] - (x - 1.0)) < 0.01, 2)  # odom comes after the result
        c.initialpose.publish(_initial(5.0, 5.0, math.pi))
        assert wait_until(lambda: abs(abs(c.pose()[2]) - math.pi) < 1e-3, 5)
        status, result = c.run(BackUp, "backup", BackUp.Goal(target=Point(x=2.0), speed=0.2))
        assert status == GoalStatus.STATUS_ABORTED and result.error_code == BackUp.Result.COLLISION_AHEAD
        assert c.still(0.1) and 5.0 < c.pose()[0] < 5.75


def _initial(x: float, y: float, yaw: float):
    from geometry_msgs.msg import PoseWithCovarianceStamped

    msg = PoseWithCovarianceStamped()
    msg.header.frame_id = "map"
    msg.pose.pose = _pose(x, y, yaw).pose
    return msg


def test_a_zero_twist_on_cmd_vel_stops_a_running_navigation(ros_context):
    from action_msgs.msg import GoalStatus
    from geometry_msgs.msg import TwistStamped
    from nav2_msgs.action import NavigateToPose

    with nav2(ros_context, time_scale=STEADY) as c:
        feedback: list = []
        handle = c.send(NavigateToPose, "navigate_to_pose", _nav_goal(16.0, 3.0), feedback)
        assert wait_until(lambda: feedback and feedback[-1].distance_remaining < feedback[0].distance_remaining - 2.0, 10)
        c.cmd_vel.publish(TwistStamped())
        status, result = c.result(handle)
        assert status == GoalStatus.STATUS_ABORTED and result.error_code == NavigateToPose.Result.UNKNOWN
        assert "cmd_vel" in result.error_msg
        assert c.still()


def test_lifecycle_get_state_active_or_inactive_under_a_namespace(ros_context):
    from lifecycle_msgs.msg import State
    from nav2_msgs.action import NavigateToPose

    with nav2(ros_context) as c:
        for server in ("bt_navigator", "controller_server"):
            state = c.get_state(server)
            assert (state.id, state.label) == (State.PRIMARY_STATE_ACTIVE, "active")
    with nav2(ros_context, "robot2", lifecycle="inactive") as c:
        assert c.node.resolve_topic_name("odom") == "/robot2/odom" and c.pose()
        state = c.get_state("bt_navigator")
        assert (state.id, state.label) == (State.PRIMARY_STATE_INACTIVE, "inactive")
        assert not c.send(NavigateToPose, "navigate_to_pose", _nav_goal(3.0, 3.0)).accepted


def test_detections_show_what_the_camera_sees_ahead_within_range_and_not_behind_the_shelf(ros_context):
    from nav2_msgs.action import Spin
    from timely_fleet.msg import DetectionArray

    # a cat 3 m ahead of the dock, a dog beyond the shelf (x 6-8 m) in line with the heading and
    # within the camera's 10 m, a cup 3 m to the left and a bus 12 m away: only the cat is in view,
    # at (3000, 0) mm in base_link
    objects = {"cat": (5.0, 2.0), "dog": (9.5, 2.0), "cup": (2.0, 5.0), "bus": (2.0, 14.0)}
    with nav2(ros_context, objects=objects, view_m=10.0) as c:
        got: list = []
        c.node.create_subscription(DetectionArray, "detections", got.append, 10)
        assert wait_until(lambda: len(got) >= 2, 5), "no detections published"
        (d,) = got[-1].detections
        assert d.class_id == "cat" and d.has_position and got[-1].header.frame_id == "base_link"
        assert abs(d.position[0] - 3000.0) < 1.0 and abs(d.position[1]) < 1.0
        c.run(Spin, "spin", Spin.Goal(target_yaw=math.pi / 2))  # now facing the cup, the cat to the right
        n = len(got)
        assert wait_until(lambda: len(got) >= n + 2, 5)
        assert [x.class_id for x in got[-1].detections] == ["cup"]
        x, y = got[-1].detections[0].position[:2]
        assert abs(x - 3000.0) < 1.0 and abs(y) < 1.0
