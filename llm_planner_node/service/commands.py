"""What the other threads ask of the scheduler thread: a closed set of typed commands (frozen
dataclasses with no callable fields, as vLLM's engine core takes typed requests), posted on one
:class:`CommandQueue` and dispatched there by type to the one handler each part registered.

A reader (or a tool) sees what is queued: which goal is submitted, cancelled, adopted, which
robots an operator stops. A callback a command's effect must reach (a goal's end, the journal's
publisher) is held by the part that posts it, keyed by the command's goal, never in the command.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Callable, TypeVar

from llm_planner_node.core.task_model import Goal, Request


@dataclass(frozen=True)
class SubmitGoal:
    """A goal accepted by the intake, to reach the core (its end callback: the intake's)."""

    goal_id: str
    goal: Goal
    budget: Any  # the robot's budget (timely_robot.budgets.Budget)


@dataclass(frozen=True)
class CancelGoal:
    """A client's cancel of ``goal_id`` (kept if its submit has not reached the core yet)."""

    goal_id: str


@dataclass(frozen=True)
class AdoptGoal:
    """A goal another planner had in flight, taken over (``entry``: its journal entry)."""

    entry: Any  # service.takeover.JournalEntry


@dataclass(frozen=True)
class ForgetRequest:
    """An ended request, dropped from the core after its end was reported."""

    request: Request


@dataclass
class StopReply:
    """Where :class:`StopRobots` leaves its outcome for the operator's thread that waits on it."""

    done: threading.Event = field(default_factory=threading.Event)
    outcome: Any = None


@dataclass(frozen=True)
class StopRobots:
    """An operator's stop of ``robots`` (their goals end CANCELLED, the robots halt)."""

    robots: tuple[str, ...]
    who: str
    reply: StopReply


@dataclass(frozen=True)
class StopLate:
    """A stop for a goal accepted a moment before it, whose submit was still queued."""

    robot_id: str
    goal_id: str
    reason: str


@dataclass(frozen=True)
class ApplyDecision:
    """An operator's decision on a segment held for approval, to carry out."""

    goal_id: str


@dataclass(frozen=True)
class EndAll:
    """End every goal in flight (CANCELLED with ``reason``)."""

    reason: str


@dataclass(frozen=True)
class UpdateParams:
    """Settings that changed while running."""

    params: Any  # config.params.FleetParams


@dataclass(frozen=True)
class TakeJournal:
    """Take the journal of the goals in flight: ``delta``, ``snapshot`` or ``heartbeat``."""

    what: str


COMMANDS = (SubmitGoal, CancelGoal, AdoptGoal, ForgetRequest, StopRobots, StopLate, ApplyDecision, EndAll,
            UpdateParams, TakeJournal)

C = TypeVar("C")


class CommandQueue:
    """The scheduler thread's queue: any thread :meth:`post`s a command, the scheduler thread
    :meth:`run`s each one with the handler registered for its type (:meth:`on`)."""

    def __init__(self, wake_up: Callable[[], None] = lambda: None) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._handlers: dict[type, Callable[[Any], None]] = {}
        self._wake_up = wake_up

    def on(self, command_type: type[C], handler: Callable[[C], None]) -> None:
        """Register the one handler of ``command_type`` (a dataclass without callable fields)."""
        if command_type in self._handlers:
            raise ValueError(f"{command_type.__name__} has a handler already")
        self._handlers[command_type] = handler

    def post(self, command: Any) -> None:
        """Queue ``command`` for the scheduler thread and wake it; a command of a type nobody
        handles is refused here, on the poster's thread."""
        if type(command) not in self._handlers:
            raise TypeError(f"no handler for {type(command).__name__}")
        if any(callable(getattr(command, f.name)) for f in fields(command)):
            raise TypeError(f"{type(command).__name__} carries a callable: a command is data")
        self._queue.put(command)
        self._wake_up()

    def get_nowait(self) -> Any:
        return self._queue.get_nowait()

    def empty(self) -> bool:
        return self._queue.empty()

    def run(self, command: Any) -> None:
        """Scheduler thread: carry out ``command`` with its handler."""
        self._handlers[type(command)](command)
