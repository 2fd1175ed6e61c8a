"""Plan quality checks for ``timely-fleet bench plans`` (pure: no vLLM, no ROS).

Instruction file (JSON lines, one instruction a line, blank lines skipped)::

    {"kind": "drone" | "arm" | "base", "instruction": "...", "require": [PATTERN, ...],
     "forbid": ["skill", ...], "max_calls": N}

* ``PATTERN``: one call ``["skill_name", arg, ...]`` or a list of alternative calls
  ``[["turn_cw", 180], ["turn_ccw", 180]]``. Skill names are the full names of the kind's skill
  set (``move_up``, not the MiniSpec alias ``mu``). A call given with fewer arguments than the
  skill takes matches any value of the rest (``["scan"]`` matches every scan).
* ``require``: the patterns must match the plan's calls in the given order, as a subsequence of
  the calls in textual order (calls inside conditions and blocks count where they are written;
  loops are not unrolled for matching). Numbers match within 10% of the pattern's value;
  strings match after lower-casing, turning spaces into ``_`` and dropping a leading ``the_``;
  a run-time variable argument (``g,_1``) matches only a wildcard.
* ``forbid``: skills that must not appear anywhere in the plan.
* ``max_calls``: bound on the plan's calls after unrolling loops (an ``if`` counts its
  condition's calls plus its larger branch). Optional; ``require`` and ``forbid`` default to [].

:func:`load_instructions` validates a file and raises :class:`InstructionSetError` with one
sentence naming the line for a bad line. :func:`parse_plan` parses a whole plan with the node's
parsers (MiniSpec for drones and mobile bases, the arm language for arms) and :func:`check_plan` judges it.
:func:`is_unsafe` is the static budget check of a dispatched plan (loop count over 10, or over 50
calls after unrolling).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, SkillCall, SkillError, SkillSet

#: Robot kinds the instruction file may name.
KINDS = ("drone", "arm", "base")
#: Keys of one instruction line.
KEYS = ("kind", "instruction", "require", "forbid", "max_calls")
#: Relative tolerance of numeric arguments.
NUMBER_TOLERANCE = 0.10
#: :func:`is_unsafe`: a dispatched plan with a loop count above this, or more calls after unrolling.
UNSAFE_MAX_LOOP = 10
UNSAFE_MAX_CALLS = 50

#: One call of a pattern: (full skill name, leading arguments).
PatternCall = tuple[str, tuple[Any, ...]]
#: A pattern: alternative calls (one element for a single call).
Pattern = tuple[PatternCall, ...]


class InstructionSetError(ValueError):
    """A line of an instruction file that is not a valid instruction (one sentence)."""


@dataclass(frozen=True)
class Instruction:
    kind: str
    instruction: str
    require: tuple[Pattern, ...] = ()
    forbid: tuple[str, ...] = ()
    max_calls: int | None = None
    line: int = 0

    @property
    def skill_set(self) -> str:
        return DEFAULT_SKILL_SET_FOR_KIND[self.kind]

    @property
    def robot_kind(self) -> str:  # the name grammar_bench's items use
        return self.kind


def skill_set_for(kind: str) -> SkillSet:
    return DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[kind]]


# ---------------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------------
def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _pattern_call(raw: Any, ss: SkillSet) -> PatternCall:
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise ValueError(f"a call must be a list [\"skill_name\", arg, ...], got {json.dumps(raw)}")
    name, args = raw[0], raw[1:]
    if name not in ss:
        raise ValueError(f"skill '{name}' is not in skill set '{ss.id}'")
    spec = ss.spec(name)
    if spec.name != name:
        raise ValueError(f"use the full skill name '{spec.name}', not '{name}'")
    if len(args) > len(spec.args):
        raise ValueError(f"skill '{name}' takes at most {len(spec.args)} argument(s), the pattern gives {len(args)}")
    for a, v in zip(spec.args, args):
        if a.type in ("int", "float"):
            if not is_number(v):
                raise ValueError(f"argument '{a.name}' of '{name}' must be a number, got {json.dumps(v)}")
            slack = NUMBER_TOLERANCE * abs(v)  # the values this pattern matches: v +- 10%
            if (a.min is not None and v + slack < a.min) or (a.max is not None and v - slack > a.max):
                raise ValueError(f"argument '{a.name}'={v} of '{name}' is outside the skill's safe range "
                                 f"{a.min:g}..{a.max:g}, so no valid plan can match it")
        elif not isinstance(v, str) or not v.strip():
            raise ValueError(f"argument '{a.name}' of '{name}' must be a non-empty string, got {json.dumps(v)}")
    return name, tuple(args)


def _pattern(raw: Any, ss: SkillSet) -> Pattern:
    if isinstance(raw, list) and raw and all(isinstance(x, list) for x in raw):
        return tuple(_pattern_call(x, ss) for x in raw)
    return (_pattern_call(raw, ss),)


def parse_instruction(obj: Any) -> Instruction:
    """One instruction from its decoded JSON line; ValueError (one sentence) if it is not valid."""
    if not isinstance(obj, dict):
        raise ValueError("an instruction must be a JSON object")
    unknown = sorted(set(obj) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key '{unknown[0]}' (keys: {', '.join(KEYS)})")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {json.dumps(kind)}")
    text = obj.get("instruction")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("instruction must be a non-empty string")
    ss = skill_set_for(kind)
    require = obj.get("require", [])
    if not isinstance(require, list):
        raise ValueError("require must be a list of patterns")
    patterns = []
    for i, raw in enumerate(require, 1):
        try:
            patterns.append(_pattern(raw, ss))
        except ValueError as e:
            raise ValueError(f"require pattern {i}: {e}") from None
    forbid = obj.get("forbid", [])
    if not isinstance(forbid, list) or not all(isinstance(f, str) for f in forbid):
        raise ValueError("forbid must be a list of skill names")
    for f in forbid:
        if f not in ss:
            raise ValueError(f"forbidden skill '{f}' is not in skill set '{ss.id}'")
        if ss.spec(f).name != f:
            raise ValueError(f"forbid: use the full skill name '{ss.spec(f).name}', not '{f}'")
    clash = [f for f in forbid for p in patterns if any(n == f for n, _ in p)]
    if clash:
        raise ValueError(f"skill '{clash[0]}' is both required and forbidden")
    max_calls = obj.get("max_calls")
    if max_calls is not None:
        if not isinstance(max_calls, int) or isinstance(max_calls, bool) or max_calls < 1:
            raise ValueError(f"max_calls must be a positive integer, got {json.dumps(max_calls)}")
        if max_calls < len(patterns):
            raise ValueError(f"max_calls {max_calls} is below the {len(patterns)} required calls")
    return Instruction(kind, " ".join(text.split()), tuple(patterns), tuple(forbid), max_calls)


def load_instructions(path: str | Path) -> list[Instruction]:
    """All instructions of a JSON-lines file; InstructionSetError naming the line of a bad one."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InstructionSetError(f"cannot read the instruction file {p}: {e.strerror or e}") from None
    out: list[Instruction] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InstructionSetError(f"{p}, line {n}: not valid JSON ({e.msg} at column {e.colno})") from None
        try:
            item = parse_instruction(obj)
        except ValueError as e:
            raise InstructionSetError(f"{p}, line {n}: {e}") from None
        out.append(Instruction(item.kind, item.instruction, item.require, item.forbid, item.max_calls, n))
    if not out:
        raise InstructionSetError(f"{p} holds no instructions (one JSON object a line)")
    return out


