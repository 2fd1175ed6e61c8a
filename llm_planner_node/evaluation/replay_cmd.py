"""``timely-fleet replay <bag>``: re-send a recording's goals with their original timing.

    timely-fleet up ...                      # a running planner node (plan_task action)
    timely-fleet replay runs/wid1 [--time-scale 0.5] [--record runs/wid1_replay]

Each recorded GoalRecord (``/planner/goals``) becomes a ``plan_task`` action goal sent at its
original offset from the first goal (x ``--time-scale``). With ``--record`` the replay itself
is recorded, so ``timely-fleet report`` can compare both runs.
"""

from __future__ import annotations

import argparse
import threading


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="recorded bag")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiply offsets (0.5 = 2x faster)")
    parser.add_argument("--action", default="plan_task", help="action name (default plan_task)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for results")
    parser.add_argument("--record", metavar="BAG", help="also record the replay to this bag")


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from .bag import BagRecorder, replay

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
        print(f"error: {e}")
        return 1
    finally:
        stop.set()
        if rec is not None:
            th.join(timeout=2)
            rec.close()
        rclpy.try_shutdown()
    ok = sum(1 for r in res if r is not None and r.result.status == 0)
    print(f"replayed {len(res)} goals: {ok} succeeded, {sum(1 for r in res if r is None)} without result")
    return 0
