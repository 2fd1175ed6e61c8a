"""``timely-fleet record <bag>``: record planner goals, results, robot status and segments.

    timely-fleet record runs/wid1 --robots drone0,drone1     # Ctrl-C to stop
    timely-fleet record runs/wid1 --duration 300 --storage sqlite3

Records ``/planner/goals``, ``/planner/results``, ``/planner/missions`` and
``/planner/mission_results`` (every mission and its end), ``/robot_status``, ``/robot_segments``
(every robot's segments) and, with ``security.per_robot_topics``, ``/robots/<id>/segments`` (the given
robots plus any per-robot segment topic discovered while recording), and what each robot sees
and feels (``/<id>/camera/image_raw`` unless ``--no-images``, ``/<id>/detections``,
``/<id>/battery``) into a rosbag2 written
with ``rosbags``. ``timely-fleet report <bag>`` recomputes the metrics;
``timely-fleet replay <bag>`` re-sends the goals and missions.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="output bag directory (must not exist)")
    parser.add_argument("--robots", default="", help="comma-separated robot ids (per-robot segment topics)")
    parser.add_argument("--no-discover", action="store_true", help="do not add discovered per-robot segment topics")
    parser.add_argument("--no-images", action="store_true",
                        help="do not record the robots' camera images (their detections and battery still are)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")


def run(args: argparse.Namespace) -> int:
    from timely_robot.errors import CommandError

    if Path(args.bag).exists():
        raise CommandError(f"{args.bag} already exists: give a new bag directory "
                           "(a recording never overwrites another)")
    if args.duration is not None and not args.duration > 0:
        raise CommandError(f"--duration must be > 0 seconds, got {args.duration}")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from timely_tools.evaluation.bag import BagRecorder

    rclpy.init()
    rec = BagRecorder(args.bag, robots=[r for r in args.robots.split(",") if r],
                      discover=not args.no_discover, storage=args.storage, images=not args.no_images)
    ex = SingleThreadedExecutor()
    ex.add_node(rec.node)
    end = None if args.duration is None else time.monotonic() + args.duration
    print(f"recording to {args.bag} (Ctrl-C to stop)")
    try:
        while end is None or time.monotonic() < end:
            ex.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        rec.close()
        rclpy.try_shutdown()
    print(f"wrote {args.bag}: " + ", ".join(f"{t} {n}" for t, n in sorted(rec.writer.count.items())))
    return 0
