"""Skill executor interface shared by adapters (ROS-free, so it is testable without ROS).

An executor turns validated :class:`SkillCall` objects into robot commands. Adapters own the
ordering, status reporting and safety checks; an executor only executes one call at a time and
can be interrupted from another thread with :meth:`SkillExecutor.stop`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from llm_planner_node.core.skills import SkillCall, SkillSet


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

    def stop(self) -> None:
        """Interrupt the current motion (called from another thread; best effort)."""

    def close(self) -> None:
        """Release the robot (land, disconnect)."""


def sleep_cancellable(seconds: float, cancel: threading.Event) -> None:
    if cancel.wait(max(0.0, seconds)):
        raise SkillCancelled("cancelled")


class SimulatedExecutor(SkillExecutor):
    """Executes any skill of ``skill_set`` by sleeping for a duration drawn from a sampler
    (the execution-time model) times ``time_scale``; ``fail`` maps skill name -> error text to
    simulate failures; perception skills are answered by an optional scene."""

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

    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        if call.name in self.fail:
            raise SkillExecutionError(self.fail[call.name])
        d = float(self.sampler(call)) if self.sampler is not None else 0.0
        sleep_cancellable(d * self.time_scale, cancel)
        self.executed.append(call)
        spec = self.skill_set.spec(call.name)
        if self.scene is not None and spec.kind == "perception" and hasattr(self.scene, call.name):
            return getattr(self.scene, call.name)(*call.args)
        return {"bool": True, "float": 0.5, "int": 1, "str": "unknown"}.get(spec.returns or "", None)
