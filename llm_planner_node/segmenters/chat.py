"""Chat segmentation: sentences (TimelyLLM-Sen) or paragraphs (TimelyLLM-Para).

Sentence boundary: one of ``.``, ``!``, ``?`` (runs such as ``?!`` or ``...`` included), then any
closing quotes/brackets, then **whitespace**. A '.' does not end a sentence when the word before
it is a known abbreviation (Mr., Dr., e.g., etc., ...; case-insensitive) or a single letter
(initials such as "J. K."); decimals (3.14) and URLs never have whitespace after the '.'.
A line break also ends a sentence (titles, list items). Paragraph boundary: a blank line
(a newline followed by optional spaces and another newline). The boundary is confirmed by the
first whitespace character after the punctuation, so no extra lookahead token is needed.

Each segment becomes ``SkillCall('say', (text,))`` validated by the chat skill set; its ``end``
offset is just after the punctuation (sentence) or after the paragraph's last non-space char.
At finish the remaining text (if any) is flushed as a last segment.
"""

from __future__ import annotations

import re
from typing import Literal as TLiteral

from timely_robot.skills import SkillCall, SkillSet
from timely_robot.plans import PlanSyntaxError, Repair, check_call
from llm_planner_node.segmenters.base import Segment, Segmenter, register_segmenter

ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof sr jr st mt vs etc e.g i.e eg ie cf al approx dept est fig inc ltd co corp
    no vol ch p pp a.m p.m am pm u.s u.k jan feb mar apr jun jul aug sep sept oct nov dec""".split()
)
_CLOSERS = "\"')]}\u201d\u2019"
_TERMINALS = ".!?"
_INTERESTING = re.compile(r"[.!?\n]")
_PREV_WORD = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")


class ChatSegmenter(Segmenter):
    """Incremental sentence/paragraph segmenter (``mode`` = "sentence" | "paragraph").

    Options: ``max_segment_chars`` (a longer sentence/paragraph is cut at the last space before
    the limit so a reader is never starved; 2000), ``abbreviations`` (replace the default set).
    """

    def __init__(
        self,
        skill_set: SkillSet,
        *,
        mode: TLiteral["sentence", "paragraph"] = "sentence",
        repair: Repair = "none",
        max_segment_chars: int = 2000,
        abbreviations: frozenset[str] | None = None,
    ) -> None:
        super().__init__(skill_set, repair=repair)
        if mode not in ("sentence", "paragraph"):
            raise ValueError(f"mode must be 'sentence' or 'paragraph', got {mode!r}")
        self.mode = mode
        self.name = f"chat-{mode}"
        self.max_segment_chars = max_segment_chars
        self.abbreviations = ABBREVIATIONS if abbreviations is None else abbreviations
        self._pending = ""
        self._pstart = 0
        self._scan = 0
        self._say = "say" if "say" in skill_set else skill_set.names()[0]

    # -- sentence mode helpers --
    def _sentence_end(self, p: str, i: int) -> int:
        """If p[i] (a terminal) ends a sentence confirmed by whitespace, return the end index
        (after closers); -1 if not a boundary; -2 if more text is needed to decide."""
        j = i
        n = len(p)
        while j < n and p[j] in _TERMINALS:
            j += 1
        while j < n and p[j] in _CLOSERS:
            j += 1
        if j >= n:
            return -2
        if not p[j].isspace():
            return -1
        if p[i] == "." and j - i == 1 or (p[i] == "." and p[i:j].rstrip(_CLOSERS) == "."):
            m = _PREV_WORD.search(p, 0, i + 1) if i - 12 < 0 else _PREV_WORD.search(p, i - 12, i + 1)
            if m:
                w = m.group(1).lower()
                if w in self.abbreviations or (len(w) == 1 and w.isalpha()):
                    return -1
        return j

    def _feed(self, new_text: str) -> list[Segment]:
        self._pending += new_text
        out: list[Segment] = []
        p = self._pending
        i, n = self._scan, len(p)
        while i < n:
            if self.mode == "paragraph":
                k = p.find("\n", i)
                if k < 0:
                    i = n
                    break
                j = k + 1
                while j < n and p[j] in " \t\r":
                    j += 1
                if j >= n:
                    i = k  # undecided: rescan from this newline when more text arrives
                    break
                if p[j] == "\n" and p[:k].strip():
                    seg = self._cut(k)
                    out.append(seg)
                    p, n, i = self._pending, len(self._pending), 0
                    continue
                i = j
                continue
            m = _INTERESTING.search(p, i)
            if m is None:
                i = n
                break
            i = m.start()
            if p[i] == "\n":
                if p[:i].strip():
                    out.append(self._cut(i))
                    p, n, i = self._pending, len(self._pending), 0
                else:
                    i += 1
                continue
            e = self._sentence_end(p, i)
            if e == -2:
                break  # rescan this terminal when more text arrives
            if e == -1:
                i += 1
                while i < n and p[i] in _TERMINALS:
                    i += 1
                continue
            out.append(self._cut(e))
            p, n, i = self._pending, len(self._pending), 0
        self._scan = i
        while len(self._pending) > self.max_segment_chars:
            cut = self._pending.rfind(" ", 0, self.max_segment_chars)
            if cut <= 0 or not self._pending[:cut].strip():
                cut = self.max_segment_chars
            out.append(self._cut(cut))
        return out

    def _cut(self, k: int) -> Segment:
        raw = self._pending[:k]
        start = self._pstart
        self._pending = self._pending[k:]
        self._pstart = start + k
        self._scan = 0
        text = raw.strip()
        lead = len(raw) - len(raw.lstrip())
        call = check_call(self.skill_set, self._say, [text], statement=text[:80], offset=start + lead)
        # keep the text verbatim (SkillSet coercion strips quote characters from str arguments)
        call = SkillCall(call.name, (text,))
        return self._emit(text, start + lead, start + len(raw.rstrip()), [call])

    def _finish(self) -> list[Segment]:
        if self._pending.strip():
            return [self._cut(len(self._pending))]
        return []


__all__ = ["ChatSegmenter", "ABBREVIATIONS", "PlanSyntaxError"]


register_segmenter("chat-sentence", lambda skill_set, **opts: ChatSegmenter(skill_set, mode="sentence", **opts))
register_segmenter("chat-paragraph", lambda skill_set, **opts: ChatSegmenter(skill_set, mode="paragraph", **opts))
