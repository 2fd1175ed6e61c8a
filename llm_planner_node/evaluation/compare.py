"""``timely-fleet compare``: the four other papers' headline effects reproduced in our simulator,
each beside the paper's number, plus the WID1-3 comparison of all policies.

    timely-fleet compare                 # writes out/compare/report.md, results.json, figures
    timely-fleet compare --quick         # smaller workloads (a smoke run, ~1 min)

Experiments (all on the real Planner over the simulated engine; details in the report):

- Trail: chat-like output lengths (Alpaca-like, log-normal, <= 1,024 tokens), one engine with
  16 slots near saturation: mean latency FCFS (``vllm``) vs ``trail`` (probe accuracy set to
  our trained probe's, c = 0.8).
- LTR: same workload; P90 and mean latency FCFS vs ``ltr`` with rank keys of Kendall tau-b
  near the paper's ShareGPT value; plus our trained ranker's tau-b (predictors/weights).
- LAMPS: arm plans (long robot actions, 2-5 s) under tight KV memory: LAMPS (waste-minimising
  handling, memory-over-time ranking) vs preserve-everything FCFS (INFERCEPT-like).
- Hybrid: a GSM8K-like batch (1,319 requests, inputs ~68 tokens, outputs ~345 capped at 512) on
  200 client slots with the paper's LLaMA-65B/NPU latency model: FCFS + prefill-first vs hybrid
  (MIP plan + balancing + marginal-cost rule): utilisation, makespan and T_LB.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.policies import get_policy
from ..core.policies.lamps import LAMPS
from ..core.predictors import OracleLengths
from ..core.skills import CHAT
from ..core.task_model import Goal, Request
from ..core.tuf import NORMAL
from ..engines.sim_engine import LLAMA65B_NPU, SimEngineConfig, SimPrompt, SimSegment
from ..sim.simulation import SimResult, simulate
from ..sim.workload import Arrival, WorkloadSpec, generate
from .results import format_table, policy_result, write_json

PAPER = {
    "trail_latency_x": (1.66, 2.01), "ltr_tau": (0.54, 0.62), "ltr_p90_x": 2.8,
    "lamps_latency_reduction": (0.27, 0.85), "hybrid_util": (0.802, 0.8906),
    "hybrid_time": (201.00, 190.58), "hybrid_lb": 180.0, "trail_mae_x": 2.66,
}
WID_POLICIES = ("vllm", "timelyllm", "trail", "ltr", "lamps", "hybrid", "timelyllm-trail", "timelyllm-lamps")
WEIGHTS_REPORT = Path(__file__).resolve().parents[1] / "predictors" / "weights" / "report.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("out/compare"))
    parser.add_argument("--quick", action="store_true", help="small workloads (smoke run)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per WID workload")
    parser.add_argument("--mip-seconds", type=float, default=30.0, help="hybrid MIP time limit")


# --------------------------------------------------------------------------- workloads
def _text_goal(i: int, prompt_tokens: int, out_tokens: int, key: str) -> Goal:
    say = (CHAT.validate("say", ("answer",)),)
    p = SimPrompt(0, int(prompt_tokens), (SimSegment("answer", int(out_tokens), say),), key)
    return Goal(f"c{i}", "chat", "chat", p, NORMAL, 1024, CHAT.id, f"q{i}")


def chat_like(n: int, rate: float, seed: int) -> list[Arrival]:
    """Alpaca-like requests: prompts ~N(60, 20), outputs log-normal (median 180, sigma 0.7,
    8..1,000 tokens), Poisson arrivals at ``rate`` per second."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    pin = np.clip(rng.normal(60, 20, n), 8, 200).astype(int)
    out = np.clip(rng.lognormal(np.log(180), 0.7, n), 8, 1000).astype(int)
    return [Arrival(float(t[i]), _text_goal(i, pin[i], out[i], "chat-like")) for i in range(n)]


def gsm8k_like(n: int, seed: int) -> list[Arrival]:
    """A GSM8K-like batch at t = 0: inputs mean ~68 tokens, outputs mean ~345 capped at 512."""
    rng = np.random.default_rng(seed)
    pin = np.clip(rng.normal(68.4, 25, n), 16, 250).astype(int)
    out = np.clip(rng.gamma(3.0, 128.0, n), 16, 512).astype(int)
    return [Arrival(0.0, _text_goal(i, pin[i], out[i], "gsm8k")) for i in range(n)]


