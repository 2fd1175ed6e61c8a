"""``timely-fleet paper``: TimelyLLM's evaluation (Sec. 7) in the simulator, as a markdown report.

    timely-fleet paper                    # out/paper/report.md + figures, ~2-4 min on 2 cores
    timely-fleet paper --quick --out /tmp/p   # shortened workloads, 1 seed (tests)

Experiments (all on the simulated engine: the real Planner over the ``--calibration`` engine,
default ``paper-vllm`` = the paper's Llama3-8B served by vLLM on an RTX 4090, Phi-3-mini's
Table 1 profile for chat; simulated robots, one plan per robot with Table 3's agent counts, 8 ms
network). Every experiment whose result depends on the admission runs under both rules, the
literal TimelyLLM 4.4 rule and ours (improved; :mod:`llm_planner_node.core.batching`); the
figures show the literal rule (the paper's), the headline table both:

- Headline table: every TimelyLLM headline (Fig. 5a, 5d, 7, 8, 9, 10, Tables 4 and 5) beside the
  paper's number, ours under both rules, with the calibration's source.
- Fig. 5: WID1 (Fig. 5a) and WID2 (Fig. 5d), exactly Table 3, per task type, vllm / vllm-stream
  / timelyllm, utility as % of beta; WID2 at 4x the event rate as an extra stress line.
- Fig. 7: maximum batch size 1..16 on WID2, vllm vs timelyllm (mean utility, 2 seeds; a fixed
  batch replaces the admission, so both rules give the same numbers).
- Fig. 8: seg-fcfs / seg-edf / timelyllm on WID2.
- Admission rules side by side: every segmented policy on WID1, WID2 and the stress line.
- Fig. 9: WID3 (arm), per trace, vllm / vllm-stream / timelyllm utility and waiting.
- Fig. 10: chat (WritingPrompts-style) with Phi-3 and Llama3: vllm, TimelyLLM-Sen, TimelyLLM-Para.
- Tables 4-5: segmentation and scheduling overheads (the project's benchmarks).
- Headline ratios timelyllm vs vllm on WID1/2/3 beside the paper's numbers.
- Best-found schedule search on small bursts (:mod:`.upper_bound`; a feasible schedule, so a
  lower bound on the optimum) and the real upper bound (:mod:`.bound_milp`).

Results are averaged over ``--seeds`` seeds (workload arrivals and robot draws).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from timely_robot.logging_setup import add_log_level_argument, configure_logging, run_steps
from llm_planner_node.engines.sim_traces import TRACES
from timely_tools.sim.workload import Arrival
from timely_tools.evaluation.eval_cmd import run_sim
from timely_tools.evaluation.results import FIELDS, write_json
from timely_tools.evaluation.workload_spec import EvalSpec, compose, load_spec

PAPER = {
    "urgent_low_timelyllm_pct": 81.5, "urgent_low_vllm_pct": 59.5,
    "urgent_high_gain_pct": 191.0,
    "batch_peak_timelyllm": (1.21, 6), "batch_peak_vllm": (0.74, 12),
    "urgent_vs_segfcfs_pct": 183.0, "urgent_vs_segedf_pct": 142.0,
    "arm_desk_utility_x": 1.97, "arm_desk_waiting_reduction_pct": 84.0,
    "chat_utility_x": 21.57, "chat_delay_reduction_pct": 96.0,
    "table4_ms": {1: 13.7, 2: 24.1, 3: 19.9, 4: 19.9, 5: 16.0, 6: 13.1, 7: 14.4, 8: 14.8},
    "table4_pct": {1: 3.0, 2: 2.6, 3: 5.6, 4: 2.8, 5: 3.2, 6: 3.7, 7: 4.1, 8: 4.2},
    "table5_ms": {1: 0.58, 2: 0.83, 4: 1.25, 6: 1.58, 8: 2.03},
}
HIGH_LOAD_EPS_FACTOR = 4.0  # the extra stress line (not a paper workload)
RULES = ("literal", "improved")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/paper", help="output directory (default out/paper)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds to average (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="short workloads, 1 seed, coarse sweep, small best-found search (for tests)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress lines on stderr (one per finished experiment)")
    from timely_tools.evaluation.eval_cmd import add_calibration_argument

    add_calibration_argument(parser)
    add_log_level_argument(parser)


# ----------------------------------------------------------------------------- helpers

def _avg(runs: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Average per-policy results over seeds (field-wise mean of each task type's metrics)."""
    out = []
    for i, first in enumerate(runs[0]):
        tts: dict[str, dict[str, Any]] = {}
        for tt in first["task_types"]:
            vals = {}
            for f in FIELDS:
                xs = [r[i]["task_types"].get(tt, {}).get(f) for r in runs]
                xs = [x for x in xs if x is not None]
                vals[f] = (int(sum(xs)) if f in ("goals", "completed") else float(np.mean(xs))) if xs else None
            tts[tt] = vals
        out.append({"policy": first["policy"], "task_types": tts, "seeds": len(runs),
                    "agents": first.get("agents")})  # one plan per robot: the first seed's counts
    return out


def _get(results: list[dict[str, Any]], policy: str, tt: str, f: str) -> float:
    for r in results:
        if r["policy"] == policy:
            v = r["task_types"].get(tt, {}).get(f)
            return float("nan") if v is None else float(v)
    return float("nan")


def _ratio(a: float, b: float) -> float:
    """a / b; n/a (nan) unless b > 0 (a utility ratio over a negative baseline means nothing)."""
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else float("nan")


