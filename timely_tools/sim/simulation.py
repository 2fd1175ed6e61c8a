"""The discrete-event simulation loop: arrivals, engine iterations, robot execution reports.

``simulate(arrivals, "timelyllm")`` runs the real :class:`~llm_planner_node.core.planner.Planner`
(the same code the ROS node wraps) over :class:`~llm_planner_node.engines.sim_engine.SimEngine`
and :class:`~.robots.SimRobots` on a virtual clock. Scheduling decisions happen at every engine
iteration boundary, and at an arrival or robot report only when the engine is idle (TimelyLLM:
"whenever the LLM inference engine completes a decoding iteration"). Deterministic under
``seed``.

One plan per robot (``agents=``, an :class:`~.agents.AgentPool`; the evaluation harness passes
the workload's fleet): a task for a busy robot goes to a free robot of the same kind or waits
for one (the rule and its metrics: :mod:`.agents`). Without ``agents`` every goal is submitted
at its arrival for the robot it names, even if that robot's earlier plan is still running
(hand-built scenarios).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import TokensEvent
from llm_planner_node.core.exec_table import TableExecutionTime
from timely_robot.execution_time import ExecutionTimeEstimator
from llm_planner_node.core.metrics import Summary, summarize
from llm_planner_node.core.planner import Planner, PlannerConfig, QueueFull
from llm_planner_node.core.policies import Policy, get_policy
from llm_planner_node.core.predictors import LengthPredictor
from llm_planner_node.core.task_model import Request, Segment
from llm_planner_node.engines.sim_engine import EngineStats, SimEngine, SimEngineConfig
from timely_tools.sim.agents import AgentPool
from timely_tools.sim.robots import SimRobots
from timely_tools.sim.workload import Arrival


@dataclass
class SimResult:
    policy: str
    requests: list[Request]
    engine: EngineStats
    engine_capacity: int
    end_time: float
    summary: list[Summary] = field(default_factory=list)
    dispatch_log: list[tuple[float, int, int]] = field(default_factory=list)  # (t, request, k)
    request_of_arrival: dict[int, int] = field(default_factory=dict)  # arrival index -> request id
    refused: list[int] = field(default_factory=list)  # arrival indices refused (queue full)
    agent_wait_s: dict[int, float] = field(default_factory=dict)  # arrival index -> wait for a robot
    reassigned: list[int] = field(default_factory=list)  # arrival indices moved to another robot
    first_token: dict[int, float] = field(default_factory=dict)  # request id -> time of its first token

    def ttft(self) -> list[float]:
        """Time to first token of every request that got one (first token - arrival)."""
        return [self.first_token[r.id] - r.arrival for r in self.requests if r.id in self.first_token]

    def by_type(self, task_type: str) -> Summary:
        return next(s for s in self.summary if s.task_type == task_type)


class _Sink:
    def __init__(self, clock: VirtualClock, robots: SimRobots, log: list[tuple[float, int, int]],
                 on_done: object = None) -> None:
        self.clock, self.robots, self.log = clock, robots, log
        self.on_done = on_done

    def dispatch(self, request: Request, segment: Segment) -> None:
        t = self.clock.now()
        self.log.append((t, request.id, segment.index))
        self.robots.dispatch(t, request, segment)

    def done(self, request: Request) -> None:
        if self.on_done is not None:
            self.on_done(request)  # type: ignore[operator]


def simulate(arrivals: Sequence[Arrival], policy: str | Policy, *, seed: int = 0,
             engine_config: SimEngineConfig = SimEngineConfig(),
             planner_config: PlannerConfig = PlannerConfig(),
             exec_model: ExecutionTimeEstimator | None = None,
             robot_exec_model: ExecutionTimeEstimator | None = None,
             cancels: Sequence[tuple[float, int]] = (),
             predictor: LengthPredictor | None = None,
             agents: AgentPool | None = None,
             **policy_params: object) -> SimResult:
    """Simulate ``arrivals`` under ``policy`` (a name for ``get_policy`` or an instance).

    ``cancels``: (time, index into ``arrivals``) pairs; the client cancels that goal then.
    Goals refused because the planner's queue is full (``planner_config.max_queue``) are listed
    in ``SimResult.refused``; ``policy_params`` may name the shared ``admission``
    (``literal`` / ``improved``) of segmented policies.

    ``exec_model`` is what the scheduler predicts with (default: the fixed table);
    ``robot_exec_model`` is what simulated robots sample from (default: the same model).
    ``predictor``: output-length predictor for length-aware policies (default: the policy's
    simulator-fed one, seeded with ``seed``). A policy's ``engine_iteration`` overrides the
    engine's iteration rule. ``agents``: one plan per robot over this fleet (module docstring);
    ``SimResult.agent_wait_s`` / ``reassigned`` report what the rule did.
    """
    pol = get_policy(policy, **policy_params) if isinstance(policy, str) else policy
    if pol.engine_iteration is not None:
        engine_config = replace(engine_config, iteration_policy=pol.engine_iteration)
    if predictor is None:
        predictor = pol.make_predictor(seed)
    clock = VirtualClock()
    engine = SimEngine(clock, engine_config)
    first_token: dict[int, float] = {}
    _step = engine.step

    def step_recording_first_tokens() -> list:
        evs = _step()
        for ev in evs:
            if isinstance(ev, TokensEvent) and ev.gen_id not in first_token:
                first_token[ev.gen_id] = ev.t
        return evs

    engine.step = step_recording_first_tokens  # type: ignore[method-assign]
    for a in arrivals:  # skill sets are pre-stored on the server
        p = a.goal.prompt
        engine.prewarm(p.prefix_key, p.shared_prefix_tokens)  # type: ignore[attr-defined]
    model = exec_model or TableExecutionTime()
    heap: list[tuple[float, int, tuple]] = []
    seq = 0

    def push(t: float, item: tuple) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, seq, item))
        seq += 1

    def schedule_status(t: float, robot: str, rid: int, k: int, state: str, d: tuple[float, ...]) -> None:
        push(t, ("status", robot, rid, k, state, d))

    arrival_of: dict[int, int] = {}  # request id -> arrival index (the same under every policy)
    robots = SimRobots(robot_exec_model or model, seed, planner_config.network_latency_s, schedule_status,
                       goal_key=lambda req: arrival_of[req.id])
    log: list[tuple[float, int, int]] = []

    def robot_free(req: Request) -> None:  # a goal ended: its robot is free (handled as an event)
        push(clock.now(), ("release", req.goal.robot_id))

    planner = Planner(engine, pol, clock, model,
                      _Sink(clock, robots, log, robot_free if agents is not None else None),
                      planner_config, predictor)
    for i in sorted(range(len(arrivals)), key=lambda i: arrivals[i].t):
        push(arrivals[i].t, ("arrival", arrivals[i].goal, i))
    for t, i in cancels:
        push(t, ("cancel", i))
    request_of: dict[int, int] = {}  # arrival index -> request id
    refused: list[int] = []
    agent_wait: dict[int, float] = {}
    cancelled: set[int] = set()  # cancelled before a robot took them

    def send(i: int, goal: object) -> None:
        try:
            request_of[i] = planner.submit(goal)  # type: ignore[arg-type]
            arrival_of[request_of[i]] = i
        except QueueFull:
            refused.append(i)
            if agents is not None:
                push(clock.now(), ("release", goal.robot_id))  # type: ignore[attr-defined]

    def assigned(a: object) -> None:
        if a is None:
            return
        agent_wait[a.index] = a.waited_s  # type: ignore[attr-defined]
        if a.index in cancelled:  # type: ignore[attr-defined]
            push(clock.now(), ("release", a.goal.robot_id))  # type: ignore[attr-defined]
        else:
            send(a.index, a.goal)  # type: ignore[attr-defined]

    while True:
        t_eng = engine.in_flight_end()
        t_evt = heap[0][0] if heap else np.inf
        if t_eng is None and not heap:
            break
        if t_eng is not None and t_eng <= t_evt:
            clock.advance_to(t_eng)
            planner.tick()
        else:
            clock.advance_to(t_evt)
            while heap and heap[0][0] <= t_evt:
                _, _, item = heapq.heappop(heap)
                if item[0] == "arrival":
                    if agents is None:
                        send(item[2], item[1])
                    else:
                        assigned(agents.arrive(item[2], item[1], clock.now()))
                elif item[0] == "release":
                    assigned(agents.release(item[1], clock.now()))  # type: ignore[union-attr]
                elif item[0] == "cancel":
                    if item[1] in request_of:
                        planner.cancel(request_of[item[1]])
                    else:
                        cancelled.add(item[1])
                else:
                    _, robot, rid, k, state, d = item
                    planner.on_robot_status(robot, rid, k, state, d, t=clock.now())
            if t_eng is None:
                planner.tick()
        engine.start_iteration()
        if engine.in_flight_end() is None and planner.queued():
            planner.tick()  # e.g. a preemption re-queued work after this step's admissions
            engine.start_iteration()
            if engine.in_flight_end() is None and not heap:
                raise RuntimeError(f"simulation stalled at t={clock.now():.3f} with "
                                   f"{planner.queued()} queued generations and an idle engine")

    requests = list(planner.requests.values())
    result = SimResult(pol.name, requests, engine.stats, engine.kv_capacity_tokens(), clock.now(),
                       dispatch_log=log, request_of_arrival=request_of, refused=refused,
                       agent_wait_s=agent_wait, reassigned=list(agents.reassigned) if agents else [],
                       first_token=first_token)
    first = min((a.t for a in arrivals), default=0.0)
    result.summary = summarize(pol.name, requests, planner_config.network_latency_s,
                               clock.now() - first)
    return result
