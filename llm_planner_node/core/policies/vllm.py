"""``vllm`` baseline: FCFS continuous batching; the whole plan is generated, then dispatched."""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import Policy, fcfs_order, register


@register
class VLLM(Policy):
    name = "vllm"
    suspends_at_segments = False
    dispatches_early = False

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return fcfs_order(q)

    def sort_keys(self, q: QueueView, now: float, net_latency: float) -> tuple[np.ndarray, ...]:
        return (q.seq,)