def _fmt(x: float, f: str = ".2f") -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, f)


class _Plot:
    def __init__(self, out: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.plt, self.out = plt, out

    def bars(self, name: str, groups: Sequence[str], series: dict[str, Sequence[float]], ylabel: str,
             title: str) -> str:
        fig, ax = self.plt.subplots(figsize=(max(5.0, 1.5 * len(groups) + 1.5), 3.3))
        w = 0.8 / max(1, len(series))
        for i, (label, ys) in enumerate(series.items()):
            ax.bar(np.arange(len(groups)) + i * w - 0.4 + w / 2, ys, w, label=label)
        ax.set_xticks(range(len(groups)), groups, fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(self.out / name, dpi=110)
        self.plt.close(fig)
        return name

    def lines(self, name: str, x: Sequence[int], series: dict[str, Sequence[float]], xlabel: str,
              ylabel: str, title: str) -> str:
        fig, ax = self.plt.subplots(figsize=(5.5, 3.3))
        for label, ys in series.items():
            ax.plot(x, ys, marker="o", label=label)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(self.out / name, dpi=110)
        self.plt.close(fig)
        return name


# ----------------------------------------------------------------------------- experiments

def _multi(spec: EvalSpec, policies: Sequence[str], seeds: Sequence[int],
           retype: Callable[[Arrival], Arrival] | None = None, **kw: Any) -> list[dict[str, Any]]:
    runs = []
    for s in seeds:
        arr = compose(spec, s, chat_segmentation=kw.get("chat_segmentation"))
        if retype:
            arr = [retype(a) for a in arr]
        runs.append(run_sim(spec, policies, s, arrivals=arr, max_batch=kw.get("max_batch"),
                            admission=kw.get("admission")))
    return _avg(runs)


def _arm_by_trace(a: Arrival) -> Arrival:
    desc = a.goal.instruction or a.goal.task_type
    short = {"object stacking": "stacking", "desk cleaning": "desk-clean",
             "fruit and vegetable classification": "fruit-veg"}.get(desc, desc)
    return Arrival(a.t, replace(a.goal, task_type=short))


def _overheads(quick: bool, spec: EvalSpec | None = None) -> dict[str, Any]:
    from timely_tools.decision_cost import measure

    t5 = measure("timelyllm", sizes=(1, 2, 4, 6, 8), rounds=3 if quick else 5,
                 min_round_s=0.005 if quick else 0.02)
    t4 = []
    try:
        from llm_planner_node.segmenters import get_segmenter, segment_all

        for tid in range(1, 9):
            tr = TRACES[tid]
            text = " ".join(s.text for s in tr.prompt.segments)
            pieces = [text[i:i + 2] for i in range(0, len(text), 2)]
            reps = 20 if quick else 200
            segment_all(get_segmenter("minispec"), pieces)  # warm-up (imports, regex compilation)
            t0 = time.perf_counter()
            for _ in range(reps):
                segs = segment_all(get_segmenter("minispec"), pieces)
            ms = 1e3 * (time.perf_counter() - t0) / reps
            tokens = sum(s.n_tokens for s in tr.prompt.segments)
            # the plan generated alone on the calibrated engine: prefill of its whole prompt
            # (token 0), then one decode per further token
            m = (spec.engine_config() if spec is not None else load_spec("WID1").engine_config()).iteration
            gen_ms = 1e3 * (m.time(tr.prompt.prompt_tokens, 0) + (tokens - 1) * m.time(0, 1))
            t4.append({"trace": tid, "segments": len(segs), "tokens": tokens, "ours_ms": ms,
                       "ours_pct": 100 * ms / gen_ms, "paper_ms": PAPER["table4_ms"][tid],
                       "paper_pct": PAPER["table4_pct"][tid]})
    except Exception as e:  # noqa: BLE001 - report instead of failing the whole run
        t4 = [{"error": f"{type(e).__name__}: {e}"}]
    return {"table4": t4, "table5": t5}


def run_all(out: Path, seeds: int = 3, quick: bool = False, progress: bool = True,
            calibration: str | None = None) -> dict[str, Any]:
    from llm_planner_node.engines.calibration import DEFAULT_CALIBRATION

    out.mkdir(parents=True, exist_ok=True)
    cal = calibration or DEFAULT_CALIBRATION
    seeds_l = list(range(1 if quick else seeds))
    dur = (lambda s: s.with_(duration_s=min(s.duration_s, 80.0))) if quick else (lambda s: s)
    wid1, wid2, wid3, chat = (dur(load_spec(w)).with_(calibration=cal) for w in ("WID1", "WID2", "WID3", "CHAT"))
    stress = wid2.with_(name=f"WID2 x{HIGH_LOAD_EPS_FACTOR:g} eps (stress, not a paper workload)",
                        eps=wid2.eps * HIGH_LOAD_EPS_FACTOR)
    base3 = ["vllm", "vllm-stream", "timelyllm"]
    seg = ["vllm-stream", "seg-fcfs", "seg-edf", "timelyllm"]
    steps: list[tuple[str, Callable[[], Any]]] = []
    R: dict[str, Any] = {"seeds": seeds_l, "quick": quick, "paper": {k: v for k, v in PAPER.items()},
                         "calibration": wid1.calibration_info(), "chat_calibration": chat.calibration_info(),
                         "rules": {r: {} for r in RULES}}

    def per_rule(rule: str) -> None:
        X = R["rules"][rule]
        X["fig5_low"] = _multi(wid1, ["vllm", *seg], seeds_l, admission=rule)
        X["wid2"] = _multi(wid2, ["vllm", *seg], seeds_l, admission=rule)  # Fig. 5d and Fig. 8
        X["stress"] = _multi(stress, ["vllm", *seg], seeds_l, admission=rule)
        X["fig9"] = _multi(wid3, base3, seeds_l, _arm_by_trace, admission=rule)
        f10 = {}
        for model in ("phi3", "llama3-8b"):
            spec = chat.with_(engine_model=model)
            sen = _multi(spec, ["vllm", "timelyllm"], seeds_l, chat_segmentation="sentence", admission=rule)
            para = _multi(spec, ["timelyllm"], seeds_l, chat_segmentation="paragraph", admission=rule)
            f10[model] = {"vllm": sen[0], "timelyllm-sen": sen[1], "timelyllm-para": para[0]}
        X["fig10"] = f10

    for rule in RULES:
        steps.append((f"Fig. 5, 8, 9, 10 and stress, {rule} admission", lambda rule=rule: per_rule(rule)))
    batches = [1, 2, 4, 6, 8, 12, 16] if quick else list(range(1, 17))

    def sweep() -> None:
        sw: dict[str, list[float]] = {"vllm": [], "timelyllm": []}
        for b in batches:
            res = _multi(wid2, list(sw), seeds_l[:2], max_batch=b)
            for p in sw:
                sw[p].append(_get(res, p, "all", "mean_utility"))
        R["fig7"] = {"batches": batches, "mean_utility": sw}
    steps.append(("fig7 batch sweep", sweep))
    steps.append(("tables 4-5", lambda: R.__setitem__("overheads", _overheads(quick, wid1))))

    def ub() -> None:
        from timely_tools.evaluation.bound_milp import bound_by_type
        from timely_tools.evaluation.upper_bound import best_found

        cases = []
        pols = ["vllm", "vllm-stream", "seg-fcfs", "seg-edf", "timelyllm"]
        n = 4 if quick else 6
        burst_arr = compose(wid2.with_(eps=5.0, duration_s=2.0), 1)[:n]
        burst = [Arrival(0.0, a.goal) for a in burst_arr]
        chat_arr = [Arrival(0.2 * i, a.goal) for i, a in enumerate(compose(chat, 0)[: (3 if quick else 5)])]
        for label, arr, eng in ((f"burst of {n} drone goals at t=0", burst, wid2),
                                (f"{len(chat_arr)} chat requests 0.2 s apart (Phi-3)", chat_arr, chat)):
            from timely_tools.sim.simulation import simulate

            per = {p: simulate(arr, p, engine_config=eng.engine_config(),
                               planner_config=eng.planner_config()).by_type("all").mean_utility for p in pols}
            bf = best_found(arr, policies=pols, batches=(1, None) if quick else (1, 2, 4, None),
                            engine_config=eng.engine_config(), planner_config=eng.planner_config())
            cases.append({"case": label, "goals": len(arr), "policies": per,
                          "best_found_mean_utility": bf.mean_utility, "best_source": bf.source,
                          "best_order": bf.order, "best_max_batch": bf.max_batch,
                          "candidates": bf.candidates, "exhaustive": bf.exhaustive,
                          "bound": bound_by_type(arr, eng.engine_config(), eng.planner_config())["all"]})
        R["best_found"] = cases
        R["upper_bound"] = cases  # deprecated key (the search is not a bound): use "best_found"
    steps.append(("best found", ub))

    t0 = time.perf_counter()
    run_steps(steps, "paper", show=progress)  # a line per finished experiment on stderr
    R["wall_s"] = time.perf_counter() - t0
    lit = R["rules"]["literal"]
    # the figures show the paper's (literal) rule; the headline table shows both
    R["fig5_low"] = _pick(lit["fig5_low"], base3)
    R["fig5_high"] = _pick(lit["wid2"], base3)
    R["fig8"] = _pick(lit["wid2"], ["seg-fcfs", "seg-edf", "timelyllm"])
    R["wid2"] = _pick(lit["wid2"], ["vllm", "timelyllm"])
    R["fig9"], R["fig10"] = lit["fig9"], lit["fig10"]
    R["admission_rules"] = {label: {rule: _pick(R["rules"][rule][key], seg) for rule in RULES}
                            for label, key in (("WID1", "fig5_low"), ("WID2", "wid2"), ("stress", "stress"))}
    R["specs"] = {"WID1": wid1.as_dict(), "WID2": wid2.as_dict(), "high": wid2.as_dict(), "stress": stress.as_dict(),
                  "WID3": wid3.as_dict(), "CHAT": chat.as_dict()}
    R["headlines"] = headlines(R)
    write_json(out / "results.json", R)
    (out / "report.md").write_text(render(R, out))
    return R


def _pick(res: list[dict[str, Any]], policies: Sequence[str]) -> list[dict[str, Any]]:
    by = {r["policy"]: r for r in res}
    return [by[p] for p in policies if p in by]


def headlines(R: dict[str, Any]) -> list[dict[str, Any]]:
    """Every TimelyLLM headline beside the paper's number, ours under both admission rules."""
    rows: list[dict[str, Any]] = []

    def add(fig: str, what: str, paper: str, fn: Callable[[dict[str, Any]], str], same: bool = False) -> None:
        row = {"figure": fig, "metric": what, "paper": paper}
        for rule in RULES:
            try:
                row[rule] = fn(R["rules"][rule])
            except (KeyError, IndexError, ZeroDivisionError, TypeError, ValueError) as e:
                row[rule] = f"n/a ({type(e).__name__})"
        row["rule_independent"] = same
        rows.append(row)

    def pct(res: list, p: str, tt: str) -> float:
        return _get(res, p, tt, "utility_pct_of_beta")

    def mu(res: list, p: str, tt: str, f: str = "mean_utility") -> float:
        return _get(res, p, tt, f)

    add("Fig. 5a (WID1)", "urgent utility, % of max: timelyllm / vllm", "81.5% / 59.5%",
        lambda X: f"{_fmt(pct(X['fig5_low'], 'timelyllm', 'drone-urgent'), '.1f')}% / "
                  f"{_fmt(pct(X['fig5_low'], 'vllm', 'drone-urgent'), '.1f')}%")
    add("Fig. 5a (WID1)", "normal utility, % of max: timelyllm", "100% (the maximum)",
        lambda X: f"{_fmt(pct(X['fig5_low'], 'timelyllm', 'drone-normal'), '.1f')}%")
    add("Fig. 5d (WID2)", "urgent utility of timelyllm vs vllm", "+191%",
        lambda X: f"{_fmt(100 * (_ratio(mu(X['wid2'], 'timelyllm', 'drone-urgent'), mu(X['wid2'], 'vllm', 'drone-urgent')) - 1), '+.0f')}% "
                  f"({_fmt(pct(X['wid2'], 'timelyllm', 'drone-urgent'), '.1f')}% vs {_fmt(pct(X['wid2'], 'vllm', 'drone-urgent'), '.1f')}% of max)")
    add("stress (WID2 x4 eps; not in the paper)", "urgent utility of timelyllm vs vllm", "-",
        lambda X: f"{_fmt(100 * (_ratio(mu(X['stress'], 'timelyllm', 'drone-urgent'), mu(X['stress'], 'vllm', 'drone-urgent')) - 1), '+.0f')}% "
                  f"({_fmt(pct(X['stress'], 'timelyllm', 'drone-urgent'), '.1f')}% vs {_fmt(pct(X['stress'], 'vllm', 'drone-urgent'), '.1f')}%)")
    f7 = R.get("fig7")
    if f7:
        pk = {p: (float(np.nanmax(ys)), f7["batches"][int(np.nanargmax(ys))]) for p, ys in f7["mean_utility"].items()}
        txt = f"timelyllm {pk['timelyllm'][0]:.2f} at {pk['timelyllm'][1]}, vllm {pk['vllm'][0]:.2f} at {pk['vllm'][1]}"
        add("Fig. 7 (WID2)", "peak mean utility over max batch 1..16", "timelyllm 1.21 at 6, vllm 0.74 at 12",
            lambda X: txt, same=True)
    add("Fig. 8 (WID2)", "urgent utility of timelyllm relative to seg-fcfs / seg-edf", "183% / 142%",
        lambda X: f"{_fmt(100 * _ratio(mu(X['wid2'], 'timelyllm', 'drone-urgent'), mu(X['wid2'], 'seg-fcfs', 'drone-urgent')), '.0f')}% / "
                  f"{_fmt(100 * _ratio(mu(X['wid2'], 'timelyllm', 'drone-urgent'), mu(X['wid2'], 'seg-edf', 'drone-urgent')), '.0f')}%")
    add("Fig. 8 (WID2)", "normal utility, % of max: seg-fcfs / seg-edf / timelyllm", "FCFS best on normal; EDF neglects normal",
        lambda X: " / ".join(f"{_fmt(pct(X['wid2'], p, 'drone-normal'), '.1f')}%" for p in ("seg-fcfs", "seg-edf", "timelyllm")))
    add("Fig. 9 (WID3)", "desk cleaning: utility timelyllm / vllm; waiting change", "x1.97; -84%",
        lambda X: f"x{_fmt(_ratio(mu(X['fig9'], 'timelyllm', 'desk-clean'), mu(X['fig9'], 'vllm', 'desk-clean')))} "
                  f"({_fmt(mu(X['fig9'], 'timelyllm', 'desk-clean'))} vs {_fmt(mu(X['fig9'], 'vllm', 'desk-clean'))}); "
                  f"{_fmt(100 * (_ratio(mu(X['fig9'], 'timelyllm', 'desk-clean', 'mean_waiting_s'), mu(X['fig9'], 'vllm', 'desk-clean', 'mean_waiting_s')) - 1), '+.0f')}%")
    add("Fig. 10 (chat, Phi-3)", "TimelyLLM-Sen vs vllm: utility; delay change", "up to x21.57; -96%",
        lambda X: (lambda ph: f"{_fmt(ph['timelyllm-sen']['task_types']['all']['mean_utility'])} vs "
                   f"{_fmt(ph['vllm']['task_types']['all']['mean_utility'])}; "
                   f"{_fmt(100 * (_ratio(ph['timelyllm-sen']['task_types']['all']['mean_waiting_s'], ph['vllm']['task_types']['all']['mean_waiting_s']) - 1), '+.0f')}%")(X["fig10"]["phi3"]))
    ov = R.get("overheads")
    if ov:
        t4 = [r for r in ov["table4"] if "error" not in r]
        if t4:
            txt4 = (f"{min(r['ours_ms'] for r in t4):.3f}-{max(r['ours_ms'] for r in t4):.3f} ms "
                    f"({min(r['ours_pct'] for r in t4):.3f}-{max(r['ours_pct'] for r in t4):.3f}%; segmenter only, simulated)")
            add("Table 4", "segmentation overhead per trace", "13.1-24.1 ms (2.6-5.6%)", lambda X: txt4, same=True)
        t5 = {r["queued"]: r["ours_ms"] for r in ov["table5"]}
        txt5 = f"{t5.get(1, float('nan')):.4f} ms (1 task) to {t5.get(8, float('nan')):.4f} ms (8 tasks)"
        add("Table 5", "one scheduling decision", "0.58 ms (1 task) to 2.03 ms (8 tasks)", lambda X: txt5, same=True)
    return rows


# ----------------------------------------------------------------------------- report

def headline(R: dict[str, Any]) -> list[dict[str, Any]]:
    """timelyllm vs vllm ratios on WID1/WID2/WID3 (urgent utility; WID3 has no urgent: all)."""
    rows = []
    for wid, res, tt in (("WID1", R["fig5_low"], "drone-urgent"), ("WID2", R["wid2"], "drone-urgent"),
                         ("WID3", R["fig9"], "all")):
        rows.append({
            "workload": wid, "task_type": tt,
            "utility_x": _ratio(_get(res, "timelyllm", tt, "mean_utility"), _get(res, "vllm", tt, "mean_utility")),
            "urgent_pct_timelyllm": _get(res, "timelyllm", tt, "utility_pct_of_beta"),
            "urgent_pct_vllm": _get(res, "vllm", tt, "utility_pct_of_beta"),
            "response_x": _ratio(_get(res, "timelyllm", "all", "mean_response_s"), _get(res, "vllm", "all", "mean_response_s")),
            "waiting_x": _ratio(_get(res, "timelyllm", "all", "mean_waiting_s"), _get(res, "vllm", "all", "mean_waiting_s")),
        })
    return rows


def headline_table(R: dict[str, Any]) -> str:
    rows = R.get("headlines") or headlines(R)
    lines = ["| figure | metric | paper | ours, literal 4.4 admission | ours, improved admission |",
             "|---|---|---|---|---|"]
    for r in rows:
        imp = "(same: no admission involved)" if r.get("rule_independent") else r["improved"]
        lines.append(f"| {r['figure']} | {r['metric']} | {r['paper']} | {r['literal']} | {imp} |")
    return "\n".join(lines) + "\n"


def render(R: dict[str, Any], out: Path) -> str:
    P = _Plot(out)
    L: list[str] = []
    w = L.append
    w("# TimelyLLM evaluation, reproduced in the simulator\n")
    cal = R.get("calibration", {})
    w(f"Generated by `timely-fleet paper{' --quick' if R['quick'] else ''}"
      f"{'' if cal.get('name') == 'paper-vllm' else ' --calibration ' + str(cal.get('path') or cal.get('name'))}` "
      f"in {R['wall_s']:.0f} s; {len(R['seeds'])} seed(s) averaged; simulated robots with the execution-time "
      "table, one plan per robot with Table 3's agent counts (a task for a busy robot goes to a free "
      "one of its kind or waits), 8 ms network; prefix cache for the pre-stored skill-set prompt.\n")
    w(f"**Calibration** (robot workloads): {cal.get('description', '?')}\n")
    if R.get("chat_calibration"):
        w(f"**Chat calibration** (Fig. 10, Phi-3): {R['chat_calibration']['description']}\n")
    w("## Every headline beside the paper's number\n")
    w("Workloads exactly as in Table 3 (WID1 for Fig. 5a, WID2 for Fig. 5d, 7 and 8, WID3 for Fig. 9); "
      "the stress line (WID2 at 4x the event rate) is ours, not the paper's. Each column uses one "
      "admission rule for every segmented policy: *literal* = TimelyLLM 4.4 as written (the paper's "
      "system), *improved* = ours (`core/batching.py`). The figures below show the literal rule.\n")
    w(headline_table(R))
    st = next((r.get("agents") for r in R["rules"]["literal"].get("stress", []) if r["policy"] == "vllm"), None)
    w2 = next((r.get("agents") for r in R["rules"]["literal"].get("wid2", []) if r["policy"] == "vllm"), None)
    if st and w2:
        n_st = _get(R["rules"]["literal"]["stress"], "vllm", "all", "goals")
        n_w2 = _get(R["rules"]["literal"]["wid2"], "vllm", "all", "goals")
        w(f"\nThe stress line is bounded by the fleet, not the engine: with one plan per robot and "
          f"WID2's 42 drones, {st['waited']} of {n_st:.0f} tasks wait for a free robot (mean "
          f"{st['mean_wait_s']:.0f} s; WID2: {w2['waited']} of {n_w2:.0f}, mean {w2['mean_wait_s']:.1f} s), "
          "so goals reach the planner at the rate robots free up and the urgent utilities are higher "
          "than on WID2. Response times count from when a robot takes the task.\n")
    w("**Read this first.** The paper's absolute numbers come from a real GPU, HF/vLLM engines, "
      "real Tello/Indy7 execution profiles and its own (unpublished) plans. Ours come from a "
      "calibrated model of that engine with our own LRTrace-like plans (~20 tokens drone, ~100 "
      "arm). Our engine is lighter-loaded than the paper's at the same Table 3 arrival rates: "
      "segments are short, the shared prompt is prefix-cached, and batching costs only 0.2 ms per "
      "extra sequence, so queues rarely build up on WID1. Compare *directions and ratios*, not "
      "absolute values; differences are discussed under each figure.\n")

    # headline
    hl = headline(R)
    R["headline"] = hl
    w("## Ratios: timelyllm vs vllm (literal admission)\n")
    w("| workload | task type | utility (% of beta) timelyllm / vllm | utility ratio | response ratio | waiting ratio | paper |")
    w("|---|---|---|---|---|---|---|")
    paper_txt = {"WID1": "urgent 81.5% vs 59.5% (x1.37)",
                 "WID2": "Fig. 5d: urgent utility +191% (x2.91)",
                 "WID3": "desk cleaning utility x1.97, waiting -84% (x0.16)"}
    for r in hl:
        w(f"| {r['workload']} | {r['task_type']} | {_fmt(r['urgent_pct_timelyllm'], '.1f')}% / "
          f"{_fmt(r['urgent_pct_vllm'], '.1f')}% | x{_fmt(r['utility_x'])} | x{_fmt(r['response_x'])} | "
          f"x{_fmt(r['waiting_x'])} | {paper_txt[r['workload']]} |")
    w("\nRatios are timelyllm / vllm of the mean (utility: higher is better; response and robot "
      "waiting: lower is better). A utility ratio is n/a when vllm's mean utility is <= 0: our "
      "TUF is not clipped at zero (core/tuf.py), and on WID3 vllm's ~2.3 s whole-plan wait for "
      "~100-token arm plans gives negative utility; compare the % of beta column instead.\n")

    # fig 5
    w("## Fig. 5: utility per task type, low and high load\n")
    for key, title in (("fig5_low", f"Fig. 5a ({R['specs']['WID1']['name']})"),
                       ("fig5_high", f"Fig. 5d ({R['specs']['WID2']['name']})")):
        res = R[key]
        tts = list(res[0]["task_types"])
        name = P.bars(f"fig5_{key.split('_')[1]}.png", tts,
                      {r["policy"]: [_get(res, r["policy"], t, "utility_pct_of_beta") for t in tts] for r in res},
                      "utility (% of beta)", f"Fig. 5 {title}")
        w(f"![{title}]({name})\n")
        w(_table(res))
    lo_t, lo_v = (_get(R["fig5_low"], p, "drone-urgent", "utility_pct_of_beta") for p in ("timelyllm", "vllm"))
    hi_t, hi_v = (_get(R["fig5_high"], p, "drone-urgent", "mean_utility") for p in ("timelyllm", "vllm"))
    w(f"Urgent tasks, WID1: timelyllm {_fmt(lo_t, '.1f')}% of beta vs vllm {_fmt(lo_v, '.1f')}% "
      f"(paper: 81.5% vs 59.5%). WID2: urgent utility "
      f"{_fmt(100 * (_ratio(hi_t, hi_v) - 1), '+.0f')}% vs vllm (paper: +191%). "
      "vllm-stream is not in the paper's Fig. 5 headline; in our simulator it is as good as "
      "timelyllm at these loads because drone plans are short (a whole plan is ~20 tokens, "
      "~0.5 s), so streaming alone removes most of vllm's wait.\n")

    # fig 7
    f7 = R["fig7"]
    name = P.lines("fig7_batch.png", f7["batches"], f7["mean_utility"], "maximum batch size",
                   "mean utility (all goals)", f"Fig. 7: batch sweep, {R['specs']['WID2']['name']}")
    w("## Fig. 7: maximum batch size sweep\n")
    w(f"![batch sweep]({name})\n")
    w("| max batch | " + " | ".join(str(b) for b in f7["batches"]) + " |")
    w("|---|" + "---|" * len(f7["batches"]))
    for p, ys in f7["mean_utility"].items():
        w(f"| {p} | " + " | ".join(_fmt(y) for y in ys) + " |")
    pk = {p: (max(ys), f7["batches"][int(np.nanargmax(ys))]) for p, ys in f7["mean_utility"].items()}
    R["fig7_peaks"] = pk
    w(f"\nPeak: timelyllm {_fmt(pk['timelyllm'][0])} at batch {pk['timelyllm'][1]}, vllm "
      f"{_fmt(pk['vllm'][0])} at batch {pk['vllm'][1]} (paper: 1.21 at 6 vs 0.74 at 12). "
      "timelyllm uses its latency-guided admission below the cap, so larger caps do not hurt it.\n")

    # fig 8
    res = R["fig8"]
    tts = list(res[0]["task_types"])
    name = P.bars("fig8_segmented.png", tts,
                  {r["policy"]: [_get(res, r["policy"], t, "utility_pct_of_beta") for t in tts] for r in res},
                  "utility (% of beta)", f"Fig. 8: segmented baselines, {R['specs']['high']['name']}")
    w("## Fig. 8: seg-fcfs / seg-edf / timelyllm\n")
    w(f"![segmented baselines]({name})\n")
    w(_table(res))
    u = {p: _get(res, p, "drone-urgent", "mean_utility") for p in ("seg-fcfs", "seg-edf", "timelyllm")}
    w(f"Urgent utility of timelyllm relative to seg-fcfs {_fmt(100 * _ratio(u['timelyllm'], u['seg-fcfs']), '.0f')}% "
      f"and seg-edf {_fmt(100 * _ratio(u['timelyllm'], u['seg-edf']), '.0f')}% (paper: 183% and 142%). "
      "All three use the same admission here (literal); see the next section for both rules.\n")

    # admission rules side by side
    if "admission_rules" in R:
        w("## Admission rules side by side (literal TimelyLLM 4.4 vs improved)\n")
        w("Every segmented policy uses the same admission in each column: *literal* = the paper's "
          "4.4 rule as written (one admission per engine step while the most urgent running "
          "generation's WCET fits its remaining budget, late ones included); *improved* = ours "
          "(`core/batching.py`: late generations unprotected, the batch filled to 32, 16 "
          "admissions per step, late goals generated without suspending). Urgent utility, % of beta:\n")
        w("| workload | policy | literal | improved |")
        w("|---|---|---|---|")
        ar = R["admission_rules"]
        for label, by_rule in ar.items():
            for r in by_rule["literal"]:
                p = r["policy"]
                w(f"| {R['specs'].get(label, R['specs']['WID1'])['name']} | {p} | "
                  f"{_fmt(_get(by_rule['literal'], p, 'drone-urgent', 'utility_pct_of_beta'), '.1f')} | "
                  f"{_fmt(_get(by_rule['improved'], p, 'drone-urgent', 'utility_pct_of_beta'), '.1f')} |")
        lit = {p: _get(ar["WID1"]["literal"], p, "drone-urgent", "utility_pct_of_beta")
               for p in ("seg-fcfs", "seg-edf", "timelyllm")}
        ok = lit["timelyllm"] > lit["seg-edf"] > lit["seg-fcfs"]
        R["wid1_literal_ordering_holds"] = ok
        hi = {p: _get(ar["WID2"]["literal"], p, "drone-urgent", "mean_utility") for p in ("seg-fcfs", "seg-edf", "timelyllm")}
        w(f"\nWID1, literal rule: urgent utility timelyllm {_fmt(lit['timelyllm'], '.1f')}% > seg-edf "
          f"{_fmt(lit['seg-edf'], '.1f')}% > seg-fcfs {_fmt(lit['seg-fcfs'], '.1f')}%: the paper's ordering "
          f"{'holds' if ok else 'does NOT hold'} (paper: timelyllm 81.5%). WID2, literal rule: "
          f"timelyllm's urgent utility is {_fmt(100 * _ratio(hi['timelyllm'], hi['seg-fcfs']), '.0f')}% of "
          f"seg-fcfs's and {_fmt(100 * _ratio(hi['timelyllm'], hi['seg-edf']), '.0f')}% of seg-edf's (paper: "
          "183% and 142%). With the improved rule the engine is kept busy and every segmented policy "
          "serves the urgent goals of these loads near their maximum, so the order matters less; "
          "the order's value shows under overload (`timely-fleet bench overload`).\n")

    # fig 9
    res = R["fig9"]
    tts = [t for t in res[0]["task_types"]]
    n1 = P.bars("fig9_utility.png", tts,
                {r["policy"]: [_get(res, r["policy"], t, "mean_utility") for t in tts] for r in res},
                "mean time utility", "Fig. 9a: arm (WID3) utility")
    n2 = P.bars("fig9_waiting.png", tts,
                {r["policy"]: [_get(res, r["policy"], t, "mean_waiting_s") for t in tts] for r in res},
                "mean robot waiting (s)", "Fig. 9b: arm (WID3) waiting")
    w("## Fig. 9: robot arm (WID3)\n")
    w(f"![arm utility]({n1}) ![arm waiting]({n2})\n")
    w(_table(res))
    du = _ratio(_get(res, "timelyllm", "desk-clean", "mean_utility"), _get(res, "vllm", "desk-clean", "mean_utility"))
    dw = _ratio(_get(res, "timelyllm", "desk-clean", "mean_waiting_s"), _get(res, "vllm", "desk-clean", "mean_waiting_s"))
    w(f"Desk cleaning: utility x{_fmt(du)} (n/a = vllm's mean utility <= 0, our TUF is not clipped "
      f"at zero) and waiting {_fmt(100 * (dw - 1), '+.0f')}% vs vllm (paper: x1.97 and -84%). "
      "Waiting equals response here because every later segment is ready before the previous "
      "one finishes executing (arm skills take seconds, segments ~0.2 s to generate).\n")

    # fig 10
    f10 = R["fig10"]
    w("## Fig. 10: chatbot (WritingPrompts-style stories)\n")
    groups = list(f10)
    series_u = {k: [_get([f10[m][k]], f10[m][k]["policy"], "all", "mean_utility") for m in groups]
                for k in ("vllm", "timelyllm-sen", "timelyllm-para")}
    series_w = {k: [_get([f10[m][k]], f10[m][k]["policy"], "all", "mean_waiting_s") for m in groups]
                for k in ("vllm", "timelyllm-sen", "timelyllm-para")}
    n1 = P.bars("fig10_utility.png", groups, series_u, "mean time utility", "Fig. 10a: chat utility")
    n2 = P.bars("fig10_waiting.png", groups, series_w, "mean waiting (s)", "Fig. 10b: chat waiting")
    w(f"![chat utility]({n1}) ![chat waiting]({n2})\n")
    w("| model | policy | utility | % of beta | response (s) | waiting (s) |")
    w("|---|---|---|---|---|---|")
    for m in groups:
        for k in ("vllm", "timelyllm-sen", "timelyllm-para"):
            d = f10[m][k]["task_types"]["all"]
            w(f"| {m} | {k} | {_fmt(d['mean_utility'])} | {_fmt(d['utility_pct_of_beta'], '.0f')} | "
              f"{_fmt(d['mean_response_s'])} | {_fmt(d['mean_waiting_s'])} |")
    ph = f10["phi3"]
    ut = ph["timelyllm-sen"]["task_types"]["all"]["mean_utility"]
    uv = ph["vllm"]["task_types"]["all"]["mean_utility"]
    wt = _ratio(ph["timelyllm-sen"]["task_types"]["all"]["mean_waiting_s"], ph["vllm"]["task_types"]["all"]["mean_waiting_s"])
    w(f"\nPhi-3, TimelyLLM-Sen vs vllm: utility {_fmt(ut)} vs {_fmt(uv)}, delay {_fmt(100 * (wt - 1), '+.0f')}% "
      "(paper: up to 21.57x utility, -96% delay). Our TUF is not clipped at zero (core/tuf.py), so "
      "vllm's whole-story wait of several seconds gives *negative* utility and a ratio is not "
      "meaningful; the difference in utility and the delay reduction are the comparable numbers. "
      "Sentence segmentation beats paragraph segmentation, as in the paper.\n")

    # tables 4-5
    ov = R["overheads"]
    w("## Tables 4-5: overheads\n")
    w("Table 4 (segmentation / stop checking per plan; ours = MiniSpec segmenter over the plan "
      "fed in 2-character pieces, % of the simulated generation time of that plan):\n")
    if ov["table4"] and "error" not in ov["table4"][0]:
        w("| trace | ours (ms) | ours (%) | paper (ms) | paper (%) |")
        w("|---|---|---|---|---|")
        for r in ov["table4"]:
            w(f"| {r['trace']} | {r['ours_ms']:.3f} | {r['ours_pct']:.2f} | {r['paper_ms']} | {r['paper_pct']} |")
        w("\nThe paper's 13-24 ms per trace includes its detokenize-and-regex stop checker in "
          "Python around HF generate; ours is an incremental parser costing microseconds per token.\n")
    else:
        w(f"Not measured: {ov['table4'][0]['error']}\n")
    w("Table 5 (one scheduling decision, timelyllm, 4 running generations):\n")
    w("| queued | ours (ms) | paper (ms) |")
    w("|---|---|---|")
    for r in ov["table5"]:
        w(f"| {r['queued']} | {r['ours_ms']:.4f} | {r['paper_ms']} |")

    # best found and the bound
    w("\n## Distance to a best-found schedule (small workloads)\n")
    w("Best-found = max over every fixed priority order of the goals (all n! permutations, "
      "segmented generation with early dispatch) x maximum batch sizes, and the named policies' "
      "own schedules, in the same simulator. It is not provably optimal (schedules that change "
      "priorities over time are not searched).\n")
    w("Bound = the hindsight MILP over engine iterations (:mod:`bound_milp`, the same as "
      "`timely-fleet eval --bound`): a real upper bound on every schedule's mean utility.\n")
    for c in R.get("best_found", R.get("upper_bound", [])):
        mb = "" if c["best_max_batch"] is None else f", max batch {c['best_max_batch']}"
        w(f"**{c['case']}** ({c['candidates']} schedules, exhaustive over orders: {c['exhaustive']}): "
          f"best-found mean utility {_fmt(c['best_found_mean_utility'], '.3f')} (from {c['best_source']}"
          f"{mb}); bound {_fmt(c.get('bound', {}).get('mean_utility'), '.3f')}.\n")
        bnd = c.get("bound", {}).get("mean_utility")
        w("| policy | mean utility | gap to best-found | % of bound |")
        w("|---|---|---|---|")
        for p, u in c["policies"].items():
            pct = 100 * u / bnd if bnd and bnd > 0 else None
            w(f"| {p} | {_fmt(u, '.3f')} | {_fmt(c['best_found_mean_utility'] - u, '.3f')} | {_fmt(pct, '.1f')} |")
        w("")
    w("## Workloads\n")
    w("```json\n" + json.dumps(R["specs"], indent=1) + "\n```\n")
    return "\n".join(L) + "\n"


def _table(res: list[dict[str, Any]]) -> str:
    lines = ["| policy | task type | goals | utility | % of beta | resp (s) | P90 resp (s) | waiting (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res:
        for tt, m in r["task_types"].items():
            lines.append(f"| {r['policy']} | {tt} | {m['goals']} | {_fmt(m['mean_utility'], '.3f')} | "
                         f"{_fmt(m['utility_pct_of_beta'], '.1f')} | {_fmt(m['mean_response_s'], '.3f')} | "
                         f"{_fmt(m['p90_response_s'], '.3f')} | {_fmt(m['mean_waiting_s'], '.3f')} |")
    return "\n".join(lines) + "\n"


def rerender(out: Path) -> None:
    """Rewrite report.md (and figures) from an existing results.json."""
    R = json.loads((out / "results.json").read_text())
    (out / "report.md").write_text(render(R, out))


def run(args: argparse.Namespace) -> int:
    from timely_tools.evaluation.eval_cmd import with_calibration

    out = Path(args.out)
    configure_logging(args.log_level, ros=False)
    with_calibration(load_spec("WID1"), getattr(args, "calibration", None))  # a user error before anything runs
    R = run_all(out, seeds=args.seeds, quick=args.quick, progress=not args.no_progress,
                calibration=getattr(args, "calibration", None))
    print(f"wrote {out / 'report.md'} ({R['wall_s']:.0f} s)")
    print(f"calibration {R['calibration']['description']}")
    for r in R["headlines"]:
        print(f"{r['figure']}: {r['metric']}: paper {r['paper']}; literal {r['literal']}; improved {r['improved']}")
    for r in R.get("headline", []):
        print(f"{r['workload']}: utility x{_fmt(r['utility_x'])} ({r['task_type']}), "
              f"response x{_fmt(r['response_x'])}, waiting x{_fmt(r['waiting_x'])}")
    return 0
