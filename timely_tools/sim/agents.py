"""One plan per robot: which agent of a workload's fleet runs each task, and when.

The rule (the same in the simulator, :func:`timely_tools.sim.simulation.simulate` with
``agents=``, and in live evaluation, :mod:`timely_tools.evaluation.live`):

- A workload has ``agents`` robots per robot kind, ids ``<kind><index>`` for index
  0..agents-1 (TimelyLLM Table 3: WID1 25 drones, WID2 42 drones, WID3 40 arms; Table 3's
  workloads have one kind each).
- A robot runs one plan at a time (the planner node refuses a goal for a robot that is still
  executing one: ``planner_service``'s busy robots). A robot is busy from the moment its goal is
  sent until the goal ends (every segment executed, or cancelled / failed / shed / refused).
- A task that arrives for a busy robot goes to a free robot of the same kind: the free one with
  the lowest index (deterministic). If every robot of that kind is busy, the task waits, in
  arrival order (FIFO per kind), and is sent the moment a robot of its kind becomes free.
- A task's goal is sent (and its response time, TUF and robot waiting measured) from the moment
  a robot takes it; the time it waited for a free robot is reported separately
  (``agent_wait_s``), as is the number of tasks moved to another robot (``reassigned``).

The workload generator (:func:`.workload.generate`) already starts an event's tasks on distinct
agents; the rule matters when an agent is still busy with an earlier event's task (28-38% of
goals on WID1-3 arrive so: without the rule, their plans would overlap on one robot).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, replace
from typing import Iterable

from llm_planner_node.core.task_model import Goal

_ID = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True)
class Assignment:
    """A task handed to a robot: ``index`` = the task's arrival index, ``goal`` with the robot id
    it runs on, ``t`` = when the robot took it, ``arrived`` = when the task arrived."""

    index: int
    goal: Goal
    t: float
    arrived: float

    @property
    def waited_s(self) -> float:
        return self.t - self.arrived


class AgentPool:
    """Free/busy robots per kind and the FIFO of tasks waiting for one (module docstring)."""

    def __init__(self, robots_by_kind: dict[str, Iterable[str]]) -> None:
        self._order: dict[str, list[str]] = {k: sorted(set(v), key=_robot_key) for k, v in robots_by_kind.items()}
        self._kind_of = {r: k for k, rs in self._order.items() for r in rs}
        self._busy: dict[str, int] = {}  # robot id -> arrival index of its task
        self._waiting: dict[str, deque[tuple[int, Goal, float]]] = {k: deque() for k in self._order}
        self.reassigned: list[int] = []  # arrival indices sent to another robot than asked for

    @classmethod
    def for_fleet(cls, kinds: Iterable[str], agents: int) -> "AgentPool":
        """``agents`` robots ``<kind>0..<kind>{agents-1}`` of each kind."""
        if agents < 1:
            raise ValueError(f"a fleet needs at least one agent, got {agents}")
        return cls({k: [f"{k}{i}" for i in range(agents)] for k in kinds})

    @classmethod
    def for_goals(cls, goals: Iterable[Goal], agents: int) -> "AgentPool":
        """A fleet of ``agents`` robots of every kind that ``goals`` use."""
        return cls.for_fleet(sorted({g.robot_kind for g in goals}), agents)

    # ------------------------------------------------------------------ queries
    def robots(self, kind: str) -> list[str]:
        return list(self._order.get(kind, ()))

    def busy(self, robot_id: str) -> bool:
        return robot_id in self._busy

    def waiting(self, kind: str | None = None) -> int:
        if kind is not None:
            return len(self._waiting.get(kind, ()))
        return sum(len(q) for q in self._waiting.values())

    # ------------------------------------------------------------------ the rule
    def arrive(self, index: int, goal: Goal, t: float) -> Assignment | None:
        """Task ``index`` arrives at ``t`` for ``goal.robot_id``: the assignment if a robot of its
        kind is free now (the asked-for one if free, else the lowest free), None if it waits."""
        kind = goal.robot_kind
        if kind not in self._order:
            raise ValueError(f"no robots of kind {kind!r} in the fleet (kinds: {', '.join(self._order)})")
        if self._waiting[kind]:  # earlier tasks of this kind wait: keep arrival order
            self._waiting[kind].append((index, goal, t))
            return None
        robot = self._free_robot(kind, goal.robot_id)
        if robot is None:
            self._waiting[kind].append((index, goal, t))
            return None
        return self._take(robot, index, goal, t, t)

    def release(self, robot_id: str, t: float) -> Assignment | None:
        """``robot_id``'s goal ended at ``t``: the robot is free; the next waiting task of its kind
        (if any) takes it at once."""
        if self._busy.pop(robot_id, None) is None:
            return None
        kind = self._kind_of[robot_id]
        if not self._waiting[kind]:
            return None
        index, goal, arrived = self._waiting[kind].popleft()
        return self._take(robot_id, index, goal, t, arrived)

    def _free_robot(self, kind: str, asked: str) -> str | None:
        if asked in self._kind_of and self._kind_of[asked] == kind and asked not in self._busy:
            return asked
        return next((r for r in self._order[kind] if r not in self._busy), None)

    def _take(self, robot: str, index: int, goal: Goal, t: float, arrived: float) -> Assignment:
        self._busy[robot] = index
        if robot != goal.robot_id:
            self.reassigned.append(index)
            goal = replace(goal, robot_id=robot)
        return Assignment(index, goal, t, arrived)


def _robot_key(robot_id: str) -> tuple[str, int, str]:
    m = _ID.match(robot_id)
    return (m.group(1), int(m.group(2)), "") if m else (robot_id, -1, robot_id)
