"""``timelyllm``: segmented generation, PUD priorities (Eq. 4) recomputed for the current time at
every fetch, and the shared latency-guided batch admission (Section 4.4; ``admission``:
``literal`` as written in the paper or ``improved``, see :mod:`..batching`).

``max_batch`` switches to a fixed maximum batch instead (the paper's batch-size sweep).

Ordering cost: Eq. 4 depends on the current time for every queued generation (W and L both
move with t, and two generations' priorities can cross), so no static key exists that a heap
could keep. Each decision computes all priorities with a few vectorised operations (O(n)) and
orders only the top rows the admission can take (:func:`~..batching.top_rows`: partial
selection + sort of the candidates, identical to the full sort's prefix), not the whole queue.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llm_planner_node.core.batching import Admission, LatencyGuided
from llm_planner_node.core.priority import DEFAULT_SLACK_FLOOR_S, pud_priorities
from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import Policy, register


@register
class TimelyLLM(Policy):
    name = "timelyllm"
    suspends_at_segments = True
    dispatches_early = True
    shared_admission = True

    def __init__(self, max_batch: int | None = None, slack_floor_s: float = DEFAULT_SLACK_FLOOR_S,
                 per_step: int | None = None, admission: str | LatencyGuided | None = None) -> None:
        self.slack_floor_s = slack_floor_s
        self.per_step = per_step
        super().__init__(max_batch, admission)

    def make_admission(self, max_batch: int | None,
                       admission: str | LatencyGuided | None = None) -> Admission:
        adm = super().make_admission(max_batch, admission)
        if self.per_step is not None and isinstance(adm, LatencyGuided):
            adm = replace(adm, per_step=self.per_step)
        return adm

    def priorities(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        """Eq. 4 for every queued generation at time ``now``."""
        return pud_priorities(now, q.ref, q.ert_k, q.alpha, q.beta, q.g, net_latency,
                              self.slack_floor_s)

    def sort_keys(self, q: QueueView, now: float, net_latency: float) -> tuple[np.ndarray, ...]:
        # highest priority first; equal priorities by arrival order
        return (q.seq, -self.priorities(q, now, net_latency))

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return np.lexsort(self.sort_keys(q, now, net_latency))
