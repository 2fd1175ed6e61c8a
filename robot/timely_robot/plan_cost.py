"""The worst case a plan segment can make its robot do (:class:`~..core.budgets.Cost`), for the
planner's budget check before dispatch.

MiniSpec segments are parsed and multiplied out: a loop costs its count times its body, an if
its condition plus the costlier of its branches, a call with a variable argument the largest
value the argument's safe range allows (``1000{g,bottle;tp;180{g,bottle;tc,180;}};`` costs
362,000 skill calls and 32,400,000 degrees of turns). Arm and chat segments are flat lists of
calls.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from timely_robot.budgets import Cost, call_cost
from timely_robot.skills import SkillCall, SkillSet
from timely_robot.minispec import Assign, BoolOp, Call, Compare, If, Loop, Return, Var, parse_program

T = TypeVar("T")


def _worst_call(call: Call, skill_set: SkillSet) -> SkillCall:
    """``call`` with each variable argument at the largest value its safe range allows (0 if none)."""
    args = list(call.args)
    if any(isinstance(a, Var) for a in args):
        spec = skill_set.spec(call.name)
        args = [(s.max if s.max is not None else 0) if isinstance(a, Var) else a for a, s in zip(args, spec.args)]
    return SkillCall(call.name, tuple(args))


def _walk(node: Any, skill_set: SkillSet, call: Callable[[SkillCall], T], seq: Callable[[list[T]], T],
          either: Callable[[T, T], T], repeat: Callable[[T, int], T]) -> T:
    """Fold a parsed MiniSpec segment in source order: ``call`` of each call (variables at their
    worst), ``seq`` of what follows in order, ``either`` of an if's two branches (after its
    condition), ``repeat`` of a loop's body and count."""
    def walk(n: Any) -> T:
        if isinstance(n, (list, tuple)):
            return seq([walk(x) for x in n])
        if isinstance(n, Call):
            return call(_worst_call(n, skill_set))
        if isinstance(n, (Assign, Return)):
            return walk(n.value)
        if isinstance(n, Compare):
            return seq([walk(n.left)] + ([walk(n.right)] if n.right is not None else []))
        if isinstance(n, BoolOp):
            return walk(n.values)
        if isinstance(n, If):
            return seq([walk(n.cond), either(walk(n.body), walk(n.orelse))])
        if isinstance(n, Loop):
            return repeat(walk(n.body), n.count)
        return seq([])  # Var, Literal

    return walk(node)


def _sum(costs: list[Cost]) -> Cost:
    total = Cost()
    for c in costs:
        total = total + c
    return total


def _parse(text: str, skill_set: SkillSet) -> list[Any]:
    return parse_program(text, skill_set, max_loop=10**9, check_vars=False)


def minispec_cost(text: str, skill_set: SkillSet) -> Cost:
    """Worst case of a MiniSpec segment (any loop count: the grammar or the parser bound it)."""
    return _walk(_parse(text, skill_set), skill_set, lambda c: call_cost(c, skill_set), _sum, Cost.most,
                 lambda body, n: body * n)


def minispec_calls(text: str, skill_set: SkillSet, limit: int = 10_000) -> list[SkillCall]:
    """The first ``limit`` calls a MiniSpec segment can make, in order: loops unrolled, an if's
    condition and then both its branches in turn, each variable argument at its worst (as
    :func:`minispec_cost` counts them)."""
    def seq(parts: list[list[SkillCall]]) -> list[SkillCall]:
        out: list[SkillCall] = []
        for p in parts:
            out += p[:limit - len(out)]
        return out

    def repeat(body: list[SkillCall], n: int) -> list[SkillCall]:
        return (body * min(n, -(-limit // len(body))))[:limit] if body else []

    return _walk(_parse(text, skill_set), skill_set, lambda c: [c], seq, lambda a, b: seq([a, b]), repeat)


def segment_cost(text: str, calls: Iterable[SkillCall], skill_set: SkillSet, language: str) -> Cost:
    """Worst case of one dispatched segment in its plan language (``minispec``, ``arm``, ``chat``)."""
    if language == "minispec" and text.strip():
        return minispec_cost(text, skill_set)
    return _sum([call_cost(c, skill_set) for c in calls])
