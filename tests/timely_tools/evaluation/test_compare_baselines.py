"""`timely-fleet compare` measures each paper against its own baseline (tiny sizes)."""

from __future__ import annotations

import pytest

from llm_planner_node.core.policies.lamps import LAMPS
from llm_planner_node.engines.calibration import CALIBRATIONS
from timely_tools.evaluation import compare as C


@pytest.fixture
def recorded(monkeypatch):
    """Tiny workloads; every simulate() call's policy, engine and arrivals recorded."""
    calls = []
    chat, gsm, gen, sim = C.chat_like, C.gsm8k_like, C.generate, C.simulate
    monkeypatch.setattr(C, "chat_like", lambda n, rate, seed, **kw: chat(min(n, 12), rate, seed, **kw))
    monkeypatch.setattr(C, "gsm8k_like", lambda n, seed: gsm(min(n, 24), seed))
    monkeypatch.setattr(C, "generate", lambda spec, seed: gen(spec, seed)[:6])

    def simulate(arr, pol, **kw):
        res = sim(arr, pol, **kw)
        calls.append((pol, kw.get("engine_config"), arr, res))
        return res

    monkeypatch.setattr(C, "simulate", simulate)
    monkeypatch.setattr(C, "CURRENT_CALIBRATION", "hf-table1")
    return calls


def test_trail_and_ltr_against_fcfs(recorded):
    r = C.trail_ltr(quick=True)
    t, lt = r["trail"], r["ltr"]
    assert set(t["loads"]) == {"0.5", "1.0"}  # 50% and 100% of the measured capacity (quick)
    for row in t["loads"].values():
        assert set(row) == {"fcfs", "trail"}
        assert all(v["mean_latency_s"] > 0 and v["mean_ttft_s"] > 0 for v in row.values())
    names = [(p.name, getattr(p, "c", None)) for p, *_ in recorded]
    assert ("trail", 0.8) in names and ("vllm", None) in names and ("ltr", None) in names
    # every chat experiment on the chosen calibration's engine
    assert all(cfg == CALIBRATIONS["hf-table1"].engine for _, cfg, *_ in recorded)
    # LTR: a burst (all at t=0) with per-token P90, and the shortest-k synthetic-data throughput
    ltr_runs = [(p, arr) for p, _, arr, _ in recorded if p.name in ("ltr",)]
    assert ltr_runs and all(a.t == 0.0 for _, arr in ltr_runs for a in arr)
    assert set(lt["chat"]) == {"fcfs", "ltr"} and lt["chat"]["fcfs"]["p90_s_per_token"] > 0
    assert set(lt["sdg"]) >= {"fcfs", "ltr", "k", "prompts"} and lt["sdg"]["k"] < lt["sdg"]["prompts"]


def test_lamps_against_infercept(recorded):
    r = C.lamps(quick=True)
    for rows in r["workloads"].values():
        assert {"infercept (waste-min, FCFS)", "lamps", "preserve-all FCFS"} <= set(rows)
        for v in (v for v in rows.values() if isinstance(v, dict)):  # robot execution is part of completion
            assert 0 < v["mean_execution_s"] <= v["mean_completion_s"]
    pols = [p for p, *_ in recorded]
    infercept = [p for p in pols if isinstance(p, LAMPS) and p.rank == "fcfs" and p.handling == "auto"]
    lamps = [p for p in pols if isinstance(p, LAMPS) and p.rank == "memory" and p.handling == "auto"]
    # the baseline is INFERCEPT: the same waste-minimising handling as LAMPS, FCFS order
    assert len(infercept) == len(lamps) == 2


