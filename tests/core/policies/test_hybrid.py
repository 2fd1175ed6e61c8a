"""Hybrid offline-online: marginal-cost iteration rule, LPT, MIP makespan, T_LB, client slots."""

import numpy as np
import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import GenerationSpec
from llm_planner_node.core.policies.hybrid import lpt_assign
from llm_planner_node.engines.sim_engine import (LLAMA65B_NPU, IterationModel, SimEngine, SimEngineConfig,
                                                 SimPrompt, SimSegment, prefill_now)
from timely_tools.evaluation.hybrid_offline import makespan_plan, t_lb
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for


def test_marginal_cost_rule():
    # C_p = 25 ms + 0.13 ms * 100 = 38 ms; decode rounds of 29 ms: wait one round, then prefill
    c_p = LLAMA65B_NPU.time(100, 0)
    assert c_p == pytest.approx(0.038)
    assert LLAMA65B_NPU.time(0, 10) == pytest.approx(0.029 + 0.0021)
    assert not prefill_now(c_p, 0.0) and not prefill_now(c_p, 0.0311) and prefill_now(c_p, 0.0622)


def test_pd_marginal_engine_schedule():
    clock = VirtualClock()
    eng = SimEngine(clock, SimEngineConfig(iteration=IterationModel(0.03, 0.001, 0.0, prefill_a_s=0.02),
                                           kv_capacity_tokens=10_000, iteration_policy="pd-marginal"))
    long = SimPrompt(0, 10, (SimSegment("x", 50, ()),), "k")
    eng.add(GenerationSpec(0, long, 60, "chat", "k", False))
    kinds = []
    for i in range(5):
        if i == 1:  # a 30-token prefill arrives while 0 decodes: C_p = 0.02 + 0.03 = 0.05
            eng.add(GenerationSpec(1, SimPrompt(0, 30, (SimSegment("y", 5, ()),), "k"), 10, "chat", "k", False))
        t0 = clock.now()
        eng.start_iteration()
        kinds.append(round(eng.in_flight_end() - t0, 4))
        clock.advance_to(eng.in_flight_end())
        eng.step()
    # prefill of 0 alone; then decode rounds (30 ms each) until 2 x 30 ms >= 50 ms; then prefill
    assert kinds == [0.03, 0.03, 0.03, 0.05, 0.03]


def test_lpt_and_mip_makespan():
    sizes = np.array([3.0, 3.0, 2.0, 2.0, 2.0])  # LPT: 3+2+2=7 vs 3+2=5 -> 7; optimum 6 (3+3, 2+2+2)
    loads = np.zeros(2)
    lpt_assign(sizes, loads)
    assert loads.max() == 7.0
    plan = makespan_plan(sizes, 2, time_limit_s=5)
    assert plan.makespan == 6.0 and plan.lower_bound == pytest.approx(6.0) and plan.solver == "mip-optimal"


def test_t_lb_hand_computed():
    # prompts 100 x 4 = 400 tokens, cap 256: 2 rounds of (25 + 0.13*256) ms = 58.28 ms each
    # outputs [10, 10, 10, 30] on 2 clients: max(60/2, 30) = 30 rounds of (29 + 0.42) ms
    lb = t_lb(np.full(4, 100), np.array([10, 10, 10, 30]), 2, LLAMA65B_NPU, 256)
    assert lb == pytest.approx(2 * (0.025 + 0.13e-3 * 256) + 30 * (0.029 + 0.21e-3 * 2))


def test_hybrid_follows_the_offline_plan_and_finishes():
    arrivals = [Arrival(0.0, goal_for(t, f"r{i}")) for i, t in enumerate([9, 1, 10, 2, 11, 3])]
    plan = {0: 0, 1: 0, 2: 1, 3: 1, 4: 0, 5: 1}
    res = simulate(arrivals, "hybrid", max_batch=2, plan=plan)
    assert all(r.state.value == "finished" for r in res.requests)
    assert res.engine.peak_batch <= 2


def test_gsm8k_like_batch_matches_the_paper_statistics():
    from timely_tools.evaluation.compare import gsm8k_like

    arr = gsm8k_like(1319, 0)
    pin = np.array([a.goal.prompt.task_tokens for a in arr])
    out = np.array([a.goal.prompt.segments[0].n_tokens for a in arr])
    assert len(arr) == 1319 and all(a.t == 0.0 for a in arr)
    assert abs(pin.mean() - 68.43) < 3 and abs(out.mean() - 344.83) < 10 and out.max() <= 512
