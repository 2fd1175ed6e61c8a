"""``timelyllm-trail``: TimelyLLM with G from a per-generation length prediction.

Eq. 4 uses G(s_k), the generation time of the next segment (TimelyLLM: a profiled average per
robot kind). Here ``G = predicted tokens until the segment boundary x profiled seconds per
token``, predicted per generation and refined per token (simulator: the true count with
log-normal noise ``sigma``; live: a remaining-length probe trained on segment boundaries), so
long arm segments and short drone ones are told apart inside one kind. L follows from G.
"""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.predictors import LengthPredictor, SegmentLengths
from llm_planner_node.core.priority import pud_priorities
from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import register
from llm_planner_node.core.policies.timelyllm import TimelyLLM


@register
class TimelyLLMTrail(TimelyLLM):
    name = "timelyllm-trail"

    def __init__(self, max_batch: int | None = None, sigma: float = 0.3,
                 token_time_s: float = 0.022, **params: float) -> None:
        self.sigma = sigma
        self.token_time_s = token_time_s
        super().__init__(max_batch, **params)

    def make_predictor(self, seed: int = 0) -> LengthPredictor:
        return SegmentLengths(self.sigma, seed)

    def priorities(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        g = np.where(q.pred > 0, q.pred * self.token_time_s, q.g)
        return pud_priorities(now, q.ref, q.ert_k, q.alpha, q.beta, g, net_latency, self.slack_floor_s)
