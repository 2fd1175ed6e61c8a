"""``timely-fleet eval``: run scheduling policies on one workload and report per-task-type metrics.

    timely-fleet eval --workload WID1 --policy vllm,vllm-stream,timelyllm --engine sim
    timely-fleet eval --workload my.yaml --policy timelyllm --json out.json --out results/
    timely-fleet eval --workload WID1 --policy timelyllm --engine vllm --bag runs/wid1   # live

``--engine sim``: the discrete-event simulator (the real Planner over the calibrated simulated
engine and simulated robots; fast, hundreds of robots). Every policy sees the same arrivals
(same seed) and the same robot execution-time draws.

``--engine vllm``: live, through the planner node on vLLM and simulated robots, started here for
each policy (or an already running node with ``--attach``); the workload's goals are sent as
``plan_task`` action goals with their original timing and metrics are computed from the
``/planner/results`` messages (see :mod:`.live`).

Output: a table (per policy and task type: mean utility, % of beta, mean/P90 response, mean
robot waiting, goals completed, tokens/s), ``--json PATH`` (one object per policy) and
``--out DIR`` (``results.json`` + ``utility.png`` / ``waiting.png`` bar charts).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..core.policies import policy_names
from .results import bar_chart, format_table, policy_result, write_json
from .workload_spec import EvalSpec, SpecError, compose, load_spec


def run_sim(spec: EvalSpec, policies: Sequence[str], seed: int | None = None, *,
            max_batch: int | None = None, chat_segmentation: str | None = None,
            progress: bool = False, arrivals: list | None = None) -> list[dict[str, Any]]:
    """Simulate each policy on the same arrivals; one :func:`policy_result` dict per policy."""
    from ..sim.simulation import simulate

    seed = spec.seed if seed is None else seed
    arr = arrivals if arrivals is not None else compose(spec, seed, chat_segmentation=chat_segmentation)
    params = {} if max_batch is None else {"max_batch": max_batch}
    it: Any = policies
    if progress:
        from tqdm import tqdm

        it = tqdm(policies, desc=f"{spec.name} (sim)", unit="policy", file=sys.stderr)
    out = []
    for name in it:
        t0 = time.perf_counter()
        res = simulate(arr, name, seed=seed, engine_config=spec.engine_config(),
                       planner_config=spec.planner_config(), **params)
        out.append(policy_result(name, res.summary, wall_s=time.perf_counter() - t0,
                                 sim_end_s=res.end_time, peak_batch=res.engine.peak_batch))
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="WID1",
                        help="preset (WID1, WID2, WID3, CHAT) or a YAML spec file")
    parser.add_argument("--policy", default="vllm,vllm-stream,seg-fcfs,seg-edf,timelyllm",
                        help=f"comma-separated policies ({', '.join(policy_names())})")
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--seed", type=int, default=None, help="override the spec's seed")
    parser.add_argument("--max-batch", type=int, default=None, help="fixed maximum batch size")
    parser.add_argument("--chat-segmentation", choices=("sentence", "paragraph"), default=None)
    parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    parser.add_argument("--out", metavar="DIR", help="write results.json and bar charts here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    # live (--engine vllm) options
    parser.add_argument("--bag", metavar="DIR", help="live: record a rosbag2 of the run here")
    parser.add_argument("--attach", action="store_true",
                        help="live: send the goals to an already running node (one --policy) "
                             "instead of starting the planner and simulated robots here")
    parser.add_argument("--params", metavar="YAML",
                        help="live: planner parameters (engine, model, batching); robots come from the workload")
    parser.add_argument("--robots", default="",
                        help="live: comma-separated robot ids whose segment topics to record")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="live: multiply arrival times (e.g. 0.5 = twice as fast)")
    parser.add_argument("--limit", type=int, default=None, help="live: send only the first N goals")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="live: seconds to wait for results after the last goal")


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.workload)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    bad = [p for p in policies if p not in policy_names()]
    if bad or not policies:
        print(f"error: unknown policy {', '.join(bad) or '(none)'} (known: {', '.join(policy_names())})",
              file=sys.stderr)
        return 2
    seed = spec.seed if args.seed is None else args.seed
    if args.engine == "sim":
        results = run_sim(spec, policies, seed, max_batch=args.max_batch,
                          chat_segmentation=args.chat_segmentation, progress=not args.no_progress)
    else:
        from .live import run_live

        results = run_live(spec, policies, seed, args)
        if results is None:
            return 1
    n_goals = results[0]["task_types"].get("all", {}).get("goals", 0) if results else 0
    print(f"workload {spec.name}: {n_goals} goals, seed {seed}, engine {args.engine}")
    print(format_table(results))
    doc = {"workload": spec.as_dict(), "engine": args.engine, "seed": seed,
           "max_batch": args.max_batch, "policies": results}
    if args.json:
        write_json(args.json, doc)
    if args.out:
        out = Path(args.out)
        write_json(out / "results.json", doc)
        bar_chart(results, out / "utility.png", f"{spec.name}: time utility")
        bar_chart(results, out / "waiting.png", f"{spec.name}: robot waiting",
                  metric="mean_waiting_s", ylabel="mean robot waiting (s)")
        print(f"wrote {out / 'results.json'}, {out / 'utility.png'}, {out / 'waiting.png'}")
    return 0
