"""Mobile-base skills (``NAV2_BASE``) executed through a Nav2 stack's own ROS 2 interfaces.

One rclpy node (``<robot>_nav2_client``, in the Nav2 namespace) spun by the executor's own thread:

* ``go_to(place)`` / ``go_to_pose(x, y[, yaw])``: ComputePathToPose from where the base is, the
  route (here, the path's poses, the goal) checked and charged against the goal's budget meter
  (fence polygon, distance) before anything moves, then NavigateToPose; while it drives, every
  pose and odometry update is watched against the fence and the speed limit;
* ``move_forward`` / ``move_backward``: DriveOnHeading / BackUp (Nav2's collision checks), the
  endpoint checked against the fence first (not charged: the adapter's meter charged the move's
  distance when it admitted the call); ``turn_cw`` / ``turn_ccw``: Spin;
* ``scan(object)``: 45-degree Spins, up to a full turn, until ``seen(object)``; ``is_visible``
  (``detections``: the declared detections topic's :class:`DetectionsSource`, read after a motion
  only from a message that came after it);
  ``delay``, ``log``, ``stop``.

Nav2's error codes become one sentence (:class:`SkillExecutionError`); a cancel or :meth:`stop`
cancels the Nav2 goal and publishes a zero ``cmd_vel`` (its only use); every wait is bounded (a
server silent mid-goal: :class:`SkillTimeout`). The pose is the localiser's (``amcl_pose``, map)
advanced by the odometry received since its stamp. A heartbeat (``timely_watchdog/heartbeat``,
5 Hz) lets :mod:`robot_adapters.nav2_watchdog` stop the base if this process dies.

``time_scale`` (< 1 for a faster simulator) scales delays and time bounds, and converts the
measured odometry speed (per second of the ROS clock) into the base's own speed.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping, Sequence

from timely_robot.budgets import NOMINAL_NAV_MPS, path_outside
from timely_robot.config import NAV2_KEYS
from timely_robot.skills import NAV2_BASE, SkillCall

from robot_adapters.executor import (Measured, Pose, SkillCancelled, SkillExecutionError, SkillExecutor,
                                     SkillTimeout, sleep_cancellable)
from robot_adapters.perception.types import PerceptionError
from robot_adapters.ros_goals import send_goal, wait_future

log = logging.getLogger("robot_adapters.base")

Pose2D = tuple[float, float, float]  # x, y (m), yaw (rad)
HEARTBEAT_TOPIC = "timely_watchdog/heartbeat"
DRIVE_SPEED_MPS = 0.25  # DriveOnHeading / BackUp, or the budget's max_speed_mps if lower
NOMINAL_TURN_RADPS = 0.5  # for time bounds only (with NOMINAL_NAV_MPS): 3 x nominal + slack
SCAN_STEP_DEG = 45
ANSWER_S = 5.0  # a goal request, a cancel, a state request answered within this (real s)
SILENCE_S = 5.0  # a running goal gives feedback at least this often, else SkillTimeout (real s)
PLAN_S = 20.0  # ComputePathToPose answers within this (real s)
#: FollowPath (controller_server) codes that NavigateToPose reports (nav2_msgs Kilted; not built here)
_CONTROLLER_CODES = {100: "UNKNOWN", 101: "INVALID_CONTROLLER", 102: "TF_ERROR", 103: "INVALID_PATH",
                     104: "PATIENCE_EXCEEDED", 105: "FAILED_TO_MAKE_PROGRESS", 106: "NO_VALID_CONTROL",
                     107: "CONTROLLER_TIMED_OUT"}
_PLAN_PHRASES = {"NO_VALID_PATH": "found no valid path to {}", "GOAL_OCCUPIED": "cannot go to {}: the goal is occupied",
                 "GOAL_OUTSIDE_MAP": "cannot go to {}: the goal is outside the map",
                 "START_OCCUPIED": "cannot plan to {}: the base's own cell is occupied",
                 "START_OUTSIDE_MAP": "cannot plan to {}: the base is outside the map",
                 "TIMEOUT": "did not find a path to {} in time", "INVALID_PLANNER": "has no such planner for {}",
                 "TF_ERROR": "could not transform the goal {} into the map frame"}


def code_names(action: Any) -> dict[int, str]:
    """An action's result codes, value -> name (from the generated message's constants)."""
    consts = next((v for k, v in vars(type(action.Result)).items() if k.endswith("__constants")), {})
    return {int(v): k for k, v in consts.items()}


def _colon(msg: str) -> str:
    return f": {msg}" if msg else ""


def yaw_of(q: Any) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def compose(a: Pose2D, b: Pose2D) -> Pose2D:
    """Pose ``b`` (relative to ``a``) in ``a``'s frame."""
    c, s = math.cos(a[2]), math.sin(a[2])
    return a[0] + c * b[0] - s * b[1], a[1] + s * b[0] + c * b[1], math.remainder(a[2] + b[2], math.tau)


