"""The lease grace at the adapter, without ROS: with ``lease_grace_s`` > 0 a robot whose planner
went silent is held (its skill interrupted, its goals paused) until a planner of a higher term
speaks, and its goals end only if none does within the grace.

Deterministic: a manual event loop on a fake clock (nothing sleeps), simulated skills of 1 s each."""

from __future__ import annotations

import heapq
import logging

import pytest

from timely_robot.skills import TELLO_MINISPEC as T
from robot_adapters.adapter_core import (
    STATE_CANCELLED, STATE_DONE, STATE_EXECUTING, STATE_FAILED, STATE_IDLE, SegmentIn)
from robot_adapters.adapter_core import AdapterCore
from robot_adapters.executor import SimulatedExecutor

LEASE = 3.0
GRACE = 2.0
SKILL_S = 1.0


class ManualLoop:
    """The adapter's event loop on a fake clock: callbacks run only in :meth:`advance`."""

    def __init__(self) -> None:
        self.t = 100.0
        self._heap: list[tuple[float, int, object]] = []
        self._seq = 0
        self._cancelled: set[int] = set()

    def clock(self) -> float:
        return self.t

    def call_soon(self, cb) -> None:
        self.call_later(0.0, cb)

    def call_later(self, seconds: float, cb) -> int:
        self._seq += 1
        heapq.heappush(self._heap, (self.t + max(0.0, seconds), self._seq, cb))
        return self._seq

    def cancel(self, token) -> None:
        if token is not None:
            self._cancelled.add(token)

    def in_loop(self) -> bool:
        return True

    def advance(self, dt: float = 0.0) -> None:
        """Run every callback due within ``dt`` seconds from now, in order, the clock following."""
        end = self.t + dt
        while self._heap and self._heap[0][0] <= end:
            when, token, cb = heapq.heappop(self._heap)
            if token in self._cancelled:
                self._cancelled.discard(token)
                continue
            self.t = max(self.t, when)
            cb()
        self.t = end


class Robot:
    def __init__(self, grace: float = GRACE) -> None:
        self.loop = ManualLoop()
        self.ex = SimulatedExecutor("d1", "drone", T, lambda call: SKILL_S)
        self.stops = 0
        stop = self.ex.stop

        def counted_stop() -> None:
            self.stops += 1
            stop()

        self.ex.stop = counted_stop  # type: ignore[method-assign]
        self.events = []
        self.core = AdapterCore("d1", self.ex, self.events.append, clock=self.loop.clock, loop=self.loop,
                                lease_s=LEASE, lease_grace_s=grace).start()

    def of(self, goal: str, seq: int | None = None, state: int | None = None) -> list:
        return [e for e in self.events if e.goal_id == goal and (seq is None or e.sequence == seq)
                and (state is None or e.state == state)]

    def executed(self) -> list[str]:
        return [c.name for c in self.ex.executed]


def seg(goal: str, seq: int, term: int, n: int = 1, **kw) -> SegmentIn:
    return SegmentIn(goal, seq, skills=[("tc", ["90"])] * n, term=term, **kw)


def _expire_lease(r: Robot, goal: str = "g") -> None:
    """Segment 0 (six 1-s skills) of ``goal`` runs under term 1, segment 1 is queued; then the
    planner says nothing more, and the lease expires during segment 0's fourth skill (the lease
    is checked every lease_s / 4: at 3.75 s)."""
    assert r.core.submit(seg(goal, 0, term=1, n=6))
    assert r.core.submit(seg(goal, 1, term=1))
    r.loop.advance(0.0)
    assert r.of(goal, 0, STATE_EXECUTING)
    r.loop.advance(LEASE + 1.0)
    assert len(r.ex.executed) == 3


def test_without_grace_the_lease_ends_the_goal_at_expiry():
    r = Robot(grace=0.0)
    _expire_lease(r)
    assert r.core.lease_stops == 1 and r.core.lease_holds == 0 and not r.core.held()
    (cancelled,) = r.of("g", 0, STATE_CANCELLED)
    assert cancelled.error.startswith("stopped: planner lost (no word for 3.")
    assert r.of("g", 1, STATE_CANCELLED)[0].error == "cancelled before execution"
    idle = r.of("g", state=STATE_IDLE)
    assert idle and idle[-1].error.startswith("stopped: planner lost") and "no standby" not in idle[-1].error
    assert r.core.submit(seg("g", 2, term=2))  # a late takeover finds the goal over
    assert r.of("g", 2)[-1].state == STATE_FAILED and "goal already ended" in r.of("g", 2)[-1].error


