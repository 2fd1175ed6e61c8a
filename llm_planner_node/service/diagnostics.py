"""The service's counters and gauges for diagnostics, refreshed by the scheduler thread."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llm_planner_node.core.task_model import GenState, Request
from llm_planner_node.service.shared import ServicePart, Shared
from llm_planner_node.service.status_path import StatusPath


@dataclass
class Snapshot:
    """Counters and gauges for diagnostics (refreshed by the scheduler thread once a second)."""

    queued: int = 0
    running: int = 0
    suspended: int = 0
    active_goals: int = 0
    tokens_per_s: float = 0.0
    kv_free_fraction: float = 1.0
    silent_robots: tuple[str, ...] = ()
    status_delay_p99_s: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's own diagnostics, if it has any


class Diagnostics(ServicePart):
    """Takes a :class:`Snapshot` of the core, the engine, delivery and the status path."""

    def __init__(self, shared: Shared, statuses: StatusPath) -> None:
        super().__init__(shared)
        self._statuses = statuses
        self.snapshot = Snapshot()
        self._rate_mark = (shared.clock.now(), 0)
        self._forgotten_tokens = 0

    def forgotten(self, request: Request) -> None:
        """A request left the core: its tokens still count in the generation rate."""
        self._forgotten_tokens += request.generated_tokens

    def refresh(self, now: float) -> None:
        planner, delivery, statuses = self._planner, self._delivery, self._statuses
        reqs = list(planner.requests.values())
        states = Counter(r.state for r in reqs)
        total = self._forgotten_tokens + sum(r.generated_tokens for r in reqs)
        t0, n0 = self._rate_mark
        self._rate_mark = (now, total)
        engine = planner.engine
        try:
            free = engine.free_kv_tokens() / max(1, engine.kv_capacity_tokens())
        except Exception:  # noqa: BLE001 - a dead engine reports nothing
            free = 0.0
        try:  # e.g. the remote engine: servers up, failovers, per-server load
            engine_info = dict(engine.diagnostics()) if hasattr(engine, "diagnostics") else {}
        except Exception:  # noqa: BLE001
            engine_info = {}
        silent = tuple(sorted({planner.requests[rid].goal.robot_id for rid, g in self._goals.by_request.items()
                               if delivery.silent_for(g.goal_id, now) > 0.5 * delivery.silence_timeout_s}))
        self.snapshot = Snapshot(
            queued=states[GenState.QUEUED], running=states[GenState.RUNNING],
            suspended=states[GenState.SUSPENDED], active_goals=sum(1 for r in reqs if not r.state.terminal),
            tokens_per_s=(total - n0) / max(now - t0, 1e-6), kv_free_fraction=free, silent_robots=silent,
            status_delay_p99_s=float(np.quantile(np.fromiter(statuses.delays, float), 0.99))
            if statuses.delays else 0.0,
            counters=dict(self._counters) | {"resends": delivery.resends, "probes": delivery.probes,
                                             "status_flood_s": int(statuses.flood_seconds),
                                             "robot_stops": delivery.stops_sent,
                                             "robot_stops_unconfirmed": delivery.stops_unconfirmed}
            | {f"status_dropped: {k}": v for k, v in statuses.drops.items()}, engine=engine_info)
