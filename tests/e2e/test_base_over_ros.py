"""A mobile base over real ROS, through Nav2's own interfaces: `running_fleet` (the planner node
and the adapter node, as `timely-fleet up` runs them) with a base on ``adapter: nav2-sim`` (the
Nav2 protocol simulator in the adapter's process, nav2_msgs built from upstream's definitions).
The scripted engine writes the instruction as the plan, so each test chooses the skills; an
independent rclpy node watches the base's ``amcl_pose`` and ``odom`` and calls
``planner/stop_robots``.

- ``go_to(kitchen)`` ends SUCCEEDED with the measured pose at the kitchen;
- a place inside an obstacle ends ROBOT_FAILED with Nav2's reason (its error code), the base unmoved;
- a place whose route leaves the map fence is refused before the base moves;
- an operator's stop mid-navigation cancels the Nav2 goal and the base stands still within 0.5 s;
- perception from the declared detections topic (the simulator's camera): a scan at the kitchen
  finds the person standing there, one for a box (in the lab) answers False after a full turn, and
  a plan about a cat (no class of its detector) is refused before it runs.
"""

from __future__ import annotations

import hashlib
import math
import time

import pytest
from testkit import wait_until

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
SUCCEEDED, REJECTED, CANCELLED, INVALID_PLAN, ROBOT_FAILED = 0, 1, 2, 3, 4
SECRET = "operator-secret-for-base-tests"
# the simulator's room (robot_adapters.sim.nav2_sim): places of its default world, a shelf at
# x 6-8 m, y 0-12 m; the fence keeps the base out of the room's top strip (y > 14 m)
PLACES = {"dock": [2.0, 2.0], "kitchen": [16.0, 3.0], "hall": [10.0, 8.0], "office": [3.0, 17.0],
          "shelf": [7.0, 5.0]}
FENCE = [[0.5, 0.5], [19.5, 0.5], [19.5, 14.0], [0.5, 14.0]]


def fleet_params(tmp_path):
    from llm_planner_node.config.params import parse_params

    return parse_params({
        "planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 10.0},
        "security": {"mode": "sign", "keystore": str(tmp_path / "keys"),
                     "cancel_operator_keys_sha256": hashlib.sha256(SECRET.encode()).hexdigest()},
        "robots": [{"id": "base_1", "kind": "base", "adapter": "nav2-sim", "places": PLACES,
                    "budget": {"fence_map_m": FENCE},
                    "perception": {"source": "topic", "topic": "/base_1/detections", "classes": ["person", "box"]}}]})