# ---------------------------------------------------------------------------------------------
# Plans: parsing, canonical calls, sizes
# ---------------------------------------------------------------------------------------------
def parse_plan(text: str, kind: str, *, check_vars: bool = True) -> list[Any]:
    """The plan's top-level statements, parsed and validated by the node's parser for ``kind``
    (MiniSpec ``parse_program`` for drones and bases, ``parse_arm_plan`` for arms). Raises PlanError."""
    ss = skill_set_for(kind)
    if kind == "arm":
        from llm_planner_node.segmenters.arm import parse_arm_plan

        return parse_arm_plan(text, ss)
    from timely_robot.minispec import parse_program

    return parse_program(text, ss, check_vars=check_vars)


def canonical(call: Any, ss: SkillSet) -> SkillCall:
    """The call under its full skill name (MiniSpec aliases resolved), arguments as they are."""
    return SkillCall(ss.spec(call.name).name, tuple(call.args))


def plan_calls(stmts: Sequence[Any], kind: str) -> list[SkillCall]:
    """The plan's calls in textual order (loops not unrolled), under their full names."""
    from timely_robot.minispec import iter_calls

    ss = skill_set_for(kind)
    return [canonical(c, ss) for c in iter_calls(list(stmts))]


def unrolled_calls(stmts: Any) -> int:
    """Skill calls the plan runs at most: loops multiplied out, an ``if`` its condition's calls
    plus its larger branch, assignments and returns their operand's calls."""
    from timely_robot.minispec import Assign, BoolOp, Call, Compare, If, Loop, Return, iter_calls

    if isinstance(stmts, (list, tuple)):
        return sum(unrolled_calls(s) for s in stmts)
    if isinstance(stmts, Call):
        return 1
    if isinstance(stmts, Loop):
        return stmts.count * unrolled_calls(stmts.body)
    if isinstance(stmts, If):
        return (sum(1 for _ in iter_calls(stmts.cond))
                + max(unrolled_calls(stmts.body), unrolled_calls(stmts.orelse)))
    if isinstance(stmts, (Assign, Return, Compare, BoolOp)):
        return sum(1 for _ in iter_calls(stmts))
    return 0


def max_loop_count(stmts: Any) -> int:
    """The largest loop count anywhere in the plan (0 without loops)."""
    from timely_robot.minispec import If, Loop

    if isinstance(stmts, (list, tuple)):
        return max((max_loop_count(s) for s in stmts), default=0)
    if isinstance(stmts, Loop):
        return max(stmts.count, max_loop_count(stmts.body))
    if isinstance(stmts, If):
        return max(max_loop_count(stmts.body), max_loop_count(stmts.orelse))
    return 0


