"""Nav2 protocol simulator: one rclpy node that looks to a client like a Nav2 stack on a mobile base.

Serves, under ``namespace`` (default none), what a client of Nav2 Kilted uses, with Nav2's types
(``nav2_msgs``: interfaces/nav2_msgs, upstream's definitions) and result codes:

* ``navigate_to_pose`` (NavigateToPose, bt_navigator): plans as below, drives a unicycle along the
  path at ``speed`` (m/s) and ``turn_speed`` (rad/s), turning in place at its corners, then turns
  to the goal's yaw. Feedback at ~10 Hz: current_pose (``map``), navigation_time,
  estimated_time_remaining (distance / current speed, as upstream), number_of_recoveries (0: no
  recoveries run), distance_remaining (along the path). Cancel: CANCELED, the robot stops. A
  planning failure aborts at once with the planner's code as bt_navigator reports it
  (GOAL_OCCUPIED 206, GOAL_OUTSIDE_MAP 204, NO_VALID_PATH 208, ...) and an error_msg;
  ``navigate_timeout_s`` (sim time) aborts with TIMEOUT 9003, a zero ``cmd_vel`` with UNKNOWN 9000,
  a base that moved less than 0.5 m in 10 s (Nav2's progress checker) with the controller's
  FAILED_TO_MAKE_PROGRESS 105;
  a new NavigateToPose goal aborts the running one (error_code NONE), as Nav2's preemption does.
* ``compute_path_to_pose`` (ComputePathToPose, planner_id "" or "GridBased"): A* on a grid
  (``resolution``) of the obstacles inflated by the robot's radius, shortened by line of sight
  (``nav2_map``), a nav_msgs/Path in ``map`` with a pose every ``resolution``; upstream's
  START/GOAL_OUTSIDE_MAP, START/GOAL_OCCUPIED, NO_VALID_PATH, INVALID_PLANNER, TF_ERROR (a frame
  other than ``map``, ``odom`` or empty).
* ``spin``, ``drive_on_heading``, ``backup`` (behavior_server): upstream's checks, feedback,
  results and messages (``"<behavior> failed:..."``); time_allowance 0: none. DriveOnHeading and
  BackUp look ``simulate_ahead_s`` (2 s, upstream's default) ahead at the commanded speed and end
  COLLISION_AHEAD (723 / 714) when the robot would touch an obstacle or a wall within the distance
  left (without collision checks it stops at the obstacle). A disc never collides turning in
  place, so Spin never ends COLLISION_AHEAD here.
* ``odom`` (nav_msgs/Odometry, ``odom`` -> ``base_link``, 20 Hz; odom coincides with ``map``),
  ``amcl_pose`` (PoseWithCovarianceStamped in ``map``, 5 Hz, transient local as AMCL's),
  ``initialpose`` (sets the pose, as AMCL does). No ``/tf``.
* ``cmd_vel`` (geometry_msgs/TwistStamped, Kilted's default; ``stamped=False``: Twist): a zero
  velocity stops the robot and ends the action moving it; another velocity drives the idle robot
  for 0.5 s (sim time) and is ignored while an action moves it. Being base and Nav2 in one, the
  simulator publishes no cmd_vel.
* ``detections`` (timely_fleet/DetectionArray, 5 Hz): a camera on the base looking ahead, the
  objects of its scene (``objects``: label -> (x, y) in ``map``) within ``view_m`` metres and
  ``fov_deg`` of its heading and not hidden by an obstacle, each with its position in
  ``base_link`` (mm, x ahead, y to the left): the detections topic a base's perception
  (``perception: {source: topic}``) reads, as a team's detector node would publish it.
* ``{bt_navigator,controller_server,planner_server,behavior_server}/get_state``
  (lifecycle_msgs/GetState): ``active``, or with ``lifecycle="inactive"`` ``inactive``, and then,
  as Nav2's inactive action servers do, every goal is rejected.

Like a real Nav2, a NavigateToPose goal keeps driving when the client that sent it dies or goes
silent: nothing here watches clients (the hazard a Nav2 adapter's watchdog must cover). Only a
cancel, a zero ``cmd_vel``, a new goal or the goal's end stop the robot.

Default world (``DEFAULT_OBSTACLES``, ``PLACES``): a 20 m x 20 m room, ``map`` origin at its lower
left corner; a shelf x 6-8 m from the floor to y = 12 m, a table x 12-15 m, y 12-15 m; places
``dock`` (2, 2: the start), ``kitchen`` (16, 3), ``hall`` (10, 8), ``office`` (3, 17), ``lab``
(17, 17); in view of its camera (``SCENE``) a person at the kitchen (18, 3), a chair in the hall
(10, 10) and a box in the lab (17, 19). The robot: a disc of radius 0.25 m, 0.5 m/s, 1 rad/s. ``time_scale`` < 1 runs faster
(0.1: ten times); durations in messages are simulated, stamps are the ROS clock's.

CLI: ``python -m robot_adapters.sim.nav2_sim [--namespace robot1] [--time-scale 1] ...``; Ctrl-C
or SIGTERM (``stop()`` in-process) ends every running goal ABORTED (UNKNOWN, "Nav2 simulator shut
down") and sends its result before ROS shuts down.
"""