class Watcher:
    """The base's measured pose and speed, and the operator's stop, from an independent node."""

    def __init__(self, ctx):
        from geometry_msgs.msg import PoseWithCovarianceStamped
        from nav_msgs.msg import Odometry
        from rclpy.node import Node
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from timely_fleet.srv import StopRobots

        self.StopRobots = StopRobots
        self.node = Node("base_watcher", context=ctx)
        self.pose = None
        self.speeds: list[tuple[float, float]] = []
        self.node.create_subscription(PoseWithCovarianceStamped, "/base_1/amcl_pose", self._on_pose,
                                      QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.node.create_subscription(Odometry, "/base_1/odom", self._on_odom, 10)
        self.stop_cli = self.node.create_client(StopRobots, "planner/stop_robots")

    def _on_pose(self, msg) -> None:
        p = msg.pose.pose.position
        self.pose = (p.x, p.y)

    def _on_odom(self, msg) -> None:
        v = msg.twist.twist.linear
        self.speeds.append((time.monotonic(), math.hypot(v.x, v.y)))

    def speed(self) -> float:
        return self.speeds[-1][1] if self.speeds else 0.0

    def near(self, xy, tol=0.3) -> bool:
        return self.pose is not None and math.dist(self.pose, xy) <= tol


@pytest.fixture(scope="module")
def base(ros_module_context, tmp_path_factory):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    ctx = ros_module_context
    with running_fleet(fleet_params(tmp_path_factory.mktemp("base")), time_scale=0.25, context=ctx) as f:
        client, watch = GoalClient(ctx), Watcher(ctx)
        with spinning(client.node, ctx), spinning(watch.node, ctx):
            assert client.wait_for_server(30), client.wait_problem
            assert watch.stop_cli.wait_for_service(timeout_sec=20)
            assert wait_until(lambda: watch.pose is not None, 10), "no pose from the base"
            f.client, f.watch = client, watch
            yield f
        client.destroy()
        watch.node.destroy_node()


def test_go_to_a_named_place_ends_succeeded_with_the_measured_pose_there(base):
    res = base.client.send("base_1", "gt,kitchen;", tuf=NORMAL).result(120)
    assert res.status == SUCCEEDED, res.message
    assert wait_until(lambda: base.watch.near(PLACES["kitchen"]), 3), base.watch.pose


def test_a_place_inside_an_obstacle_ends_robot_failed_with_nav2s_reason_and_the_base_unmoved(base):
    before = base.watch.pose
    res = base.client.send("base_1", "gt,shelf;", tuf=NORMAL).result(60)
    assert res.status == ROBOT_FAILED, res.message
    assert "GOAL_OCCUPIED" in res.message or "occupied" in res.message.lower(), res.message
    assert math.dist(base.watch.pose, before) < 0.05


def test_a_place_whose_route_leaves_the_fence_is_refused_before_the_base_moves(base):
    before = base.watch.pose
    res = base.client.send("base_1", "gt,office;", tuf=NORMAL).result(60)
    assert res.status == ROBOT_FAILED, res.message
    assert "outside the geofence" in res.message, res.message
    time.sleep(0.3)
    assert math.dist(base.watch.pose, before) < 0.05 and base.watch.speed() < 1e-3


def test_an_operators_stop_mid_navigation_cancels_the_nav2_goal_and_the_base_stands_still(base):
    h = base.client.send("base_1", "gt,dock;", tuf=NORMAL)
    assert wait_until(lambda: base.watch.speed() > 0.05, 20), "the base never moved"
    req = base.watch.StopRobots.Request(robot_ids=["base_1"], operator_name="alice", secret=SECRET)
    fut = base.watch.stop_cli.call_async(req)
    assert wait_until(fut.done, 10) and fut.result().accepted, fut.result().message if fut.done() else "no answer"
    t_stop = time.monotonic()
    res = h.result(30)
    assert res.status == CANCELLED, res.message
    assert wait_until(lambda: base.watch.speed() < 1e-3, 2)
    stopped_at = next((t for t, v in list(base.watch.speeds) if t >= t_stop and v < 1e-3), None)
    assert stopped_at is not None and stopped_at - t_stop <= 0.5, (stopped_at, t_stop)
    time.sleep(0.3)  # amcl_pose comes at 5 Hz: the pose where it stopped
    pose = base.watch.pose
    time.sleep(0.5)
    assert math.dist(base.watch.pose, pose) < 0.01  # and it stays there


def test_a_minispec_loop_runs_on_the_base_through_nav2s_spin(base):
    h = base.client.send("base_1", "2{tc,90;};", tuf=NORMAL)
    res = h.result(60)
    assert res.status == SUCCEEDED, res.message
    assert len(res.segments) >= 1 and "2{" in res.plan_text.replace(" ", ""), res.plan_text


def test_a_scan_answers_from_the_detections_topic_and_an_undetectable_thing_is_refused(base):
    res = base.client.send("base_1", "gt,kitchen;_1=s,person;->_1;", tuf=NORMAL).result(120)
    assert res.status == SUCCEEDED, res.message
    assert [(a.skill, a.value) for a in res.answers if a.skill.startswith("scan")] == [("scan(person)", "True")]
    res = base.client.send("base_1", "_1=s,box;->_1;", tuf=NORMAL).result(120)  # the box is in the lab
    assert res.status == SUCCEEDED and "returned False" in res.message, res.message  # a true "not found"
    assert [(a.skill, a.value) for a in res.answers if a.skill.startswith("scan")] == [("scan(box)", "False")]
    res = base.client.send("base_1", "_1=s,cat;->_1;", tuf=NORMAL).result(60)
    assert res.status == REJECTED, res.message  # refused before a plan is written, naming what it knows
    assert res.message.startswith("base_1 cannot perceive 'cat': its detections topic reports 2 classes (person, box)")


def test_a_plan_to_a_place_the_base_does_not_have_is_refused_before_it_runs(base):
    before = base.watch.pose
    res = base.client.send("base_1", "gt,garage;", tuf=NORMAL).result(60)
    assert res.status == INVALID_PLAN and res.reason == "unknown_place", (res.status, res.reason, res.message)
    assert res.message.startswith("the plan sends base_1 to 'garage', which is not one of its places "
                                  "(dock, hall, kitchen, office, shelf)"), res.message
    assert math.dist(base.watch.pose, before) < 0.05
    assert all(s.execution_start_s < 0 for s in res.segments), [(s.text, s.execution_start_s) for s in res.segments]
