"""Skill executor interface shared by adapters (ROS-free, so it is testable without ROS).

An executor turns validated :class:`SkillCall` objects into robot commands. Adapters own the
ordering, status reporting and safety checks; an executor only executes one call at a time and
can be interrupted from another thread with :meth:`SkillExecutor.stop`.

Adapters drive executors from one event loop per process (:mod:`.event_loop`) through
:meth:`SkillExecutor.start`, which must not block: the default runs the blocking
:meth:`~SkillExecutor.execute` of a real robot client on the bounded blocking pool; simulated
executors override ``start`` with a timer on the loop (no thread per call, none per robot).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from timely_robot.budgets import pose_after
from timely_robot.skills import SkillCall, SkillSet

#: a robot's pose as ``RobotStatus`` carries it: x, y, z (m), yaw (rad) in the robot's own frame,
#: x forward, y left, z up, yaw counter-clockwise (REP 103)
Pose = tuple[float, float, float, float]


#: longest answer text reported on the status link (a vision-language answer is cut here)
MAX_ANSWER_CHARS = 200


def answer_text(value: Any) -> str:
    """A skill's (or a plan's) value as the status link and the goal's result carry it:
    ``True``/``False``, a number with at most 4 significant decimals, or bounded text."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)[:MAX_ANSWER_CHARS]


@dataclass(frozen=True)
class Measured:
    """What the robot measured of itself, as of now (-1: not measured by this robot).
    ``link_age_s``: how old its newest telemetry is (a Tello's state packet): the link's health."""

    battery_pct: float = -1.0
    temperature_c: float = -1.0
    height_cm: float = -1.0
    link_age_s: float = -1.0

    def any(self) -> bool:
        """Whether the robot measured anything."""
        return any(v >= 0 for v in (self.battery_pct, self.temperature_c, self.height_cm, self.link_age_s))

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.battery_pct, self.temperature_c, self.height_cm, self.link_age_s)


def takeoff_pose(pose_cm: Sequence[float]) -> Pose:
    """A drone's pose as the adapters track it for the geofence (x forward, y right, z up, cm from
    the take-off point; yaw degrees clockwise) in the status link's units and axes (:data:`Pose`)."""
    x, y, z, yaw = (float(v) for v in pose_cm)
    return (x / 100.0, -y / 100.0, z / 100.0, math.remainder(-math.radians(yaw), math.tau))


class SkillExecutionError(RuntimeError):
    """The robot could not execute a skill (error reply, unreachable robot, missing object)."""


class SkillCancelled(RuntimeError):
    """Execution was interrupted by a cancellation."""


class SkillTimeout(SkillExecutionError):
    """The robot did not finish a skill in time."""


