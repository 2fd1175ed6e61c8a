"""`timely-fleet bench overload`: graceful degradation of the scheduler under overload.

WID1's per-agent rate (0.25 events/s x 4.5 tasks per event on 25 agents = 0.045 goals/s per
agent) with N agents (the event rate scales with N), on the simulated engine (Llama3-8B / RTX
4090 calibration), for ``vllm`` and ``timelyllm`` under each admission asked for
(``--admission``) and, for the improved rule, each overload rule asked for (``--hopeless``:
``keep``, the default rule, and ``shed``, which ends goals that can no longer gain utility). Arrivals last ``--duration`` seconds (at most ``--max-goals`` goals, so a
5,000-agent run stays short); the simulation then drains.

Reported per policy and load (honest under shedding: every arrival counts):

- ``utility_pct``: mean over *all* arrivals of time utility as % of beta, a goal that was
  shed or refused counting 0 (the value its TUF gives a response that is worth nothing; serving
  it could only have given <= 0), and ``mean_utility_completed`` (the eval table's number,
  over completed goals only) beside ``shed``/``refused`` counts;
- ``throughput_tok_s``: tokens generated while arrivals last / their duration (the engine's
  delivered rate under load; each segment's tokens are counted when it completes), and
  ``tokens_per_s`` (eval's: all tokens / time to drain);
- mean batch (engine slot-seconds / busy seconds), prefill tokens, mean and P90 response.

``--plot PATH``: utility (% of beta, all arrivals) and throughput vs load for every policy.
Targets at 400, 1,000 and 5,000 agents: timelyllm utility >= vllm's and
throughput >= 0.9x vllm's with the improved admission.

Run: ``timely-fleet bench overload [--agents 400,1000,5000] [--json PATH] [--plot PATH]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Sequence

import numpy as np

from timely_tools import outfiles

WID1_PER_AGENT_GOALS_S = 0.25 * 4.5 / 25  # eps x mean tasks per event / agents = 0.045
DEFAULT_AGENTS = (25, 100, 200, 300, 400, 700, 1000, 2000, 5000)
TARGET_AGENTS = (400, 1000, 5000)


def workload(agents: int, duration_s: float, max_goals: int, seed: int = 0) -> tuple[Any, list]:
    """WID1 with ``agents`` agents at WID1's per-agent rate; arrivals for ``duration_s``
    seconds, shortened so that about ``max_goals`` goals arrive."""
    from timely_tools.evaluation.workload_spec import compose, load_spec

    base = load_spec("WID1")
    rate = WID1_PER_AGENT_GOALS_S * agents
    dur = min(duration_s, max(5.0, max_goals / rate))
    spec = base.with_(name=f"WID1 x{agents} agents", eps=base.eps * agents / base.agents,
                      agents=agents, duration_s=dur)
    return spec, compose(spec, seed)


def run_one(spec: Any, arrivals: list, policy: str, admission: str | None, hopeless: str | None,
            seed: int = 0) -> dict[str, Any]:
    """One simulation; the metrics of the module docstring."""
    from llm_planner_node.core.batching import make_admission
    from llm_planner_node.core.metrics import request_outcome
    from llm_planner_node.core.policies import REGISTRY
    from timely_tools.sim.simulation import simulate

    params: dict[str, Any] = {}
    shared = REGISTRY[policy].shared_admission
    if shared:
        params["admission"] = make_admission(admission or "improved",
                                             **({"hopeless": hopeless} if hopeless else {}))
    net = spec.planner_config().network_latency_s
    t0 = time.perf_counter()
    res = simulate(arrivals, policy, seed=seed, engine_config=spec.engine_config(),
                   planner_config=spec.planner_config(), **params)
    wall = time.perf_counter() - t0
    first = min(a.t for a in arrivals)
    window_end = first + spec.duration_s
    util, resp, done, shed = 0.0, [], 0, 0
    window_tokens = 0
    for r in res.requests:
        o = request_outcome(r, net)
        if o is not None:
            util += o.time_utility / r.goal.tuf.beta
            resp.append(o.response_s)
            done += 1
        elif r.end is not None and r.end.value == "shed":
            shed += 1
        window_tokens += sum(len(s.token_ids) for s, t in zip(r.segments, r.gen_end) if t <= window_end)
    s_all = res.by_type("all")
    eng = res.engine
    return {
        "policy": policy, "admission": params["admission"].name if shared else "fixed-batch",
        "hopeless": params["admission"].hopeless if shared else None,
        "goals": len(arrivals), "completed": done, "shed": shed, "refused": len(res.refused),
        "utility_pct": 100 * util / len(arrivals) if arrivals else math.nan,
        "mean_utility_completed": s_all.mean_utility, "utility_pct_completed": s_all.utility_pct_of_beta,
        "throughput_tok_s": window_tokens / spec.duration_s, "tokens_per_s": s_all.tokens_per_s,
        "mean_batch": eng.busy_slot_s / eng.busy_s if eng.busy_s else 0.0,
        "prefill_tokens": eng.prefill_tokens, "decoded_tokens": eng.tokens,
        "mean_response_s": float(np.mean(resp)) if resp else math.nan,
        "p90_response_s": float(np.percentile(resp, 90)) if resp else math.nan,
        "sim_end_s": res.end_time, "wall_s": wall,
    }


def measure(agents: Sequence[int] = DEFAULT_AGENTS, policies: Sequence[str] = ("vllm", "timelyllm"),
            admissions: Sequence[str] = ("improved",), hopeless: Sequence[str] = ("keep", "shed"),
            duration_s: float = 60.0, max_goals: int = 6000, seed: int = 0,
            progress: bool = False) -> list[dict[str, Any]]:
    """Rows for every load x policy (x admission for segmented policies)."""
    from llm_planner_node.core.policies import REGISTRY

    rows = []
    for n in agents:
        spec, arr = workload(n, duration_s, max_goals, seed)
        for p in policies:
            runs = ([(a, h) for a in admissions for h in (hopeless if a == "improved" else (None,))]
                    if REGISTRY[p].shared_admission else [(None, None)])
            for adm, hop in runs:
                row = run_one(spec, arr, p, adm, hop, seed)
                row.update(agents=n, duration_s=spec.duration_s,
                           offered_goals_s=WID1_PER_AGENT_GOALS_S * n)
                rows.append(row)
                if progress:
                    print(f"  {n} agents {label(row)}: {row['utility_pct']:.1f} % "
                          f"({row['wall_s']:.1f} s)", file=sys.stderr)
    return rows


def label(row: dict[str, Any]) -> str:
    if row["admission"] == "fixed-batch":
        return row["policy"]
    if row["admission"] == "improved":
        return f"{row['policy']} (improved, {row['hopeless']})"
    return f"{row['policy']} ({row['admission']})"


def targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets at 400, 1,000 and 5,000 agents (improved timelyllm, each overload
    rule, vs vllm)."""
    out: dict[str, Any] = {}
    for n in TARGET_AGENTS:
        v = next((r for r in rows if r["agents"] == n and r["policy"] == "vllm"), None)
        for t in rows:
            if v is None or not (t["agents"] == n and t["policy"] == "timelyllm" and t["admission"] == "improved"):
                continue
            out[f"{n} {t['hopeless']}"] = {
                "agents": n, "hopeless": t["hopeless"], "utility_ok": t["utility_pct"] >= v["utility_pct"],
                "throughput_ratio": t["throughput_tok_s"] / v["throughput_tok_s"],
                "throughput_ok": t["throughput_tok_s"] >= 0.9 * v["throughput_tok_s"]}
    return out


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for lab in dict.fromkeys(label(r) for r in rows):
        rs = sorted((r for r in rows if label(r) == lab), key=lambda r: r["agents"])
        x = [r["agents"] for r in rs]
        a1.plot(x, [r["utility_pct"] for r in rs], marker="o", label=lab)
        a2.plot(x, [r["throughput_tok_s"] for r in rs], marker="o", label=lab)
    a1.set_yscale("symlog", linthresh=100)
    for ax, yl in ((a1, "time utility, % of beta (all goals; shed = 0)"),
                   (a2, "throughput under load (tokens/s)")):
        ax.set_xscale("log")
        ax.set_xlabel("agents (WID1 per-agent rate, 0.045 goals/s each)")
        ax.set_ylabel(yl, fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Overload: utility and throughput vs load (simulated Llama3-8B / RTX 4090)", fontsize=10)
    fig.tight_layout()
    fig.savefig(outfiles.ready(path), dpi=110)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", default=",".join(map(str, DEFAULT_AGENTS)),
                        help="comma-separated agent counts (default %(default)s)")
    parser.add_argument("--policies", default="vllm,timelyllm", help="comma-separated policies")
    parser.add_argument("--admission", default="improved",
                        help="comma-separated admissions of segmented policies: literal, improved")
    parser.add_argument("--hopeless", default="keep,shed",
                        help="comma-separated overload rules of the improved admission: keep, last, shed "
                             "(default %(default)s)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals (at most)")
    parser.add_argument("--max-goals", type=int, default=6000,
                        help="shorten the arrivals so that about this many goals arrive")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="write the rows and targets as JSON")
    parser.add_argument("--plot", metavar="PATH", help="write the utility/throughput vs load plot (PNG)")


