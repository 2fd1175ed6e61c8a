"""The worst case a plan segment can make its robot do (:class:`~..core.budgets.Cost`), for the
planner's budget check before dispatch.

MiniSpec segments are parsed and multiplied out: a loop costs its count times its body, an if
its condition plus the costlier of its branches, a call with a variable argument the largest
value the argument's safe range allows (``1000{g,bottle;tp;180{g,bottle;tc,180;}};`` costs
362,000 skill calls and 32,400,000 degrees of turns). Arm and chat segments are flat lists of
calls.
"""

from __future__ import annotations

from typing import Any, Iterable

from llm_planner_node.core.budgets import Cost, call_cost
from llm_planner_node.core.skills import SkillCall, SkillSet
from llm_planner_node.segmenters.minispec import Assign, BoolOp, Call, Compare, If, Loop, Return, Var, parse_program


def _call(call: Call, skill_set: SkillSet) -> Cost:
    args = list(call.args)
    if any(isinstance(a, Var) for a in args):
        spec = skill_set.spec(call.name)
        args = [(s.max if s.max is not None else 0) if isinstance(a, Var) else a for a, s in zip(args, spec.args)]
    return call_cost(SkillCall(call.name, tuple(args)))


def _cost(node: Any, skill_set: SkillSet) -> Cost:
    if isinstance(node, (list, tuple)):
        total = Cost()
        for n in node:
            total = total + _cost(n, skill_set)
        return total
    if isinstance(node, Call):
        return _call(node, skill_set)
    if isinstance(node, Assign):
        return _cost(node.value, skill_set)
    if isinstance(node, Return):
        return _cost(node.value, skill_set)
    if isinstance(node, Compare):
        return _cost(node.left, skill_set) + (_cost(node.right, skill_set) if node.right is not None else Cost())
    if isinstance(node, BoolOp):
        return _cost(node.values, skill_set)
    if isinstance(node, If):
        return _cost(node.cond, skill_set) + _cost(node.body, skill_set).most(_cost(node.orelse, skill_set))
    if isinstance(node, Loop):
        return _cost(node.body, skill_set) * node.count
    return Cost()  # Var, Literal


def minispec_cost(text: str, skill_set: SkillSet) -> Cost:
    """Worst case of a MiniSpec segment (any loop count: the grammar or the parser bound it)."""
    return _cost(parse_program(text, skill_set, max_loop=10**9, check_vars=False), skill_set)


def segment_cost(text: str, calls: Iterable[SkillCall], skill_set: SkillSet, language: str) -> Cost:
    """Worst case of one dispatched segment in its plan language (``minispec``, ``arm``, ``chat``)."""
    if language == "minispec" and text.strip():
        return minispec_cost(text, skill_set)
    total = Cost()
    for c in calls:
        total = total + call_cost(c)
    return total