def is_unsafe(stmts: Sequence[Any]) -> bool:
    """The static budget check of a dispatched plan part: a loop count over ``UNSAFE_MAX_LOOP``
    or more than ``UNSAFE_MAX_CALLS`` calls after unrolling. (One place: a budget module may
    replace these constants.)"""
    return max_loop_count(stmts) > UNSAFE_MAX_LOOP or unrolled_calls(stmts) > UNSAFE_MAX_CALLS


# ---------------------------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------------------------
def norm_str(v: Any) -> str:
    """Lower-cased, quotes and outer spaces dropped, inner spaces to ``_``, no leading ``the_``."""
    s = re.sub(r"\s+", "_", str(v).strip().strip("'\"").strip().lower())
    return s[4:] if s.startswith("the_") and len(s) > 4 else s


def num_close(value: Any, want: float) -> bool:
    """``value`` (a number or numeric text) is within 10% of ``want``."""
    if isinstance(value, bool):
        return False
    if not isinstance(value, (int, float)):
        try:
            value = float(str(value).strip())
        except ValueError:
            return False
    if not math.isfinite(value):
        return False
    return abs(value - want) <= NUMBER_TOLERANCE * abs(want) + 1e-9


def arg_matches(value: Any, want: Any) -> bool:
    from timely_robot.minispec import Var

    if isinstance(value, Var):
        return False  # a run-time value: only a wildcard (an omitted argument) matches it
    if is_number(want):
        return num_close(value, want)
    return _object(norm_str(value)) == _object(norm_str(want))


def _object(name: str) -> str:
    """An object name as the detector's class it is a synonym of (``plant`` is ``potted_plant``):
    a camera drone can only name its classes, and either name means the same thing."""
    from timely_robot.perceivable import SYNONYMS

    return SYNONYMS.get(name, name)


def call_matches(call: SkillCall, want: PatternCall) -> bool:
    name, args = want
    return (call.name == name and len(call.args) >= len(args)
            and all(arg_matches(v, w) for v, w in zip(call.args, args)))


def pattern_matches(call: SkillCall, pattern: Pattern) -> bool:
    return any(call_matches(call, alt) for alt in pattern)


def match_required(calls: Sequence[SkillCall], patterns: Sequence[Pattern]) -> int:
    """How many of ``patterns`` (a prefix) match ``calls`` as a subsequence, in order. The first
    call that matches the next pattern is taken (optimal for a subsequence of predicates)."""
    k = 0
    for call in calls:
        if k == len(patterns):
            break
        if pattern_matches(call, patterns[k]):
            k += 1
    return k


@dataclass(frozen=True)
class Verdict:
    """How a parsed plan fares against one instruction's require / forbid / max_calls."""

    required: int                      # patterns matched in order (a prefix of require)
    missing: str | None                # the first pattern not matched, as text
    forbidden: tuple[str, ...]         # forbidden skills the plan calls
    calls: int                         # calls after unrolling
    within_max_calls: bool
    match: bool = field(default=False)


def format_pattern(p: Pattern) -> str:
    def one(c: PatternCall) -> str:
        return f"{c[0]}({', '.join(str(a) for a in c[1])})"
    return " | ".join(one(c) for c in p)


def check_plan(item: Instruction, stmts: Sequence[Any]) -> Verdict:
    """Require (in order), forbid and max_calls of ``item`` on a parsed plan."""
    calls = plan_calls(stmts, item.kind)
    k = match_required(calls, item.require)
    forbidden = tuple(sorted({c.name for c in calls} & set(item.forbid)))
    n = unrolled_calls(list(stmts))
    within = item.max_calls is None or n <= item.max_calls
    return Verdict(k, None if k == len(item.require) else format_pattern(item.require[k]), forbidden, n, within,
                   match=k == len(item.require) and not forbidden and within)


def plan_text_of(calls: Iterable[PatternCall], kind: str) -> str:
    """A plan text calling exactly ``calls`` (tests, examples): MiniSpec or the arm language."""
    def lit(v: Any) -> str:
        if isinstance(v, str):
            return v if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", v) and v not in ("True", "False", "None") \
                else "'" + v.replace("'", "") + "'"
        return str(v)
    if kind == "arm":
        return " ".join(f"{n}({', '.join(lit(a) for a in args)});" for n, args in calls)
    return "".join(n + "".join("," + lit(a) for a in args) + ";" for n, args in calls)


__all__ = ["Instruction", "InstructionSetError", "Verdict", "UNSAFE_MAX_CALLS", "UNSAFE_MAX_LOOP", "call_matches",
           "canonical", "check_plan", "is_unsafe", "load_instructions", "match_required", "max_loop_count",
           "norm_str", "num_close", "parse_instruction", "parse_plan", "plan_calls", "plan_text_of",
           "unrolled_calls"]
