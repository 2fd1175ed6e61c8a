"""What the planner reports on ``/diagnostics``, without ROS: one :class:`StatusReport` per part
(engine, goals, robots, operator; the role's comes from
:meth:`.failover_role.FailoverRole.report`), with the levels of ``diagnostic_msgs/DiagnosticStatus``
(OK, WARN, ERROR). The node turns them into a ``DiagnosticArray`` once a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The levels of ``diagnostic_msgs/DiagnosticStatus``.
OK, WARN, ERROR = 0, 1, 2
#: Queue length above which diagnostics warn (goals waiting for the engine).
QUEUE_WARN = 200
#: Free KV share below which diagnostics warn.
KV_WARN = 0.05


@dataclass(frozen=True)
class StatusReport:
    """One ``DiagnosticStatus``: level, name, message and key/value pairs."""

    level: int
    name: str
    message: str
    values: list[tuple[str, str]] = field(default_factory=list)


class HealthReport:
    """The engine, goals, robots and operator statuses of the node ``name`` (the module
    docstring). It remembers what it has reported, so an engine failure or a status that failed
    authentication raises one report at the next refresh, not every one after."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._link_dropped_reported = 0

    def not_configured(self) -> StatusReport:
        return StatusReport(WARN, f"{self.name}: engine", "not configured: no engine loaded")

    def reports(self, service: Any, *, link_counts: dict[str, int], cancel_refusals: dict[str, int],
                cancel_all_refused: int) -> list[StatusReport]:
        """Every status of a configured node: ``link_counts``, the link verifier's counts (empty
        without ``security.mode: sign``); ``cancel_refusals``, cancels refused by reason."""
        return [self.engine(service), self.goals(service, cancel_refusals, cancel_all_refused),
                self.robots(service, link_counts), *self.operator(service)]

    def engine(self, service: Any) -> StatusReport:
        """ERROR while the engine is down or restarting, and once for every failure since the
        last report; WARN when the KV cache is nearly exhausted."""
        snap, health, pp = service.snapshot, service.health, service.params.planner
        if health.state != "up" or health.failures > health.failures_reported:
            level = ERROR
            text = (f"engine {health.state}" if health.state != "up" else "engine failed and was restarted") + \
                f": {health.last_error}"
            health.failures_reported = health.failures
        else:
            level, text = OK, f"engine up ({pp.engine.kind}, {snap.tokens_per_s:.0f} tokens/s)"
        if level == OK and snap.kv_free_fraction < KV_WARN:
            level, text = WARN, f"KV cache nearly exhausted ({snap.kv_free_fraction:.0%} free)"
        values = [("kv_free_fraction", f"{snap.kv_free_fraction:.3f}"), ("failures", str(health.failures)),
                  ("status_delay_p99_s", f"{snap.status_delay_p99_s:.3f}")]
        values += [(str(k), str(v)) for k, v in snap.engine.items()]
        return StatusReport(level, f"{self.name}: engine", text, values)

    def goals(self, service: Any, cancel_refusals: dict[str, int], cancel_all_refused: int) -> StatusReport:
        """WARN when more than QUEUE_WARN goals wait for the engine; the goal counters."""
        snap = service.snapshot
        level = WARN if snap.queued > QUEUE_WARN else OK
        message = (f"queue of {snap.queued} past {QUEUE_WARN}" if level else
                   f"{snap.active_goals} goal(s) in flight, {'accepting' if service.accepting else 'not accepting'}")
        values = [(k, str(v)) for k, v in sorted(snap.counters.items())]
        values += [(f"cancel refused: {k}", str(v)) for k, v in sorted(cancel_refusals.items())]
        values.append(("cancel refused: cancel all", str(cancel_all_refused)))
        return StatusReport(level, f"{self.name}: goals", message, values)

    def robots(self, service: Any, link_counts: dict[str, int]) -> StatusReport:
        """WARN for robots silent past half their timeout, and once for statuses that failed
        authentication (forged, unsigned or replayed) since the last report."""
        snap = service.snapshot
        level = WARN if snap.silent_robots else OK
        message = (f"silent: {', '.join(snap.silent_robots)}" if snap.silent_robots
                   else f"{len(service.params.robots)} robot(s) reporting")
        dropped = sum(v for k, v in link_counts.items() if k != "accepted")
        if dropped > self._link_dropped_reported:
            level = WARN
            message = f"{dropped - self._link_dropped_reported} status(es) failed authentication and were dropped; {message}"
            self._link_dropped_reported = dropped
        values = [(f"link {k}", str(v)) for k, v in link_counts.items()]
        values.append(("security.mode", service.params.security.mode))
        return StatusReport(level, f"{self.name}: robots", message, values)

    def operator(self, service: Any) -> list[StatusReport]:
        """WARN while goals wait for an operator's approval; the operator's counters and last events."""
        waiting, counters, events = service.operator_view()
        if waiting:
            level = WARN
            listed = ", ".join(f"{robot} segment {k} of goal {gid[:8]} for {s:.0f} s" for gid, robot, k, s in waiting[:10])
            message = f"{len(waiting)} goal(s) waiting for approval: {listed}" + (", ..." if len(waiting) > 10 else "")
        else:
            level = OK
            message = f"last: {events[-1]}" if events else "no operator action yet"
        values = [(k, str(v)) for k, v in sorted(counters.items())]
        values += [(f"event {len(events) - i}", e) for i, e in enumerate(events)]
        return [StatusReport(level, f"{self.name}: operator", message, values)]
