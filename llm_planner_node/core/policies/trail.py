"""``trail``: Trail (paper 001) -- shortest predicted remaining processing time (SPRPT) with
limited preemption.

Running and queued generations are ranked together by predicted remaining output tokens
(:class:`~..predictors.SimTrailProbe` in the simulator: per-token bin probabilities refined with
Trail's Bayesian update; live: the hidden-state probe of :mod:`llm_planner_node.predictors`).
A running generation may be preempted (suspended, context kept as prefix cache; resumed later)
only while its age ``a`` (tokens generated) is below ``c * r``, ``r`` its initial prediction;
after that it runs to completion. ``c = 1`` is plain SPRPT; Trail's code default is 0.8.
Like the vLLM baseline it replaces, it generates whole plans (no segmentation).
"""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.batching import RunningView
from llm_planner_node.core.predictors import LengthBins, LengthPredictor, SimTrailProbe
from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import DEFAULT_MAX_BATCH, Policy, displaced, register


def preemptible(age: np.ndarray, initial: np.ndarray, c: float) -> np.ndarray:
    """Trail's limited preemption: a job may be preempted only while ``a < c * r``."""
    return age < c * initial


@register
class Trail(Policy):
    name = "trail"
    suspends_at_segments = False
    dispatches_early = False

    def __init__(self, max_batch: int | None = None, c: float = 0.8, bins: int = 10,
                 max_len: float = 512.0, accuracy: float = 0.6) -> None:
        self.c = c
        self.bins = LengthBins(bins, max_len)
        self.accuracy = accuracy
        self.slots = max_batch or DEFAULT_MAX_BATCH
        super().__init__(max_batch)

    def make_predictor(self, seed: int = 0) -> LengthPredictor:
        return SimTrailProbe(self.bins, self.accuracy, seed)

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return np.lexsort((q.seq, q.pred))  # shortest predicted remaining first

    def preempt(self, q: QueueView, running: RunningView, now: float) -> np.ndarray:
        return displaced(q.pred, running.pred, preemptible(running.age, running.pred0, self.c),
                         running.gen_id, self.slots)
