"""What passes between the ROS node and the service: the goals and robot statuses it hands in,
and the ports the service answers through."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from llm_planner_node.core.task_model import Request

#: Bound on untrusted identifiers (robot id, goal id, skill-set id, skill names).
MAX_ID_CHARS = 64


@dataclass(frozen=True)
class GoalIn:
    """A PlanTask goal as the service sees it (the node converts the message)."""

    robot_id: str
    instruction: str
    robot_kind: str = ""
    task_type: str = ""
    ert_s: float = 1.0
    alpha: float = -2.0
    beta: float = 1.0
    skill_set: str = ""
    max_tokens: int = 0

    @classmethod
    def of(cls, msg: Any) -> "GoalIn":
        """The goal of a message with a ``PlanTask`` goal's fields (the action's goal, a journal's goal)."""
        return cls(robot_id=msg.robot_id, instruction=msg.instruction, robot_kind=msg.robot_kind,
                   task_type=msg.task_type, ert_s=msg.ert_s, alpha=msg.alpha, beta=msg.beta,
                   skill_set=msg.skill_set, max_tokens=int(msg.max_tokens))


@dataclass(frozen=True)
class StatusIn:
    """A ``/robot_status`` report as the service sees it."""

    robot_id: str
    goal_id: str
    sequence: int
    state: int
    skill_durations_s: tuple[float, ...] = ()
    error: str = ""
    received: float = field(default_factory=time.monotonic)  # when the node took it off the wire
    #: what the segment's calls answered: (skill call, value as text), and the plan's return value
    answers: tuple[tuple[str, str], ...] = ()
    return_value: str | None = None
    #: the robot's measured battery %, temperature (C), height (cm); -1 = not measured
    measured: tuple[float, float, float, float] = (-1.0, -1.0, -1.0, -1.0)  # battery, temperature, height, link age
    #: the robot's measured pose in its own frame: x, y, z (m), yaw (rad); None: it reports none
    pose: tuple[float, float, float, float] | None = None


class PlannerPorts(Protocol):
    """How the service reaches ROS (implemented by the node)."""

    def segment(self, goal_id: str, req: Request, index: int, final: bool, feedback: bool = True) -> Any:
        """Publish segment ``index`` to the robot and (``feedback``) as the goal's feedback;
        return the message (re-sends)."""

    def stop(self, goal_id: str, robot_id: str, sequence: int) -> Any:
        """Publish a stop for the goal to its robot; return the message (re-sends)."""

    def publish(self, robot_id: str, msg: Any) -> None:
        """Re-send a message returned by ``segment`` or ``stop``."""

    def goal_started(self, goal_id: str, req: Request) -> None:
        """A goal reached the core (GoalRecord for recording and replay)."""

    def log(self, level: str, text: str) -> None:
        """``level``: debug, info, warning, error."""

    def approval_notice(self, goal_id: str, req: Request, index: int, text: str) -> None:
        """Tell the goal's client that its segment ``index`` waits for an operator's approval."""

    def operator_cancelling(self, goal_id: str) -> None:
        """An operator ends the goal: its action goes to CANCELING first (it ends CANCELED)."""
