"""``lamps``: LAMPS (paper 003) with robot actions as its API calls.

A generation suspended at a segment boundary is paused for the robot's execution of that
segment (a blocking call: it becomes schedulable again only when the robot reports the segment
finished). Before it waits, its KV context is handled by the strategy of least memory waste
(INFERCEPT Eqs. 1-3, in KV-token seconds, ``M = 1`` token):

- preserve: ``T_call * C_i``;
- discard: ``T_fwd(C_i) * (C_i + C_other)`` (recompute; the others wait meanwhile);
- swap: ``2 * T_swap(C_i) * C_batch`` (out and back in; the batch stalls).

Queued generations are ranked by predicted memory consumption over time, lowest first [R]:
``tau * (C * L + L^2 / 2)`` for the ``L`` tokens until the next call (predicted) plus that call's
waste under the chosen strategy. Starvation: a ready generation unscheduled for
``starvation_threshold`` steps (100) goes to the head and stays there until it completes.

Admission is the baseline's (FixedBatch, head-of-line on KV memory) except when nothing runs:
then :func:`first_fit` avoids the deadlock pinned contexts can cause.

``handling`` forces one strategy (``preserve`` with ``rank="fcfs"`` is INFERCEPT-like
preserve-everything, the comparison baseline).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llm_planner_node.core.batching import RunningView
from llm_planner_node.core.predictors import LengthPredictor, SegmentLengths
from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import Decision, Pause, Policy, fcfs_order, register

# Default engine costs = the simulated engine's Llama3-8B / RTX 4090 calibration
# (engines/sim_engine.py): prefill 0.10617 ms per token; host<->GPU copy 7.3 us per token.
PREFILL_S_PER_TOKEN = (0.328 - 0.0218) / 2884
SWAP_S_PER_TOKEN = 0.0095 / 1300
TOKEN_TIME_S = 0.022
HANDLINGS = ("auto", "preserve", "discard", "swap")


@dataclass(frozen=True)
class WasteModel:
    """INFERCEPT's waste formulas (token-seconds of KV memory)."""

    prefill_s_per_token: float = PREFILL_S_PER_TOKEN
    swap_s_per_token: float = SWAP_S_PER_TOKEN

    def preserve(self, t_call: float, c: float) -> float:
        """Eq. 1: ``T_call * C_i * M``."""
        return t_call * c

    def discard(self, c: float, c_other: float) -> float:
        """Eq. 2: ``T_fwd(C_i) * (C_i + C_other) * M``, ``T_fwd(C) = b * C``."""
        return self.prefill_s_per_token * c * (c + c_other)

    def swap(self, c: float, c_batch: float) -> float:
        """Eq. 3: ``2 * T_swap(C_i) * C_batch * M``, ``T_swap(C) = s * C``."""
        return 2 * self.swap_s_per_token * c * c_batch

    def wastes(self, t_call: float, c: float, c_other: float) -> dict[str, float]:
        return {"preserve": self.preserve(t_call, c), "discard": self.discard(c, c_other),
                "swap": self.swap(c, c + c_other)}

    def best(self, t_call: float, c: float, c_other: float) -> tuple[str, float]:
        """The strategy of least waste (ties: preserve, discard, swap) and its waste."""
        w = self.wastes(t_call, c, c_other)
        mode = min(w, key=w.__getitem__)
        return mode, w[mode]


def memory_area(ctx: np.ndarray, tokens: np.ndarray, token_time_s: float) -> np.ndarray:
    """Memory over time while generating ``L`` tokens from context ``C`` [R]:
    ``tau * sum_{j<L} (C + j) ~ tau * (C * L + L^2 / 2)``."""
    return token_time_s * (ctx * tokens + tokens ** 2 / 2)


def first_fit(order: np.ndarray, kv_need: np.ndarray, free_kv: int) -> np.ndarray:
    """Rows of ``order`` admitted greedily, skipping those that do not fit. Used only when the
    engine would otherwise idle: pinned (preserved) contexts can hold the memory a starved head
    of the queue needs, while their owners, ready behind it, would release it by resuming."""
    out, left = [], free_kv
    for i in order.tolist():
        if kv_need[i] <= left:
            out.append(i)
            left -= int(kv_need[i])
    return np.array(out, dtype=np.int64)


@register
class LAMPS(Policy):
    name = "lamps"
    decides_on_empty_queue = True  # per-step state in decide
    suspends_at_segments = True
    dispatches_early = True

    def __init__(self, max_batch: int | None = None, handling: str = "auto", rank: str = "memory",
                 starvation_threshold: int = 100, sigma: float = 0.3,
                 waste: WasteModel = WasteModel(), token_time_s: float = TOKEN_TIME_S) -> None:
        if handling not in HANDLINGS or rank not in ("memory", "fcfs"):
            raise ValueError(f"handling must be one of {HANDLINGS} and rank memory|fcfs")
        self.handling, self.rank = handling, rank
        self.starvation_threshold = starvation_threshold
        self.sigma = sigma
        self.waste = waste
        self.token_time_s = token_time_s
        self._unscheduled: dict[int, int] = {}
        self._starved: set[int] = set()
        self._running_ctx = 0
        super().__init__(max_batch)

    def make_predictor(self, seed: int = 0) -> LengthPredictor:
        return SegmentLengths(self.sigma, seed)

    def call_time(self, pause: Pause) -> float:
        """How long the context would sit unused: until the robot action ends."""
        return max(0.0, pause.until_needed_s)

    def retention(self, pause: Pause) -> str | None:
        if self.handling != "auto":
            return self.handling
        return self.waste.best(self.call_time(pause), pause.ctx, pause.other_ctx)[0]

    def scores(self, q: QueueView) -> np.ndarray:
        """Predicted memory over time until the next call, plus that call's least waste."""
        tokens = np.maximum(q.pred, 1.0)
        at_call = q.ctx + tokens
        waste = np.array([self.waste.best(float(t), float(c), self._running_ctx)[1]
                          for t, c in zip(q.call_s.tolist(), at_call.tolist(), strict=True)])
        return memory_area(q.ctx.astype(float), tokens, self.token_time_s) + waste

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        if self.rank == "fcfs":
            base = fcfs_order(q)
        else:
            base = np.lexsort((q.seq, self.scores(q)))
        starved = np.fromiter((g in self._starved for g in q.gen_id[base].tolist()), bool, len(base))
        # ready before waiting-on-the-robot, then starved first, then the base ranking
        return base[np.lexsort((np.arange(len(base)), ~starved, q.ready[base] == 0))]

    def decide(self, q: QueueView, running: RunningView, free_kv: int, now: float,
               net_latency: float) -> Decision:
        self._running_ctx = int(running.ctx.sum()) if running.ctx is not None else 0
        alive = set(q.gen_id.tolist()) | set(running.gen_id.tolist())
        self._starved &= alive
        self._unscheduled = {g: n for g, n in self._unscheduled.items() if g in alive}
        if len(q) == 0:
            return Decision(np.zeros(0, np.int64))
        order = self.order(q, now, net_latency)
        order = order[q.ready[order] == 1]
        rows = self.admission.select(order, q, running, free_kv, now, net_latency)
        if len(rows) == 0 and len(running) == 0:
            rows = first_fit(order, q.kv_need, free_kv)
        admitted = set(q.gen_id[rows].tolist())
        for g in q.gen_id[order].tolist():
            if g in admitted:
                self._unscheduled.pop(g, None)
                continue
            n = self._unscheduled.get(g, 0) + 1
            self._unscheduled[g] = n
            if n >= self.starvation_threshold:
                self._starved.add(g)
        return Decision(q.gen_id[rows])
