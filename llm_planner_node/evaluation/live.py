"""``eval --engine vllm``: run a workload live through a running planner node.

The node must already run (``timely-fleet up`` with the vLLM engine, the policy to evaluate and
the workload's robots, e.g. drone0..drone24 for WID1); ``llm_planner_node/up.py`` did not exist
when this was written, so eval does not start it itself. The workload's goals are sent as
``plan_task`` action goals with their original timing (x ``--time-scale``), ``/planner/goals``
and ``/planner/results`` are collected (and, with ``--bag``, recorded with robot status and
segments), and metrics are computed from the GoalResult messages exactly as
``timely-fleet report <bag>`` does (:func:`.bag.metrics_from_results`), so the report of the
recorded bag equals the live run's metrics.

The node's policy is fixed at start-up: evaluate one policy per live run (the ``--policy``
value labels the result); for several policies restart the node between runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Sequence

from ..core.task_model import Goal
from .workload_spec import EvalSpec, compose


def plan_task_goal_of(goal: Goal) -> Any:
    from timely_fleet.action import PlanTask

    return PlanTask.Goal(robot_id=goal.robot_id, robot_kind=goal.robot_kind, task_type=goal.task_type,
                         instruction=goal.instruction, ert_s=float(goal.tuf.ert),
                         alpha=float(goal.tuf.alpha), beta=float(goal.tuf.beta),
                         skill_set=goal.skill_set_id or "", max_tokens=int(goal.max_tokens))


def run_live(spec: EvalSpec, policies: Sequence[str], seed: int,
             args: argparse.Namespace) -> list[dict[str, Any]] | None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from timely_fleet.msg import GoalRecord, GoalResult

    from .bag import GOALS_TOPIC, RESULTS_TOPIC, BagRecorder, metrics_from_results, send_timed_goals

    if len(policies) != 1:
        print("error: --engine vllm evaluates the running node's policy: give exactly one --policy "
              "(restart `timely-fleet up` with another policy for the next run)", file=sys.stderr)
        return None
    arrivals = compose(spec, seed, chat_segmentation=getattr(args, "chat_segmentation", None))
    if args.limit:
        arrivals = arrivals[: args.limit]
    t0 = arrivals[0].t if arrivals else 0.0
    goals = [(a.t - t0, plan_task_goal_of(a.goal)) for a in arrivals]
    rclpy.init()
    node = Node("timely_fleet_eval")
    got_goals: list[Any] = []
    got_results: list[Any] = []
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(GoalRecord, GOALS_TOPIC, got_goals.append, qos)
    node.create_subscription(GoalResult, RESULTS_TOPIC, got_results.append, qos)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    rec = None
    if args.bag:
        rec = BagRecorder(args.bag, robots=[r for r in args.robots.split(",") if r] or
                          sorted({g.robot_id for _, g in goals}))
        ex.add_node(rec.node)
    try:
        send_timed_goals(node, goals, time_scale=args.time_scale, executor=ex,
                         progress=not args.no_progress, result_timeout_s=args.timeout)
        end = time.monotonic() + 2.0  # let the last /planner/results messages arrive
        while time.monotonic() < end and len(got_results) < len(got_goals):
            ex.spin_once(timeout_sec=0.1)
    except TimeoutError as e:
        print(f"error: {e}", file=sys.stderr)
        return None
    finally:
        if rec is not None:
            rec.close()
        node.destroy_node()
        rclpy.try_shutdown()
    res = metrics_from_results(got_results, got_goals, policy=policies[0],
                               network_latency_s=spec.network_latency_ms / 1000.0)
    res["goals_sent"] = len(goals)
    if args.bag:
        res["bag"] = str(args.bag)
    return [res]
