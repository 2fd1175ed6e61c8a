"""The goals in flight: action goal id <-> core request id, and the robots they keep busy."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from timely_robot.budgets import StaticBudget
from llm_planner_node.core.task_model import Request


@dataclass
class GoalEntry:
    """A goal that reached the core."""

    goal_id: str
    request_id: int
    on_end: Callable[[Request | str], None]
    budget: StaticBudget | None = None  # what the goal's dispatched segments may do at worst


class GoalRegistry:
    """Goals in flight (written on the scheduler thread) and busy robots (any thread, locked).

    It also keeps which goals changed since the journal last took them (:meth:`touch`,
    :meth:`take_changed`): a goal is changed when it is added (started, adopted, re-planned) and
    whenever a part of the service touches it (a segment sent, a robot's report that ended a
    segment), so the journal of the goals in flight costs what changed, not what exists. The set
    holds only goals in flight (an ended goal leaves it), so it stays bounded when no journal
    takes it."""

    def __init__(self) -> None:
        self.by_request: dict[int, GoalEntry] = {}
        self.by_goal_id: dict[str, int] = {}
        self._changed: set[str] = set()
        self._fresh: set[str] = set()  # added since the last take: the journal sends them whole
        self.busy: dict[str, str] = {}  # robot id -> goal id; written under the lock
        self._busy_lock = threading.Lock()

    def add(self, entry: GoalEntry) -> None:
        self.by_request[entry.request_id] = entry
        self.by_goal_id[entry.goal_id] = entry.request_id
        self._changed.add(entry.goal_id)
        self._fresh.add(entry.goal_id)

    def pop(self, request_id: int) -> GoalEntry | None:
        """Forget an ended goal; None if it was not in flight."""
        entry = self.by_request.pop(request_id, None)
        if entry is not None:
            self.by_goal_id.pop(entry.goal_id, None)
            self._changed.discard(entry.goal_id)
            self._fresh.discard(entry.goal_id)
        return entry

    def touch(self, goal_id: str) -> None:
        """The goal in flight ``goal_id`` changed (scheduler thread): the next journal carries it."""
        if goal_id in self.by_goal_id:
            self._changed.add(goal_id)

    def take_changed(self) -> tuple[set[str], set[str]]:
        """The goals in flight that changed since the last call, and those of them added since
        (started, adopted, re-planned); both forgotten (scheduler thread)."""
        changed, self._changed = self._changed, set()
        fresh, self._fresh = self._fresh, set()
        return changed, fresh

    def rekey(self, request_id: int, new_request_id: int) -> GoalEntry | None:
        """The goal of ``request_id`` goes on as ``new_request_id`` (a re-plan): same entry, so
        the same client, budget and busy robot."""
        entry = self.by_request.pop(request_id, None)
        if entry is not None:
            entry.request_id = new_request_id
            self.add(entry)
        return entry

    def claim(self, robot_id: str, goal_id: str, *, again: bool = False) -> str | None:
        """Atomically mark ``robot_id`` busy with ``goal_id``; the busy reason if it already was
        (``again``: unless with this same goal, which an adoption claimed when it was posted)."""
        with self._busy_lock:
            busy = self.busy.get(robot_id)
            if busy is not None and not (again and busy == goal_id):
                return f"robot '{robot_id}' is still executing goal {busy}; send one plan at a time per robot"
            self.busy[robot_id] = goal_id
            return None

    def release(self, robot_id: str, goal_id: str) -> None:
        with self._busy_lock:
            if self.busy.get(robot_id) == goal_id:
                del self.busy[robot_id]

    def active(self) -> dict[str, str]:
        """robot id -> the goal it runs now (a copy; any thread)."""
        with self._busy_lock:
            return dict(self.busy)