from __future__ import annotations

import argparse
import math
import signal
import threading
import time
from typing import Any, Callable, Sequence

import rclpy
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseStamped, PoseWithCovarianceStamped, Twist, TwistStamped
from lifecycle_msgs.msg import State
from lifecycle_msgs.srv import GetState
from nav2_msgs.action import BackUp, ComputePathToPose, DriveOnHeading, NavigateToPose, Spin
from nav_msgs.msg import Odometry, Path
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.signals import SignalHandlerOptions

from robot_adapters.sim.nav2_map import GridMap, PlanError, Rect, densify

Pose2D = tuple[float, float, float]  # x, y, yaw in map
DEFAULT_SIZE = (20.0, 20.0)
DEFAULT_OBSTACLES = (Rect(6.0, 0.0, 8.0, 12.0), Rect(12.0, 12.0, 15.0, 15.0))
PLACES: dict[str, Pose2D] = {"dock": (2.0, 2.0, 0.0), "kitchen": (16.0, 3.0, 0.0), "hall": (10.0, 8.0, 0.0),
                             "office": (3.0, 17.0, 0.0), "lab": (17.0, 17.0, 0.0)}
#: what the simulated camera can see: label -> (x, y) in map
SCENE: dict[str, tuple[float, float]] = {"person": (18.0, 3.0), "chair": (10.0, 10.0), "box": (17.0, 19.0)}
VIEW_M, FOV_DEG = 5.0, 70.0  # the camera's range and field of view
DETECTIONS_HZ = 5.0
PROGRESS_RADIUS_M, PROGRESS_S = 0.5, 10.0  # Nav2's progress checker: required_movement_radius, movement_time_allowance
#: the controller_server's code a NavigateToPose result carries when FollowPath fails (nav2_msgs FollowPath)
CONTROLLER_CODES = {"FAILED_TO_MAKE_PROGRESS": 105}
ACTIVE, INACTIVE = "active", "inactive"
LIFECYCLE_NODES = ("bt_navigator", "controller_server", "planner_server", "behavior_server")


def wrap(a: float) -> float:
    return math.atan2(math.sin(a), math.cos(a))


def yaw_of(q: Any) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def duration(s: float) -> Duration:
    ns = int(round(max(0.0, s) * 1e9))
    return Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def seconds(d: Duration) -> float:
    return d.sec + d.nanosec * 1e-9