def _latencies(res: SimResult) -> np.ndarray:
    """Generation latency per request: end of its last segment's generation - arrival."""
    return np.array([r.gen_end[-1] - r.arrival for r in res.requests if r.gen_end])


def _completion(r: Request) -> float:
    return max(e for e in r.exec_end if e is not None) - r.arrival


# --------------------------------------------------------------------------- experiments
CHAT_RATES = (3.0, 3.5)  # requests/s: ~90% and ~105% of the 16-slot engine's capacity


def trail_ltr(quick: bool, seed: int = 0) -> dict[str, Any]:
    from ..predictors.ltr_ranker import kendall_tau_b

    trained = json.loads(WEIGHTS_REPORT.read_text()) if WEIGHTS_REPORT.exists() else {}
    acc, sigma = 0.6, 0.6  # simulated probe's per-token bin accuracy; LTR key noise
    res: dict[str, Any] = {"probe_accuracy": acc, "trained": trained, "rates": {}}
    for rate in CHAT_RATES:
        arr = chat_like(150 if quick else 600, rate, seed)
        lat = {}
        for name, params in (("vllm", {}), ("trail", {"c": 0.8, "accuracy": acc}),
                             ("trail-c1", {"c": 1.0, "accuracy": acc}), ("ltr", {"sigma": sigma})):
            pol = get_policy(name.split("-c")[0], max_batch=16, **params)
            lat[name] = _latencies(simulate(arr, pol, seed=seed))
        res["rates"][rate] = {"mean_latency_s": {k: float(v.mean()) for k, v in lat.items()},
                              "p90_latency_s": {k: float(np.percentile(v, 90)) for k, v in lat.items()}}
        res["requests"] = len(arr)
    true = np.array([sum(s.n_tokens for s in a.goal.prompt.segments) for a in arr])
    keys = OracleLengths(sigma, seed)  # the keys the ltr policy saw (same seed, same order)
    res["ltr_sim_tau_b"] = kendall_tau_b(np.array([keys.initial(i, a.goal) for i, a in enumerate(arr)]), true)
    return res


def lamps(quick: bool, seed: int = 0) -> dict[str, Any]:
    spec = WorkloadSpec(0.1, 8, (9, 10, 11), 40, 200.0 if quick else 600.0)
    arr = generate(spec, seed)
    cfg = SimEngineConfig(kv_capacity_tokens=9_000)  # ~3 arm generations beside the prefixes
    out: dict[str, Any] = {"goals": len(arr), "kv_capacity_tokens": cfg.kv_capacity_tokens}
    for label, pol in (("preserve-all FCFS", LAMPS(handling="preserve", rank="fcfs")),
                       ("lamps", LAMPS()), ("lamps preserve-only", LAMPS(handling="preserve")),
                       ("timelyllm", get_policy("timelyllm")), ("timelyllm-lamps", get_policy("timelyllm-lamps"))):
        r = simulate(arr, pol, seed=seed, engine_config=cfg)
        done = [x for x in r.requests if x.state.value == "finished"]
        out[label] = {"mean_completion_s": float(np.mean([_completion(x) for x in done])),
                      "mean_response_s": r.by_type("all").mean_response_s,
                      "mean_waiting_s": r.by_type("all").mean_waiting_s,
                      "retained": dict(r.engine.retained), "swap_s": r.engine.swap_s,
                      "recompute_tokens": r.engine.recompute_tokens}
    return out


