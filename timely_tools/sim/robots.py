"""Simulated robots: execute dispatched segments in order and report on ``/robot_status``.

A segment reaches its robot ``network_latency_s`` after dispatch (8 ms in the paper), starts
when it has arrived and the goal's previous segment has finished, and lasts the sum of its
skills' durations sampled from the execution-time model. Each goal's segments run in order;
goals are independent (as in the paper's trace replay).

A duration is drawn from a generator seeded by (seed, goal, segment, call), not from one stream
in dispatch order: every policy compared on the same arrivals meets the same robot durations,
whatever order its schedule dispatches them in.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from timely_robot.execution_time import ExecutionTimeEstimator
from llm_planner_node.core.task_model import Request, Segment

#: schedule(time, robot_id, request_id, segment_index, state, per-skill durations)
StatusScheduler = Callable[[float, str, int, int, str, tuple[float, ...]], None]


class SimRobots:
    def __init__(self, exec_model: ExecutionTimeEstimator, seed: int,
                 network_latency_s: float, schedule: StatusScheduler,
                 goal_key: Callable[[Request], int] = lambda r: r.id) -> None:
        """``goal_key``: a goal's number for its draws, the same under every policy (the
        simulator's arrival index; a request id depends on the order goals were submitted)."""
        self.exec_model = exec_model
        self.seed = int(seed)
        self.goal_key = goal_key
        self.network_latency_s = network_latency_s
        self.schedule = schedule
        self._free_at: dict[int, float] = {}  # request id -> end of its last scheduled segment

    def dispatch(self, t: float, request: Request, segment: Segment) -> None:
        g = request.goal
        key = self.goal_key(request)
        durations = tuple(self.exec_model.sample(g.robot_id, g.robot_kind, (c,),
                                                 np.random.default_rng((self.seed, key, segment.index, j)))
                          for j, c in enumerate(segment.calls))
        start = max(t + self.network_latency_s, self._free_at.get(request.id, -np.inf))
        end = start + sum(durations)
        self._free_at[request.id] = end
        self.schedule(start, g.robot_id, request.id, segment.index, "started", ())
        self.schedule(end, g.robot_id, request.id, segment.index, "finished", durations)
