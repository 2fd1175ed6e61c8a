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

One plan per robot, the simulator's rule (:mod:`timely_tools.sim.agents`): the fleet has the
workload's ``agents`` robots per kind; a task whose robot is still busy (its goal sent and no
result yet) is sent to a free robot of the same kind, or waits (FIFO per kind) and is sent the
moment a result frees a robot of its kind (:func:`send_one_plan_per_robot`). The node would
refuse a goal for a busy robot; with this rule it never sees one. (``--attach``: the running
node must host the whole fleet, ``<kind>0..<kind>{agents-1}``.)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from llm_planner_node.core.task_model import Goal
from timely_tools.evaluation.workload_spec import EvalSpec, compose


def live_instruction(goal: Goal) -> str:
    """The planner model's wording of a trace's task (its canonical corpus instruction)."""
    from llm_planner_node.planner_model.corpus import canonical_examples
    from llm_planner_node.engines.sim_traces import TRACES

    by_description = {t.description: t.id for t in TRACES.values()}
    canonical = {e.task_id: e.instruction for e in canonical_examples()}
    tid = by_description.get(goal.instruction)
    return canonical.get(tid, goal.instruction) if tid is not None else goal.instruction


def fleet_params_for(goals: Sequence[Goal], policy: str, params_path: str | None,
                     fleet: dict[str, str] | None = None) -> Any:
    """Planner parameters with one simulated robot per agent: from ``params_path`` as given (its
    engine too, e.g. ``kind: sim`` for a quick check), else the defaults on vLLM. ``fleet``
    (robot id -> kind): robots to host beside the goals' own (the workload's whole fleet)."""
    from dataclasses import replace

    from llm_planner_node.config.params import DEFAULT_PARAMS, load_params
    from timely_robot.config import ParamError, RobotParams

    base = load_params(params_path or DEFAULT_PARAMS, check=False)
    kinds: dict[str, str] = dict(fleet or {})
    for g in goals:
        if kinds.setdefault(g.robot_id, g.robot_kind) != g.robot_kind:
            raise ValueError(f"agent {g.robot_id} gets both {kinds[g.robot_id]} and {g.robot_kind} goals")
    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND

    robots = tuple(RobotParams(rid, kind, DEFAULT_SKILL_SET_FOR_KIND[kind]) for rid, kind in sorted(kinds.items()))
    # without a parameter file: the papers' reproduction, on the 1M-parameter model that knows their tasks
    engine = base.planner.engine if params_path else replace(base.planner.engine, kind="vllm", model="embedded")
    planner = replace(base.planner, policy=policy, engine=engine)
    try:
        return replace(base, planner=planner, robots=robots).check()
    except ParamError as e:
        raise ParamError(f"{params_path or DEFAULT_PARAMS}: {e}") from None


def fleet_of(spec: EvalSpec, goals: Sequence[Goal]) -> dict[str, str]:
    """robot id -> kind: the workload's ``agents`` robots of every kind its goals use."""
    from timely_tools.sim.agents import AgentPool

    pool = AgentPool.for_goals(goals, spec.agents)
    return {r: k for k in sorted({g.robot_kind for g in goals}) for r in pool.robots(k)}


@contextlib.contextmanager
def _node_for(policy: str, goals: Sequence[Goal], args: argparse.Namespace,
              fleet: dict[str, str] | None = None) -> Iterator[Any]:
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
    from llm_planner_node.up import running_fleet

    n = len(set(fleet or ()) | {g.robot_id for g in goals})
    print(f"[eval] starting the planner (policy {policy}) and {n} simulated robots", file=sys.stderr, flush=True)
    with running_fleet(fleet_params_for(goals, policy, getattr(args, "params", None), fleet),
                       time_scale=args.time_scale) as fleet:
        yield fleet.context


def plan_task_goal_of(goal: Goal) -> Any:
    from timely_fleet.action import PlanTask

    return PlanTask.Goal(robot_id=goal.robot_id, robot_kind=goal.robot_kind, task_type=goal.task_type,
                         instruction=live_instruction(goal), ert_s=float(goal.tuf.ert),
                         alpha=float(goal.tuf.alpha), beta=float(goal.tuf.beta),
                         skill_set=goal.skill_set_id or "", max_tokens=int(goal.max_tokens))


def bag_paths(bag: str | None, policies: Sequence[str]) -> dict[str, str | None]:
    """Where each policy's run is recorded: ``bag`` itself for one policy, ``<bag>_<policy>`` for several."""
    if not bag:
        return {p: None for p in policies}
    return {p: bag if len(policies) == 1 else f"{bag}_{p}" for p in policies}


