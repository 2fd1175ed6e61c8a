"""`timely-fleet stop`, `approve`, `deny`: an operator's commands to a running planner.

    timely-fleet stop ROBOT [ROBOT ...] | --all   [--namespace NS] [--operator NAME] [--secret-file F] [--timeout S]
    timely-fleet approve GOAL                      [same options]
    timely-fleet deny GOAL                         [same options]

``stop`` calls the planner's ``planner/stop_robots``: the robots' goals end CANCELLED ("stopped by
operator NAME") and the robots are halted, idle ones too; it prints one line per robot whose goal
it ended, then what was done. ``approve`` / ``deny`` call ``planner/approve`` for the segment a
goal waits with (``timely-fleet goal`` prints "waiting for approval of segment k: ..." and the
goal id; 8 leading hex digits are enough when unambiguous).

The operator secret (whose SHA-256 the planner lists in ``security.cancel_operator_keys_sha256``;
not needed with ``security.mode: off``) comes from ``--secret-file`` (mode 0600, first line) or
the environment variable ``TIMELY_FLEET_OPERATOR_SECRET``, never from the command line, where
``ps`` would show it. Errors (unknown robot, refused secret, no planner answering within
``--timeout``) are one sentence on stderr, status 2.

Requests are re-sent every second until answered (a service's first answer can be lost while DDS
discovery settles): a stop is idempotent, and a repeated decision gets the first one's answer.
"""

from __future__ import annotations

import argparse
import getpass
import time
import uuid
from typing import Any

from llm_planner_node.cli import CommandError
from llm_planner_node.security.operator_secret import SECRET_ENV, read_secret

RESEND_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    command = parser.prog.split()[-1]
    if command == "stop":
        parser.add_argument("robots", nargs="*", metavar="ROBOT", help="robots to stop (ids of the fleet YAML)")
        parser.add_argument("--all", action="store_true", help="stop every robot of the planner's fleet")
    else:
        parser.add_argument("goal", metavar="GOAL",
                            help="the goal waiting for approval: its id as `timely-fleet goal` prints it "
                                 "(8 leading hex digits are enough when unambiguous)")
    parser.add_argument("--namespace", default="", help="the planner's namespace (as given to `timely-fleet up`)")
    parser.add_argument("--operator", default=None,
                        help="your name, for the record in results, log and /diagnostics (default: the login name)")
    parser.add_argument("--secret-file", default=None,
                        help=f"file holding the operator secret (mode 0600; default: ${SECRET_ENV})")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="give up when no planner answers within this many seconds (default: %(default)s)")


def call(srv_type: Any, name: str, request: Any, namespace: str, timeout_s: float) -> tuple[Any, float]:
    """Call a planner service: (its answer, seconds from the first request to the answer)."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    ctx = Context()
    rclpy.init(context=ctx)
    try:
        node = Node(f"operator_{uuid.uuid4().hex[:8]}", context=ctx, namespace=namespace or None)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        client = node.create_client(srv_type, name)
        full = f"{node.get_namespace().rstrip('/')}/{name}"
        deadline = time.monotonic() + timeout_s
        while not client.service_is_ready():
            if time.monotonic() > deadline:
                raise CommandError(f"no planner answers on {full} within {timeout_s:g} s: start one with "
                                   "`timely-fleet up`, or give its --namespace")
            ex.spin_once(timeout_sec=0.05)
        t0 = time.monotonic()
        futures = [client.call_async(request)]
        next_send = t0 + RESEND_S
        while not any(f.done() for f in futures):
            now = time.monotonic()
            if now > deadline + RESEND_S:
                raise CommandError(f"the planner on {full} did not answer within {timeout_s:g} s")
            if now >= next_send:
                futures.append(client.call_async(request))
                next_send = now + RESEND_S
            ex.spin_once(timeout_sec=0.02)
        answer = next(f for f in futures if f.done()).result()
        dt = time.monotonic() - t0
        ex.shutdown()
        node.destroy_node()
        return answer, dt
    finally:
        rclpy.try_shutdown(context=ctx)


def run(args: argparse.Namespace) -> int:
    from timely_fleet.srv import ApproveSegment, StopRobots

    from llm_planner_node.ros.operator import APPROVE_SERVICE, STOP_SERVICE

    secret = read_secret(args.secret_file)
    operator = args.operator if args.operator is not None else _login()
    if args.command == "stop":
        if args.all and args.robots:
            raise CommandError("give robot ids or --all, not both")
        if not args.all and not args.robots:
            raise CommandError("name the robots to stop (e.g. `timely-fleet stop tello_1`) or give --all")
        req = StopRobots.Request(robot_ids=list(args.robots), all=bool(args.all), operator_name=operator,
                                 secret=secret)
        res, dt = call(StopRobots, STOP_SERVICE, req, args.namespace, args.timeout)
        if not res.accepted:
            raise CommandError(res.message)
        for robot in res.stopped:
            print(f"stopped {robot}")
        print(f"{res.message} (answered in {dt:.2f} s)")
        return 0
    req = ApproveSegment.Request(goal_id=args.goal, approve=args.command == "approve", operator_name=operator,
                                 secret=secret)
    res, _dt = call(ApproveSegment, APPROVE_SERVICE, req, args.namespace, args.timeout)
    if not res.accepted:
        raise CommandError(res.message)
    print(res.message)
    return 0


def _login() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without passwd entry)
        return "operator"
