"""TimelyLLM Figure 2: an urgent request arrives while a normal request is generating.

Normal request: trace 1 (drone, look for the cat, 4 segments, ERT 1 s), arrives at t = 0.
Urgent request: trace 6 (drone, avoid human injury, ERT 0.2 s), arrives at t = 0.1 s, while
the normal plan is being generated (it takes ~0.4 s in full on the calibrated RTX 4090 model).
"""

import pytest

from llm_planner_node.core.metrics import request_outcome
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for

NET = 0.008


def _run(policy, arrivals):
    result = simulate(arrivals, policy)
    return [request_outcome(r, NET) for r in result.requests], result


def test_figure2_urgent_within_ert_only_with_timelyllm():
    arrivals = [Arrival(0.0, goal_for(1, "drone0")), Arrival(0.1, goal_for(6, "drone1"))]
    (normal, urgent), res = _run("timelyllm", arrivals)
    # the normal plan is still generating when the urgent request arrives
    assert max(t for t, rid, _ in res.dispatch_log if rid == 0) > 0.1
    assert urgent.response_s <= 0.2
    assert urgent.time_utility == pytest.approx(2.0)      # full beta
    assert normal.response_s <= 1.0
    assert normal.time_utility == pytest.approx(1.0)
    # later segments are generated while the previous one executes: no robot waits after s_0
    assert all(w == pytest.approx(0.0, abs=1e-9) for w in normal.segment_waits[1:])
    assert all(w == pytest.approx(0.0, abs=1e-9) for w in urgent.segment_waits[1:])

    (v_normal, v_urgent), _ = _run("vllm", arrivals)
    assert v_urgent.response_s > 0.2                       # whole plan before execution
    assert v_urgent.time_utility < 2.0
    assert v_normal.response_s > normal.response_s


def test_figure2_under_load_of_normal_requests():
    # six normal requests generating when the urgent one arrives
    arrivals = [Arrival(0.0, goal_for(1 + i % 5, f"drone{i}")) for i in range(6)]
    arrivals.append(Arrival(0.05, goal_for(7, "drone9")))
    outs, _ = _run("timelyllm", arrivals)
    assert outs[-1].response_s <= 0.2
    assert all(o.response_s <= 1.0 for o in outs[:-1])
    v_outs, _ = _run("vllm", arrivals)
    assert v_outs[-1].response_s > 0.2
