"""A Nav2 base's safety when a process dies, as a user runs it: four processes of their own, as the
README starts them, on a ROS domain of the test's own and a signed link (one tmp keystore):

- the Nav2 protocol simulator, ``python -m robot_adapters.sim.nav2_sim --namespace base_1``;
- the watchdog beside it, ``python -m robot_adapters.nav2_watchdog --namespace base_1 --timeout-s 1``;
- the planner, ``timely-fleet up --only planner`` (scripted engine: the instruction is the plan);
- the robot side, ``timely-robot up --robots base_1`` (``adapter: nav2``, the simulator's namespace).

A goal ``gt,lab;`` (dock -> lab, about 22 m) is sent with ``timely-fleet goal``; an independent
rclpy node watches ``/base_1/odom`` and ``/base_1/amcl_pose``, Nav2's goal statuses and /robot_status.

- ``timely-robot up`` SIGKILLed mid-navigation: Nav2 would drive on; the watchdog, its heartbeats
  gone, stops the base within its timeout + 0.5 s, and the base stays still.
- the planner SIGKILLed mid-navigation: the adapter's lease (security.lease_s) runs out, it
  cancels the Nav2 goal and the base stands still within lease_s + 1 s; /robot_status says
  ``stopped: planner lost (...)``; ``timely-fleet goal`` says the planner is gone.

And the simulator alone, Ctrl-C'd while it drives a goal: the goal ends ABORTED ("Nav2 simulator
shut down") with a result its client receives, and the process exits 0 without a traceback.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from processes import ROOT, TF, Proc, stop_all, traceback_in
from testkit import wait_until

pytestmark = pytest.mark.ros

SCALE = "0.5"  # the simulated base runs twice as fast; every process knows it
WATCHDOG_S, LEASE_S = 1.0, 2.0
PY = [sys.executable, "-m"]
SIM, WATCHDOG, ROBOT = ([*PY, m] for m in ("robot_adapters.sim.nav2_sim", "robot_adapters.nav2_watchdog",
                                            "robot_adapters.cli"))  # ROBOT: timely-robot
# places of the simulator's default room (robot_adapters.sim.nav2_sim.PLACES)
PLACES = {"dock": [2.0, 2.0], "kitchen": [16.0, 3.0], "hall": [10.0, 8.0], "office": [3.0, 17.0],
          "lab": [17.0, 17.0]}
STILL = 1e-3  # m/s, rad/s


def fleet_yaml(tmp_path) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({
        "planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 30.0},
        "security": {"mode": "sign", "keystore": str(tmp_path / "keys"), "lease_s": LEASE_S},
        "robots": [{"id": "base_1", "kind": "base", "adapter": "nav2", "nav2": {"namespace": "base_1"},
                    "places": PLACES}]}))
    return str(path)


class Watcher:
    """The base's odometry (speeds, real m/s and rad/s) and pose, the statuses of its Nav2 goals
    and /robot_status, each with its arrival time, from a node of the test's own."""

    def __init__(self, ctx) -> None:
        import rclpy
        from action_msgs.msg import GoalStatusArray
        from geometry_msgs.msg import PoseWithCovarianceStamped
        from nav_msgs.msg import Odometry
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from timely_fleet.msg import RobotStatus

        from timely_robot.link.ros import STATUS_QOS

        self.node = n = rclpy.create_node("base_process_watch", context=ctx)
        self.odom: list[tuple[float, float, float]] = []  # (t, |v|, |w|)
        self.pose: tuple[float, float] | None = None
        self.nav: dict[bytes, list[int]] = {}  # navigate_to_pose goal id -> its statuses in order
        self.statuses: list[tuple[float, RobotStatus]] = []
        n.create_subscription(Odometry, "/base_1/odom", self._on_odom, 50)
        n.create_subscription(PoseWithCovarianceStamped, "/base_1/amcl_pose", self._on_pose,
                              QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        n.create_subscription(GoalStatusArray, "/base_1/navigate_to_pose/_action/status", self._on_nav, 10)
        n.create_subscription(RobotStatus, "/robot_status", lambda m: self.statuses.append((time.monotonic(), m)),
                              STATUS_QOS)
        self.ex = SingleThreadedExecutor(context=ctx)
        self.ex.add_node(n)
        threading.Thread(target=self.ex.spin, daemon=True).start()

    def _on_odom(self, m) -> None:
        t = m.twist.twist
        self.odom.append((time.monotonic(), math.hypot(t.linear.x, t.linear.y), abs(t.angular.z)))

    def _on_pose(self, m) -> None:
        self.pose = (m.pose.pose.position.x, m.pose.pose.position.y)

    def _on_nav(self, m) -> None:
        for s in m.status_list:
            seen = self.nav.setdefault(bytes(s.goal_info.goal_id.uuid), [])
            if not seen or seen[-1] != s.status:
                seen.append(s.status)

    def speed(self) -> float:
        return self.odom[-1][1] if self.odom else 0.0

    def still_since(self, t0: float) -> float | None:
        """When the base, moving at ``t0``, first reported standing still (None: not yet)."""
        return next((t for t, v, w in list(self.odom) if t >= t0 and v < STILL and w < STILL), None)

    def close(self) -> None:
        self.ex.shutdown()
        self.node.destroy_node()


@pytest.fixture
def base(own_ros_domain, tmp_path):
    """The four processes ready, a goal to the lab sent and the base driving its first leg."""
    params = fleet_yaml(tmp_path)
    procs: dict[str, Proc] = {}
    watch = Watcher(own_ros_domain)
    goal = None
    try:
        procs["sim"] = Proc("--namespace", "base_1", "--time-scale", SCALE, ready=r"Nav2 simulator on namespace",
                            program=SIM)
        procs["dog"] = Proc("--namespace", "base_1", "--timeout-s", str(WATCHDOG_S),
                            ready=r"watching /base_1/timely_watchdog/heartbeat", program=WATCHDOG)
        procs["planner"] = Proc("up", "--only", "planner", "--params", params, "--time-scale", SCALE,
                                ready=r"ready in")  # it creates the keystore's keys
        for name in ("sim", "dog", "planner"):
            procs[name].wait_ready(60)
        procs["robot"] = Proc("up", "--params", params, "--robots", "base_1", "--time-scale", SCALE,
                              ready=r"ready: the adapters of 1 robot", program=ROBOT)
        procs["robot"].wait_ready(60)
        goal = subprocess.Popen([*TF, "goal", "base_1", "gt,lab;", "--wait", "30", "--timeout", "120"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        assert wait_until(lambda: watch.speed() > 0.2, 30), ("the base never moved", watch.odom[-3:], goal.poll(),
                                                        "\n".join(procs["robot"].lines[-20:]))
        time.sleep(1.0)  # mid-navigation, on the first leg (about 11 m towards the shelf's end)
        assert watch.speed() > 0.2, watch.odom[-5:]
        watch.procs, watch.goal = procs, goal
        yield watch
    finally:
        if goal is not None and goal.poll() is None:
            os.killpg(goal.pid, signal.SIGKILL)
        stop_all([p.proc for p in procs.values()])
        watch.close()


def _stays_still(watch: Watcher, stopped_at: float, for_s: float = 2.0) -> None:
    time.sleep(0.3)  # amcl_pose comes at 5 Hz: the pose where it stopped
    pose = watch.pose
    time.sleep(for_s)
    moving = [(round(t - stopped_at, 2), v, w) for t, v, w in list(watch.odom)
              if t > stopped_at and (v >= STILL or w >= STILL)]
    assert not moving, moving[:5]
    assert math.dist(watch.pose, pose) < 0.01, (pose, watch.pose)


def test_the_watchdog_stops_the_base_when_the_adapter_process_is_killed(base):
    robot = base.procs["robot"].proc
    os.killpg(robot.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    robot.wait()
    assert wait_until(lambda: base.still_since(killed_at) is not None, WATCHDOG_S + 5), base.odom[-5:]
    stopped_s = base.still_since(killed_at) - killed_at
    print(f"the base stood still {stopped_s:.2f} s after `timely-robot up` was killed "
          f"(watchdog timeout {WATCHDOG_S:g} s)")
    assert stopped_s <= WATCHDOG_S + 0.5, stopped_s
    _stays_still(base, killed_at + stopped_s)
    dog = "\n".join(base.procs["dog"].lines)
    assert "no heartbeat from 'base_1'" in dog, dog[-2000:]


def test_the_adapter_stops_the_base_by_the_lease_when_the_planner_is_killed(base):
    from action_msgs.msg import GoalStatus
    from timely_fleet.msg import RobotStatus

    planner = base.procs["planner"].proc
    os.killpg(planner.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    planner.wait()
    assert wait_until(lambda: base.still_since(killed_at) is not None, LEASE_S + 5), base.odom[-5:]
    stopped_s = base.still_since(killed_at) - killed_at
    print(f"the base stood still {stopped_s:.2f} s after the planner was killed (lease {LEASE_S:g} s)")
    assert stopped_s <= LEASE_S + 1.0, stopped_s
    _stays_still(base, killed_at + stopped_s)
    # the adapter said why, and cancelled the Nav2 goal (not only a zero cmd_vel)
    stops = [m.error for t, m in base.statuses if t > killed_at and m.robot_id == "base_1"
             and m.state == RobotStatus.STATE_IDLE and "planner lost" in m.error]
    assert stops and stops[0].startswith("stopped: planner lost (no word for"), \
        [(m.state, m.error) for _t, m in base.statuses][-10:]
    assert any(GoalStatus.STATUS_CANCELING in s or GoalStatus.STATUS_CANCELED in s for s in base.nav.values()), base.nav
    robot_log = "\n".join(base.procs["robot"].lines)
    assert "planner lost" in robot_log, robot_log[-2000:]
    assert not traceback_in(robot_log), traceback_in(robot_log)
    out = base.goal.communicate(timeout=15)[0]  # the planner's DDS lease (4 s) after the kill
    assert "the planner is gone" in out, out[-2000:]


def test_the_simulator_ctrl_c_mid_navigation_ends_the_goal_with_a_result(own_ros_domain):
    import rclpy
    from action_msgs.msg import GoalStatus
    from nav2_msgs.action import NavigateToPose
    from rclpy.action import ActionClient
    from rclpy.executors import SingleThreadedExecutor

    sim = Proc("--namespace", "base_1", ready=r"Nav2 simulator on namespace", program=SIM)
    node = rclpy.create_node("sim_client", context=own_ros_domain)
    ex = SingleThreadedExecutor(context=own_ros_domain)
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()
    try:
        sim.wait_ready(30)
        client = ActionClient(node, NavigateToPose, "/base_1/navigate_to_pose")
        assert client.wait_for_server(timeout_sec=20)
        goal = NavigateToPose.Goal()
        goal.pose.header.frame_id = "map"
        goal.pose.pose.position.x, goal.pose.pose.position.y = PLACES["lab"]
        goal.pose.pose.orientation.w = 1.0
        sent = client.send_goal_async(goal)
        assert wait_until(sent.done, 10) and sent.result().accepted
        result = sent.result().get_result_async()
        time.sleep(1.0)
        assert not result.done()
        os.killpg(sim.proc.pid, signal.SIGINT)
        assert wait_until(result.done, 5), "the goal never ended: its client is left waiting"
        assert sim.proc.wait(timeout=10) == 0
    finally:
        log = sim.stop()
        ex.shutdown()
        node.destroy_node()
    res = result.result()
    assert (res.status, res.result.error_code, res.result.error_msg) == (
        GoalStatus.STATUS_ABORTED, NavigateToPose.Result.UNKNOWN, "Nav2 simulator shut down")
    assert not traceback_in(log), traceback_in(log)