class Motion:
    """What moves the robot for one action: ``command`` gives (v, w) for the next ``dt`` s of sim
    time, or None when finished; ``outcome`` is then ("done" | "fail" | "stopped" | "replaced", key, msg)."""

    def __init__(self, owner: str, allowance: float = 0.0) -> None:
        self.owner, self.outcome, self.finished = owner, ("", "", ""), threading.Event()
        self.allowance = allowance  # sim seconds, 0: none
        self.progress = self.speed = 0.0  # distance or angle covered, for feedback; current |v|
        self.t0 = self.t = 0.0  # sim times: when the motion began, its last step
        self.start: Pose2D = (0.0, 0.0, 0.0)

    def begin(self, pose: Pose2D, t: float) -> None:
        self.start, self.t0, self.t = pose, t, t

    def late(self, t: float) -> bool:
        self.t = t
        return self.allowance > 0 and t - self.t0 > self.allowance

    def finish(self, kind: str, key: str = "", msg: str = "") -> None:
        if not self.finished.is_set():
            self.outcome = (kind, key, msg)
            self.finished.set()

    def command(self, pose: Pose2D, dt: float, t: float) -> tuple[float, float] | None:
        raise NotImplementedError


class FollowPath(Motion):
    def __init__(self, corners: list[tuple[float, float]], goal_yaw: float, v: float, w: float,
                 timeout_s: float | None, xy_tol: float = 0.05, yaw_tol: float = 0.02) -> None:
        super().__init__("navigate_to_pose", timeout_s or 0.0)
        self.pts, self.yaw, self.v, self.w, self.i = corners, goal_yaw, v, w, 1
        self.xy_tol, self.yaw_tol = xy_tol, yaw_tol
        self.anchor: tuple[float, float, float] | None = None  # (x, y, sim time) of the progress check

    def stuck(self, pose: Pose2D, t: float) -> bool:
        """Nav2's SimpleProgressChecker (controller_server's defaults): the base must move
        PROGRESS_RADIUS_M within PROGRESS_S, else FollowPath fails FAILED_TO_MAKE_PROGRESS."""
        if self.anchor is None or math.dist(pose[:2], self.anchor[:2]) > PROGRESS_RADIUS_M:
            self.anchor = (pose[0], pose[1], t)
        return t - self.anchor[2] > PROGRESS_S

    def remaining(self, pose: Pose2D) -> float:
        rest = sum(math.dist(a, b) for a, b in zip(self.pts[self.i:], self.pts[self.i + 1:]))
        return math.dist(pose[:2], self.pts[min(self.i, len(self.pts) - 1)]) + rest

    def command(self, pose: Pose2D, dt: float, t: float) -> tuple[float, float] | None:
        if self.late(t):
            self.finish("fail", "TIMEOUT", f"Navigation did not reach the goal within {self.allowance:g} s")
            return None
        if self.stuck(pose, t):
            self.finish("fail", "FAILED_TO_MAKE_PROGRESS", "Failed to make progress")
            return None
        while self.i < len(self.pts) - 1 and math.dist(pose[:2], self.pts[self.i]) < 0.1:
            self.i += 1
        tx, ty = self.pts[self.i]
        d = math.dist(pose[:2], (tx, ty))
        final = self.i == len(self.pts) - 1
        if final and d < self.xy_tol:
            err = wrap(self.yaw - pose[2])
            if abs(err) < self.yaw_tol:
                self.finish("done")
                return None
            return 0.0, math.copysign(min(self.w, abs(err) / dt, max(0.2, 2 * abs(err))), err)
        err = wrap(math.atan2(ty - pose[1], tx - pose[0]) - pose[2])
        w = math.copysign(min(self.w, abs(err) / dt, 3 * abs(err)), err)
        v = 0.0 if abs(err) > 0.5 else self.v * math.cos(err)
        if final:
            v = min(v, d / dt, max(0.1, 1.5 * d))
        return v, w


class Turn(Motion):
    def __init__(self, angle: float, w_max: float, allowance: float) -> None:
        super().__init__("spin", allowance)
        self.angle, self.w_max = angle, w_max

    def command(self, pose: Pose2D, dt: float, t: float) -> tuple[float, float] | None:
        if self.late(t):
            self.finish("fail", "TIMEOUT", "Exceeded time allowance before reaching the Spin goal - Exiting Spin")
            return None
        left = abs(self.angle) - abs(self.progress)
        if left < 1e-6:
            self.finish("done")
            return None
        w = min(max(math.sqrt(2 * 3.2 * left), 0.4), self.w_max, left / dt)  # upstream's rotational_acc_lim 3.2, min 0.4
        return 0.0, math.copysign(w, self.angle)


