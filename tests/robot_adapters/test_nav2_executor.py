"""Nav2Executor and the Nav2 watchdog against the Nav2 protocol simulator (in-process, ten times real
time, its own ROS namespace per test): the calls the adapter makes, with NAV2_BASE's SkillCalls."""

from __future__ import annotations

import math
import threading
import time
import uuid
from contextlib import contextmanager

import pytest
from testkit import wait_until

pytestmark = pytest.mark.ros

SCALE = 0.1  # the simulator's time scale: ten times real time
LOWER_HALF = ((0.0, 0.0), (20.0, 0.0), (20.0, 10.0), (0.0, 10.0))  # a fence: the room below y = 10 m


def call(name: str, *args):
    from timely_robot.skills import NAV2_BASE

    return NAV2_BASE.validate(name, args)


def meter(**kw):
    from timely_robot.budgets import Budget, BudgetMeter

    return BudgetMeter(Budget(**{"max_calls": 30, "max_translation_cm": 10000.0, "max_speed_mps": 1.0, **kw}))


@contextmanager
def base(ctx, start=(10.0, 8.0, 0.0), places=None, connect: bool = True, **sim_kw):
    """A simulator (starting at the hall by default) and a connected executor on a fresh namespace."""
    from robot_adapters.base_executor import Nav2Executor
    from robot_adapters.sim.nav2_sim import PLACES, Nav2Sim

    ns = "nav" + uuid.uuid4().hex[:8]
    sim = Nav2Sim(ctx, ns, start=start, time_scale=SCALE, **sim_kw).start()
    places = places or {k: list(v) for k, v in PLACES.items()}
    ex = Nav2Executor("base_1", context=ctx, places=places, nav2={"namespace": ns}, time_scale=SCALE,
                      connect_timeout_s=5.0)
    try:
        if connect:
            ex.connect()
        yield sim, ex
    finally:
        ex.close()
        time.sleep(0.1)  # the simulator takes the closing zero cmd_vel before it shuts its executor down
        sim.stop()


def sim_pose(sim):
    with sim.lock:
        return sim.pose


