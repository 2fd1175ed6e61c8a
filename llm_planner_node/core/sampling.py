"""Sampling settings per plan language: plans are decoded greedily, chat answers may sample.

Greedy plans are what makes segmented generation token-identical to unsegmented (a resumed
generation continues exactly where it stopped). A repetition penalty is deterministic too (vLLM
applies it over the prompt and the output: the kept tokens of a resumed generation are in its
prompt, so the penalised set is the same). Temperature > 0 samples; a seeded request then gives
the same answer for the same prompt, but a resumed generation's draws restart, so segmented
chat answers are not the unsegmented ones token for token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from timely_robot.overrides import with_overrides


@dataclass(frozen=True)
class Sampling:
    """vLLM sampling of one plan language (temperature 0 = greedy)."""

    temperature: float = 0.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"sampling temperature must be in 0..2, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling top_p must be in (0, 1], got {self.top_p!r}")
        if not 1.0 <= self.repetition_penalty <= 2.0:
            raise ValueError(f"sampling repetition_penalty must be in 1..2, got {self.repetition_penalty!r}")

    def merged(self, overrides: Mapping[str, Any] | None) -> "Sampling":
        floats = {k: float(v) for k, v in overrides.items()} if overrides else None
        return with_overrides(self, floats, "sampling setting", "settings")


#: Defaults: plans greedy; chat greedy with a repetition penalty (a 135M instruct model repeated
#: "A robot is a robot is a robot." 13 times under plain greedy decoding).
DEFAULT_SAMPLING: dict[str, Sampling] = {
    "minispec": Sampling(),
    "arm": Sampling(),
    "chat": Sampling(repetition_penalty=1.2),
}
