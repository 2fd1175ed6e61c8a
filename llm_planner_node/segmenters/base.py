"""Segmenter interface: content-aware stop checkers for segmented generation (TimelyLLM 4.1).

A segmenter is created **per generation** for one robot skill set. The engine calls
:meth:`Segmenter.feed` with the newly detokenised text after every token and
:meth:`Segmenter.finish` once at the end of generation. Each call returns the segments that
became complete (usually none, sometimes one). The cost of ``feed`` is amortised
O(len(new_text)): a segmenter keeps only the text of the statement it has not emitted yet and
never re-scans the whole output.

A :class:`Segment` is executable: every skill call in it was looked up in the robot's registered
:class:`~timely_robot.skills.SkillSet` and its literal arguments passed the safe ranges.
Text that is not a valid plan raises a :class:`PlanError` (a ``SkillError`` subclass) whose
message names the offending statement; the engine ends the goal with that message and nothing
of the bad statement ever reaches a robot. Segments emitted *before* the error were valid and
may already be executing; that is by design (the plan fails at the first bad statement).

Plan terminator
---------------
A plan ends with the model's **end-of-sequence token** (or the engine's max-tokens limit); the
engine then calls :meth:`Segmenter.finish`, which flushes the last statement (MiniSpec and the arm
language accept a final statement without ``;``; chat flushes the last sentence/paragraph) or
raises :class:`PlanSyntaxError` if the text ends inside a block, string or call. There is no
in-band end marker; the project's planner model is trained to emit EOS right after the plan.

Repair (configurable, default off)
----------------------------------
``repair="clamp"`` clamps numeric literal arguments that are outside a skill's safe range to the
nearest bound (``mf,600`` -> ``move_forward(500)``) instead of failing; each repair is recorded in
``Segment.repairs``. Unknown skills, wrong types and syntax errors are never repaired.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, KIND_LANGUAGE, SkillCall, SkillSet
from timely_robot.plans import PlanError, PlanSyntaxError, Repair, UnsafePlanError, check_call

@dataclass(frozen=True)
class Segment:
    """One executable piece of a plan, as emitted by a segmenter.

    ``start``/``end`` are character offsets into the *whole* generated text (all text passed to
    ``feed`` so far, concatenated): ``output[start:end]`` is the raw segment including its
    terminator (``;`` or the sentence punctuation). The engine maps ``end`` to the token whose
    decoded text covers it. ``text`` is that slice with surrounding whitespace stripped.
    ``calls`` are the validated skill calls in source order (MiniSpec blocks: every call inside
    the block, including calls in conditions; arguments that are run-time variables are
    :class:`~timely_robot.minispec.Var` objects and must be re-validated by the
    adapter after substitution). ``statements`` is the parsed AST (MiniSpec: one top-level
    statement; arm: the grouped :class:`Call` statements; chat: empty).
    """

    index: int
    text: str
    start: int
    end: int
    calls: tuple[SkillCall, ...]
    statements: tuple[Any, ...] = ()
    repairs: tuple[str, ...] = ()

    @property
    def skill_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.calls)


class Segmenter:
    """Base class of the incremental stop checkers. Subclasses implement ``_feed``/``_finish``.

    ``feed`` and ``finish`` raise :class:`PlanError` on invalid text; after an error or after
    ``finish`` the segmenter refuses further input (``RuntimeError``).
    """

    name: str = "base"

    def __init__(self, skill_set: SkillSet, *, repair: Repair = "none") -> None:
        if repair not in ("none", "clamp"):
            raise ValueError(f"repair must be 'none' or 'clamp', got {repair!r}")
        self.skill_set = skill_set
        self.repair = repair
        self.consumed = 0  # total characters fed so far
        self.segments: list[Segment] = []
        self._closed = False

    # -- public API --------------------------------------------------------------------------
    def feed(self, new_text: str) -> list[Segment]:
        """Consume newly detokenised text; return the segments completed by it (often [])."""
        if self._closed:
            raise RuntimeError(f"{self.name} segmenter is closed (finished or failed)")
        if not new_text:
            return []
        try:
            out = self._feed(new_text)
        except PlanError:
            self._closed = True
            raise
        self.consumed += len(new_text)
        return out

    def finish(self) -> list[Segment]:
        """End of generation (EOS / max tokens): flush the last segment or raise PlanError."""
        if self._closed:
            raise RuntimeError(f"{self.name} segmenter is closed (finished or failed)")
        self._closed = True
        return self._finish()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- for subclasses ------------------------------------------------------------------------
    def _feed(self, new_text: str) -> list[Segment]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _finish(self) -> list[Segment]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _emit(
        self,
        text: str,
        start: int,
        end: int,
        calls: Sequence[SkillCall],
        statements: Sequence[Any] = (),
        repairs: Sequence[str] = (),
    ) -> Segment:
        seg = Segment(
            index=len(self.segments),
            text=text,
            start=start,
            end=end,
            calls=tuple(calls),
            statements=tuple(statements),
            repairs=tuple(repairs),
        )
        self.segments.append(seg)
        return seg


SEGMENTER_NAMES = ("minispec", "arm", "chat-sentence", "chat-paragraph")
#: name -> (skill set, constructor options) -> a new segmenter; each segmenter module registers
#: its own (:func:`register_segmenter`, as policies register), so this module imports none of them
_FACTORIES: dict[str, Any] = {}


def register_segmenter(name: str, factory: Any) -> None:
    """Make ``get_segmenter(name)`` build ``factory(skill_set, **opts)``."""
    if name not in SEGMENTER_NAMES:
        raise ValueError(f"segmenter {name!r} is not one of {SEGMENTER_NAMES}")
    _FACTORIES[name] = factory
_KIND_TO_SEGMENTER = {kind: "chat-sentence" if lang == "chat" else lang for kind, lang in KIND_LANGUAGE.items()}


def get_segmenter(kind_or_name: str, skill_set: SkillSet | str | None = None, **opts: Any) -> Segmenter:
    """Create a fresh segmenter for one generation.

    ``kind_or_name`` is a segmenter name (``minispec``, ``arm``, ``chat-sentence``,
    ``chat-paragraph``; ``chat`` = ``chat-sentence``) or a robot kind (``drone``/``sim`` ->
    minispec, ``arm`` -> arm, ``chat`` -> chat-sentence). ``skill_set`` is a SkillSet, a skill-set
    id of :data:`DEFAULT_SKILL_SETS`, or None for the kind's default. ``opts`` go to the
    segmenter's constructor (e.g. ``repair="clamp"``, ``group_size=2`` for the arm).
    """
    key = kind_or_name.strip().lower().replace("_", "-")
    name = _KIND_TO_SEGMENTER.get(key, key)
    if name not in SEGMENTER_NAMES:
        raise ValueError(
            f"unknown segmenter or robot kind {kind_or_name!r} "
            f"(segmenters: {', '.join(SEGMENTER_NAMES)}; kinds: {', '.join(_KIND_TO_SEGMENTER)})"
        )
    default_kind = {"minispec": "drone", "arm": "arm"}.get(name, "chat")
    if skill_set is None:
        skill_set = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[default_kind]]
    elif isinstance(skill_set, str):
        try:
            skill_set = DEFAULT_SKILL_SETS[skill_set]
        except KeyError:
            raise ValueError(f"unknown skill set {skill_set!r}") from None
    return _FACTORIES[name](skill_set, **opts)


def segment_all(segmenter: Segmenter, pieces: Iterable[str]) -> list[Segment]:
    """Feed all pieces then finish; return all segments (a convenience for tests and tools)."""
    out: list[Segment] = []
    for p in pieces:
        out.extend(segmenter.feed(p))
    out.extend(segmenter.finish())
    return out