def in_thread(fn):
    """Run ``fn`` in a thread; the returned dict gets "value" or "error" and the thread "done"."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - the test reads it
            out["error"] = e
        out["done"] = time.monotonic()

    out["thread"] = threading.Thread(target=run, daemon=True)
    out["thread"].start()
    return out


def test_go_to_kitchen_inside_the_fence_arrives_and_charges_the_route(ros_context):
    with base(ros_context) as (sim, ex):
        m = meter(fence_map_m=LOWER_HALF)
        assert ex.measured().link_age_s < 1.0
        ex.use_budget(m)
        assert ex.execute(call("go_to", "kitchen"), threading.Event()) is None
        x, y, yaw = ex.pose()
        assert math.dist((x, y), (16.0, 3.0)) < 0.3 and math.dist(sim_pose(sim)[:2], (16.0, 3.0)) < 0.3
        # the status link's pose is the same measured pose: map frame, z 0, yaw in radians
        assert ex.measured_pose() == pytest.approx((x, y, 0.0, math.radians(yaw)), abs=0.05)
        assert 7.5 * 100 < m.used.translation_cm < 9.0 * 100  # hall -> kitchen, about 7.8 m
        # the drive's expected time joins the plan's prediction: route at 0.25 m/s + a half turn at 0.5 rad/s
        route_m = m.used.translation_cm / 100
        assert m.predicted_s == pytest.approx((route_m / 0.25 + math.pi / 0.5) * SCALE)


def test_go_to_a_place_inside_an_obstacle_names_nav2s_code(ros_context):
    from robot_adapters.executor import SkillExecutionError

    with base(ros_context, places={"shelf": [7.0, 5.0, 0.0], "hall": [10.0, 8.0]}) as (sim, ex):
        with pytest.raises(SkillExecutionError, match=r"shelf.*\(GOAL_OCCUPIED\)"):
            ex.execute(call("go_to", "shelf"), threading.Event())
        with pytest.raises(SkillExecutionError, match="knows no place 'lab'.*hall, shelf"):
            ex.execute(call("go_to", "lab"), threading.Event())


def test_a_route_leaving_the_geofence_is_refused_before_moving(ros_context):
    from robot_adapters.executor import SkillExecutionError

    with base(ros_context) as (sim, ex):
        before = sim_pose(sim)
        ex.use_budget(meter(fence_map_m=LOWER_HALF))
        with pytest.raises(SkillExecutionError, match="^refused: outside the geofence"):
            ex.execute(call("go_to", "office"), threading.Event())  # (3, 17): above the fence
        time.sleep(0.3)
        assert sim_pose(sim) == before and sim.motion is None


def test_stop_from_another_thread_mid_navigation_cancels_and_the_base_stands(ros_context):
    from robot_adapters.executor import SkillCancelled

    with base(ros_context) as (sim, ex):
        cancel = threading.Event()
        run = in_thread(lambda: ex.execute(call("go_to_pose", 3.0, 17.0), cancel))
        assert wait_until(lambda: math.dist(sim_pose(sim)[:2], (10.0, 8.0)) > 1.0, 10)
        cancel.set()
        ex.stop()
        t0 = time.monotonic()
        assert wait_until(lambda: sim.vel == (0.0, 0.0) and sim.motion is None, 0.5)
        run["thread"].join(2.0)
        assert isinstance(run.get("error"), SkillCancelled) and run["done"] - t0 < 1.0
        assert math.dist(sim_pose(sim)[:2], (3.0, 17.0)) > 3.0


def test_the_speed_limit_stops_a_navigation_and_a_silent_nav2_times_out(ros_context):
    from robot_adapters.executor import SkillExecutionError, SkillTimeout

    with base(ros_context) as (sim, ex):
        ex.use_budget(meter(max_speed_mps=0.3))  # the simulator drives at 0.5 m/s
        with pytest.raises(SkillExecutionError, match=r"^exceeds the speed limit: 0\.[3-5]\d m/s > 0.3 m/s"):
            ex.execute(call("go_to", "kitchen"), threading.Event())
        assert wait_until(lambda: sim.motion is None and sim.vel == (0.0, 0.0), 0.5)
        assert math.dist(sim_pose(sim)[:2], (16.0, 3.0)) > 5.0
        ex.use_budget(None)
        ex.silence_s = 1.0
        run = in_thread(lambda: ex.execute(call("go_to", "kitchen"), threading.Event()))
        assert wait_until(lambda: sim.motion is not None, 5)
        sim.executor.shutdown(timeout_sec=1.0)  # Nav2 stops answering mid-goal
        t0 = time.monotonic()
        run["thread"].join(5.0)
        assert isinstance(run.get("error"), SkillTimeout) and "stopped answering" in str(run["error"])
        assert run["done"] - t0 < 2.0


def test_scan_turns_in_steps_until_the_object_is_seen(ros_context):
    from robot_adapters.executor import SkillExecutionError

    with base(ros_context) as (sim, ex):
        with pytest.raises(SkillExecutionError, match="^robot base_1 has no perception source declared"):
            ex.execute(call("scan", "cat"), threading.Event())
        ex.seen = lambda obj: obj == "cat" and sim_pose(sim)[2] < math.radians(-80)  # seen once turned right 90
        assert ex.execute(call("scan", "cat"), threading.Event()) is True
        assert abs(sim_pose(sim)[2] - math.radians(-90)) < 0.05
        assert ex.execute(call("is_visible", "dog"), threading.Event()) is False


def test_move_forward_towards_a_wall_ends_with_the_collision_message(ros_context):
    from robot_adapters.executor import SkillExecutionError

    with base(ros_context, start=(5.0, 5.0, 0.0)) as (sim, ex):  # facing the shelf, 1 m away
        with pytest.raises(SkillExecutionError, match=r"^Nav2 stopped: obstacle ahead \(COLLISION_AHEAD\)"):
            ex.execute(call("move_forward", 200), threading.Event())
        assert 5.0 < sim_pose(sim)[0] < 5.75
        ex.execute(call("turn_ccw", 90), threading.Event())
        assert wait_until(lambda: abs(ex.pose()[2] - 90.0) < 3.0, 1)  # odometry may come after the result


def test_connect_to_an_inactive_nav2_fails_with_one_sentence(ros_context):
    from robot_adapters.executor import SkillExecutionError

    with base(ros_context, connect=False, lifecycle="inactive") as (sim, ex):
        with pytest.raises(SkillExecutionError) as e:
            ex.connect()
        assert str(e.value) == ("robot base_1: Nav2 is not active (bt_navigator is 'inactive'): "
                                "activate its lifecycle nodes first")
        assert ex.node is None
    from robot_adapters.base_executor import Nav2Executor

    ex = Nav2Executor("base_2", context=ros_context, places={}, nav2={"namespace": "nowhere"}, connect_timeout_s=0.3)
    with pytest.raises(SkillExecutionError, match=r"^robot base_2: no Nav2 action server navigate_to_pose, .* "
                                                  r"under '/nowhere' within 0.3 s: start Nav2"):
        ex.connect()


def test_watchdog_stops_a_navigation_whose_client_went_silent_and_re_arms(ros_context):
    import rclpy
    from action_msgs.msg import GoalStatus
    from geometry_msgs.msg import TwistStamped
    from nav2_msgs.action import NavigateToPose
    from rclpy.action import ActionClient
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from std_msgs.msg import Header

    from robot_adapters.base_executor import HEARTBEAT_TOPIC
    from robot_adapters.nav2_watchdog import Nav2Watchdog
    from robot_adapters.sim.nav2_sim import Nav2Sim

    ns = "nav" + uuid.uuid4().hex[:8]
    # the simulator takes Twist, the watchdog sends TwistStamped: its zero velocity does not reach the
    # simulator, so only its cancel-all can stop it (as on a real Nav2, whose controller overrides a zero)
    sim = Nav2Sim(ros_context, ns, start=(10.0, 8.0, 0.0), time_scale=SCALE, stamped=False).start()
    client = Node("dying_adapter", namespace=ns, context=ros_context)
    beat = client.create_publisher(Header, HEARTBEAT_TOPIC, 10)
    beats = client.create_timer(0.2, lambda: beat.publish(Header(frame_id="base_1")))
    dog_ctx = Context()  # the watchdog's own participant, as in its own process
    rclpy.init(context=dog_ctx)
    dog = Nav2Watchdog(dog_ctx, ns, timeout_s=1.0)
    observer = Node("observer", namespace=ns, context=dog_ctx)
    zeros: list = []
    observer.create_subscription(TwistStamped, "cmd_vel", zeros.append, 10)
    spinners = []
    for ctx, nodes in ((ros_context, (client,)), (dog_ctx, (dog.node, observer))):
        spinners.append(SingleThreadedExecutor(context=ctx))
        for n in nodes:
            spinners[-1].add_node(n)
        threading.Thread(target=spinners[-1].spin, daemon=True).start()
    try:
        nav = ActionClient(client, NavigateToPose, "navigate_to_pose")
        assert nav.wait_for_server(timeout_sec=10)
        goal = NavigateToPose.Goal()
        goal.pose.header.frame_id = "map"
        goal.pose.pose.position.x, goal.pose.pose.position.y, goal.pose.pose.orientation.w = 3.0, 17.0, 1.0
        sent = nav.send_goal_async(goal)
        assert wait_until(lambda: sent.done() and sent.result().accepted, 10)
        assert wait_until(lambda: math.dist(sim_pose(sim)[:2], (10.0, 8.0)) > 0.5, 10)
        client.destroy_timer(beats)  # the adapter dies: no cancel, no more heartbeats
        t0 = time.monotonic()
        assert wait_until(lambda: sim.motion is None and sim.vel == (0.0, 0.0), 1.5)
        assert time.monotonic() - t0 <= 1.5 and dog.trips == 1
        result = sent.result().get_result_async()
        assert wait_until(result.done, 2) and result.result().status == GoalStatus.STATUS_CANCELED
        assert wait_until(lambda: len(zeros) >= 3, 2) and all(z.twist.linear.x == 0.0 for z in zeros)
        beats = client.create_timer(0.2, lambda: beat.publish(Header(frame_id="base_1")))  # back: re-armed
        time.sleep(0.5)
        client.destroy_timer(beats)
        assert dog.trips == 1 and wait_until(lambda: dog.trips == 2, 1.5)
    finally:
        for sp in spinners:
            sp.shutdown()
        dog.destroy()
        observer.destroy_node()
        client.destroy_node()
        rclpy.try_shutdown(context=dog_ctx)
        sim.stop()
