"""Incremental detokenisation: token ids in, newly completed text out (what segmenters eat).

Mirrors vLLM's incremental detokeniser: decode a small window of recent ids and emit only the
text beyond what was already emitted; hold back text that ends in an incomplete UTF-8 sequence
(U+FFFD). Cost per token is O(window), independent of the output length. Works with any
Hugging Face tokenizer (``decode``); ``ids`` never get re-tokenised.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, *, skip_special_tokens: bool = True, window: int = 6) -> None:
        self.tok = tokenizer
        self.skip = skip_special_tokens
        self.window = window
        self.ids: list[int] = []
        self._prefix = 0  # window start
        self._read = 0  # ids up to here are reflected in emitted text
        self.text = ""

    def push(self, token_id: int) -> str:
        """Add one generated token id; return the new text it completes (may be '')."""
        self.ids.append(int(token_id))
        prefix_text = self.tok.decode(self.ids[self._prefix : self._read], skip_special_tokens=self.skip)
        full = self.tok.decode(self.ids[self._prefix :], skip_special_tokens=self.skip)
        if len(full) > len(prefix_text) and not full.endswith("\ufffd"):
            new = full[len(prefix_text) :]
            self._read = len(self.ids)
            if self._read - self._prefix > self.window:
                self._prefix = self._read - self.window // 2
            self.text += new
            return new
        return ""

    def extend(self, ids: Iterable[int]) -> Iterator[str]:
        for t in ids:
            yield self.push(t)
