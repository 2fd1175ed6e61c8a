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

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from timely_robot.skills import SkillCall, SkillSet


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


def sleep_cancellable(seconds: float, cancel: threading.Event) -> None:
    if cancel.wait(max(0.0, seconds)):
        raise SkillCancelled("cancelled")


class SimulatedExecutor(SkillExecutor):
    """Executes any skill of ``skill_set`` for a duration drawn from a sampler (the
    execution-time model) times ``time_scale``; ``fail`` maps skill name -> error text to
    simulate failures; perception skills are answered by an optional scene.

    Event-driven: :meth:`start` sets a timer on the adapter's event loop (:meth:`stop` ends it at
    once with :class:`SkillCancelled`); :meth:`execute` (sleeping) is kept for direct use."""

    def __init__(self, robot_id: str, robot_kind: str, skill_set: SkillSet, sampler=None, *,
                 time_scale: float = 1.0, scene=None, fail: dict[str, str] | None = None,
                 clock=time.monotonic) -> None:
        self.robot_id = robot_id
        self.robot_kind = robot_kind
        self.skill_set = skill_set
        self.sampler = sampler  # (call) -> seconds
        self.time_scale = time_scale
        self.scene = scene
        self.fail = dict(fail or {})
        self.executed: list[SkillCall] = []
        self._running: tuple[Any, int, Callable[[Any, BaseException | None], None]] | None = None
        self._run_lock = threading.Lock()

    def prepare(self, call: SkillCall) -> float:
        """Seconds the call will take (raises :class:`SkillExecutionError` for a failure)."""
        if call.name in self.fail:
            raise SkillExecutionError(self.fail[call.name])
        d = float(self.sampler(call)) if self.sampler is not None else 0.0
        return max(0.0, d * self.time_scale)

    def finish(self, call: SkillCall) -> Any:
        """The call's value once it ran (perception skills ask the scene)."""
        self.executed.append(call)
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
