"""WID1-3 are exactly TimelyLLM Table 3, and the paper's figures run on them (WID2 for Fig. 5d and 8)."""

from __future__ import annotations

from timely_tools.evaluation.workload_spec import load_spec
from timely_tools.sim.workload import WORKLOADS

TABLE3 = {  # name: (eps, max TPE, traces, agents, duration s)
    "WID1": (0.25, 8, tuple(range(1, 9)), 25, 260.0),
    "WID2": (0.25, 16, tuple(range(1, 9)), 42, 300.0),
    "WID3": (0.1, 8, (9, 10, 11), 40, 900.0),
}


def test_wid_specs_equal_table3():
    for name, (eps, tpe, traces, agents, dur) in TABLE3.items():
        s = load_spec(name)
        assert (s.eps, s.max_tpe, tuple(s.traces), s.agents, s.duration_s) == (eps, tpe, traces, agents, dur), name
        w = WORKLOADS[name]  # the simulator's presets agree
        assert (w.eps, w.max_tpe, w.trace_ids, w.agents, w.duration_s) == (eps, tpe, traces, agents, dur), name


def test_wid2_spec_is_table3_exactly():
    s = load_spec("WID2")
    assert s.as_dict() | {"tuf": {}} == {
        "name": "WID2", "duration_s": 300.0, "eps": 0.25, "max_tpe": 16, "traces": [1, 2, 3, 4, 5, 6, 7, 8],
        "agents": 42, "seed": 0, "network_latency_ms": 8.0, "tuf": {}, "chat_segmentation": "sentence",
        "engine_model": "llama3-8b", "calibration": None}
