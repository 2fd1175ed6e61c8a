"""Arm skill language for Indy7-class manipulators, and its incremental segmenter.

The language is a flat sequence of skill calls, each terminated by ';'::

    plan      ::= { statement }
    statement ::= NAME [ '(' [ arg { ',' arg } ] ')' ] ';'
    arg       ::= INT | FLOAT | STRING | NAME          -- a bare NAME is a string (object label)

Example: ``home(); look(red_box); pick(red_box); place(red_box, tray); move_to(300, 0, 200);``

Names are the canonical skill names of the robot's skill set (``home``, ``move_to``, ``pick``,
``place``, ``push``, ``open_gripper``, ``close_gripper``, ``wipe``, ``look``, ``wait`` for
:data:`INDY7_ARM`). Numbers are millimetres/degrees/seconds as the skill set documents; every
argument is type- and range-checked (``move_to`` inside the workspace box, ``push`` 10-300 mm, ...).
There are no variables, conditions or loops: a failed ``look`` makes the adapter abort/replan.

Segmentation: each statement is a segment (``group_size=1``, default) or ``group_size``
consecutive statements form one segment. At finish the last statement may omit its ';' and a
partial group is flushed.
"""

from __future__ import annotations

from typing import Any

from timely_robot.skills import SkillSet
from timely_robot.plans import PlanSyntaxError, Repair, check_call
from llm_planner_node.segmenters.base import Segment, Segmenter, register_segmenter
from timely_robot.minispec import Call, _lex

__all__ = ["ArmSegmenter", "parse_arm_plan", "parse_arm_statement"]


def parse_arm_statement(
    text: str, skill_set: SkillSet, *, base: int = 0, repair: Repair = "none", repairs: list[str] | None = None
) -> Call:
    """Parse and validate one arm statement (``pick(red_box);``, trailing ';' optional)."""
    stmt = text.strip()
    toks = _lex(text, base, stmt)
    i = 0

    def err(msg: str, k: int) -> PlanSyntaxError:
        return PlanSyntaxError(msg, stmt, toks[k].start)

    def desc(k: int) -> str:
        return repr(toks[k].text) if toks[k].kind != "eof" else "end of text"

    if toks[0].kind != "name":
        raise err(f"expected a skill name, got {desc(0)}", 0)
    name_tok = toks[0]
    i = 1
    args: list[Any] = []
    if toks[i].kind == "op" and toks[i].text == "(":
        i += 1
        if not (toks[i].kind == "op" and toks[i].text == ")"):
            while True:
                t = toks[i]
                if t.kind == "str":
                    args.append(t.text[1:-1])
                elif t.kind == "num":
                    args.append(float(t.text) if "." in t.text else int(t.text))
                elif t.kind == "name":
                    args.append(t.text)
                else:
                    raise err(f"expected an argument of {name_tok.text}, got {desc(i)}", i)
                i += 1
                if toks[i].kind == "op" and toks[i].text == ",":
                    i += 1
                    continue
                break
        if not (toks[i].kind == "op" and toks[i].text == ")"):
            raise err(f"expected ')' to close the arguments of {name_tok.text}, got {desc(i)}", i)
        i += 1
    end = toks[i - 1].end
    if toks[i].kind == "op" and toks[i].text == ";":
        i += 1
    if toks[i].kind != "eof":
        raise err(f"expected ';' after {name_tok.text}(...), got {desc(i)}", i)
    sc = check_call(skill_set, name_tok.text, args, statement=stmt, offset=name_tok.start, repair=repair,
                    repairs=repairs)
    return Call(sc.name, sc.args, name_tok.text, span=(name_tok.start, end))


def parse_arm_plan(text: str, skill_set: SkillSet, *, repair: Repair = "none") -> list[Call]:
    """Parse a whole arm plan (statements separated by ';')."""
    seg = ArmSegmenter(skill_set, repair=repair)
    out = seg.feed(text) + seg.finish()
    return [st for s in out for st in s.statements]


class ArmSegmenter(Segmenter):
    """Incremental stop checker for the arm language: scans for ';' outside quotes only.

    Options: ``group_size`` (statements per segment, default 1), ``repair``,
    ``max_statement_chars`` (default 300), ``allow_unterminated_last`` (default True).
    """

    name = "arm"

    def __init__(
        self,
        skill_set: SkillSet,
        *,
        repair: Repair = "none",
        group_size: int = 1,
        max_statement_chars: int = 300,
        allow_unterminated_last: bool = True,
    ) -> None:
        super().__init__(skill_set, repair=repair)
        if group_size < 1:
            raise ValueError("group_size must be >= 1")
        self.group_size = group_size
        self.max_statement_chars = max_statement_chars
        self.allow_unterminated_last = allow_unterminated_last
        self._pending = ""
        self._pstart = 0
        self._scan = 0
        self._quote = ""
        self._group: list[tuple[Call, int, int, list[str]]] = []
        self._group_raw = ""

    def _feed(self, new_text: str) -> list[Segment]:
        self._pending += new_text
        p = self._pending
        i, n = self._scan, len(p)
        out: list[Segment] = []
        while i < n:
            c = p[i]
            if self._quote:
                if c == self._quote:
                    self._quote = ""
            elif c == "'" or c == '"':
                self._quote = c
            elif c == ";":
                seg = self._stmt_done(i + 1)
                if seg is not None:
                    out.append(seg)
                p, n, i = self._pending, len(self._pending), -1
            i += 1
        self._scan = i
        if len(self._pending) > self.max_statement_chars:
            raise PlanSyntaxError(
                f"statement longer than {self.max_statement_chars} characters without ';'",
                self._pending.strip()[:80] + "...", self._pstart,
            )
        return out

    def _stmt_done(self, k: int) -> Segment | None:
        raw = self._pending[:k]
        start = self._pstart
        self._pending = self._pending[k:]
        self._pstart = start + k
        self._scan = 0
        if raw.strip() in ("", ";"):
            if self._group:
                self._group_raw += raw
            return None
        repairs: list[str] = []
        call = parse_arm_statement(raw, self.skill_set, base=start, repair=self.repair, repairs=repairs)
        lead = len(raw) - len(raw.lstrip())
        self._group.append((call, start + lead, start + len(raw.rstrip()), repairs))
        self._group_raw += raw
        if len(self._group) >= self.group_size:
            return self._flush_group()
        return None

    def _flush_group(self) -> Segment | None:
        if not self._group:
            return None
        g, self._group = self._group, []
        raw, self._group_raw = self._group_raw, ""
        start, end = g[0][1], g[-1][2]
        calls = [c for c, *_ in g]
        repairs = [r for *_, rs in g for r in rs]
        return self._emit(raw.strip(), start, end, [c.skill_call for c in calls], calls, repairs)

    def _finish(self) -> list[Segment]:
        out: list[Segment] = []
        if self._quote:
            raise PlanSyntaxError("plan ended inside a string", self._pending.strip(), self._pstart)
        if self._pending.strip():
            if not self.allow_unterminated_last:
                raise PlanSyntaxError("plan ended without ';'", self._pending.strip(), self._pstart)
            seg = self._stmt_done(len(self._pending))
            if seg is not None:
                out.append(seg)
        seg = self._flush_group()
        if seg is not None:
            out.append(seg)
        return out


register_segmenter("arm", ArmSegmenter)
