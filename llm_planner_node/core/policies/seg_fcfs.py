"""``seg-fcfs`` baseline: segmented generation; the queue is FCFS by the goal's arrival, so a
suspended generation keeps its initial priority."""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import Policy, fcfs_order, register


@register
class SegmentedFCFS(Policy):
    name = "seg-fcfs"
    suspends_at_segments = True
    dispatches_early = True
    shared_admission = True

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return fcfs_order(q)

    def sort_keys(self, q: QueueView, now: float, net_latency: float) -> tuple[np.ndarray, ...]:
        return (q.seq,)
