"""``eval --engine vllm``: run a workload live, through the planner node on vLLM.

For each policy the planner node (vLLM engine, the shipped planner model unless ``--params``
names another) and simulated adapters for every agent of the workload are started in this
process (:func:`llm_planner_node.up.running_fleet`), the workload's goals are sent as
``plan_task`` action goals with their original timing (x ``--time-scale``; robot execution is
scaled the same way), and ``/planner/goals`` and ``/planner/results`` are collected (and, with
``--bag``, recorded with robot status and segments). Metrics come from the GoalResult messages
exactly as ``timely-fleet report <bag>`` computes them (:func:`.bag.metrics_from_results`), so
the report of a recorded bag equals the live run's metrics.

``--attach`` sends the goals to an already running node instead (``timely-fleet up`` or
``ros2 launch``); its policy is fixed at start-up, so give exactly one ``--policy`` then.

A robot runs one plan at a time: a goal for an agent that is still executing an earlier plan is
rejected by the node and counted as not completed (the simulator lets such goals overlap).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Any, Iterator, Sequence

from ..core.task_model import Goal
from .workload_spec import EvalSpec, compose


def live_instruction(goal: Goal) -> str:
    """The planner model's wording of a trace's task (its canonical corpus instruction)."""
    from ..planner_model.corpus import canonical_examples
    from ..sim.traces import TRACES

    by_description = {t.description: t.id for t in TRACES.values()}
    canonical = {e.task_id: e.instruction for e in canonical_examples()}
    tid = by_description.get(goal.instruction)
    return canonical.get(tid, goal.instruction) if tid is not None else goal.instruction


def fleet_params_for(goals: Sequence[Goal], policy: str, params_path: str | None) -> Any:
    """Planner parameters with one simulated robot per agent: from ``params_path`` as given (its
    engine too, e.g. ``kind: sim`` for a quick check), else the defaults on vLLM."""
    from dataclasses import replace

    from ..params import DEFAULT_PARAMS, RobotParams, load_params

    base = load_params(params_path or DEFAULT_PARAMS)
    kinds: dict[str, str] = {}
    for g in goals:
        if kinds.setdefault(g.robot_id, g.robot_kind) != g.robot_kind:
            raise ValueError(f"agent {g.robot_id} gets both {kinds[g.robot_id]} and {g.robot_kind} goals")
    from ..core.skills import DEFAULT_SKILL_SET_FOR_KIND

    robots = tuple(RobotParams(rid, kind, DEFAULT_SKILL_SET_FOR_KIND[kind]) for rid, kind in sorted(kinds.items()))
    engine = base.planner.engine if params_path else replace(base.planner.engine, kind="vllm")
    planner = replace(base.planner, policy=policy, engine=engine)
    return replace(base, planner=planner, robots=robots)


@contextlib.contextmanager
def _node_for(policy: str, goals: Sequence[Goal], args: argparse.Namespace) -> Iterator[Any]:
    """The ROS context to talk in: a fleet started here, or (``--attach``) a fresh context."""
    import rclpy
    from rclpy.context import Context

    if getattr(args, "attach", False):
        ctx = Context()
        rclpy.init(context=ctx)
        try:
            yield ctx
        finally:
            rclpy.try_shutdown(context=ctx)
        return
    from ..up import running_fleet

    print(f"[eval] starting the planner (policy {policy}) and {len({g.robot_id for g in goals})} "
          "simulated robots", file=sys.stderr, flush=True)
    with running_fleet(fleet_params_for(goals, policy, getattr(args, "params", None)),
                       time_scale=args.time_scale) as fleet:
        yield fleet.context


def plan_task_goal_of(goal: Goal) -> Any:
    from timely_fleet.action import PlanTask

    return PlanTask.Goal(robot_id=goal.robot_id, robot_kind=goal.robot_kind, task_type=goal.task_type,
                         instruction=live_instruction(goal), ert_s=float(goal.tuf.ert),
                         alpha=float(goal.tuf.alpha), beta=float(goal.tuf.beta),
                         skill_set=goal.skill_set_id or "", max_tokens=int(goal.max_tokens))


def run_live(spec: EvalSpec, policies: Sequence[str], seed: int,
             args: argparse.Namespace) -> list[dict[str, Any]] | None:
    if getattr(args, "attach", False) and len(policies) != 1:
        print("error: --attach evaluates the running node's policy: give exactly one --policy "
              "(restart the node with another policy for the next run)", file=sys.stderr)
        return None
    arrivals = compose(spec, seed, chat_segmentation=getattr(args, "chat_segmentation", None))
    if args.limit:
        arrivals = arrivals[: args.limit]
    results = []
    for policy in policies:
        with _node_for(policy, [a.goal for a in arrivals], args) as context:
            bag = args.bag if len(policies) == 1 or not args.bag else f"{args.bag}_{policy}"
            res = _run_one(spec, arrivals, policy, context, args, bag)
        if res is None:
            return None
        results.append(res)
    return results


def _run_one(spec: EvalSpec, arrivals: Sequence[Any], policy: str, context: Any,
             args: argparse.Namespace, bag: str | None) -> dict[str, Any] | None:
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from timely_fleet.msg import GoalRecord, GoalResult

    from .bag import GOALS_TOPIC, RESULTS_TOPIC, BagRecorder, metrics_from_results, send_timed_goals

    t0 = arrivals[0].t if arrivals else 0.0
    goals = [(a.t - t0, plan_task_goal_of(a.goal)) for a in arrivals]
    node = Node("timely_fleet_eval", context=context)
    got_goals: list[Any] = []
    got_results: list[Any] = []
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(GoalRecord, GOALS_TOPIC, got_goals.append, qos)
    node.create_subscription(GoalResult, RESULTS_TOPIC, got_results.append, qos)
    ex = SingleThreadedExecutor(context=context)
    ex.add_node(node)
    rec = None
    if bag:
        rec = BagRecorder(bag, context=context, robots=[r for r in args.robots.split(",") if r] or
                          sorted({g.robot_id for _, g in goals}))
        ex.add_node(rec.node)
    try:
        send_timed_goals(node, goals, time_scale=args.time_scale, executor=ex, server_timeout_s=120.0,
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
        ex.shutdown()
        node.destroy_node()
    res = metrics_from_results(got_results, got_goals, policy=policy,
                               network_latency_s=spec.network_latency_ms / 1000.0)
    res["goals_sent"] = len(goals)
    if bag:
        res["bag"] = str(bag)
    return res
