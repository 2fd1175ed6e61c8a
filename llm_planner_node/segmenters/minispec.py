"""MiniSpec segmentation (TimelyLLM 4.1 on TypeFly's plan language): the incremental segmenter
that emits each complete top-level statement of a generation as an executable segment; the
language itself (grammar, parser, AST) is :mod:`timely_robot.minispec`.

Segmentation (:class:`MiniSpecSegmenter`): a segment is one complete **top-level** statement.
A simple statement is complete at its ';'. A block (loop/if) is complete only when closed: at the
';' right after its '}' (segment includes the ';'), or, without ';', when the next non-space
character after '}' is not ':' (an else branch) — the segment then ends at the '}'. Blocks are
never cut in half.
"""

from __future__ import annotations

import re

from timely_robot.skills import SkillSet
from timely_robot.plans import PlanSyntaxError, Repair, UnsafePlanError
from llm_planner_node.segmenters.base import Segment, Segmenter, register_segmenter
from timely_robot.minispec import iter_calls, parse_statement

_SPECIAL = re.compile(r"[;{}'\"]")
_NONSPACE = re.compile(r"\S")
_STMT_START = re.compile(r"[A-Za-z_?\-0-9;]")
_HEAD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class MiniSpecSegmenter(Segmenter):
    """Incremental MiniSpec stop checker: one segment per complete top-level statement.

    Per character it only tracks block depth, string quotes and statement start; a statement's
    text is parsed (and validated) once, when it is complete. Cost: amortised O(new text).

    Options: ``repair`` ("none" | "clamp"), ``max_loop`` (largest loop count, 1000),
    ``max_statement_chars`` (a statement that grows longer than this without completing fails the
    plan; 2000), ``allow_unterminated_last`` (accept a last statement without ';' at finish;
    True, as TypeFly does).
    """

    name = "minispec"

    def __init__(
        self,
        skill_set: SkillSet,
        *,
        repair: Repair = "none",
        max_loop: int = 1000,
        max_statement_chars: int = 2000,
        allow_unterminated_last: bool = True,
    ) -> None:
        super().__init__(skill_set, repair=repair)
        self.max_loop = max_loop
        self.max_statement_chars = max_statement_chars
        self.allow_unterminated_last = allow_unterminated_last
        self._pending = ""  # text not yet emitted (starts at absolute offset self._pstart)
        self._pstart = 0
        self._scan = 0  # index into _pending of the next char to scan
        self._depth = 0
        self._quote = ""  # current string quote char, or ""
        self._after_block = -1  # >=0: a top-level block closed at this pending index
        self._started = False  # pending holds a non-space char of the current statement
        self._head = -1  # pending index of the statement's first name, until it is checked
        self._defined: set[str] = set()

    def _feed(self, new_text: str) -> list[Segment]:
        self._pending += new_text
        out: list[Segment] = []
        p = self._pending
        i = self._scan
        n = len(p)
        while i < n:
            if self._after_block >= 0:
                m = _NONSPACE.search(p, i)
                if m is None:
                    i = n
                    break
                i = m.start()
                c = p[i]
                if c == ":":  # else branch follows: the block continues
                    self._after_block = -1
                    i += 1
                    continue
                seg = self._cut(i + 1 if c == ";" else self._after_block)
                if seg is not None:
                    out.append(seg)
                p, n, i = self._pending, len(self._pending), 0
                continue
            if not self._started:
                m = _NONSPACE.search(p, i)
                if m is None:
                    i = n
                    break
                i = m.start()
                if not _STMT_START.match(p, i):
                    raise PlanSyntaxError(
                        f"unexpected {p[i]!r} at the start of a statement", p[i : i + 20], self._pstart + i
                    )
                self._started = True
                self._head = i if p[i].isalpha() else -1
            if self._head >= 0:
                # fail fast on prose / unknown skills: check the statement's first name once complete
                m = _HEAD_NAME.match(p, self._head)
                if m.end() < n:
                    name = m.group()
                    self._head = -1
                    if name not in self.skill_set:
                        raise UnsafePlanError(
                            f"skill '{name}' is not in skill set '{self.skill_set.id}'",
                            p[m.start() : m.end() + 10].strip(),
                            self._pstart + m.start(),
                        )
            if self._quote:
                j = p.find(self._quote, i)
                if j < 0:
                    i = n
                    break
                self._quote = ""
                i = j + 1
                continue
            m = _SPECIAL.search(p, i)
            if m is None:
                i = n
                break
            i = m.start()
            c = p[i]
            if c == "'" or c == '"':
                self._quote = c
                i += 1
            elif c == "{":
                self._depth += 1
                i += 1
            elif c == "}":
                self._depth -= 1
                if self._depth < 0:
                    raise PlanSyntaxError("unbalanced '}'", p[: i + 1].strip(), self._pstart + i)
                i += 1
                if self._depth == 0:
                    self._after_block = i
            else:  # ';'
                i += 1
                if self._depth == 0:
                    seg = self._cut(i)
                    if seg is not None:
                        out.append(seg)
                    p, n, i = self._pending, len(self._pending), 0
        self._scan = i
        if len(self._pending) > self.max_statement_chars:
            raise PlanSyntaxError(
                f"statement longer than {self.max_statement_chars} characters without completing",
                self._pending.strip()[:80] + "...",
                self._pstart,
            )
        return out

    def _cut(self, k: int) -> Segment | None:
        """Emit pending[:k] as one statement segment; keep the rest pending.

        An empty statement (a lone ';') is consumed silently and returns None."""
        raw = self._pending[:k]
        start = self._pstart
        if raw.strip() in ("", ";"):
            self._pending = self._pending[k:]
            self._pstart = start + k
            self._scan = 0
            self._after_block = -1
            self._started = False
            return None
        st, repairs = parse_statement(
            raw, self.skill_set, base=start, defined=self._defined, max_loop=self.max_loop, repair=self.repair
        )
        lead = len(raw) - len(raw.lstrip())
        seg = self._emit(
            raw.strip(),
            start + lead,
            start + len(raw.rstrip()),
            [c.skill_call for c in iter_calls(st)],
            (st,),
            repairs,
        )
        self._pending = self._pending[k:]
        self._pstart = start + k
        self._scan = 0
        self._after_block = -1
        self._started = False
        self._head = -1
        return seg

    def _finish(self) -> list[Segment]:
        out: list[Segment] = []
        if self._after_block >= 0:  # only whitespace can follow the closed block here
            seg = self._cut(self._after_block)
            if seg is not None:
                out.append(seg)
        if self._quote:
            raise PlanSyntaxError("plan ended inside a string", self._pending.strip(), self._pstart)
        if self._depth > 0:
            raise PlanSyntaxError("plan ended inside an unclosed block '{'", self._pending.strip(), self._pstart)
        if self._pending.strip():
            if not self.allow_unterminated_last:
                raise PlanSyntaxError("plan ended without ';'", self._pending.strip(), self._pstart)
            seg = self._cut(len(self._pending))
            if seg is not None:
                out.append(seg)
        return out


register_segmenter("minispec", MiniSpecSegmenter)
