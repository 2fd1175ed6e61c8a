"""``timely-fleet replay <bag>``: re-send a recording's goals with their original timing.

    timely-fleet up ...                      # a running planner node (plan_task action)
    timely-fleet replay runs/wid1 [--time-scale 0.5] [--record runs/wid1_replay]

Each recorded GoalRecord (``/planner/goals``) becomes a ``plan_task`` action goal and each
recorded mission (``/planner/missions``) a ``plan_mission`` goal, sent at its original offset
from the first (x ``--time-scale``); the goals a mission's task ran as are not re-sent (the
mission makes them again, on whichever robot the planner chooses now). With ``--record`` the
replay itself is recorded, so ``timely-fleet report`` can compare both runs.
"""

from __future__ import annotations

import argparse
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Sequence


def summary_line(results: Sequence[Any]) -> str:
    """``replayed N goals: S succeeded, F failed (STATUS n, ...), U without result`` (and
    ``; M missions: ...`` likewise when the bag held missions).

    ``results``: what :func:`.bag.replay` returns, a result wrapper (``.result.status``) per goal
    or None when the goal got no result (not accepted, or no answer before ``--timeout``), and
    the missions' in ``results.missions``.
    """
    from timely_robot.outcomes import STATUS_NAMES

    line = "replayed " + _count(results, "goals", STATUS_NAMES)
    missions = getattr(results, "missions", [])
    if missions:
        from llm_planner_node.service.missions import MISSION_STATUS_NAMES

        line += "; " + _count(missions, "missions", MISSION_STATUS_NAMES)
    return line


def _count(results: Sequence[Any], what: str, names: dict[int, str]) -> str:
    ok = sum(1 for r in results if r is not None and r.result.status == 0)
    failed = Counter(names.get(int(r.result.status), str(r.result.status))
                     for r in results if r is not None and r.result.status != 0)
    how = f" ({', '.join(f'{name} {n}' for name, n in sorted(failed.items()))})" if failed else ""
    return (f"{len(results)} {what}: {ok} succeeded, {sum(failed.values())} failed{how}, "
            f"{sum(1 for r in results if r is None)} without result")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="recorded bag")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply offsets (0.5 = 2x faster)")
    parser.add_argument("--action", default="plan_task", help="action name (default plan_task)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for results")
    parser.add_argument("--record", metavar="BAG", help="also record the replay to this bag")


def run(args: argparse.Namespace) -> int:
    from timely_robot.errors import CommandError

    if not Path(args.bag).exists():
        raise CommandError(f"{args.bag} does not exist: give a bag recorded with `timely-fleet record` "
                           "or `eval --bag`")
    if args.record and Path(args.record).exists():
        raise CommandError(f"{args.record} already exists: give a new bag directory for --record")
    if not args.time_scale > 0:
        raise CommandError(f"--time-scale must be > 0, got {args.time_scale}")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from timely_tools.evaluation.bag import BagRecorder, replay

    rclpy.init()
    rec = None
    stop = threading.Event()
    if args.record:
        rec = BagRecorder(args.record)
        ex = SingleThreadedExecutor()
        ex.add_node(rec.node)
        th = threading.Thread(target=lambda: [ex.spin_once(timeout_sec=0.1) for _ in iter(stop.is_set, True)],
                              daemon=True)
        th.start()
    try:
        res = replay(args.bag, time_scale=args.time_scale, action_name=args.action,
                     result_timeout_s=args.timeout)
    except TimeoutError as e:
        raise CommandError(str(e)) from None
    finally:
        stop.set()
        if rec is not None:
            th.join(timeout=2)
            rec.close()
        rclpy.try_shutdown()
    print(summary_line(res))
    return 0
