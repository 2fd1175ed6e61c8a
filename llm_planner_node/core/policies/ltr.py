"""``ltr``: learning to rank output lengths (paper 004).

Each goal gets one score at arrival (a rank key, lower = shorter output: the ListMLE ranker of
:mod:`llm_planner_node.predictors.ltr_ranker` live or offline; in the simulator the true length
with calibrated log-normal noise, ``sigma`` chosen so Kendall's tau-b is near the paper's).
Every step the whole queue, running generations included, is sorted by key and the batch filled
to its limit (running generations that fall out of it are preempted). Starvation: a generation
not scheduled for ``starvation_threshold`` consecutive steps is promoted to the front for
``priority_quantum`` steps (authors' scripts: 200 and 10). Whole plans, no segmentation.
"""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.batching import RunningView
from llm_planner_node.core.predictors import LengthPredictor, OracleLengths
from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import DEFAULT_MAX_BATCH, Decision, Policy, displaced, register


class Starvation:
    """LTR's starvation rule: per-generation counters of consecutive unscheduled steps."""

    def __init__(self, threshold: int, quantum: int) -> None:
        self.threshold, self.quantum = threshold, quantum
        self.waiting: dict[int, int] = {}
        self.promoted: dict[int, int] = {}  # gen id -> promoted steps left

    def keys(self, gen_ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Rank keys with promoted generations first (-inf)."""
        promo = np.fromiter((g in self.promoted for g in gen_ids.tolist()), bool, len(gen_ids))
        return np.where(promo, -np.inf, keys)

    def step(self, scheduled: set[int], waiting: np.ndarray) -> None:
        """Advance one step: ``scheduled`` ran, ``waiting`` ids stayed queued."""
        for g in list(self.promoted):
            self.promoted[g] -= 1
            if self.promoted[g] <= 0:
                del self.promoted[g]
        for g in scheduled:
            self.waiting.pop(g, None)
        for g in waiting.tolist():
            if g in scheduled:
                continue
            n = self.waiting.get(g, 0) + 1
            if n >= self.threshold:
                self.promoted[g] = self.quantum
                n = 0
            self.waiting[g] = n


@register
class LTR(Policy):
    name = "ltr"
    decides_on_empty_queue = True  # per-step state in decide
    suspends_at_segments = False
    dispatches_early = False

    def __init__(self, max_batch: int | None = None, starvation_threshold: int = 200,
                 priority_quantum: int = 10, sigma: float = 0.6) -> None:
        self.sigma = sigma
        self.slots = max_batch or DEFAULT_MAX_BATCH
        self.starvation = Starvation(starvation_threshold, priority_quantum)
        super().__init__(max_batch)

    def make_predictor(self, seed: int = 0) -> LengthPredictor:
        return OracleLengths(self.sigma, seed)

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return np.lexsort((q.seq, self.starvation.keys(q.gen_id, q.pred0)))

    def preempt(self, q: QueueView, running: RunningView, now: float) -> np.ndarray:
        qk = self.starvation.keys(q.gen_id, q.pred0)
        rk = self.starvation.keys(running.gen_id, running.pred0)
        return displaced(qk, rk, np.isfinite(rk), running.gen_id, self.slots)

    def decide(self, q: QueueView, running: RunningView, free_kv: int, now: float,
               net_latency: float) -> Decision:
        d = super().decide(q, running, free_kv, now, net_latency)
        self.starvation.step(set(d.admit.tolist()) | set(running.gen_id.tolist()) - set(d.preempt.tolist()),
                             q.gen_id)
        return d
