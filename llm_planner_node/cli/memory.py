"""`timely-fleet memory LABEL`: what the fleet remembers seeing of a thing (the active planner's
``planner/memory`` service, docs/guides/missions.md#fleet-memory): who saw it, when and where.

    cat: seen by tello_1 3 min ago (2026-12-06 21:03:10 UTC) at (1.20, 0.40, 1.00) m in the fleet frame
    nothing remembered about "wristwatch"

``--json`` prints the answer as one JSON object instead (label, message, sightings).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("label", metavar="LABEL", help='the thing, by any of its names (e.g. "cat", "cats", "kitty")')
    parser.add_argument("--max", type=int, default=5, metavar="N",
                        help="at most N sightings, newest first (default: 5)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")
    parser.add_argument("--namespace", default="", help="the planner's namespace (as given to `timely-fleet up`)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="give up when no planner answers within this many seconds (default: %(default)s)")


def ago(seconds: float) -> str:
    """``seconds`` as a person says it: ``just now``, ``42 s ago``, ``3 min ago``, ``5 h ago``."""
    s = max(0.0, seconds)
    if s < 1:
        return "just now"
    if s < 60:
        return f"{s:.0f} s ago"
    if s < 3600:
        return f"{s // 60:.0f} min ago"
    return f"{s // 3600:.0f} h ago"


def line(m: Any, now: float) -> str:
    """One sighting (a ``timely_fleet/Sighting``) as one line."""
    t = m.stamp.sec + m.stamp.nanosec * 1e-9
    when = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    where = (f"at ({m.x:.2f}, {m.y:.2f}, {m.z:.2f}) m in the fleet frame" if m.has_position
             else "position unknown")
    text = f"{m.label}: seen by {m.robot_id} {ago(now - t)} ({when}) {where}"
    return text + (f", confidence {m.confidence:.2f}" if m.has_confidence else "")


def as_json(label: str, res: Any, now: float) -> str:
    """The answer as one JSON object (times as UNIX seconds and ISO 8601 UTC, positions in metres)."""
    def one(m: Any) -> dict[str, Any]:
        t = m.stamp.sec + m.stamp.nanosec * 1e-9
        return {"robot_id": m.robot_id, "label": m.label, "time": t,
                "time_utc": datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds"),
                "age_s": round(max(0.0, now - t), 3),
                "position": [m.x, m.y, m.z] if m.has_position else None,
                "confidence": m.confidence if m.has_confidence else None, "goal_id": m.goal_id}

    return json.dumps({"label": label, "message": res.message, "sightings": [one(m) for m in res.sightings]})


def run(args: argparse.Namespace) -> int:
    from timely_fleet.srv import QueryMemory

    from llm_planner_node.cli import CommandError
    from llm_planner_node.cli.operator import call
    from llm_planner_node.ros.memory_server import MEMORY_SERVICE

    if args.max < 1:
        raise CommandError(f"--max must be at least 1, got {args.max}")
    res, _dt = call(QueryMemory, MEMORY_SERVICE, QueryMemory.Request(label=args.label, max_results=args.max),
                    args.namespace, args.timeout)
    now = time.time()
    if args.json:
        print(as_json(args.label, res, now))
    elif res.sightings:
        for m in res.sightings:
            print(line(m, now))
    else:
        print(res.message)
    return 0
