"""``timely-fleet report <bag|json>``: recompute and print evaluation metrics from a recording.

    timely-fleet report runs/wid1_bag            # rosbag2 directory (mcap or sqlite3)
    timely-fleet report out.json                 # an ``eval --json`` file
    timely-fleet report runs/wid1_bag --json metrics.json --policy timelyllm

For a bag, metrics come from the ``/planner/results`` GoalResult messages (segment dispatch and
execution times, TUF) through ``core/metrics.py`` (see :func:`.bag.metrics_from_bag`); goals that
were accepted (``/planner/goals``) but never finished count as not completed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .results import format_table, load_json, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="rosbag2 directory/file or eval JSON")
    parser.add_argument("--policy", default=None, help="label for a bag's results (default: from the bag)")
    parser.add_argument("--network-latency-ms", type=float, default=8.0,
                        help="bags without measured execution starts: dispatch + this latency")
    parser.add_argument("--json", metavar="PATH", help="write the recomputed metrics as JSON")


def run(args: argparse.Namespace) -> int:
    src = Path(args.source)
    if not src.exists():
        print(f"error: {src} does not exist", file=sys.stderr)
        return 2
    if src.is_file() and src.suffix == ".json":
        doc = load_json(src)
        results = doc["policies"]
        print(f"{src}: workload {doc.get('workload', {}).get('name', '?')}, engine {doc.get('engine', '?')}")
    else:
        from .bag import metrics_from_bag

        res = metrics_from_bag(src, policy=args.policy,
                               network_latency_s=args.network_latency_ms / 1000.0)
        results = [res]
        doc = {"source": str(src), "engine": "bag", "policies": results}
        print(f"{src}: {res['task_types'].get('all', {}).get('goals', 0)} goals")
    print(format_table(results))
    if args.json:
        write_json(args.json, doc)
    return 0