def hybrid(quick: bool, mip_seconds: float, seed: int = 0) -> dict[str, Any]:
    from .hybrid_offline import makespan_plan, t_lb

    n, clients = (264, 40) if quick else (1319, 200)
    arr = gsm8k_like(n, seed)
    pin = np.array([a.goal.prompt.task_tokens for a in arr])
    nd = np.array([a.goal.prompt.segments[0].n_tokens for a in arr])
    cfg = SimEngineConfig(iteration=LLAMA65B_NPU, kv_capacity_tokens=clients * 1100)
    t0 = time.perf_counter()
    plan = makespan_plan((pin + nd).astype(float), clients, mip_seconds)
    solve_s = time.perf_counter() - t0
    runs = {}
    for label, pol, engine_rule in (
            ("FCFS, prefill-first", get_policy("vllm", max_batch=clients), "prefill-first"),
            ("FCFS, mixed batches", get_policy("vllm", max_batch=clients), "mixed"),
            ("hybrid online (LPT, no MIP)", get_policy("hybrid", max_batch=clients), None),
            ("hybrid (MIP plan)", get_policy("hybrid", max_batch=clients, plan=dict(enumerate(plan.assign.tolist()))), None)):
        c = cfg if engine_rule is None else SimEngineConfig(iteration=LLAMA65B_NPU, kv_capacity_tokens=clients * 1100,
                                                            iteration_policy=engine_rule)
        r = simulate(arr, pol, seed=seed, engine_config=c)
        makespan = max(x.gen_end[-1] for x in r.requests)
        runs[label] = {"makespan_s": makespan, "utilisation": r.engine.busy_slot_s / (clients * makespan)}
    lb = t_lb(pin, nd, clients, LLAMA65B_NPU, prefill_cap_tokens=8192)
    return {"requests": n, "clients": clients, "mean_in": float(pin.mean()), "mean_out": float(nd.mean()),
            "mip": {"solver": plan.solver, "seconds": solve_s, "makespan_tokens": plan.makespan,
                    "bound_tokens": plan.lower_bound}, "t_lb_s": lb, "runs": runs}


def wid(quick: bool, seeds: int) -> dict[str, Any]:
    from .eval_cmd import run_sim
    from .workload_spec import load_spec

    out = {}
    for w in ("WID1", "WID2", "WID3"):
        spec = load_spec(w)
        if quick:
            spec = spec.with_(duration_s=spec.duration_s / 4)
        runs = [run_sim(spec, WID_POLICIES, s) for s in range(seeds)]
        out[w] = _average(runs)
    return out


