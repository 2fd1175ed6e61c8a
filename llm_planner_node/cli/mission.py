"""`timely-fleet mission`: give the fleet one instruction; the planner chooses the robot (over the
``plan_mission`` action, docs/guides/missions.md), and this prints whom and why, and the end."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from timely_robot.outcomes import STATUS_NAMES

MISSION_STATUS_NAMES = {0: "SUCCEEDED", 1: "FAILED", 2: "IMPOSSIBLE", 3: "UNAVAILABLE", 4: "REJECTED", 5: "CANCELLED"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_planner_node.cli.goal import add_tuf_arguments

    parser.add_argument("instruction", help='the task, e.g. "find the cat"')
    parser.add_argument("--robots", default="",
                        help="only these robots or kinds, comma-separated (e.g. tello_1,base_1 or drone); default: any")
    add_tuf_arguments(parser)
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--wait", type=float, default=10.0,
                        help="how long to wait for a planner to answer before giving up (s)")


def selector(text: str) -> tuple[list[str], list[str]]:
    """``--robots``: the robot ids and kinds it names (a known kind is a kind, anything else an id)."""
    from llm_planner_node.service.missions import parse_selector

    return parse_selector(text)


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.action import ActionClient
    from rclpy.context import Context
    from rclpy.node import Node
    from timely_fleet.action import PlanMission

    from llm_planner_node.cli.goal import tuf_for
    from llm_planner_node.ros.goal_client import spinning
    from llm_planner_node.ros.messages import action_qos_kwargs
    from llm_planner_node.ros.mission_server import MISSION_ACTION

    ert, alpha, beta = tuf_for(args)
    ids, kinds = selector(args.robots)
    ctx = Context()
    rclpy.init(context=ctx)
    node = Node("timely_fleet_mission", context=ctx)
    client = ActionClient(node, PlanMission, MISSION_ACTION, **action_qos_kwargs("client"))
    t0 = time.monotonic()
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            print(text, flush=True)

    def show(fb: Any) -> None:
        f = fb.feedback
        say(f"[{time.monotonic() - t0:7.3f} s] {f.task} {f.event}: {f.robot_id} ({f.text})"
            if f.robot_id else f"[{time.monotonic() - t0:7.3f} s] {f.task} {f.event}: {f.text}")

    try:
        with spinning(node, ctx):
            if not client.wait_for_server(timeout_sec=min(args.wait, args.timeout)):
                print(f"timely-fleet mission: no planner answers on the '{MISSION_ACTION}' action; start one with "
                      "`timely-fleet up`", file=sys.stderr)
                return 1
            goal = PlanMission.Goal(instruction=args.instruction, robot_ids=ids, robot_kinds=kinds,
                                    ert_s=ert, alpha=alpha, beta=beta)
            sent = client.send_goal_async(goal, feedback_callback=show)
            if not _wait(sent, args.timeout) or not sent.result().accepted:
                say("the planner did not accept the mission")
                return 1
            handle = sent.result()
            done = handle.get_result_async()
            if not _wait(done, max(0.0, args.timeout - (time.monotonic() - t0))):
                handle.cancel_goal_async()
                say(f"no result after {args.timeout} s: mission cancelled")
                return 1
            res = done.result().result
            say(f"{MISSION_STATUS_NAMES.get(res.status, res.status)}: {res.message}")
            for t in res.tasks:
                for robot, why in zip(t.tried_robots, t.tried_why):
                    say(f"  {t.task}: left {robot}: {why}")
                if t.robot_id:
                    say(f"  {t.task} on {t.robot_id}: {STATUS_NAMES.get(t.status, t.status)}: {t.message}")
                for a in t.answers:
                    say(f"    segment {a.segment}: {a.skill} -> {a.value}")
                if t.has_return_value:
                    say(f"    the plan returned {t.return_value}")
            return 0 if res.status == 0 else 1
    finally:
        client.destroy()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def _wait(future: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not future.done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
