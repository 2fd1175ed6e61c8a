"""``vllm-stream`` baseline (TypeFly-style stream interpretation): FCFS, the whole plan is
generated non-stop, and each segment is dispatched the moment it is detected."""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import Policy, fcfs_order, register


@register
class VLLMStream(Policy):
    name = "vllm-stream"
    suspends_at_segments = False
    dispatches_early = True
    shared_admission = True

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return fcfs_order(q)

    def sort_keys(self, q: QueueView, now: float, net_latency: float) -> tuple[np.ndarray, ...]:
        return (q.seq,)
