"""Best-found schedule utility for small workloads: a search, not a bound.

What it finds is a feasible schedule, hence a *lower* bound on the optimum; every gap to it is
>= 0 by construction. The real upper bound is :mod:`.bound_milp` (``timely-fleet eval --bound``).

The search space: a fixed priority order over the goals (all n! permutations, so keep n <= 7)
x a maximum batch size, run in the simulator with segmented generation and early dispatch
(a goal's generations always have the priority of its rank; suspended generations keep it).
The same simulator, engine model and robot execution draws as the policies are used, and the
named policies' own schedules are included as candidates, so the result is >= every policy.

This is *best-found*, not provably optimal: the optimum over all (non-priority-order,
time-varying) schedules may be higher. Objective: total time utility sum_i TUF0_i(response_i)
(the reported "mean utility" x n); ``objective="segment"`` uses Eq. 3's segment utility.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from llm_planner_node.core.metrics import request_outcome
from llm_planner_node.core.planner import PlannerConfig
from llm_planner_node.core.policies import Policy
from llm_planner_node.core.queue import QueueView
from llm_planner_node.engines.sim_engine import SimEngineConfig
from timely_tools.sim.simulation import SimResult, simulate
from timely_tools.sim.workload import Arrival


class FixedOrderPolicy(Policy):
    """Segmented generation, dispatch early; priority = the goal's rank in ``order``.

    ``order[r]`` is the arrival index (submission order) of the goal with rank r (0 = first).
    """

    name = "fixed-order"
    suspends_at_segments = True
    dispatches_early = True

    def __init__(self, order: Sequence[int], max_batch: int | None = None) -> None:
        super().__init__(max_batch)
        self.rank = np.empty(len(order), dtype=np.int64)
        self.rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order))

    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:  # type: ignore[override]
        return np.argsort(self.rank[q.seq], kind="stable")


def _score(res: SimResult, net: float, objective: str) -> float:
    total = 0.0
    for r in res.requests:
        o = request_outcome(r, net)
        if o is None:
            return -math.inf
        total += o.segment_utility if objective == "segment" else o.time_utility
    return total


@dataclass(frozen=True)
class BestFound:
    total_utility: float
    mean_utility: float
    order: tuple[int, ...] | None  # None: a named policy's schedule was best
    max_batch: int | None
    source: str
    candidates: int
    exhaustive: bool


def best_found(arrivals: Sequence[Arrival], *, seed: int = 0, policies: Sequence[str] = (),
               batches: Sequence[int | None] = (1, 2, 4, None), max_perms: int = 5040,
               engine_config: SimEngineConfig = SimEngineConfig(),
               planner_config: PlannerConfig = PlannerConfig(), objective: str = "time") -> BestFound:
    """Best total utility over priority orders x batch sizes (and the named policies).

    Arrivals must be sorted by time (their submission order is their index). If n! exceeds
    ``max_perms``, a deterministic random sample of ``max_perms`` orders is searched (plus the
    arrival order) and ``exhaustive`` is False.
    """
    arr = sorted(arrivals, key=lambda a: a.t)
    n = len(arr)
    net = planner_config.network_latency_s
    if math.factorial(n) <= max_perms:
        orders: list[tuple[int, ...]] = list(itertools.permutations(range(n)))
        exhaustive = True
    else:
        rng = np.random.default_rng(seed)
        orders = [tuple(range(n))] + [tuple(rng.permutation(n).tolist()) for _ in range(max_perms - 1)]
        exhaustive = False
    best = BestFound(-math.inf, -math.inf, None, None, "", 0, exhaustive)
    count = 0
    kw = dict(seed=seed, engine_config=engine_config, planner_config=planner_config)
    for name in policies:
        s = _score(simulate(arr, name, **kw), net, objective)
        count += 1
        if s > best.total_utility:
            best = BestFound(s, s / n, None, None, name, count, exhaustive)
    for b in batches:
        for order in orders:
            s = _score(simulate(arr, FixedOrderPolicy(order, b), **kw), net, objective)
            count += 1
            if s > best.total_utility + 1e-12:
                best = BestFound(s, s / n, order, b, "fixed-order", count, exhaustive)
    return BestFound(best.total_utility, best.mean_utility, best.order, best.max_batch, best.source,
                     count, exhaustive)

