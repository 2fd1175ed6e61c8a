"""``timelyllm``: segmented generation, PUD priorities (Eq. 4) recomputed for the current time at
every fetch, and latency-guided batch admission (Section 4.4).

``max_batch`` switches to a fixed maximum batch instead (the paper's batch-size sweep).
"""

from __future__ import annotations

import numpy as np

from ..batching import Admission, FixedBatch, LatencyGuided
from ..priority import DEFAULT_SLACK_FLOOR_S, pud_priorities
from ..queue import QueueView
from .base import Policy, register


@register
class TimelyLLM(Policy):
    name = "timelyllm"
    suspends_at_segments = True
    dispatches_early = True

    def __init__(self, max_batch: int | None = None, slack_floor_s: float = DEFAULT_SLACK_FLOOR_S,
                 per_step: int = 4) -> None:
        self.slack_floor_s = slack_floor_s
        self.per_step = per_step
        super().__init__(max_batch)

    def make_admission(self, max_batch: int | None) -> Admission:
        return LatencyGuided(self.per_step) if max_batch is None else FixedBatch(max_batch)

    def priorities(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        """Eq. 4 for every queued generation at time ``now``."""
        return pud_priorities(now, q.ref, q.ert_k, q.alpha, q.beta, q.g, net_latency,
                              self.slack_floor_s)

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        # highest priority first; equal priorities by arrival order
        return np.lexsort((q.seq, -self.priorities(q, now, net_latency)))