def run(args: argparse.Namespace) -> int:
    from timely_robot.errors import CommandError

    try:
        agents = [int(a) for a in args.agents.split(",") if a.strip()]
    except ValueError:
        raise CommandError(f"--agents must be comma-separated integers, got {args.agents!r}") from None
    from llm_planner_node.core.batching import ADMISSIONS, HOPELESS_MODES
    from llm_planner_node.core.policies import policy_names

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    admissions = [a.strip() for a in args.admission.split(",") if a.strip()]
    hopeless = [h.strip() for h in args.hopeless.split(",") if h.strip()]
    bad = ([p for p in policies if p not in policy_names()] + [a for a in admissions if a not in ADMISSIONS]
           + [h for h in hopeless if h not in HOPELESS_MODES])
    if bad or not agents or min(agents) < 1:
        raise CommandError(f"unknown policy/admission or bad agents: {', '.join(bad) or args.agents}")
    rows = measure(agents, policies, admissions, hopeless, args.duration, args.max_goals,
                   args.seed, progress=True)
    print("overload: WID1 per-agent rate (0.045 goals/s per agent), simulated engine; "
          "utility over all arrivals (shed/refused = 0)")
    print(f"{'agents':>6} {'policy':30} {'goals':>6} {'done':>6} {'shed':>5} {'util%':>9} "
          f"{'util%done':>9} {'tok/s':>7} {'batch':>6} {'resp(s)':>8} {'wall(s)':>7}")
    for r in rows:
        print(f"{r['agents']:>6} {label(r):30} {r['goals']:>6} {r['completed']:>6} {r['shed']:>5} "
              f"{r['utility_pct']:>9.1f} {r['utility_pct_completed']:>9.1f} {r['throughput_tok_s']:>7.1f} "
              f"{r['mean_batch']:>6.1f} {r['mean_response_s']:>8.2f} {r['wall_s']:>7.1f}")
    tg = targets(rows)
    for n, t in tg.items():
        print(f"target at {t['agents']} agents ({t['hopeless']}): utility >= vllm's {'met' if t['utility_ok'] else 'NOT met'}; "
              f"throughput {t['throughput_ratio']:.2f}x vllm's ({'met' if t['throughput_ok'] else 'NOT met'}, >= 0.9x)")
    if args.json:
        outfiles.write_json(args.json, {"per_agent_goals_s": WID1_PER_AGENT_GOALS_S, "rows": rows, "targets": tg}, indent=2)
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    raise SystemExit(run(p.parse_args()))
