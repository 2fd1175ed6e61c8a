"""LAMPS: INFERCEPT waste formulas, strategy choice, memory-over-time ranking, and the
simulated engine's exact model of preserve / discard / swap."""

import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import GenerationSpec
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.policies.base import Pause
from llm_planner_node.core.policies.lamps import PREFILL_S_PER_TOKEN, SWAP_S_PER_TOKEN, WasteModel, memory_area
from llm_planner_node.engines.sim_engine import (LLAMA3_8B_RTX4090, LLAMA3_8B_SWAP_S_PER_TOKEN, IterationModel,
                                                 SimEngine, SimEngineConfig, SimPrompt, SimSegment)
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for

W = WasteModel(prefill_s_per_token=0.001, swap_s_per_token=0.0001)


def test_waste_formulas_hand_computed():
    # C_i = 1000, C_other = 3000, T_call = 2 s
    assert W.preserve(2.0, 1000) == 2000.0  # T_call * C_i
    assert W.discard(1000, 3000) == pytest.approx(1.0 * 4000)  # T_fwd = 1 s; (C_i + C_other)
    assert W.swap(1000, 4000) == pytest.approx(2 * 0.1 * 4000)  # 2 * T_swap(0.1 s) * C_batch
    assert W.best(2.0, 1000, 3000) == ("swap", pytest.approx(800.0))
    assert W.best(0.1, 1000, 3000) == ("preserve", pytest.approx(100.0))  # short call: keep it
    no_swap = WasteModel(prefill_s_per_token=0.001, swap_s_per_token=1.0)
    assert no_swap.best(10.0, 1000, 0)[0] == "discard"  # 1 s * 1000 < 10 s * 1000


def test_defaults_match_engine_calibration():
    assert PREFILL_S_PER_TOKEN == LLAMA3_8B_RTX4090.b_s_per_prefill_token
    assert SWAP_S_PER_TOKEN == LLAMA3_8B_SWAP_S_PER_TOKEN


def test_memory_area():
    import numpy as np
    # tau * (C L + L^2 / 2) with C = 100, L = 10, tau = 0.02 -> 0.02 * 1050 = 21
    assert memory_area(np.array([100.0]), np.array([10.0]), 0.02)[0] == pytest.approx(21.0)


def test_retention_choice_and_forced_handling():
    p = get_policy("lamps", waste=W)
    assert p.retention(Pause(1000, 2.0, 0.09, 3000)) == "swap"
    assert get_policy("lamps", handling="preserve").retention(Pause(1000, 2.0, 0.09, 3000)) == "preserve"
    # the TimelyLLM combination only counts the idle time before the resume (minus G)
    assert get_policy("timelyllm-lamps", waste=W).retention(Pause(1000, 0.19, 0.09, 3000)) == "preserve"


def _engine(mode_model=IterationModel(0.01, 0.001, 0.0)):
    clock = VirtualClock()
    cfg = SimEngineConfig(iteration=mode_model, kv_capacity_tokens=10_000, block_size=16,
                          swap_s_per_token=0.0001)
    eng = SimEngine(clock, cfg)
    prompt = SimPrompt(0, 100, (SimSegment("a;", 4, ()), SimSegment("b;", 4, ())), "k")
    eng.add(GenerationSpec(0, prompt, 50, "drone", "k", True))
    for _ in range(4):
        eng.start_iteration()
        clock.advance_to(eng.in_flight_end())
        eng.step()
    assert 0 in eng._suspended  # suspended at the first boundary, context 104 tokens
    return clock, eng


@pytest.mark.parametrize("mode, free_after, resume_time", [
    ("preserve", 10_000 - 104, 0.01),             # pinned; resume decodes at once
    ("discard", 10_000, 0.01 + 0.001 * 104),      # freed; resume recomputes 104 tokens
    ("swap", 10_000, 0.01 + 0.0001 * 104),        # host; the swap-in stalls the iteration
    ("cache", 10_000, 0.01 + 0.001 * (104 - 96)),  # prefix cache hit: partial block recomputed
])
def test_sim_engine_retention_modes_exact(mode, free_after, resume_time):
    clock, eng = _engine()
    swap_out_before = eng._pending_swap_s
    eng.retain(0, mode)
    assert eng.free_kv_tokens() == free_after
    if mode == "swap":
        assert eng._pending_swap_s - swap_out_before == pytest.approx(0.0001 * 104)
        eng._pending_swap_s = 0.0  # the swap-out is charged to an iteration of other work
    eng.resume(0)
    t0 = clock.now()
    eng.start_iteration()
    assert eng.in_flight_end() - t0 == pytest.approx(resume_time)
    assert eng.stats.retained[mode] == 1


def test_lamps_blocks_until_robot_finished_and_completes():
    arrivals = [Arrival(0.0, goal_for(10, "arm0")), Arrival(0.1, goal_for(1, "drone0"))]
    res = simulate(arrivals, "lamps")
    for r in res.requests:
        assert r.state.value == "finished"
        # blocking calls: segment k+1 was generated only after segment k finished executing
        for k in range(1, len(r.segments)):
            assert r.gen_start[k] >= r.exec_end[k - 1] - 1e-9
    assert sum(res.engine.retained.values()) > 0