def between(a: Pose2D, b: Pose2D) -> Pose2D:
    """Pose ``b`` relative to pose ``a`` (both in one frame)."""
    c, s, dx, dy = math.cos(a[2]), math.sin(a[2]), b[0] - a[0], b[1] - a[1]
    return c * dx + s * dy, -s * dx + c * dy, math.remainder(b[2] - a[2], math.tau)


class Nav2Executor(SkillExecutor):
    """A mobile base over Nav2 (see the module docstring). ``places``: name -> [x, y(, yaw deg)]
    in map; ``nav2``: ``NAV2_KEYS`` (timely_robot.config) overrides; ``seen(object)``: the perception source."""

    robot_kind = "base"
    skill_set = NAV2_BASE
    silence_s = SILENCE_S  # a running goal's feedback may pause this long (real s)

    def __init__(self, robot_id: str, *, context: Any, places: Mapping[str, Sequence[float]],
                 nav2: Mapping[str, Any] | None = None, time_scale: float = 1.0,
                 seen: Callable[[str], bool] | None = None, connect_timeout_s: float = 10.0,
                 detections: Any = None) -> None:
        self.robot_id, self.context, self.time_scale = robot_id, context, time_scale
        self.places = {str(k): tuple(float(v) for v in p) for k, p in (places or {}).items()}
        self.nav2 = {**NAV2_KEYS, **(nav2 or {})}
        self.seen, self.connect_timeout_s = seen, connect_timeout_s
        #: the perception source the adapter node feeds from its topic (robot_topics.RobotTopics)
        self.detections_source = detections
        if detections is not None and seen is None:
            self.seen = detections.sees
        self.node: Any = None
        self._spinner: Any = None  # the node's executor, spun by _thread
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._map: tuple[Pose2D, Pose2D | None] | None = None  # localiser pose, odom pose at its stamp
        self._odom: deque[tuple[int, Pose2D]] = deque(maxlen=100)  # (stamp ns, odom pose): 5 s at 20 Hz
        self._speed, self._heard_t, self._feedback_t = 0.0, 0.0, 0.0
        self._goals: dict[int, Any] = {}  # id -> accepted Nav2 goal handles not yet ended
        self._meter: Any = None  # the current goal's BudgetMeter (use_budget)
        self._watching = False  # a motion runs: watch pose and speed against the meter
        self._violation: str | None = None
        self._stops = 0  # stop() calls: a call that sees this change was stopped
        self._call_stops = 0  # their number when the running call began

    # ------------------------------------------------------------------ connection
    def connect(self) -> None:
        """Create the node and its thread; wait for Nav2's action servers, an active bt_navigator
        and a pose, each missing one a SkillExecutionError sentence; then start the heartbeat."""
        from geometry_msgs.msg import PoseWithCovarianceStamped, Twist, TwistStamped
        from nav2_msgs.action import BackUp, ComputePathToPose, DriveOnHeading, NavigateToPose, Spin
        from nav_msgs.msg import Odometry
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import DurabilityPolicy, QoSProfile
        from std_msgs.msg import Header

        if self.node is not None:
            return
        name = re.sub(r"[^A-Za-z0-9_]", "_", self.robot_id) + "_nav2_client"
        n = self.node = Node(name, namespace=self.nav2["namespace"], context=self.context)
        self.actions = {key: ActionClient(n, t, key) for key, t in (
            ("navigate_to_pose", NavigateToPose), ("compute_path_to_pose", ComputePathToPose), ("spin", Spin),
            ("drive_on_heading", DriveOnHeading), ("backup", BackUp))}
        # transient local for AMCL's latched amcl_pose (it publishes only when the base moves), and
        # volatile, which a volatile localiser's publisher matches too
        for durability in (DurabilityPolicy.TRANSIENT_LOCAL, DurabilityPolicy.VOLATILE):
            n.create_subscription(PoseWithCovarianceStamped, self.nav2["pose_topic"], self._on_pose,
                                  QoSProfile(depth=1, durability=durability))
        n.create_subscription(Odometry, self.nav2["odom_topic"], self._on_odom, 20)
        self._twist = TwistStamped if self.nav2["cmd_vel_stamped"] else Twist
        self._cmd_vel = n.create_publisher(self._twist, "cmd_vel", 10)
        self._heartbeat = n.create_publisher(Header, HEARTBEAT_TOPIC, 10)
        self._spinner = SingleThreadedExecutor(context=self.context)
        self._spinner.add_node(n)
        self._thread = threading.Thread(target=self._spinner.spin, daemon=True, name=f"{name}-spin")
        self._thread.start()
        try:
            self._check_nav2(time.monotonic() + self.connect_timeout_s)
        except BaseException:
            self.close()
            raise
        n.create_timer(0.2, lambda: self._heartbeat.publish(
            Header(stamp=n.get_clock().now().to_msg(), frame_id=self.robot_id)))

    def _check_nav2(self, deadline: float) -> None:
        from lifecycle_msgs.srv import GetState

        who, t = f"robot {self.robot_id}", f"{self.connect_timeout_s:g} s"
        for key, client in self.actions.items():
            client.wait_for_server(timeout_sec=max(0.0, deadline - time.monotonic()))
        missing = [k for k, c in self.actions.items() if not c.server_is_ready()]
        if missing:
            raise SkillExecutionError(f"{who}: no Nav2 action server {', '.join(missing)} under "
                                      f"'{self.node.get_namespace()}' within {t}: start Nav2 or fix nav2.namespace")
        cli = self.node.create_client(GetState, "bt_navigator/get_state")
        try:
            fut = cli.call_async(GetState.Request()) if cli.wait_for_service(
                timeout_sec=max(0.0, deadline - time.monotonic())) else None
            state = wait_future(fut, max(0.1, deadline - time.monotonic())) if fut is not None else None
        finally:
            self.node.destroy_client(cli)
        if state is None:
            raise SkillExecutionError(f"{who}: bt_navigator/get_state did not answer within {t}: "
                                      "start Nav2's bt_navigator")
        if state.current_state.label != "active":
            raise SkillExecutionError(f"{who}: Nav2 is not active (bt_navigator is '{state.current_state.label}'): "
                                      "activate its lifecycle nodes first")
        while self.pose() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.pose() is None:
            topic = self.node.resolve_topic_name(self.nav2["pose_topic"])
            raise SkillExecutionError(f"{who}: no pose on {topic} within {t}: set the initial pose (initialpose) "
                                      "or start localisation")

    def close(self) -> None:
        """Stop, then destroy the node and its thread."""
        if self.node is None:
            return
        self.stop()  # the cancel requests go out at once (rcl sends them in the calling thread)
        self._spinner.shutdown(timeout_sec=2.0)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.node.destroy_node()
        self.node = self._spinner = self._thread = None

    # ------------------------------------------------------------------ telemetry
    def _on_pose(self, msg: Any) -> None:
        p = msg.pose.pose
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self._lock:
            odom = min(self._odom, key=lambda o: abs(o[0] - stamp), default=None)
            odom = odom if odom is not None and abs(odom[0] - stamp) < 500_000_000 else None  # within 0.5 s
            self._map = ((p.position.x, p.position.y, yaw_of(p.orientation)), odom[1] if odom else None)
            self._heard_t = time.monotonic()
        self._watch()

    def _on_odom(self, msg: Any) -> None:
        p, v = msg.pose.pose, msg.twist.twist.linear
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self._lock:
            self._odom.append((stamp, (p.position.x, p.position.y, yaw_of(p.orientation))))
            self._speed = math.hypot(v.x, v.y) * self.time_scale
            self._heard_t = time.monotonic()
        self._watch()

    def _pose2d(self) -> Pose2D | None:
        with self._lock:
            if self._map is None:
                return None
            at_map, odom_then = self._map
            if odom_then is None or not self._odom:
                return at_map
            return compose(at_map, between(odom_then, self._odom[-1][1]))

    def pose(self) -> tuple[float, float, float] | None:
        """(x m, y m, yaw degrees) in map, or None before the first pose."""
        p = self._pose2d()
        return None if p is None else (p[0], p[1], math.degrees(p[2]))

    def measured_pose(self) -> Pose | None:
        """The base's pose in ``map`` from its localiser's pose topic, moved on by odometry since
        (z 0), or None before the first pose."""
        p = self._pose2d()
        return None if p is None else (p[0], p[1], 0.0, p[2])

    def measured(self) -> Measured:
        """The link's age: seconds since the newest pose or odometry message."""
        with self._lock:
            t = self._heard_t
        return Measured(link_age_s=time.monotonic() - t) if t else Measured()

    def _watch(self) -> None:
        """While a motion runs: the meter's reason to stop now (fence, speed) ends it at once."""
        meter = self._meter
        if not self._watching or meter is None or self._violation is not None:
            return
        p = self._pose2d()
        if p is None:
            return
        why = meter.watch(p[0], p[1], self._speed)
        if why is not None:
            self._violation = why
            self._cancel_goals()

    # ------------------------------------------------------------------ stopping
    def use_budget(self, meter: Any) -> None:
        self._meter = meter

    def _cancel_goals(self) -> None:
        with self._lock:
            goals = list(self._goals.values())
        if self.node is None or not self.node.context.ok():
            return
        try:
            for h in goals:
                h.cancel_goal_async()
            for _ in range(2):
                self._cmd_vel.publish(self._twist())
        except Exception as e:  # noqa: BLE001 - best effort while the node goes away
            log.warning("%s: stopping the base failed: %s", self.robot_id, e)

    def stop(self) -> None:
        """Cancel the running Nav2 goal(s) and publish a zero velocity (any thread)."""
        self._stops += 1
        self._cancel_goals()

    def halt(self) -> str:
        self.stop()
        return "stopped"

    # ------------------------------------------------------------------ goals
    def _run(self, key: str, goal: Any, what: str, cancel: threading.Event, bound_s: float,
             motion: bool = True) -> Any:
        """Send ``goal`` to action ``key`` and wait for its end, honouring ``cancel``, :meth:`stop`,
        the time bounds and (``motion``: it moves the base and gives feedback) the meter's watch and
        the feedback's silence; its result when it ended by itself, with an error code or NONE."""
        from action_msgs.msg import GoalStatus

        if self.node is None:
            raise SkillExecutionError(f"robot {self.robot_id}: not connected to Nav2")
        stops, self._violation = self._call_stops, None
        if cancel.is_set() or self._stops != stops:
            raise SkillCancelled(f"cancelled before {what}")
        self._feedback_t = time.monotonic()
        handle = send_goal(self.actions[key], goal, server="Nav2", what=what, answer_s=ANSWER_S,
                           feedback=self._on_feedback if motion else None, rejected_hint=": is it active?")
        with self._lock:
            self._goals[id(handle)] = handle
        result = handle.get_result_async()
        self._watching = motion
        try:
            deadline = time.monotonic() + bound_s
            while not result.done():
                if cancel.is_set() or self._stops != stops:
                    self._cancel_goals()
                    raise SkillCancelled(f"cancelled during {what}")
                if self._violation is not None:
                    self._cancel_goals()
                    raise SkillExecutionError(self._violation)
                now = time.monotonic()
                if now > deadline or (motion and now - self._feedback_t > self.silence_s):
                    self._cancel_goals()
                    raise SkillTimeout(f"Nav2 did not finish {what} within {bound_s:.0f} s" if now > deadline else
                                       f"Nav2 stopped answering during {what} (no feedback for {self.silence_s:g} s)")
                time.sleep(0.01)
        finally:
            self._watching = False
            with self._lock:
                self._goals.pop(id(handle), None)
        status, res = result.result().status, result.result().result
        if status != GoalStatus.STATUS_SUCCEEDED:
            if cancel.is_set() or self._stops != stops:
                raise SkillCancelled(f"cancelled during {what}")
            if self._violation is not None:
                raise SkillExecutionError(self._violation)
            if status == GoalStatus.STATUS_CANCELED:
                raise SkillExecutionError(f"Nav2 cancelled the {'navigation' if key == 'navigate_to_pose' else what}")
            if res.error_code == 0:
                raise SkillExecutionError(f"Nav2 aborted {what} without an error code (another goal preempted it?)")
        return res

    def _on_feedback(self, _msg: Any) -> None:
        self._feedback_t = time.monotonic()

    def _pose_stamped(self, x: float, y: float, yaw: float) -> Any:
        from geometry_msgs.msg import PoseStamped

        ps = PoseStamped()
        ps.header.frame_id = "map"  # zero stamp: the latest transform
        ps.pose.position.x, ps.pose.position.y = float(x), float(y)
        ps.pose.orientation.z, ps.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
        return ps

    def _here(self) -> Pose2D:
        """The pose now; none yet is a SkillExecutionError."""
        p = self._pose2d()
        if p is None:
            raise SkillExecutionError(f"robot {self.robot_id}: no pose from Nav2's localisation")
        return p

    def _navigate(self, label: str, x: float, y: float, yaw_deg: float | None, cancel: threading.Event) -> None:
        """Plan, check the route against the meter, then NavigateToPose (see the module docstring)."""
        from nav2_msgs.action import ComputePathToPose, NavigateToPose

        here = self._here()
        yaw = math.radians(yaw_deg) if yaw_deg is not None else math.atan2(y - here[1], x - here[0])
        res = self._run("compute_path_to_pose", ComputePathToPose.Goal(goal=self._pose_stamped(x, y, yaw)),
                        f"the path to {label}", cancel, PLAN_S, motion=False)
        if res.error_code != ComputePathToPose.Result.NONE:
            name = code_names(ComputePathToPose).get(res.error_code, str(res.error_code))
            phrase = _PLAN_PHRASES.get(name, "could not plan a path to {}").format(label)
            raise SkillExecutionError(f"Nav2 {phrase} ({name})" + _colon(res.error_msg))
        path = [(p.pose.position.x, p.pose.position.y) for p in res.path.poses]
        if yaw_deg is None and len(path) >= 2:  # arrive facing along the path's last leg
            yaw = math.atan2(path[-1][1] - path[-2][1], path[-1][0] - path[-2][0])
        meter = self._meter
        if meter is not None:
            if res.path.header.frame_id not in ("", "map") and getattr(meter.budget, "fence_map_m", None):
                raise SkillExecutionError(f"refused: Nav2's path is in frame '{res.path.header.frame_id}', "
                                          "the geofence in 'map'")
            why = meter.route_problem([here[:2], *path, (x, y)])
            if why is not None:
                raise SkillExecutionError(f"refused: {why}")
        length = sum(math.dist(a, b) for a, b in zip([here[:2], *path], [*path, (x, y)]))
        expected_s = length / NOMINAL_NAV_MPS + math.pi / NOMINAL_TURN_RADPS
        if meter is not None:  # the plan's duration budget grows with the route it drives
            meter.expect(expected_s * self.time_scale)
        bound = (3 * expected_s + 30) * self.time_scale + 5
        res = self._run("navigate_to_pose", NavigateToPose.Goal(pose=self._pose_stamped(x, y, yaw)),
                        f"the navigation to {label}", cancel, bound)
        if res.error_code != NavigateToPose.Result.NONE:
            names = {**code_names(ComputePathToPose), **_CONTROLLER_CODES, **code_names(NavigateToPose)}
            name = names.get(res.error_code, f"error code {res.error_code}")
            raise SkillExecutionError(f"Nav2 could not reach {label} ({name})" + _colon(res.error_msg))

    def _behaviour(self, key: str, goal: Any, what: str, cancel: threading.Event, action: Any) -> None:
        """Spin / DriveOnHeading / BackUp; a failure's code as one sentence."""
        allowance_s = goal.time_allowance.sec + goal.time_allowance.nanosec * 1e-9
        res = self._run(key, goal, what, cancel, allowance_s * self.time_scale + 5)
        if res.error_code == 0:
            return
        name, msg = code_names(action).get(res.error_code, f"error code {res.error_code}"), _colon(res.error_msg)
        if name == "COLLISION_AHEAD":
            raise SkillExecutionError("Nav2 stopped: obstacle ahead (COLLISION_AHEAD)")
        if name == "TIMEOUT":
            raise SkillExecutionError(f"Nav2 did not finish {what} within its time allowance (TIMEOUT){msg}")
        raise SkillExecutionError(f"Nav2 failed {what} ({name}){msg}")

    def _turn(self, degrees: float, cancel: threading.Event) -> None:
        from builtin_interfaces.msg import Duration
        from nav2_msgs.action import Spin

        rad = math.radians(degrees)
        allowance = abs(rad) / NOMINAL_TURN_RADPS * 3 + 5
        goal = Spin.Goal(target_yaw=rad, time_allowance=Duration(sec=int(math.ceil(allowance))))
        self._behaviour("spin", goal, f"the turn of {abs(degrees):g} degrees", cancel, Spin)

    def _straight(self, distance_cm: float, cancel: threading.Event) -> None:
        from builtin_interfaces.msg import Duration
        from geometry_msgs.msg import Point
        from nav2_msgs.action import BackUp, DriveOnHeading

        d = abs(distance_cm) / 100.0
        sign = 1.0 if distance_cm > 0 else -1.0
        here = self._here()
        end = (here[0] + sign * d * math.cos(here[2]), here[1] + sign * d * math.sin(here[2]))
        fence = getattr(getattr(self._meter, "budget", None), "fence_map_m", None)
        # only the fence: the adapter's meter already charged the move's distance (call_cost)
        out = path_outside(fence, [here[:2], end]) if fence else None
        if out is not None:
            raise SkillExecutionError(f"refused: outside the geofence: the move passes x={out[0]:.2f} y={out[1]:.2f} m "
                                      f"(map), the fence is {[list(p) for p in fence]}")
        vmax = getattr(getattr(self._meter, "budget", None), "max_speed_mps", None)
        speed = min(DRIVE_SPEED_MPS, vmax) if vmax else DRIVE_SPEED_MPS
        allowance = Duration(sec=int(math.ceil(d / speed * 3 + 5)))
        action, key, way = ((DriveOnHeading, "drive_on_heading", "forward") if sign > 0
                            else (BackUp, "backup", "backward"))
        goal = action.Goal(target=Point(x=d), speed=speed, time_allowance=allowance)
        self._behaviour(key, goal, f"the {way} move of {d * 100:g} cm", cancel, action)

    def _seen(self, obj: str, since: float | None = None) -> bool:
        """Whether the perception source sees ``obj``; with ``since`` (monotonic, when a motion
        ended), from a detection that came after it."""
        if self.seen is None:
            raise SkillExecutionError(f"robot {self.robot_id} has no perception source declared")
        src = self.detections_source
        if since is not None and src is not None and not src.wait_newer(since, ANSWER_S):
            raise SkillExecutionError(f"robot {self.robot_id}: no detections on {src.topic} after its turn "
                                      f"(is the detector running?)")
        try:
            return bool(self.seen(obj))
        except PerceptionError as e:
            raise SkillExecutionError(f"robot {self.robot_id} cannot tell whether it sees '{obj}': {e}") from None

    # ------------------------------------------------------------------ skills
    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        n, a = call.name, call.args
        self._call_stops = self._stops
        if cancel.is_set():
            raise SkillCancelled("cancelled")
        if n == "go_to":
            place = self.places.get(a[0])
            if place is None:
                known = ", ".join(sorted(self.places)) or "none declared"
                raise SkillExecutionError(f"robot {self.robot_id} knows no place '{a[0]}' (its places: {known})")
            self._navigate(a[0], place[0], place[1], place[2] if len(place) > 2 else None, cancel)
        elif n == "go_to_pose":
            yaw = a[2] if len(a) > 2 and a[2] is not None else None
            self._navigate(f"({a[0]:g}, {a[1]:g})", float(a[0]), float(a[1]), yaw, cancel)
        elif n in ("move_forward", "move_backward"):
            self._straight(float(a[0]) * (1 if n == "move_forward" else -1), cancel)
        elif n in ("turn_cw", "turn_ccw"):
            self._turn(-float(a[0]) if n == "turn_cw" else float(a[0]), cancel)
        elif n == "stop":
            self.stop()
        elif n == "scan":
            if self._seen(a[0]):
                return True
            for _ in range(360 // SCAN_STEP_DEG):
                self._turn(-SCAN_STEP_DEG, cancel)
                if self._seen(a[0], since=time.monotonic()):
                    return True
            return False
        elif n == "is_visible":
            return self._seen(a[0])
        elif n == "delay":
            sleep_cancellable(float(a[0]) / 1000.0 * self.time_scale, cancel)
        elif n == "log":
            log.info("%s: %s", self.robot_id, a[0])
        elif n != "re_plan":  # re_plan: the adapter's business, nothing to drive
            raise SkillExecutionError(f"base cannot execute '{n}'")
        return None