class Straight(Motion):
    """DriveOnHeading / BackUp: ``distance`` along the heading (negative: backwards)."""

    def __init__(self, owner: str, distance: float, speed: float, allowance: float, check: bool,
                 collides: Callable[[float, float], bool], ahead_s: float) -> None:
        super().__init__(owner, allowance)
        self.dist, self.v, self.check, self.collides, self.ahead_s = distance, speed, check, collides, ahead_s

    def command(self, pose: Pose2D, dt: float, t: float) -> tuple[float, float] | None:
        if self.late(t):
            self.finish("fail", "TIMEOUT", "Exceeded time allowance before reaching the DriveOnHeading goal - Exiting DriveOnHeading")
            return None
        self.progress = math.dist(pose[:2], self.start[:2])
        left = abs(self.dist) - self.progress
        if left <= 1e-6:
            self.finish("done")
            return None
        v = max(min(abs(self.v), math.sqrt(2 * 2.5 * left)), 0.10)  # upstream's deceleration_limit 2.5, minimum_speed 0.10
        v = math.copysign(min(v, left / dt), self.dist)
        if self.check:
            for k in range(int(10 * self.ahead_s)):  # upstream: cycle_frequency 10 Hz x simulate_ahead_time
                s = v * k / 10.0
                if left - abs(s) <= 0:
                    break
                if self.collides(pose[0] + s * math.cos(pose[2]), pose[1] + s * math.sin(pose[2])):
                    self.finish("fail", "COLLISION_AHEAD", "Collision Ahead - Exiting DriveOnHeading")
                    return None
        return v, 0.0


