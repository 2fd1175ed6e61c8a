"""The discrete-event simulation loop: arrivals, engine iterations, robot execution reports.

``simulate(arrivals, "timelyllm")`` runs the real :class:`~llm_planner_node.core.planner.Planner`
(the same code the ROS node wraps) over :class:`~llm_planner_node.engines.sim_engine.SimEngine`
and :class:`~.robots.SimRobots` on a virtual clock. Scheduling decisions happen at every engine
iteration boundary, and at an arrival or robot report only when the engine is idle (TimelyLLM:
"whenever the LLM inference engine completes a decoding iteration"). Deterministic under
``seed``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..core.clock import VirtualClock
from ..core.exec_table import TableExecutionTime
from ..core.interfaces import ExecutionTimeEstimator
from ..core.metrics import Summary, summarize
from ..core.planner import Planner, PlannerConfig
from ..core.policies import Policy, get_policy
from ..core.predictors import LengthPredictor
from ..core.task_model import Request, Segment
from ..engines.sim_engine import EngineStats, SimEngine, SimEngineConfig
from .robots import SimRobots
from .workload import Arrival


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

    def by_type(self, task_type: str) -> Summary:
        return next(s for s in self.summary if s.task_type == task_type)


class _Sink:
    def __init__(self, clock: VirtualClock, robots: SimRobots, log: list[tuple[float, int, int]]) -> None:
        self.clock, self.robots, self.log = clock, robots, log

    def dispatch(self, request: Request, segment: Segment) -> None:
        t = self.clock.now()
        self.log.append((t, request.id, segment.index))
        self.robots.dispatch(t, request, segment)

    def done(self, request: Request) -> None:
        pass


def simulate(arrivals: Sequence[Arrival], policy: str | Policy, *, seed: int = 0,
             engine_config: SimEngineConfig = SimEngineConfig(),
             planner_config: PlannerConfig = PlannerConfig(),
             exec_model: ExecutionTimeEstimator | None = None,
             robot_exec_model: ExecutionTimeEstimator | None = None,
             cancels: Sequence[tuple[float, int]] = (),
             predictor: LengthPredictor | None = None,
             **policy_params: object) -> SimResult:
    """Simulate ``arrivals`` under ``policy`` (a name for ``get_policy`` or an instance).

    ``cancels``: (time, index into ``arrivals``) pairs; the client cancels that goal then.

    ``exec_model`` is what the scheduler predicts with (default: the fixed table);
    ``robot_exec_model`` is what simulated robots sample from (default: the same model).
    ``predictor``: output-length predictor for length-aware policies (default: the policy's
    simulator-fed one, seeded with ``seed``). A policy's ``engine_iteration`` overrides the
    engine's iteration rule.
    """
    pol = get_policy(policy, **policy_params) if isinstance(policy, str) else policy
    if pol.engine_iteration is not None:
        engine_config = replace(engine_config, iteration_policy=pol.engine_iteration)
    if predictor is None:
        predictor = pol.make_predictor(seed)
    clock = VirtualClock()
    engine = SimEngine(clock, engine_config)
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

    robots = SimRobots(robot_exec_model or model, np.random.default_rng(seed),
                       planner_config.network_latency_s, schedule_status)
    log: list[tuple[float, int, int]] = []
    planner = Planner(engine, pol, clock, model, _Sink(clock, robots, log), planner_config, predictor)
    for i in sorted(range(len(arrivals)), key=lambda i: arrivals[i].t):
        push(arrivals[i].t, ("arrival", arrivals[i].goal, i))
    for t, i in cancels:
        push(t, ("cancel", i))
    request_of: dict[int, int] = {}  # arrival index -> request id

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
                    request_of[item[2]] = planner.submit(item[1])
                elif item[0] == "cancel":
                    if item[1] in request_of:
                        planner.cancel(request_of[item[1]])
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
                       dispatch_log=log, request_of_arrival=request_of)
    first = min((a.t for a in arrivals), default=0.0)
    result.summary = summarize(pol.name, requests, planner_config.network_latency_s,
                               clock.now() - first)
    return result
