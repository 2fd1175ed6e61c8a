"""Operator approval of marked skills (the safety envelope's human in the loop).

A robot's entry in the fleet YAML may mark skills whose segments an operator must approve before
the planner dispatches them::

    robots:
      - {id: tello_1, kind: drone, approval: {skills: [land, goto], timeout_s: 30}}
      - {id: indy_1, kind: arm, approval: {all: true}}        # every segment of this robot

``skills`` are names (or MiniSpec aliases) of the robot's skill set; ``all: true`` holds every
segment; ``timeout_s`` (default 30 s) is how long a held segment waits before its goal ends
("approval timed out after 30 s") and the robot is stopped. A segment is held when it calls a
marked skill anywhere in its text (inside a loop or a branch too: the segmenter's calls are every
call of the text). The planner side of the hold is :mod:`llm_planner_node.service.operator_control`.

ROS-free and stdlib-only, like :mod:`.budgets`.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Iterable

from timely_robot.skills import SkillCall, SkillError, SkillSet

#: Longest time-out an approval may have (one day): beyond, a goal would hold its robot forever.
MAX_TIMEOUT_S = 86_400.0
DEFAULT_TIMEOUT_S = 30.0
APPROVAL_KEYS = ("skills", "all", "timeout_s")


@dataclass(frozen=True)
class Approval:
    """Which segments of a robot wait for an operator (canonical skill names) and for how long."""

    skills: tuple[str, ...] = ()
    all: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S

    def marked(self, calls: Iterable[SkillCall]) -> str:
        """Why a segment of these calls waits for approval ("" = it does not): the marked skills
        it calls, in order, or "every segment" under ``all``."""
        if self.all:
            return "every segment"
        names = list(dict.fromkeys(c.name for c in calls if c.name in self.skills))
        return ", ".join(names)


def approval_from(value: Any, skill_set: SkillSet) -> Approval:
    """A robot's ``approval`` mapping, checked against its skill set; ValueError with one
    sentence (without the key's location, which the caller adds) for a mistake."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a mapping such as {{skills: [land], timeout_s: 30}}, got {value!r}")
    for key in value:
        if key not in APPROVAL_KEYS:
            close = difflib.get_close_matches(str(key), APPROVAL_KEYS, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"settings: {', '.join(APPROVAL_KEYS)}"
            raise ValueError(f"unknown approval setting '{key}' ({hint})")
    raw = value.get("skills") or []
    if isinstance(raw, str) or not isinstance(raw, (list, tuple)) or not all(isinstance(s, str) for s in raw):
        raise ValueError(f"skills must be a list of skill names, e.g. [land, goto], got {raw!r}")
    skills: list[str] = []
    for name in raw:
        try:
            canonical = skill_set.spec(name.strip()).name
        except SkillError:
            close = (difflib.get_close_matches(name, skill_set.names(), n=1)
                     or difflib.get_close_matches(name, [s.alias for s in skill_set.skills if s.alias], n=1))
            hint = f"did you mean '{close[0]}'?" if close else f"skills: {', '.join(skill_set.names())}"
            raise ValueError(f"'{name}' is not a skill of skill set {skill_set.id} ({hint})") from None
        if canonical not in skills:
            skills.append(canonical)
    every = value.get("all", False)
    if not isinstance(every, bool):
        raise ValueError(f"all must be true or false, got {every!r}")
    timeout = value.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout_s must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}, got {timeout!r}")
    if not skills and not every:
        raise ValueError("holds nothing: give skills: [name, ...] or all: true")
    return Approval(tuple(skills), every, float(timeout))