def test_a_higher_term_within_the_grace_resumes_the_goal(caplog):
    r = Robot()
    with caplog.at_level(logging.INFO, logger="timely_fleet.adapter"):
        _expire_lease(r)
    assert r.core.held() and r.core.lease_holds == 1 and r.core.lease_stops == 0 and r.stops == 1
    warnings = [m.getMessage() for m in caplog.records if m.levelno == logging.WARNING]
    assert len(warnings) == 1 and "robot held" in warnings[0]
    (done,) = r.of("g", 0, STATE_DONE)  # the interrupted segment is over, the goal is not
    assert done.error.startswith("interrupted: planner lost (no word for 3.")
    assert done.error.endswith(f"lease {LEASE:g} s); robot held for up to {GRACE:g} s waiting for a standby planner")
    assert done.skill_durations_s == [] and done.skill_names == []  # nothing for the execution-time model
    assert not r.of("g", state=STATE_CANCELLED) and not r.of("g", state=STATE_IDLE)
    r.loop.advance(GRACE / 2)
    # the standby takes over: a heartbeat of term 2, then the goal's unfinished segments again
    assert r.core.heartbeat(2) and not r.core.held() and r.core.lease_resumes == 1 and r.core.term == 2
    n = len(r.events)
    assert r.core.submit(seg("g", 0, term=2, n=6))  # a duplicate: its latest status again
    assert r.events[n].state == STATE_DONE and r.events[n].error.startswith("interrupted:")
    assert r.core.submit(seg("g", 1, term=2))  # already queued: repeated
    r.loop.advance(0.0)
    assert r.of("g", 1, STATE_EXECUTING)
    assert r.core.submit(seg("g", 2, term=2, n=5))  # the new planner's next segment
    r.loop.advance(SKILL_S + 0.01)
    assert r.of("g", 1, STATE_DONE) and r.of("g", 1, STATE_DONE)[0].error == ""
    assert r.of("g", 2, STATE_EXECUTING)
    assert len(r.executed()) == 4  # segment 0's three calls, segment 1's: the interrupted call is not
    assert r.core.submit(seg("g", 0, term=2, cancel=True))  # a later stop works
    r.loop.advance(0.0)
    assert r.of("g", 2, STATE_CANCELLED)[0].error == "cancelled"
    assert r.of("g", state=STATE_IDLE)[-1].error == "stopped: stopped"
    r.loop.advance(3 * GRACE)  # the ended hold's timer is gone
    assert r.core.lease_stops == 0 and r.core.lease_holds == 1


def test_without_a_higher_term_the_goal_ends_after_lease_and_grace():
    r = Robot()
    _expire_lease(r)
    assert r.core.held()  # since 3.75 s (the lease's check after its expiry at 3 s)
    r.loop.advance(GRACE - 0.3)  # 5.70 s
    assert r.core.held() and not r.of("g", state=STATE_CANCELLED) and r.core.lease_stops == 0
    r.loop.advance(0.06)  # 5.76 s: the grace is over
    assert not r.core.held() and r.core.lease_stops == 1 and r.core.lease_resumes == 0
    why = f"lease {LEASE:g} s); no standby took over within {GRACE:g} s"
    # segment 0 ended "interrupted" at the hold: the goal's next one reports the stop and its reason
    stop = r.of("g", 1, STATE_CANCELLED)[0]
    assert stop.error.startswith("stopped: planner lost (no word for 3.") and stop.error.endswith(why)
    idle = r.of("g", state=STATE_IDLE)[-1]
    assert idle.error.startswith("stopped: planner lost") and f"{why}; stopped" in idle.error
    assert r.core.submit(seg("g", 2, term=2))  # too late: the goal is over
    assert r.of("g", 2)[-1].state == STATE_FAILED and "goal already ended" in r.of("g", 2)[-1].error


def test_a_message_of_the_held_term_does_not_release_the_hold():
    r = Robot()
    _expire_lease(r)
    r.loop.advance(GRACE / 4)
    assert r.core.heartbeat(1) and r.core.held()  # the silent planner is back: obeyed, but no release
    assert r.core.submit(seg("g", 2, term=1)) and r.core.held()
    r.loop.advance(GRACE / 4)
    assert r.core.heartbeat(1) and r.core.held() and r.core.lease_resumes == 0
    assert not r.of("g", 1, STATE_EXECUTING) and not r.of("g", 2, STATE_EXECUTING)
    r.loop.advance(GRACE / 2 + 0.01)  # neither extended: the hold ends at the grace
    assert not r.core.held() and r.core.lease_stops == 1
    assert r.of("g", 2, STATE_CANCELLED)[0].error == "cancelled before execution"


def test_nothing_starts_during_the_hold_and_stops_still_work():
    r = Robot()
    _expire_lease(r)
    assert r.core.submit(seg("h", 0, term=1, final=True))  # another goal, of the held term
    r.loop.advance(GRACE * 0.8)  # the hold began at 3.75 s, 0.25 s ago
    assert r.core.held()
    assert not r.of("g", 1, STATE_EXECUTING) and not r.of("h", 0, STATE_EXECUTING)
    assert len(r.executed()) == 3 and r.stops == 1
    assert r.core.submit(seg("h", 0, term=1, cancel=True))  # a stop of the held term is obeyed
    r.loop.advance(0.0)
    assert r.of("h", 0, STATE_CANCELLED) and r.of("h", state=STATE_IDLE)[-1].error == "stopped: stopped"
    assert r.core.held()
    assert r.core.submit(seg("g", 2, term=3))  # a segment of a higher term releases the hold
    assert not r.core.held()
    r.loop.advance(0.0)
    assert r.of("g", 1, STATE_EXECUTING)  # in order: the queued segment first
    r.loop.advance(SKILL_S + 0.01)
    assert r.of("g", 2, STATE_EXECUTING) and not r.of("h", 0, STATE_EXECUTING)


def test_the_grace_must_not_be_negative_and_is_a_fleet_parameter():
    from llm_planner_node.config.params import DEFAULT_PARAMS, load_params, parse_params
    from timely_robot.config import ParamError

    with pytest.raises(ValueError, match="lease_grace_s must be >= 0"):
        AdapterCore("d1", SimulatedExecutor("d1", "drone", T), lease_s=LEASE, lease_grace_s=-1.0)
    assert parse_params({}).security.lease_grace_s == 0.0
    assert parse_params({"security": {"lease_grace_s": 1.5}}).security.lease_grace_s == 1.5
    with pytest.raises(ParamError, match=r"security\.lease_grace_s must be >= 0"):
        parse_params({"security": {"lease_grace_s": -0.5}})
    assert load_params(DEFAULT_PARAMS).security.lease_grace_s == 0.0