def test_hybrid_against_fcfs_offline_online(recorded):
    r = C.hybrid(quick=True, mip_seconds=1.0)
    assert set(r["runs"]) == {"FCFS (baseline, prefill-first)", "offline only (MIP plan, prefill-first)",
                              "online only (LPT + stealing + marginal rule)", "hybrid (MIP plan + online)",
                              "FCFS, mixed batches (extra)"}
    assert r["t_lb_s"] > 0 and all(v["makespan_s"] > 0 for v in r["runs"].values())
    by = {}
    for p, cfg, *_ in recorded:
        rule = p.engine_iteration or cfg.iteration_policy
        by.setdefault(p.name, []).append((rule, bool(getattr(p, "plan", None))))
    assert sorted(by["vllm"]) == [("mixed", False), ("prefill-first", False)]
    assert sorted(by["hybrid"]) == [("pd-marginal", False), ("pd-marginal", True), ("prefill-first", True)]
    # on the hybrid paper's own NPU model
    assert all(cfg.iteration == CALIBRATIONS["npu-hybrid"].engine.iteration for _, cfg, *_ in recorded)


# ----------------------------------------------------------------- why-experiments
def _fake_result(reqs, busy_slot_s):
    from types import SimpleNamespace as NS

    return NS(requests=[NS(arrival=a, gen_end=[e]) for a, e in reqs], engine=NS(busy_slot_s=busy_slot_s))


def test_queue_stats_by_hand():
    # one slot, two requests at t=0 of 1 s each: the first runs 0-1, the second waits 0-1 and runs 1-2
    q = C.queue_stats(_fake_result([(0.0, 1.0), (0.0, 2.0)], busy_slot_s=2.0))
    assert q["mean_queue_delay_s"] == pytest.approx(0.5)  # (0 + 1) / 2
    assert q["queue_share"] == pytest.approx(1 / 3)  # 1 s queued of 3 s latency
    assert q["mean_queue_len"] == pytest.approx(0.5)  # 1 request-second waiting over a 2 s span
    assert q["mean_in_batch"] == pytest.approx(1.0)
    # nobody waits: every latency is time in the batch
    q = C.queue_stats(_fake_result([(0.0, 1.0), (0.0, 1.0)], busy_slot_s=2.0))
    assert q["mean_queue_delay_s"] == 0 and q["queue_share"] == 0 and q["mean_in_batch"] == pytest.approx(2.0)


def test_queue_stats_matches_fcfs_waiting_in_the_simulator():
    """On FCFS (no preemption) the identity's queued time equals what each request waited before
    its generation started (gen_start - arrival), on a real simulated run with one slot."""
    from llm_planner_node.core.policies import get_policy
    from timely_tools.sim.workload import Arrival

    arr = [Arrival(0.0, a.goal) for a in C.chat_like(4, 1.0, 3)]
    r = C.simulate(arr, get_policy("vllm", max_batch=1), seed=0, engine_config=CALIBRATIONS["paper-vllm"].engine)
    direct = sum(x.gen_start[0] - x.arrival for x in r.requests) / len(r.requests)
    assert direct > 0.5  # three of four requests wait a whole generation
    assert C.queue_stats(r)["mean_queue_delay_s"] == pytest.approx(direct, abs=0.02)
    assert C.queue_stats(r)["mean_in_batch"] == pytest.approx(1.0, abs=0.01)  # the one slot is always busy


def test_average_keeps_the_seed_range():
    def run(u):
        m = {"mean_utility": u / 100, "utility_pct_of_beta": u, "goals": 2, "completed": 2}
        return [{"policy": "vllm", "task_types": {"all": dict(m)}}]

    avg = C._average([run(50.0), run(70.0), run(90.0)])[0]["task_types"]["all"]
    assert avg["utility_pct_of_beta"] == pytest.approx(70.0)
    assert avg["utility_pct_of_beta_range"] == [50.0, 90.0]
    assert avg["goals"] == 6
    assert C._pct_range(avg) == "70.0 (50.0 to 90.0)"
    assert C._pct_range(C._average([run(61.8)])[0]["task_types"]["all"]) == "61.8"  # one seed: no range
    assert C._pct_range(None) == "-"