class SkillExecutor:
    """Base class. Subclasses set ``robot_kind`` and ``skill_set`` and implement ``execute``."""

    robot_kind = "sim"
    skill_set: SkillSet

    def connect(self) -> None:
        """Open the connection to the robot (called once by the adapter before executing)."""

    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        """Execute one validated call; return its value (perception skills) or None.

        Raise :class:`SkillExecutionError` on failure, :class:`SkillCancelled` when ``cancel``
        is set before the call finishes."""
        raise NotImplementedError

    def start(self, call: SkillCall, cancel: threading.Event,
              done: Callable[[Any, BaseException | None], None], loop: Any) -> None:
        """Begin ``call`` without blocking; ``done(value, error)`` runs once on ``loop`` when it
        ends (``error``: what :meth:`execute` would raise). Default: :meth:`execute` on the
        bounded blocking pool (real robot clients block; see :mod:`.event_loop`)."""
        from robot_adapters.event_loop import run_blocking

        run_blocking(loop, lambda: self.execute(call, cancel), done)

    def start_halt(self, done: Callable[[Any, BaseException | None], None], loop: Any) -> None:
        """:meth:`halt` without blocking the loop (default: on the blocking pool)."""
        from robot_adapters.event_loop import run_blocking

        run_blocking(loop, self.halt, done)

    def use_budget(self, meter: Any) -> None:
        """The budget meter (:class:`timely_robot.budgets.BudgetMeter`) of the goal whose call
        starts next; the adapter core sets it before every call. An executor that learns a
        motion's extent only when it plans it (a base's route) checks and charges it there, and
        watches the measured motion against it; default: nothing."""

    def scene_view(self) -> list[str] | None:
        """What the robot sees now, as TypeFly's scene entries (``cat x:0.28 y:0.52 width:0.10
        height:0.12``); None: it has no camera, or none answers now. May block (a detection)."""
        return None

    def measured(self) -> Measured:
        """The robot's own measurements (battery, temperature, height) for ``/robot_status``;
        default: none."""
        return Measured()

    def measured_pose(self) -> Pose | None:
        """The robot's pose in its own frame (:data:`Pose`: a drone's take-off point, a base's
        ``map``, an arm's base) for ``/robot_status``, as it measures or tracks it now; None when it
        has none (the default: a pose it does not know is not reported)."""
        return None

    def stop(self) -> None:
        """Interrupt the current motion (called from another thread; best effort)."""

    def halt(self) -> str:
        """Bring the robot to a known idle state after its goal ended early (called on the
        adapter's worker thread, after the running skill was interrupted); return one short
        phrase saying the state it is left in (reported on ``/robot_status``)."""
        self.stop()
        return "stopped"

    def close(self) -> None:
        """Release the robot (land, disconnect)."""


def _base_pose_after(pose: tuple[float, ...] | None, call: SkillCall,
                     places: dict[str, Any]) -> tuple[float, float, float] | None:
    """A simulated base's map pose (x m, y m, yaw rad) after ``call``: at the place or pose it
    drove to, moved along its heading or turned from a known pose; None: not known."""
    name, args = call.name, call.args
    if name == "go_to":
        place = places.get(str(args[0])) if args else None
        return None if place is None else (float(place[0]), float(place[1]), math.radians(float(place[2])))
    if name == "go_to_pose":  # no yaw given: Nav2 keeps the heading it arrives with; 0 if unknown
        given = len(args) > 2 and args[2] is not None
        yaw = math.radians(float(args[2])) if given else (pose[2] if pose is not None else 0.0)
        return (float(args[0]), float(args[1]), yaw)
    if pose is None:
        return None
    x, y, yaw = pose
    if name in ("move_forward", "move_backward"):
        d = float(args[0]) / 100.0 * (1 if name == "move_forward" else -1)
        return (x + d * math.cos(yaw), y + d * math.sin(yaw), yaw)
    if name in ("turn_cw", "turn_ccw"):
        turn = math.radians(float(args[0])) * (-1 if name == "turn_cw" else 1)
        return (x, y, math.remainder(yaw + turn, math.tau))
    return (x, y, yaw)


def sleep_cancellable(seconds: float, cancel: threading.Event) -> None:
    if cancel.wait(max(0.0, seconds)):
        raise SkillCancelled("cancelled")