def _average(runs: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    first = runs[0]
    avg = []
    for i, r in enumerate(first):
        tts = {}
        for tt, m in r["task_types"].items():
            tts[tt] = {k: (None if any(run[i]["task_types"][tt][k] is None for run in runs)
                           else float(np.mean([run[i]["task_types"][tt][k] for run in runs])))
                       for k in m}
            tts[tt]["goals"] = int(sum(run[i]["task_types"][tt]["goals"] for run in runs))
            tts[tt]["completed"] = int(sum(run[i]["task_types"][tt]["completed"] for run in runs))
        avg.append(policy_result(r["policy"], [], seeds=len(runs)) | {"task_types": tts})
    return avg


# --------------------------------------------------------------------------- report
def figure(wid_res: dict[str, Any], path: Path) -> None:
    """Urgent/normal/arm utility (% of beta) per policy on WID1-3 (one panel per workload)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    for ax, (w, res) in zip(axes, wid_res.items(), strict=True):
        types = [t for t in res[0]["task_types"] if t != "all"] + ["all"]
        width = 0.8 / len(res)
        for i, r in enumerate(res):
            ys = [r["task_types"][t]["utility_pct_of_beta"] or np.nan for t in types]
            ax.bar(np.arange(len(types)) + i * width - 0.4 + width / 2, ys, width, label=r["policy"])
        ax.set_xticks(range(len(types)), types, fontsize=8)
        ax.set_title(w)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("time utility (% of beta)")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _x(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def wid_table(wid_res: dict[str, Any]) -> str:
    lines = ["| workload | policy | urgent %beta | normal/arm %beta | all %beta | mean resp (s) | P90 resp (s) | robot wait (s) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for w, res in wid_res.items():
        for r in res:
            tt = r["task_types"]
            urgent = tt.get("drone-urgent", {}).get("utility_pct_of_beta")
            normal = (tt.get("drone-normal") or tt.get("arm") or {}).get("utility_pct_of_beta")
            a = tt["all"]
            f = lambda v, s=".1f": "-" if v is None else format(v, s)  # noqa: E731
            lines.append(f"| {w} | {r['policy']} | {f(urgent)} | {f(normal)} | {f(a['utility_pct_of_beta'])} | "
                         f"{f(a['mean_response_s'], '.3f')} | {f(a['p90_response_s'], '.3f')} | "
                         f"{f(a['mean_waiting_s'], '.3f')} |")
    return "\n".join(lines)


CAVEATS = [
    "- Trail/LTR act only when a queue forms: the gain grows with load; past saturation LTR's P90 "
    "suffers from its 200-step starvation threshold. Probe/ranker quality is measured on our short, "
    "task-determined plans (easier than Alpaca/ShareGPT), latency with simulated predictions.",
    "- LAMPS vs preserve-all exceeds the paper's range because under tight KV memory pinned contexts "
    "block admissions almost completely; swap is always chosen at 7.3 us/token host copies.",
    "- Hybrid: most of the gain is the marginal-cost rule vs a prefill-first engine; an engine that mixes "
    "prefill into decode iterations (our default) is as good with FCFS. The MIP rarely beats LPT in the "
    "time limit at 1,319 x 200. Utilisation = time-weighted slot occupancy (the paper's definition differs).",
    "- WID1-3: no queue forms at batch 256, so trail/ltr/hybrid equal vllm; their whole-plan generation "
    "lacks segmentation and urgency. Discussion: docs/evaluation_policies.md.",
]


def render(R: dict[str, Any], fig_rel: str) -> str:
    t, l, h = R["trail_ltr"], R["lamps"], R["hybrid"]
    per_rate = list(t["rates"].items())

    def both(f: Any) -> str:
        return "; ".join(f"{f(r['mean_latency_s'], r['p90_latency_s'])} at {float(rate):g}/s" for rate, r in per_rate)

    tr = t["trained"].get("trail", {})
    lt = t["trained"].get("ltr", {})
    hr = h["runs"]
    base, hyb = hr["FCFS, prefill-first"], hr["hybrid (MIP plan)"]
    lb = l["preserve-all FCFS"]["mean_completion_s"]
    la = l["lamps"]["mean_completion_s"]
    P = PAPER
    rows = [
        ("Trail", "mean latency, FCFS / trail", f"{P['trail_latency_x'][0]}-{P['trail_latency_x'][1]}x",
         both(lambda m, p: f"{_x(m['vllm'], m['trail'])} (c=0.8), {_x(m['vllm'], m['trail-c1'])} (c=1)")),
        ("Trail", "length MAE, baseline / probe", f"{P['trail_mae_x']}x (vs BERT)",
         f"{_x(tr.get('mae_constant_mean', 0), tr.get('mae_initial', 1))} (vs constant mean; "
         f"{tr.get('mae_initial', float('nan')):.2f} tokens; per-token raw {tr.get('mae_per_token_raw', float('nan')):.2f}"
         f" -> Bayes {tr.get('mae_per_token_bayes', float('nan')):.2f})"),
        ("LTR", "Kendall tau-b", f"{P['ltr_tau'][0]} / {P['ltr_tau'][1]}",
         f"{lt.get('kendall_tau_b', float('nan')):.2f} (trained ranker, planner prompts); "
         f"{t['ltr_sim_tau_b']:.2f} (simulated keys, chat-like)"),
        ("LTR", "P90 latency, FCFS / ltr", f"up to {P['ltr_p90_x']}x",
         both(lambda m, p: f"{_x(p['vllm'], p['ltr'])} (mean {_x(m['vllm'], m['ltr'])})")),
        ("LAMPS", "task completion, preserve-all / lamps",
         f"-{int(P['lamps_latency_reduction'][0] * 100)}% to -{int(P['lamps_latency_reduction'][1] * 100)}% latency",
         f"{100 * (la - lb) / lb:+.0f}% ({lb:.2f} s -> {la:.2f} s)"),
        ("Hybrid", "utilisation, baseline -> hybrid", f"{P['hybrid_util'][0]:.1%} -> {P['hybrid_util'][1]:.2%}",
         f"{base['utilisation']:.1%} -> {hyb['utilisation']:.1%}"),
        ("Hybrid", "makespan, baseline -> hybrid (T_LB)",
         f"{P['hybrid_time'][0]} s -> {P['hybrid_time'][1]} s (LB {P['hybrid_lb']} s)",
         f"{base['makespan_s']:.1f} s -> {hyb['makespan_s']:.1f} s (T_LB {h['t_lb_s']:.1f} s; "
         f"hybrid/T_LB = {hyb['makespan_s'] / h['t_lb_s']:.3f})"),
    ]
    out = ["# Four more papers in the TimelyLLM harness: Trail, LTR, LAMPS, hybrid offline-online", "",
           "Generated by `timely-fleet compare`" + (" --quick" if R["quick"] else "") +
           ". Simulator: the real Planner over the calibrated simulated engine (Llama3-8B/RTX 4090 "
           "unless stated). Paper numbers come from the papers' own testbeds; ours are simulated.", "",
           "## Headline effects", "", "| paper | metric | paper | ours |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    out += ["", "### Trail and LTR (chat-like lengths)", "",
            f"{t['requests']} requests per rate, Poisson arrivals, 16 slots, outputs log-normal (median 180, "
            f"<= 1,000 tokens). Simulated probe per-token bin accuracy {t['probe_accuracy']}; Trail bins: 10 over "
            "[0, 512].", "", "| rate (req/s) | policy | mean latency (s) | P90 latency (s) |", "|---|---|---:|---:|"]
    for rate, r in per_rate:
        out += [f"| {float(rate):g} | {k} | {v:.2f} | {r['p90_latency_s'][k]:.2f} |" for k, v in r["mean_latency_s"].items()]
    out += ["", "### LAMPS (arm plans, 2-5 s robot actions, KV capacity "
            f"{l['kv_capacity_tokens']} tokens, {l['goals']} goals)", "",
            "| policy | mean task completion (s) | mean response (s) | robot waiting (s) | retention choices | swap s | recomputed tokens |",
            "|---|---:|---:|---:|---|---:|---:|"]
    for k, v in l.items():
        if isinstance(v, dict):
            ch = ", ".join(f"{a} {n}" for a, n in v["retained"].items() if n)
            out.append(f"| {k} | {v['mean_completion_s']:.2f} | {v['mean_response_s']:.3f} | {v['mean_waiting_s']:.2f} | "
                       f"{ch or '-'} | {v['swap_s']:.2f} | {v['recompute_tokens']} |")
    out += ["", f"### Hybrid (GSM8K-like batch: {h['requests']} requests, inputs {h['mean_in']:.1f}, outputs "
            f"{h['mean_out']:.1f} tokens on average; {h['clients']} clients; LLaMA-65B/NPU latency model)", "",
            f"Offline MIP (HiGHS, {h['mip']['seconds']:.0f} s): {h['mip']['solver']}, makespan "
            f"{h['mip']['makespan_tokens']:.0f} tokens vs bound {h['mip']['bound_tokens']:.0f}.", "",
            "| run | makespan (s) | utilisation |", "|---|---:|---:|"]
    out += [f"| {k} | {v['makespan_s']:.1f} | {v['utilisation']:.1%} |" for k, v in hr.items()]
    out += [f"| T_LB | {h['t_lb_s']:.1f} | |", "", "## Where we differ, and why", "", *CAVEATS, "",
            "## WID1-3 (TimelyLLM Table 3), all policies", "",
            f"Mean over {R['seeds']} seed(s). ![WID1-3]({fig_rel})", "", wid_table(R["wid"]), ""]
    return "\n".join(out)


def run_all(out: Path, quick: bool, seeds: int, mip_seconds: float) -> dict[str, Any]:
    R: dict[str, Any] = {"quick": quick, "seeds": seeds}
    R["trail_ltr"] = trail_ltr(quick)
    R["lamps"] = lamps(quick)
    R["hybrid"] = hybrid(quick, mip_seconds)
    R["wid"] = wid(quick, seeds)
    write_json(out / "results.json", R)
    figure(R["wid"], out / "wid_policies.png")
    (out / "report.md").write_text(render(R, "wid_policies.png"))
    return R


def run(args: argparse.Namespace) -> int:
    R = run_all(args.out, args.quick, 1 if args.quick else args.seeds, args.mip_seconds)
    for w, res in R["wid"].items():
        print(w)
        print(format_table(res))
    print(f"wrote {args.out / 'report.md'}")
    return 0