class Nav2Sim:
    """The simulated Nav2 stack and base (see the module docstring); ``start()``/``stop()`` or ``with``."""

    def __init__(self, context: Any = None, namespace: str = "", *, size: tuple[float, float] = DEFAULT_SIZE,
                 obstacles: Sequence[Rect] = DEFAULT_OBSTACLES, start: Pose2D = PLACES["dock"],
                 speed: float = 0.5, turn_speed: float = 1.0, radius: float = 0.25, resolution: float = 0.2,
                 time_scale: float = 1.0, navigate_timeout_s: float | None = 600.0, lifecycle: str = ACTIVE,
                 stamped: bool = True, simulate_ahead_s: float = 2.0, node_name: str = "nav2_sim",
                 objects: dict[str, Sequence[float]] | None = None, view_m: float = VIEW_M,
                 fov_deg: float = FOV_DEG) -> None:
        from timely_fleet.msg import DetectionArray

        self.map = GridMap(size, obstacles, radius, resolution)
        self.objects = {str(k): (float(v[0]), float(v[1])) for k, v in (SCENE if objects is None else objects).items()}
        self.view_m, self.half_fov = float(view_m), math.radians(fov_deg) / 2
        self.speed, self.turn_speed, self.time_scale = speed, turn_speed, time_scale
        self.navigate_timeout_s, self.lifecycle, self.ahead_s = navigate_timeout_s, lifecycle, simulate_ahead_s
        self.lock = threading.Lock()
        self.pose: Pose2D = (float(start[0]), float(start[1]), float(start[2]))
        self.vel, self.sim_t, self.ticks = (0.0, 0.0), 0.0, 0
        self.motion: Motion | None = None
        self.teleop: tuple[float, float, float] | None = None  # v, w, until (sim time)
        self.node = n = Node(node_name, namespace=namespace, context=context)
        cb = ReentrantCallbackGroup()
        self.odom_pub = n.create_publisher(Odometry, "odom", 10)
        self.amcl_pub = n.create_publisher(PoseWithCovarianceStamped, "amcl_pose",
                                           QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        n.create_subscription(PoseWithCovarianceStamped, "initialpose", self._on_initialpose, 10)
        n.create_subscription(TwistStamped if stamped else Twist, "cmd_vel", self._on_cmd_vel, 10)
        for name in LIFECYCLE_NODES:
            n.create_service(GetState, f"{name}/get_state", self._on_get_state, callback_group=cb)
        self._executing = 0  # action goals whose execute callback runs
        self.servers = [ActionServer(n, t, name, execute_callback=self._counted(fn), goal_callback=self._on_goal,
                                     cancel_callback=lambda _req: CancelResponse.ACCEPT, callback_group=cb)
                        for t, name, fn in ((NavigateToPose, "navigate_to_pose", self._navigate),
                                            (ComputePathToPose, "compute_path_to_pose", self._compute_path),
                                            (Spin, "spin", self._spin), (DriveOnHeading, "drive_on_heading", self._drive),
                                            (BackUp, "backup", self._backup))]
        n.create_timer(0.05, self._publish)
        self.det_pub = n.create_publisher(DetectionArray, "detections", 10)
        n.create_timer(1.0 / DETECTIONS_HZ, self._publish_detections)
        self.executor = MultiThreadedExecutor(num_threads=8, context=context)
        self.executor.add_node(n)
        self._halt = threading.Event()
        self._threads = [threading.Thread(target=self._spin_ros, daemon=True, name="nav2_sim-ros"),
                         threading.Thread(target=self._physics, daemon=True, name="nav2_sim-physics")]

    def _spin_ros(self) -> None:
        """Spin until :meth:`stop`. A process that shuts its ROS context down while this spins (its
        handles destroyed under a running callback: rclpy raises InvalidHandle or
        ExternalShutdownException) ends the simulator quietly; any other error is raised."""
        try:
            self.executor.spin()
        except Exception:
            if self._halt.is_set() or not rclpy.ok(context=self.node.context):
                return
            raise

    def start(self) -> "Nav2Sim":
        for th in self._threads:
            th.start()
        return self

    def stop(self) -> None:
        """End every goal (ABORTED, "Nav2 simulator shut down") and send its result while ROS is
        still up (up to 2 s), then stop spinning and destroy the node."""
        self._halt.set()
        with self.lock:
            if self.motion:
                self.motion.finish("stopped", "UNKNOWN", "Nav2 simulator shut down")
            ending = self._executing > 0
        deadline = time.monotonic() + 2.0
        while self._executing and time.monotonic() < deadline and rclpy.ok(context=self.node.context):
            time.sleep(0.01)
        if ending:
            time.sleep(0.2)  # the ended goals' result responses, sent by the executor
        self.executor.shutdown(timeout_sec=2.0)
        for th in self._threads:
            th.join(timeout=2.0)
        self.node.destroy_node()

    def __enter__(self) -> "Nav2Sim":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- physics: a unicycle, in steps of at most 20 ms of sim time ---------------------------------
    def _physics(self, period: float = 0.02) -> None:
        last = time.monotonic()
        while not self._halt.wait(period):
            now = time.monotonic()
            total, last = (now - last) / self.time_scale, now
            with self.lock:
                while total > 1e-9:
                    dt = min(0.02, total)
                    total -= dt
                    self._step(dt)

    def _step(self, dt: float) -> None:
        self.sim_t += dt
        v = w = 0.0
        m = self.motion
        if m is not None:
            cmd = m.command(self.pose, dt, self.sim_t)
            if cmd is None:
                self.motion = m = None
            else:
                v, w = cmd
        elif self.teleop is not None:
            v, w, until = self.teleop
            if self.sim_t > until:
                self.teleop, v, w = None, 0.0, 0.0
        x, y, yaw = self.pose
        nx, ny = x + v * math.cos(yaw) * dt, y + v * math.sin(yaw) * dt
        if v and self.map.collides(nx, ny) and not self.map.collides(x, y):
            nx, ny, v = x, y, 0.0  # bumped: stays where it is
        self.pose, self.vel = (nx, ny, wrap(yaw + w * dt)), (v, w)
        if m is not None:
            m.speed = abs(v)
            if isinstance(m, Turn):
                m.progress += w * dt

    def _counted(self, execute: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def counted(gh: Any) -> Any:
            with self.lock:
                self._executing += 1
            try:
                return execute(gh)
            finally:
                with self.lock:
                    self._executing -= 1
        return counted

    def _run(self, gh: Any, motion: Motion, feedback: Callable[[], None]) -> tuple[str, str, str]:
        """Make ``motion`` the robot's (ending the one it replaces) and wait for its end, sending
        feedback at ~10 Hz; ("canceled", ...) when the client canceled."""
        with self.lock:
            if self.motion is not None:
                self.motion.finish("replaced", "", f"preempted by a new {motion.owner} goal")
            self.motion, self.teleop = motion, None
            motion.begin(self.pose, self.sim_t)
        last = 0.0
        while not motion.finished.wait(0.01):
            if self._halt.is_set():  # a goal that began while stop() ran: the physics no longer step
                motion.finish("stopped", "UNKNOWN", "Nav2 simulator shut down")
            elif gh.is_cancel_requested or not rclpy.ok(context=self.node.context):
                with self.lock:
                    motion.finish("canceled")
                    if self.motion is motion:
                        self.motion, self.vel = None, (0.0, 0.0)
            elif time.monotonic() - last >= 0.1:
                last = time.monotonic()
                feedback()
        return motion.outcome

    @staticmethod
    def _end(gh: Any, kind: str, res: Any, code: int, msg: str) -> Any:
        if kind == "done":
            gh.succeed()
        elif kind == "canceled":
            gh.canceled()
        else:
            res.error_code, res.error_msg = code, msg
            gh.abort()
        return res

    # -- topics and services ----------------------------------------------------------------------
    def _on_goal(self, _goal: Any) -> GoalResponse:
        return GoalResponse.ACCEPT if self.lifecycle == ACTIVE and not self._halt.is_set() else GoalResponse.REJECT

    def _on_get_state(self, _req: Any, resp: Any) -> Any:
        active = self.lifecycle == ACTIVE
        resp.current_state = State(id=State.PRIMARY_STATE_ACTIVE if active else State.PRIMARY_STATE_INACTIVE,
                                   label=ACTIVE if active else INACTIVE)
        return resp

    def _on_initialpose(self, msg: PoseWithCovarianceStamped) -> None:
        p = msg.pose.pose
        with self.lock:
            self.pose = (p.position.x, p.position.y, yaw_of(p.orientation))

    def _on_cmd_vel(self, msg: Any) -> None:
        tw = msg.twist if isinstance(msg, TwistStamped) else msg
        with self.lock:
            if tw.linear.x == 0.0 and tw.linear.y == 0.0 and tw.angular.z == 0.0:
                if self.motion is not None:
                    self.motion.finish("stopped", "UNKNOWN", "Stopped: a zero velocity on cmd_vel")
                self.motion, self.teleop, self.vel = None, None, (0.0, 0.0)
            elif self.motion is None:
                self.teleop = (tw.linear.x, tw.angular.z, self.sim_t + 0.5)

    def _stamped(self, msg: Any, frame: str) -> Any:
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.header.frame_id = frame
        return msg

    def _pose_stamped(self, x: float, y: float, yaw: float) -> PoseStamped:
        ps = self._stamped(PoseStamped(), "map")
        ps.pose.position.x, ps.pose.position.y = x, y
        ps.pose.orientation.z, ps.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
        return ps

    def _publish(self) -> None:
        """odom at 20 Hz (velocities per second of the stamps' clock), amcl_pose at 5 Hz."""
        with self.lock:
            (x, y, yaw), (v, w) = self.pose, self.vel
        od = self._stamped(Odometry(), "odom")
        od.child_frame_id = "base_link"
        od.pose.pose = self._pose_stamped(x, y, yaw).pose
        od.twist.twist.linear.x, od.twist.twist.angular.z = v / self.time_scale, w / self.time_scale
        self.odom_pub.publish(od)
        self.ticks += 1
        if self.ticks % 4 == 1:
            msg = self._stamped(PoseWithCovarianceStamped(), "map")
            msg.pose.pose = od.pose.pose
            msg.pose.covariance[0] = msg.pose.covariance[7] = 0.01
            msg.pose.covariance[35] = 0.005
            self.amcl_pub.publish(msg)

    def in_view(self, pose: Pose2D | None = None) -> dict[str, tuple[float, float]]:
        """The scene's objects the camera sees from ``pose`` (default: the base's): label ->
        position in base_link (m, x ahead, y to the left)."""
        if pose is None:
            with self.lock:
                pose = self.pose
        x, y, yaw = pose
        out = {}
        for label, (ox, oy) in self.objects.items():
            dx, dy = ox - x, oy - y
            d = math.hypot(dx, dy)
            if d > self.view_m or abs(wrap(math.atan2(dy, dx) - yaw)) > self.half_fov:
                continue
            n = max(1, int(d / (self.map.res / 2)))
            if any(self.map.collides(x + dx * i / n, y + dy * i / n, margin=1e-6) for i in range(1, n)):
                continue  # hidden behind an obstacle
            out[label] = (dx * math.cos(yaw) + dy * math.sin(yaw), -dx * math.sin(yaw) + dy * math.cos(yaw))
        return out

    def _publish_detections(self) -> None:
        from timely_fleet.msg import Detection, DetectionArray

        msg = self._stamped(DetectionArray(source="nav2_sim camera"), "base_link")
        for label, (bx, by) in self.in_view().items():
            msg.detections.append(Detection(class_id=label, score=0.9, has_position=True,
                                            position=[bx * 1000.0, by * 1000.0, 0.0]))
        self.det_pub.publish(msg)

    # -- actions ----------------------------------------------------------------------------------
    def _plan(self, goal: PoseStamped, start: Pose2D) -> list[tuple[float, float]]:
        if goal.header.frame_id not in ("", "map", "odom"):
            raise PlanError("TF_ERROR", f"Could not transform the goal from frame '{goal.header.frame_id}' to 'map'")
        return self.map.plan(start[:2], (goal.pose.position.x, goal.pose.position.y))

    def _compute_path(self, gh: Any) -> Any:
        g, res, t0 = gh.request, ComputePathToPose.Result(), time.monotonic()
        try:
            if g.planner_id not in ("", "GridBased"):
                raise PlanError("INVALID_PLANNER", f"planner id {g.planner_id} is invalid")
            with self.lock:
                here = self.pose
            p = g.start.pose
            corners = self._plan(g.goal, (p.position.x, p.position.y, 0.0) if g.use_start else here)
        except PlanError as e:
            return self._end(gh, "fail", res, getattr(ComputePathToPose.Result, e.code), e.msg)
        res.path = self._stamped(Path(), "map")
        pts = densify(corners, self.map.res)
        for i, (x, y) in enumerate(pts):
            nxt = pts[min(i + 1, len(pts) - 1)]
            yaw = yaw_of(g.goal.pose.orientation) if i == len(pts) - 1 else math.atan2(nxt[1] - y, nxt[0] - x)
            res.path.poses.append(self._pose_stamped(x, y, yaw))
        res.planning_time = duration(time.monotonic() - t0)
        return self._end(gh, "done", res, 0, "")

    def _navigate(self, gh: Any) -> Any:
        R = NavigateToPose.Result
        with self.lock:
            here = self.pose
        try:
            corners = self._plan(gh.request.pose, here)
        except PlanError as e:  # bt_navigator reports the planner's code
            return self._end(gh, "fail", R(), getattr(ComputePathToPose.Result, e.code), e.msg)
        m = FollowPath(corners, yaw_of(gh.request.pose.pose.orientation), self.speed, self.turn_speed,
                       self.navigate_timeout_s)

        def feedback() -> None:
            with self.lock:
                pose, t, speed = self.pose, self.sim_t, m.speed
            left = m.remaining(pose)
            gh.publish_feedback(NavigateToPose.Feedback(
                current_pose=self._pose_stamped(*pose), navigation_time=duration(t - m.t0), number_of_recoveries=0,
                estimated_time_remaining=duration(left / speed if speed > 0.01 and left > 0.1 else 0.0),
                distance_remaining=left))

        kind, key, msg = self._run(gh, m, feedback)
        if kind == "replaced":  # by a new NavigateToPose goal: aborted with no error, as Nav2's preemption
            key = "NONE" if msg.endswith("navigate_to_pose goal") else "UNKNOWN"
        return self._end(gh, kind, R(), CONTROLLER_CODES.get(key) or getattr(R, key or "UNKNOWN"), msg)

    def _behaviour(self, gh: Any, name: str, action: Any, m: Motion, field: str) -> Any:
        kind, key, msg = self._run(gh, m, lambda: gh.publish_feedback(action.Feedback(**{field: float(m.progress)})))
        res = action.Result(total_elapsed_time=duration(m.t - m.t0))
        return self._end(gh, kind, res, getattr(action.Result, key or "UNKNOWN"), f"{name} failed:{msg}")

    def _spin(self, gh: Any) -> Any:
        g = gh.request
        m = Turn(g.target_yaw, self.turn_speed, seconds(g.time_allowance))
        return self._behaviour(gh, "spin", Spin, m, "angular_distance_traveled")

    def _drive(self, gh: Any, name: str = "drive_on_heading", action: Any = DriveOnHeading) -> Any:
        g, R = gh.request, action.Result
        x, speed, backup = g.target.x, g.speed, action is BackUp
        error = ""
        if g.target.y != 0.0 or g.target.z != 0.0:
            error = f"{'Backing up' if backup else 'DrivingOnHeading'} in Y and Z not supported, will only move in X."
        elif backup:  # upstream BackUp: silently both negative
            x, speed = -abs(x), -abs(speed)
        elif (x > 0.0) != (speed > 0.0):
            error = "Speed and command sign did not match"
        if error:  # upstream's initial checks: the message without the "<name> failed:" prefix
            return self._end(gh, "fail", R(), R.INVALID_INPUT, error)
        m = Straight(name, x, speed, seconds(g.time_allowance), not g.disable_collision_checks,
                     self.map.collides, self.ahead_s)
        return self._behaviour(gh, name, action, m, "distance_traveled")

    def _backup(self, gh: Any) -> Any:
        return self._drive(gh, "backup", BackUp)


def _pose_arg(text: str) -> Pose2D:
    if text in PLACES:
        return PLACES[text]
    x, y, *yaw = (float(v) for v in text.split(","))
    return x, y, (yaw[0] if yaw else 0.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Nav2 protocol simulator: NavigateToPose, ComputePathToPose, Spin, "
                                "DriveOnHeading, BackUp, odom, amcl_pose, initialpose, cmd_vel, lifecycle get_state")
    p.add_argument("--namespace", default="", help="ROS namespace of every name (default: none)")
    p.add_argument("--start", default="dock", type=_pose_arg, help=f"x,y[,yaw] or a place: {', '.join(PLACES)}")
    p.add_argument("--speed", type=float, default=0.5, help="linear speed, m/s")
    p.add_argument("--turn-speed", type=float, default=1.0, help="angular speed, rad/s")
    p.add_argument("--time-scale", type=float, default=1.0, help="< 1 runs faster (0.1: ten times)")
    p.add_argument("--inactive", action="store_true", help="lifecycle nodes report 'inactive' and goals are rejected")
    p.add_argument("--twist", action="store_true", help="cmd_vel is geometry_msgs/Twist (default TwistStamped)")
    p.add_argument("--seconds", type=float, default=0.0, help="exit after this long (0: until Ctrl-C)")
    a = p.parse_args(argv)
    # Ctrl-C and SIGTERM end the goals with a result (stop()) before ROS shuts down; rclpy's own
    # handlers would shut the context down first and leave every client without one
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    sim = Nav2Sim(namespace=a.namespace, start=a.start, speed=a.speed, turn_speed=a.turn_speed, time_scale=a.time_scale,
                  lifecycle=INACTIVE if a.inactive else ACTIVE, stamped=not a.twist)
    with sim:
        print(f"Nav2 simulator on namespace '{a.namespace or '/'}', pose {sim.pose}", flush=True)
        done.wait(a.seconds if a.seconds > 0 else None)
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
