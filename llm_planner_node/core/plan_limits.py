"""Bounds of the plan languages: one place decides how big a plan may be.

The plan grammar (``llm_planner_node/prompts/grammar.py``) is generated from these bounds, so every
plan a model can write under it is finite and short: loop counts ``1..max_loop``, blocks nested
at most ``max_depth``, at most ``max_statements`` statements in the whole plan (a block counts
one plus its body), bare names and quoted strings of bounded length, conditions of at most
``max_conditions`` comparisons, and a top-level return ends the plan. The same bounds give the
static budget check of a dispatched plan (``max_calls``: skill calls after unrolling loops).

Chat answers are bounded by ``max_sentences`` sentences of at most ``max_sentence_chars``
characters each.

Defaults per plan language are small (a 135M model under a grammar of 1000-iteration loops and 16
levels of nesting wrote ``1000{1000{...`` until max_tokens); they admit every plan of the shipped
corpus (the longest drone plan: a loop of 12 with an if inside; the longest arm plan: 11 calls).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from timely_robot.overrides import with_overrides


@dataclass(frozen=True)
class PlanLimits:
    """Size bounds of one plan language (see the module docstring)."""

    max_statements: int = 8
    max_depth: int = 2
    max_loop: int = 12
    max_vars: int = 2
    max_conditions: int = 2
    max_name_chars: int = 20
    max_string_chars: int = 28
    max_calls: int = 50
    max_sentences: int = 5
    max_sentence_chars: int = 160

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            low = 0 if f.name in ("max_depth", "max_vars") else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"plan limit {f.name} must be an integer >= {low}, got {v!r}")

    def merged(self, overrides: Mapping[str, Any] | None) -> "PlanLimits":
        """These limits with some fields replaced (unknown names raise ValueError)."""
        return with_overrides(self, overrides, "plan limit", "limits")


#: Defaults per plan language. Arm plans are flat call lists (no blocks); the shipped corpus'
#: longest has 11 calls.
DEFAULT_PLAN_LIMITS: dict[str, PlanLimits] = {
    "minispec": PlanLimits(max_conditions=1),
    "arm": PlanLimits(max_statements=14, max_depth=0, max_calls=14, max_string_chars=16),
    "chat": PlanLimits(max_sentences=6, max_sentence_chars=120),
}


def limits_for(language: str) -> PlanLimits:
    """The default limits of a plan language (``minispec``, ``arm``, ``chat``)."""
    return DEFAULT_PLAN_LIMITS.get(language, PlanLimits())