def run_live(spec: EvalSpec, policies: Sequence[str], seed: int,
             args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """Each policy live, one after the other; every parameter is checked before anything starts."""
    from timely_robot.errors import CommandError

    if getattr(args, "attach", False) and len(policies) != 1:
        raise CommandError("--attach evaluates the running node's policy: give exactly one --policy "
                           "(restart the node with another policy for the next run)")
    arrivals = compose(spec, seed, chat_segmentation=getattr(args, "chat_segmentation", None))
    if args.limit:
        arrivals = arrivals[: args.limit]
    bags = bag_paths(args.bag, policies)
    taken = [b for b in bags.values() if b and Path(b).exists()]
    if taken:
        raise CommandError(f"{', '.join(taken)} already exist{'s' if len(taken) == 1 else ''}: give --bag a new "
                           "path (a recording never overwrites another)")
    fleet = fleet_of(spec, [a.goal for a in arrivals])
    if not getattr(args, "attach", False):
        for policy in policies:  # refuse a policy the engine cannot run before starting any
            fleet_params_for([a.goal for a in arrivals], policy, getattr(args, "params", None), fleet)
    results = []
    for policy in policies:
        with _node_for(policy, [a.goal for a in arrivals], args, fleet) as context:
            res = _run_one(spec, arrivals, policy, context, args, bags[policy])
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

    from timely_tools.evaluation.bag import GOALS_TOPIC, RESULTS_TOPIC, BagRecorder, metrics_from_results

    t0 = arrivals[0].t if arrivals else 0.0
    goals = [(a.t - t0, a.goal) for a in arrivals]
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
                          sorted(fleet_of(spec, [g for _, g in goals])))
        ex.add_node(rec.node)
    try:
        from timely_tools.sim.agents import AgentPool

        pool = AgentPool.for_goals([g for _, g in goals], spec.agents)
        agents = send_one_plan_per_robot(node, goals, pool, time_scale=args.time_scale, executor=ex,
                                         server_timeout_s=120.0, progress=not args.no_progress,
                                         result_timeout_s=args.timeout)
        end = time.monotonic() + 2.0  # let the last /planner/results messages arrive (here and in the bag)
        while time.monotonic() < end and (len(got_results) < len(got_goals) or (
                rec is not None and (rec.counts[RESULTS_TOPIC] < len(got_results)
                                     or rec.counts[GOALS_TOPIC] < len(got_goals)))):
            ex.spin_once(timeout_sec=0.1)
    except TimeoutError as e:
        from timely_robot.errors import CommandError

        raise CommandError(str(e)) from None
    finally:
        if rec is not None:
            rec.close()
        ex.shutdown()
        node.destroy_node()
    res = metrics_from_results(got_results, got_goals, policy=policy,
                               network_latency_s=spec.network_latency_ms / 1000.0)
    res["goals_sent"] = len(goals)
    res["agents"] = agents
    if bag:
        res["bag"] = str(bag)
    return res


def send_one_plan_per_robot(node: Any, goals: Sequence[tuple[float, Goal]], pool: Any, *,
                            action_name: str = "plan_task", time_scale: float = 1.0,
                            server_timeout_s: float = 10.0, executor: Any = None, progress: bool = False,
                            result_timeout_s: float = 60.0) -> dict[str, Any]:
    """Send (offset s, Goal) tasks at their offsets (x ``time_scale``) under one plan per robot.

    ``pool`` (:class:`timely_tools.sim.agents.AgentPool`) decides: a task is sent at once to
    its robot or a free robot of its kind, or waits until a result (any end: succeeded, failed,
    refused, or no result within ``result_timeout_s`` after the last due time) frees one.
    Returns what the rule did: ``{"robots_per_kind", "reassigned", "waited", "mean_wait_s",
    "max_wait_s", "unsent"}`` (times in workload seconds, i.e. divided by ``time_scale``).
    """
    from llm_planner_node.ros.goal_client import answering_action_client

    client, ex = answering_action_client(node, action_name, server_timeout_s, executor)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(goals), desc="goals", unit="goal", file=sys.stderr)
    order = sorted(range(len(goals)), key=lambda i: goals[i][0])
    scale = time_scale if time_scale > 0 else 1.0
    t0 = time.monotonic()
    now = lambda: (time.monotonic() - t0) / scale  # noqa: E731 - workload seconds
    in_flight: dict[int, tuple[str, Any, Any]] = {}  # task index -> (robot, send future, result future)
    waits: dict[int, float] = {}

    def send(a: Any) -> None:
        if a is None:
            return
        waits[a.index] = a.waited_s
        in_flight[a.index] = (a.goal.robot_id, client.send_goal_async(plan_task_goal_of(a.goal)), None)

    def poll() -> None:
        for i in list(in_flight):
            robot, fut, res = in_flight[i]
            ended = False
            if res is None and fut.done():
                h = fut.result()
                if h is None or not h.accepted:
                    ended = True
                else:
                    in_flight[i] = (robot, fut, h.get_result_async())
            elif res is not None and res.done():
                ended = True
            if ended:
                del in_flight[i]
                if bar:
                    bar.update(1)
                send(pool.release(robot, now()))

    for i in order:
        due = goals[i][0]
        while now() < due:
            ex.spin_once(timeout_sec=max(0.0, min(0.01, (due - now()) * scale)))
            poll()
        send(pool.arrive(i, goals[i][1], now()))
    deadline = time.monotonic() + result_timeout_s
    while (in_flight or pool.waiting()) and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
        poll()
    if bar:
        bar.close()
    client.destroy()
    w = [x for x in waits.values() if x > 0]
    return {"robots_per_kind": len(pool.robots(goals[0][1].robot_kind)) if goals else 0,
            "reassigned": len(pool.reassigned), "waited": len(w),
            "mean_wait_s": float(sum(w) / len(w)) if w else 0.0, "max_wait_s": float(max(w, default=0.0)),
            "unsent": pool.waiting()}
