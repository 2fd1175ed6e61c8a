"""``timely-fleet report <bag|json>``: recompute and print evaluation metrics from a recording.

    timely-fleet report runs/wid1_bag            # rosbag2 directory (mcap or sqlite3)
    timely-fleet report out.json                 # an ``eval --json`` file
    timely-fleet report runs/wid1_bag --json metrics.json --policy timelyllm
    timely-fleet report runs/w1_vllm runs/w1_timelyllm   # several bags/JSONs in one table

For a bag, metrics come from the ``/planner/results`` GoalResult messages (segment dispatch and
execution times, TUF) through ``core/metrics.py`` (see :func:`.bag.metrics_from_bag`); goals that
were accepted (``/planner/goals``) but never finished count as not completed. A bag's missions
(``/planner/missions``, ``/planner/mission_results``) are listed after the table: instruction,
status, and each task's robot and status (a mission's task is also a goal of the metrics); with
``--json`` they are the document's ``missions``.

``eval --bag DIR`` with several policies writes one bag per policy, ``DIR_<policy>``; ``report
DIR`` then names them (report each, or several at once: ``report DIR_vllm DIR_timelyllm``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from timely_tools.evaluation.results import format_table, load_json, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="+", help="rosbag2 directories/files or eval JSON files")
    parser.add_argument("--policy", default=None, help="label for a bag's results (default: from the bag)")
    parser.add_argument("--network-latency-ms", type=float, default=8.0,
                        help="bags without measured execution starts: dispatch + this latency")
    parser.add_argument("--json", metavar="PATH", help="write the recomputed metrics as JSON")


def per_policy_bags(src: Path) -> list[Path]:
    """The bags ``eval --bag SRC`` wrote for several policies: ``SRC_<policy>`` directories."""
    from llm_planner_node.core.policies import policy_names

    return [p for p in (src.parent / f"{src.name}_{name}" for name in policy_names()) if p.exists()]


def load_source(src: Path, policy: str | None, network_latency_s: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(per-policy results, document) of one bag or eval JSON; CommandError if it is neither."""
    from timely_robot.errors import CommandError

    if not src.exists():
        bags = per_policy_bags(src)
        if bags:
            raise CommandError(f"{src} does not exist, but `eval --bag {src}` with several policies wrote "
                               f"one bag per policy: {', '.join(map(str, bags))} (report those)")
        raise CommandError(f"{src} does not exist: give a rosbag2 directory or an `eval --json` file")
    if src.is_file() and src.suffix == ".json":
        try:
            doc = load_json(src)
        except (ValueError, OSError) as e:
            raise CommandError(f"{src} is not an evaluation result ({str(e).splitlines()[0]})") from None
        return list(doc["policies"]), doc
    if src.is_dir() and not (src / "metadata.yaml").is_file():
        raise CommandError(f"{src} is not a rosbag2 recording (no metadata.yaml in it)")
    from timely_tools.evaluation.bag import metrics_from_bag, missions_from_bag

    try:
        res = metrics_from_bag(src, policy=policy, network_latency_s=network_latency_s)
        missions = missions_from_bag(src)
    except Exception as e:  # noqa: BLE001 - rosbags' reader errors: not a bag
        if type(e).__module__.split(".")[0] != "rosbags":
            raise
        raise CommandError(f"{src} is not a rosbag2 recording ({str(e).splitlines()[0]})") from None
    return [res], {"source": str(src), "engine": "bag", "policies": [res], "missions": missions}


def run(args: argparse.Namespace) -> int:
    sources = [Path(s) for s in ([args.source] if isinstance(args.source, (str, Path)) else args.source)]
    loaded = [load_source(src, args.policy if len(sources) == 1 else None, args.network_latency_ms / 1000.0)
              for src in sources]
    results: list[dict[str, Any]] = []
    for src, (res, doc) in zip(sources, loaded):
        if doc.get("engine") == "bag":
            print(f"{src}: {res[0]['task_types'].get('all', {}).get('goals', 0)} goals")
        else:
            print(f"{src}: workload {doc.get('workload', {}).get('name', '?')}, engine {doc.get('engine', '?')}")
        results.extend(res)
    print(format_table(results))
    from timely_tools.evaluation.bag import mission_lines

    for src, (_res, doc) in zip(sources, loaded):
        lines = mission_lines(doc.get("missions") or [])
        if lines:
            print(f"{src}: {lines[0]}" if len(sources) > 1 else lines[0])
            print("\n".join(lines[1:]))
    if args.json:
        doc = loaded[0][1] if len(loaded) == 1 else {"sources": [str(s) for s in sources], "policies": results}
        write_json(args.json, doc)
    return 0
