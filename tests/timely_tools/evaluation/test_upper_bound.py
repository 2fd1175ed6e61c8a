"""Best-found schedule search on tiny workloads."""

from __future__ import annotations

import math

import pytest

from llm_planner_node.core.metrics import request_outcome
from timely_tools.evaluation.upper_bound import FixedOrderPolicy, best_found
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for


def _burst(tids):
    return [Arrival(0.0, goal_for(t, f"drone{i}")) for i, t in enumerate(tids)]


def test_fixed_order_serves_rank_first():
    arr = _burst([1, 6])  # normal, urgent
    for order in ((0, 1), (1, 0)):
        res = simulate(arr, FixedOrderPolicy(order, max_batch=1))
        resp = {r.id: request_outcome(r, 0.008).response_s for r in res.requests}
        first, second = order
        assert resp[first] < resp[second]


def test_best_found_bounds_every_policy_and_counts_candidates():
    arr = _burst([1, 6, 7])
    pols = ["vllm", "seg-fcfs", "timelyllm"]
    bf = best_found(arr, policies=pols, batches=(1, None))
    assert bf.exhaustive and bf.candidates == len(pols) + math.factorial(3) * 2
    for p in pols:
        assert bf.mean_utility >= simulate(arr, p).by_type("all").mean_utility - 1e-12
    # with batch 1 the urgent goals must go first: ranking urgent (1, 2) before normal (0)
    # is at least as good as the arrival order
    a = simulate(arr, FixedOrderPolicy((1, 2, 0), 1)).by_type("all").mean_utility
    b = simulate(arr, FixedOrderPolicy((0, 1, 2), 1)).by_type("all").mean_utility
    assert a >= b


def test_single_goal_best_is_its_utility():
    arr = _burst([6])
    bf = best_found(arr, policies=["timelyllm"], batches=(None,))
    assert bf.mean_utility == pytest.approx(simulate(arr, "timelyllm").by_type("all").mean_utility)
