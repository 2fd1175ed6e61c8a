"""``hybrid``: hybrid offline-online scheduling (paper 002) on J client slots.

- Clients: ``max_batch`` = J slots (the paper's 200); a client serves one generation at a time.
- Offline: with the workload known, requests are assigned to clients minimising the makespan
  (P||Cmax). ``plan`` (request id -> client) comes from the time-limited MIP of
  :mod:`timely_tools.evaluation.hybrid_offline` (highspy); without one, arrivals are assigned
  online by LPT (longest first to the least-loaded client, :func:`lpt_assign`).
- Online request scheduling (Alg. 1): each client's list is ordered by ``N^p + N^d``, longest
  first [? order: the prose suggests it]; an idle client with an empty list takes the longest
  pending request from the busiest client (most remaining tokens).
- Online iteration scheduling: the engine's prefill-vs-decode marginal-cost rule
  (``engine_iteration = "pd-marginal"``, see engines/sim_engine.py).

Loads are in tokens (prompt + predicted output): the simulator feeds the trace's true length
(the paper's known workload; ``sigma`` adds noise). Whole plans, no segmentation.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from llm_planner_node.core.batching import RunningView, kv_prefix
from llm_planner_node.core.predictors import LengthPredictor, OracleLengths
from llm_planner_node.core.queue import QueueView
from llm_planner_node.core.policies.base import DEFAULT_MAX_BATCH, Decision, Policy, register


def lpt_assign(sizes: np.ndarray, loads: np.ndarray) -> np.ndarray:
    """Longest processing time first: each job, largest first, to the least-loaded client
    (Graham's 4/3-approximation of P||Cmax); ``loads`` is updated in place."""
    out = np.zeros(len(sizes), dtype=np.int64)
    for i in np.argsort(-sizes, kind="stable").tolist():
        j = int(np.argmin(loads))
        out[i] = j
        loads[j] += sizes[i]
    return out


@register
class Hybrid(Policy):
    name = "hybrid"
    decides_on_empty_queue = True  # per-step state in decide
    suspends_at_segments = False
    dispatches_early = False
    engine_iteration = "pd-marginal"

    def __init__(self, max_batch: int | None = None, plan: Mapping[int, int] | None = None,
                 sigma: float = 0.0) -> None:
        self.clients = max_batch or DEFAULT_MAX_BATCH
        self.plan = dict(plan or {})
        self.sigma = sigma
        self._list: list[dict[int, float]] = [{} for _ in range(self.clients)]  # gen -> size
        self._serving: list[int | None] = [None] * self.clients
        super().__init__(max_batch)

    def make_predictor(self, seed: int = 0) -> LengthPredictor:
        return OracleLengths(self.sigma, seed)

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        return np.lexsort((q.seq, -(q.ctx + q.pred)))  # longest first

    def _assign_new(self, q: QueueView, running: RunningView) -> None:
        """Put new queued requests on clients: the offline plan's, else online LPT."""
        known = {g for lst in self._list for g in lst} | {g for g in self._serving if g is not None}
        new = [i for i, g in enumerate(q.gen_id.tolist()) if g not in known]
        if not new:
            return
        left = dict(zip(running.gen_id.tolist(), running.pred.tolist())) if running.pred is not None else {}
        loads = np.array([sum(lst.values()) + left.get(g, 0.0)
                          for lst, g in zip(self._list, self._serving, strict=True)])
        planned = [i for i in new if int(q.gen_id[i]) in self.plan]
        online = [i for i in new if int(q.gen_id[i]) not in self.plan]
        where = {i: self.plan[int(q.gen_id[i])] % self.clients for i in planned}
        where.update(zip(online, lpt_assign((q.ctx + q.pred)[online].astype(float), loads).tolist()))
        for i in new:
            self._list[where[i]][int(q.gen_id[i])] = float(q.ctx[i] + q.pred[i])

    def _next_for(self, j: int) -> int | None:
        """Client j's next request: its longest listed one, else steal from the busiest."""
        if not self._list[j]:
            donor = int(np.argmax([sum(lst.values()) for lst in self._list]))
            if not self._list[donor]:
                return None
            g = max(self._list[donor], key=self._list[donor].__getitem__)
            del self._list[donor][g]
            return g
        g = max(self._list[j], key=self._list[j].__getitem__)
        del self._list[j][g]
        return g

    def decide(self, q: QueueView, running: RunningView, free_kv: int, now: float,
               net_latency: float) -> Decision:
        live = set(running.gen_id.tolist())
        for j, g in enumerate(self._serving):
            if g is not None and g not in live:  # finished (or cancelled): client is idle
                self._serving[j] = None
        row_of = {int(g): i for i, g in enumerate(q.gen_id.tolist())}
        for lst in self._list:  # drop requests no longer queued (cancelled)
            for g in [g for g in lst if g not in row_of]:
                del lst[g]
        self._assign_new(q, running)
        picks: list[int] = []
        for j in range(self.clients):
            if self._serving[j] is not None:
                continue
            g = self._next_for(j)
            if g is None:
                break
            self._serving[j] = g
            picks.append(row_of[g])
        rows = kv_prefix(np.array(picks, dtype=np.int64), q.kv_need, free_kv)
        for i in picks[len(rows):]:  # did not fit in KV memory: back to its client's list
            g = int(q.gen_id[i])
            j = self._serving.index(g)
            self._serving[j] = None
            self._list[j][g] = float(q.ctx[i] + q.pred[i])
        return Decision(q.gen_id[rows])
