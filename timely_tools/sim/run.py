"""Run the simulator from the command line and print per-task-type metrics per policy.

``python -m timely_tools.sim --workload WID1 --policies vllm timelyllm --seed 0``
``python -m timely_tools.sim --workload my_workload.json --json results.json``

``--workload`` is a preset name (WID1, WID2, WID3: TimelyLLM Table 3) or a JSON workload file
(see :mod:`.workload`). ``--max-batch N`` fixes the maximum batch (the batch-size sweep).
"""

from __future__ import annotations

import argparse
import time

from llm_planner_node.core.policies import policy_names
from timely_tools import outfiles
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import WORKLOADS, Arrival, generate, load_workload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="WID1", help="WID1/WID2/WID3 or a JSON workload file")
    parser.add_argument("--policies", nargs="+", choices=policy_names(), metavar="POLICY",
                        default=["vllm", "vllm-stream", "seg-fcfs", "seg-edf", "timelyllm"])
    parser.add_argument("--seed", type=int, default=0, help="workload and robot seed")
    parser.add_argument("--max-batch", type=int, default=None, help="fixed maximum batch size")
    parser.add_argument("--json", metavar="PATH", help="also write the summaries as JSON")


def _arrivals(workload: str, seed: int) -> list[Arrival]:
    return generate(WORKLOADS[workload], seed) if workload in WORKLOADS else load_workload(workload)


def run(args: argparse.Namespace) -> int:
    arrivals = _arrivals(args.workload, args.seed)
    params = {} if args.max_batch is None else {"max_batch": args.max_batch}
    print(f"workload {args.workload}: {len(arrivals)} goals, seed {args.seed}")
    print(f"{'policy':12} {'task type':14} {'goals':>5} {'done':>5} {'utility':>8} {'%beta':>6} "
          f"{'resp(s)':>8} {'p90(s)':>7} {'wait(s)':>8} {'tok/s':>7} {'sim(s)':>7}")
    out = []
    for name in args.policies:
        t0 = time.perf_counter()
        result = simulate(arrivals, name, seed=args.seed, **params)
        wall = time.perf_counter() - t0
        for s in result.summary:
            print(f"{name:12} {s.task_type:14} {s.goals:5d} {s.completed:5d} {s.mean_utility:8.3f} "
                  f"{s.utility_pct_of_beta:6.1f} {s.mean_response_s:8.3f} {s.p90_response_s:7.3f} "
                  f"{s.mean_waiting_s:8.3f} {s.tokens_per_s:7.1f} {wall:7.2f}")
            out.append(s.as_dict())
    if args.json:
        outfiles.write_json(args.json, {"workload": args.workload, "seed": args.seed, "summaries": out}, indent=2)
    return 0
