"""``timely-fleet paper``: TimelyLLM's evaluation (Sec. 7) in the simulator, as a markdown report.

    timely-fleet paper                    # out/paper/report.md + figures, ~2-4 min on 2 cores
    timely-fleet paper --quick --out /tmp/p   # shortened workloads, 1 seed (tests)

Experiments (all on the simulated engine: the real Planner + calibrated Llama3-8B/RTX 4090
iteration model, Phi-3-mini for chat, simulated robots, 8 ms network):

- Fig. 5: WID1 (low load) and a high-load variant (WID2 with 4x the event rate), per task type,
  vllm / vllm-stream / timelyllm, utility as % of beta.
- Fig. 7: maximum batch size 1..16 on WID2, vllm vs timelyllm (mean utility, 2 seeds).
- Fig. 8: seg-fcfs / seg-edf / timelyllm on the high-load workload.
- Fig. 9: WID3 (arm), per trace, vllm / vllm-stream / timelyllm utility and waiting.
- Fig. 10: chat (WritingPrompts-style) with Phi-3 and Llama3: vllm, TimelyLLM-Sen, TimelyLLM-Para.
- Tables 4-5: segmentation and scheduling overheads (the project's benchmarks).
- Headline ratios timelyllm vs vllm on WID1/2/3 beside the paper's numbers.
- Best-found upper bound on small bursts (see :mod:`.upper_bound`).

Results are averaged over ``--seeds`` seeds (workload arrivals and robot draws).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..sim.traces import TRACES
from ..sim.workload import Arrival
from .eval_cmd import run_sim
from .results import FIELDS, write_json
from .workload_spec import EvalSpec, compose, load_spec

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
HIGH_LOAD_EPS_FACTOR = 4.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="out/paper", help="output directory (default out/paper)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds to average (default 3)")
    parser.add_argument("--quick", action="store_true",
                        help="short workloads, 1 seed, coarse sweep, small upper bound (for tests)")


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
        out.append({"policy": first["policy"], "task_types": tts, "seeds": len(runs)})
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
        runs.append(run_sim(spec, policies, s, arrivals=arr, max_batch=kw.get("max_batch")))
    return _avg(runs)


def _arm_by_trace(a: Arrival) -> Arrival:
    desc = a.goal.instruction or a.goal.task_type
    short = {"object stacking": "stacking", "desk cleaning": "desk-clean",
             "fruit and vegetable classification": "fruit-veg"}.get(desc, desc)
    return Arrival(a.t, replace(a.goal, task_type=short))


def _overheads(quick: bool) -> dict[str, Any]:
    from ..bench import scheduler_bench

    t5 = scheduler_bench.measure("timelyllm", sizes=(1, 2, 4, 6, 8), rounds=3 if quick else 5,
                                 min_round_s=0.005 if quick else 0.02)
    t4 = []
    try:
        from ..segmenters import get_segmenter, segment_all

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
            gen_ms = 1e3 * (0.328 * 0 + 0.022 * tokens) + 160.0  # decode + prompt prefill (sim calibration)
            t4.append({"trace": tid, "segments": len(segs), "tokens": tokens, "ours_ms": ms,
                       "ours_pct": 100 * ms / gen_ms, "paper_ms": PAPER["table4_ms"][tid],
                       "paper_pct": PAPER["table4_pct"][tid]})
    except Exception as e:  # noqa: BLE001 - report instead of failing the whole run
        t4 = [{"error": f"{type(e).__name__}: {e}"}]
    return {"table4": t4, "table5": t5}


def run_all(out: Path, seeds: int = 3, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    seeds_l = list(range(1 if quick else seeds))
    dur = (lambda s: s.with_(duration_s=min(s.duration_s, 80.0))) if quick else (lambda s: s)
    wid1, wid2, wid3 = (dur(load_spec(w)) for w in ("WID1", "WID2", "WID3"))
    high = wid2.with_(name=f"WID2 x{HIGH_LOAD_EPS_FACTOR:g} eps", eps=wid2.eps * HIGH_LOAD_EPS_FACTOR)
    chat = dur(load_spec("CHAT"))
    base3 = ["vllm", "vllm-stream", "timelyllm"]
    steps: list[tuple[str, Callable[[], Any]]] = []
    R: dict[str, Any] = {"seeds": seeds_l, "quick": quick, "paper": {k: v for k, v in PAPER.items()}}

    steps.append(("fig5 low (WID1)", lambda: R.__setitem__("fig5_low", _multi(wid1, base3, seeds_l))))
    steps.append(("fig5 high", lambda: R.__setitem__("fig5_high", _multi(high, base3, seeds_l))))
    steps.append(("fig8", lambda: R.__setitem__("fig8", _multi(high, ["seg-fcfs", "seg-edf", "timelyllm"], seeds_l))))
    batches = [1, 2, 4, 6, 8, 12, 16] if quick else list(range(1, 17))

    def sweep() -> None:
        sw: dict[str, list[float]] = {"vllm": [], "timelyllm": []}
        for b in batches:
            res = _multi(wid2, list(sw), seeds_l[:2], max_batch=b)
            for p in sw:
                sw[p].append(_get(res, p, "all", "mean_utility"))
        R["fig7"] = {"batches": batches, "mean_utility": sw}
    steps.append(("fig7 batch sweep", sweep))
    steps.append(("fig9 arm (WID3)", lambda: R.__setitem__("fig9", _multi(wid3, base3, seeds_l, _arm_by_trace))))
    steps.append(("WID2", lambda: R.__setitem__("wid2", _multi(wid2, ["vllm", "timelyllm"], seeds_l))))

    def fig10() -> None:
        res = {}
        for model in ("phi3", "llama3-8b"):
            spec = chat.with_(engine_model=model)
            sen = _multi(spec, ["vllm", "timelyllm"], seeds_l, chat_segmentation="sentence")
            para = _multi(spec, ["timelyllm"], seeds_l, chat_segmentation="paragraph")
            res[model] = {"vllm": sen[0], "timelyllm-sen": sen[1], "timelyllm-para": para[0]}
        R["fig10"] = res
    steps.append(("fig10 chat", fig10))
    steps.append(("tables 4-5", lambda: R.__setitem__("overheads", _overheads(quick))))

    def ub() -> None:
        from .upper_bound import best_found

        cases = []
        pols = ["vllm", "vllm-stream", "seg-fcfs", "seg-edf", "timelyllm"]
        n = 4 if quick else 6
        burst_arr = compose(wid2.with_(eps=5.0, duration_s=2.0), 1)[:n]
        burst = [Arrival(0.0, a.goal) for a in burst_arr]
        chat_arr = [Arrival(0.2 * i, a.goal) for i, a in enumerate(compose(chat, 0)[: (3 if quick else 5)])]
        for label, arr, eng in ((f"burst of {n} drone goals at t=0", burst, wid2),
                                (f"{len(chat_arr)} chat requests 0.2 s apart (Phi-3)", chat_arr, chat)):
            from ..sim.simulation import simulate

            per = {p: simulate(arr, p, engine_config=eng.engine_config(),
                               planner_config=eng.planner_config()).by_type("all").mean_utility for p in pols}
            bf = best_found(arr, policies=pols, batches=(1, None) if quick else (1, 2, 4, None),
                            engine_config=eng.engine_config(), planner_config=eng.planner_config())
            cases.append({"case": label, "goals": len(arr), "policies": per,
                          "best_found_mean_utility": bf.mean_utility, "best_source": bf.source,
                          "best_order": bf.order, "best_max_batch": bf.max_batch,
                          "candidates": bf.candidates, "exhaustive": bf.exhaustive})
        R["upper_bound"] = cases
    steps.append(("upper bound", ub))

    it: Any = steps
    if progress:
        from tqdm import tqdm

        it = tqdm(steps, desc="paper", unit="exp", file=sys.stderr)
    t0 = time.perf_counter()
    for label, fn in it:
        if progress:
            it.set_postfix_str(label)
        fn()
    R["wall_s"] = time.perf_counter() - t0
    R["specs"] = {"WID1": wid1.as_dict(), "WID2": wid2.as_dict(), "high": high.as_dict(),
                  "WID3": wid3.as_dict(), "CHAT": chat.as_dict()}
    write_json(out / "results.json", R)
    (out / "report.md").write_text(render(R, out))
    return R


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


def render(R: dict[str, Any], out: Path) -> str:
    P = _Plot(out)
    L: list[str] = []
    w = L.append
    w("# TimelyLLM evaluation, reproduced in the simulator\n")
    w(f"Generated by `timely-fleet paper{' --quick' if R['quick'] else ''}` in {R['wall_s']:.0f} s; "
      f"{len(R['seeds'])} seed(s) averaged. Engine: simulated Llama3-8B fp16 on an RTX 4090 "
      "(iteration model from TimelyLLM Table 1: prefill 328 ms / 2,884 tokens, decode ~22 ms, "
      "0.2 ms per extra sequence in a batch; prefix cache for the pre-stored skill-set prompt), "
      "Phi-3-mini for chat; simulated robots with the execution-time table; 8 ms network.\n")
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
    w("## Headline: timelyllm vs vllm\n")
    w("| workload | task type | utility (% of beta) timelyllm / vllm | utility ratio | response ratio | waiting ratio | paper |")
    w("|---|---|---|---|---|---|---|")
    paper_txt = {"WID1": "urgent 81.5% vs 59.5% (x1.37)",
                 "WID2": "high load: urgent utility +191% (x2.91)",
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
    for key, title in (("fig5_low", f"low load ({R['specs']['WID1']['name']})"),
                       ("fig5_high", f"high load ({R['specs']['high']['name']})")):
        res = R[key]
        tts = list(res[0]["task_types"])
        name = P.bars(f"fig5_{key.split('_')[1]}.png", tts,
                      {r["policy"]: [_get(res, r["policy"], t, "utility_pct_of_beta") for t in tts] for r in res},
                      "utility (% of beta)", f"Fig. 5 {title}")
        w(f"![{title}]({name})\n")
        w(_table(res))
    lo_t, lo_v = (_get(R["fig5_low"], p, "drone-urgent", "utility_pct_of_beta") for p in ("timelyllm", "vllm"))
    hi_t, hi_v = (_get(R["fig5_high"], p, "drone-urgent", "mean_utility") for p in ("timelyllm", "vllm"))
    w(f"Urgent tasks, low load: timelyllm {_fmt(lo_t, '.1f')}% of beta vs vllm {_fmt(lo_v, '.1f')}% "
      f"(paper: 81.5% vs 59.5%). High load: urgent utility "
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
      "With our short segments and cheap batching, all segmented policies keep urgent tasks near "
      "their maximum, so the three are close; the paper's gap needs a saturated engine.\n")

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

    # upper bound
    w("\n## Distance to a best-found schedule (small workloads)\n")
    w("Best-found = max over every fixed priority order of the goals (all n! permutations, "
      "segmented generation with early dispatch) x maximum batch sizes, and the named policies' "
      "own schedules, in the same simulator. It is not provably optimal (schedules that change "
      "priorities over time are not searched).\n")
    for c in R["upper_bound"]:
        mb = "" if c["best_max_batch"] is None else f", max batch {c['best_max_batch']}"
        w(f"**{c['case']}** ({c['candidates']} schedules, exhaustive over orders: {c['exhaustive']}): "
          f"best-found mean utility {_fmt(c['best_found_mean_utility'], '.3f')} (from {c['best_source']}"
          f"{mb}).\n")
        w("| policy | mean utility | gap to best-found |")
        w("|---|---|---|")
        for p, u in c["policies"].items():
            w(f"| {p} | {_fmt(u, '.3f')} | {_fmt(c['best_found_mean_utility'] - u, '.3f')} |")
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
    out = Path(args.out)
    R = run_all(out, seeds=args.seeds, quick=args.quick)
    print(f"wrote {out / 'report.md'} ({R['wall_s']:.0f} s)")
    for r in R.get("headline", []):
        print(f"{r['workload']}: utility x{_fmt(r['utility_x'])} ({r['task_type']}), "
              f"response x{_fmt(r['response_x'])}, waiting x{_fmt(r['waiting_x'])}")
    return 0