def test_ltr_spread_properties(recorded):
    r = C.ltr_spread(quick=True)
    rows = r["rows"]
    assert [(x["len_sigma"], x["key_sigma"]) for x in rows] == list(C.LTR_SPREADS)
    # the same normal draws scaled by sigma: a wider spread never narrows the P90/median ratio
    noisy = [x for x in rows if x["key_sigma"] > 0]
    ratios = [x["out_p90_over_median"] for x in noisy]
    assert ratios == sorted(ratios) and ratios[-1] > ratios[0]
    exact = [x for x in rows if x["key_sigma"] == 0][0]
    assert exact["tau_b"] == pytest.approx(1.0)  # exact keys rank exactly
    # the FCFS runs are shared between the rows of one length spread
    assert exact["p90_fcfs"] == noisy[0]["p90_fcfs"] and exact["sdg_fcfs_s"] == noisy[0]["sdg_fcfs_s"]
    fcfs_runs = [p for p, *_ in recorded if p.name == "vllm"]
    assert len(fcfs_runs) == len({s for s, _ in C.LTR_SPREADS})


def test_admission_delay_is_zero_until_slots_run_out():
    """run_sim's ``mean_admission_delay_s`` (arrival at the planner -> first admission into the
    batch): 4 simultaneous goals wait for one slot, not for 256."""
    from timely_tools.evaluation.eval_cmd import run_sim
    from timely_tools.evaluation.workload_spec import compose, load_spec
    from timely_tools.sim.workload import Arrival

    spec = load_spec("WID1")
    arr = [Arrival(0.0, a.goal) for a in compose(spec, 0)[:4]]
    wide = run_sim(spec, ["vllm"], 0, arrivals=arr, one_plan_per_robot=False)[0]
    one = run_sim(spec, ["vllm"], 0, arrivals=arr, max_batch=1, one_plan_per_robot=False)[0]
    assert wide["peak_batch"] == 4 and wide["mean_admission_delay_s"] < 0.01
    assert one["peak_batch"] == 1
    # FCFS with one slot: goal k waits for the k goals before it, so the mean is 1.5 generations
    gen = one["task_types"]["all"]["mean_response_s"]  # response includes the wait, so > one generation
    assert one["mean_admission_delay_s"] > 0.3 * gen


def test_wid_why_quotes_peak_batch_and_admission_delay():
    res = {w: [{"policy": "vllm", "peak_batch": p, "mean_admission_delay_s": d, "task_types": {}}]
           for w, p, d in (("WID1", 5, 0.0012), ("WID2", 9, 0.0031))}
    s = C._wid_why(res)
    assert "5 (WID1), 9 (WID2) generations of its 256 slots" in s and "1.2 ms, 3.1 ms" in s
    avg = C._average([[{"policy": "vllm", "peak_batch": p, "mean_admission_delay_s": d,
                        "task_types": {"all": {"utility_pct_of_beta": 1.0, "goals": 1, "completed": 1}}}]
                      for p, d in ((5, 0.001), (7, 0.003))])[0]
    assert avg["peak_batch"] == 7 and avg["mean_admission_delay_s"] == pytest.approx(0.002)


def test_report_why_quotes_its_experiments(recorded):
    """The rendered 'why' (quick mode: no load past capacity) names each experiment's table and
    quotes the Trail ceiling computed from the queue statistics of the 100% row."""
    tl = C.trail_ltr(quick=True)
    R = {"quick": True, "seeds": 1, "trail_ltr": tl, "lamps": C.lamps(quick=True),
         "hybrid": C.hybrid(quick=True, mip_seconds=1.0),
         "wid": {"WID1": [{"policy": "vllm", "peak_batch": 3, "mean_admission_delay_s": 0.002,
                           "task_types": {"all": {"utility_pct_of_beta": 50.0, "mean_response_s": 0.4,
                                                  "p90_response_s": 0.5, "mean_waiting_s": 0.4}}}]}}
    txt = C.render(R, "f.png")
    for table in ("### Why Trail: queueing vs load", "### Why LTR: output-length spread and key quality",
                  "### LAMPS retention choices"):
        assert table in txt
    f = tl["trail"]["loads"]["1.0"]["fcfs"]
    ceiling = f["mean_latency_s"] / (f["mean_latency_s"] - f["mean_queue_delay_s"])
    assert f"would cut latency by only x{ceiling:.2f}" in txt
    assert "Past capacity" not in txt  # quick runs stop at 100%
    assert "largest batch is 3 (WID1) generations of its 256 slots" in txt