class SimulatedExecutor(SkillExecutor):
    """Executes any skill of ``skill_set`` for a duration drawn from a sampler (the
    execution-time model) times ``time_scale``; ``fail`` maps skill name -> error text to
    simulate failures; perception skills are answered by an optional scene.

    Its pose is where the calls it ran put it, the simulated robot having no other: a drone
    starts at its take-off point (or its scene's pose) and moves by each move and turn; a base
    is nowhere known until it drives to one of its ``places`` (name -> [x m, y m, yaw deg] in
    ``map``) or to a pose, then moves by each drive and turn. A call whose displacement the
    simulation does not know (a drone's ``goto``, ``approach``) leaves the pose unknown.

    Event-driven: :meth:`start` sets a timer on the adapter's event loop (:meth:`stop` ends it at
    once with :class:`SkillCancelled`); :meth:`execute` (sleeping) is kept for direct use."""

    def __init__(self, robot_id: str, robot_kind: str, skill_set: SkillSet, sampler=None, *,
                 time_scale: float = 1.0, scene=None, fail: dict[str, str] | None = None,
                 clock=time.monotonic, places: Any = None) -> None:
        self.robot_id = robot_id
        self.robot_kind = robot_kind
        self.skill_set = skill_set
        self.sampler = sampler  # (call) -> seconds
        self.time_scale = time_scale
        self.scene = scene
        self.fail = dict(fail or {})
        self.places = dict(places or {})
        self.executed: list[SkillCall] = []
        self._running: tuple[Any, int, Callable[[Any, BaseException | None], None]] | None = None
        self._run_lock = threading.Lock()
        self._drone = robot_kind in ("drone", "sim") and "move_forward" in skill_set and "turn_cw" in skill_set
        self._base = robot_kind == "base"
        start = list(scene.pose) if scene is not None and self._drone else [0.0, 0.0, 0.0, 0.0]
        #: a drone's pose as the geofence counts it (x, y, z cm from take-off, yaw degrees
        #: clockwise), a base's as its map has it (x, y m, yaw rad counter-clockwise); None: not known
        self._pose: tuple[float, ...] | None = tuple(float(v) for v in start) if self._drone else None

    def measured_pose(self) -> Pose | None:
        """Where the calls it ran put the simulated robot (class docstring), None if not known."""
        pose = self._pose
        if pose is None:
            return None
        return takeoff_pose(pose) if self._drone else (pose[0], pose[1], 0.0, pose[2])

    def _moved(self, call: SkillCall) -> None:
        """The pose after ``call`` ran (class docstring)."""
        pose = self._pose
        if self._drone and pose is not None:
            self._pose = pose_after(pose, call)
        elif self._base:
            self._pose = _base_pose_after(pose, call, self.places)

    def prepare(self, call: SkillCall) -> float:
        """Seconds the call will take (raises :class:`SkillExecutionError` for a failure)."""
        if call.name in self.fail:
            raise SkillExecutionError(self.fail[call.name])
        d = float(self.sampler(call)) if self.sampler is not None else 0.0
        return max(0.0, d * self.time_scale)

    def finish(self, call: SkillCall) -> Any:
        """The call's value once it ran (perception skills ask the scene)."""
        self.executed.append(call)
        self._moved(call)
        spec = self.skill_set.spec(call.name)
        if self.scene is not None and spec.kind == "perception" and hasattr(self.scene, call.name):
            return getattr(self.scene, call.name)(*call.args)
        return {"bool": True, "float": 0.5, "int": 1, "str": "unknown"}.get(spec.returns or "", None)

    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        sleep_cancellable(self.prepare(call), cancel)
        return self.finish(call)

    def start(self, call: SkillCall, cancel: threading.Event,
              done: Callable[[Any, BaseException | None], None], loop: Any) -> None:
        try:
            d = self.prepare(call)
        except BaseException as e:  # noqa: BLE001 - reported through done
            loop.call_soon(lambda e=e: done(None, e))
            return

        def fire() -> None:
            with self._run_lock:
                if self._running is None or self._running[1] != token:
                    return  # stopped meanwhile: done already ran
                self._running = None
            try:
                value = self.finish(call)
            except BaseException as e:  # noqa: BLE001
                done(None, e)
                return
            done(value, None)

        with self._run_lock:
            token = loop.call_later(d, fire)
            self._running = (loop, token, done)
        if cancel.is_set():
            self.stop()

    def stop(self) -> None:
        with self._run_lock:
            running, self._running = self._running, None
        if running is not None:
            loop, token, done = running
            loop.cancel(token)
            loop.call_soon(lambda: done(None, SkillCancelled("cancelled")))

    def start_halt(self, done: Callable[[Any, BaseException | None], None], loop: Any) -> None:
        try:
            value = self.halt()
        except BaseException as e:  # noqa: BLE001
            done(None, e)
            return
        done(value, None)
