"""``seg-edf`` baseline: segmented generation ordered by the goal's initial deadline
(arrival + ERT), kept by suspended generations; ties by arrival order."""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import Policy, register


@register
class SegmentedEDF(Policy):
    name = "seg-edf"
    suspends_at_segments = True
    dispatches_early = True
    shared_admission = True

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return np.lexsort(self.sort_keys(q, now, net_latency))

    def sort_keys(self, q: QueueView, now: float, net_latency: float) -> tuple[np.ndarray, ...]:
        return (q.seq, q.arrival + q.ert)
