"""Planner terms at the adapter (fencing), without ROS: ``AdapterCore`` obeys only the highest
planner term it has accepted; a message of a lower term has no effect at all."""

from __future__ import annotations

import logging
import threading
import time

from hypothesis import given, settings, strategies as st

from timely_robot.link.rules import PlannerTerm
from robot_adapters.adapter_core import STATE_CANCELLED, STATE_EXECUTING, STATE_IDLE, SegmentIn
from robot_adapters.adapter_core import AdapterCore

from adapter_testkit import Hangs
from testkit import wait_until


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def seg(goal, seq, term, **kw):
    return SegmentIn(goal, seq, skills=[("tc", ["90"])], term=term, **kw)


def state(core):
    """Everything a planner message can change on a core that is not started: statuses emitted,
    the lease, and each goal's queue."""
    return (len(core.events), core._lease_at,  # noqa: SLF001 - white box: the lease's last renewal
            {gid: (sorted(g.pending), sorted(g.seen), g.finished) for gid, g in core._goals.items()})  # noqa: SLF001


def test_hand_computed_terms_on_a_core():
    clock = FakeClock()
    core = AdapterCore("d1", Hangs(), clock=clock)
    assert core.term == 0
    assert core.submit(seg("g0", 0, term=0))  # no term seen yet: a term-0 sender is obeyed (compatibility)
    clock.t += 1
    assert core.heartbeat(1) and core.term == 1 and core._lease_at == clock.t  # noqa: SLF001
    before = state(core)
    clock.t += 1
    assert not core.submit(seg("g0", 1, term=0))  # term 0 after term 1: stale
    assert not core.heartbeat(0)
    assert state(core) == before and core.stale_term_drops == 2
    assert core.submit(seg("g1", 0, term=1))  # the same term: obeyed
    clock.t += 1
    assert core.submit(seg("g1", 1, term=3)) and core.term == 3  # a higher term: obeyed, remembered
    before = state(core)
    clock.t += 1
    assert not core.submit(seg("g1", 0, term=2, cancel=True))  # a stop of term 2 < 3: no effect
    assert not core.submit(seg("g2", 0, term=1))
    assert not core.heartbeat(2)
    assert state(core) == before and core.stale_term_drops == 5 and core.term == 3
    assert core.submit(seg("g1", 0, term=3, cancel=True))  # a stop of term 3 ends the goal
    assert core.events[-1].state == STATE_CANCELLED and core.events[-1].goal_id == "g1"


def test_a_stale_stop_does_not_stop_the_running_robot_and_a_current_one_does():
    ex = Hangs()
    events = []
    core = AdapterCore("d1", ex, events.append, time_scale=0.01).start()
    try:
        assert core.submit(seg("g", 0, term=1, final=True))
        assert wait_until(lambda: any(e.state == STATE_EXECUTING for e in events))
        assert core.heartbeat(2)  # a planner of term 2 took over
        assert not core.submit(seg("g", 0, term=1, cancel=True))  # the old planner's stop
        time.sleep(0.05)
        assert ex.stops == 0 and not any(e.state in (STATE_CANCELLED, STATE_IDLE) for e in events)
        assert core.submit(seg("g", 0, term=2, cancel=True))  # the new planner's stop
        assert wait_until(lambda: any(e.state == STATE_IDLE and e.error.startswith("stopped") for e in events))
        assert ex.stops >= 1
    finally:
        core.shutdown()


def test_stale_heartbeats_do_not_renew_the_lease():
    ex = Hangs()
    events = []
    core = AdapterCore("d1", ex, events.append, time_scale=0.01, lease_s=0.2).start()
    try:
        assert core.submit(seg("g", 0, term=2, final=True))
        assert wait_until(lambda: any(e.state == STATE_EXECUTING for e in events))
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not core.lease_stops:
            assert not core.heartbeat(1)  # the fenced planner keeps talking: it is not heard
            time.sleep(0.02)
        assert core.lease_stops == 1
        assert wait_until(lambda: any("planner lost" in e.error for e in events))
    finally:
        core.shutdown()


def test_each_stale_term_is_logged_once_naming_both_terms_and_a_raise_once(caplog):
    core = AdapterCore("d1", Hangs())
    with caplog.at_level(logging.DEBUG, logger="timely_fleet.adapter"):
        core.heartbeat(1)
        core.heartbeat(2)
        for _ in range(3):
            core.heartbeat(1)
            core.submit(seg("g", 0, term=0))
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert infos == ["d1: planner term 1 -> 2"]  # the first term (0 -> 1) is not news
    assert warnings == ["d1: dropped a message from planner term 1 because this robot obeys planner term 2 now",
                        "d1: dropped a message from planner term 0 because this robot obeys planner term 2 now"]
    assert core.stale_term_drops == 6


def test_terms_are_thread_safe_and_only_go_up():
    core = AdapterCore("d1", Hangs())
    threads = [threading.Thread(target=lambda k=k: [core.heartbeat(t) for t in range(k, 400, 4)]) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.term == 399
    planner = PlannerTerm(1)
    assert planner.raise_to(5) == 1 and planner.value == 5
    for bad in (5, 4):
        try:
            planner.raise_to(bad)
        except ValueError as e:
            assert str(e) == f"the planner's term can only go up: {bad} is not above the current term 5"
        else:
            raise AssertionError("a term that does not go up was taken")


KIND = st.sampled_from(["segment", "heartbeat", "stop"])
MESSAGE = st.tuples(st.sampled_from(["a", "b"]), KIND, st.sampled_from(["g1", "g2"]), st.integers(0, 3))


@settings(max_examples=200, deadline=None)
@given(terms=st.tuples(st.integers(0, 5), st.integers(1, 5)).filter(lambda ab: ab[0] < ab[1]),
       messages=st.lists(MESSAGE, max_size=30))
def test_after_the_first_higher_term_message_no_lower_term_message_has_an_effect(terms, messages):
    """Two planners of terms a < b, their segments, heartbeats and stops interleaved in any order:
    once the core took one term-b message, every term-a message is refused and changes nothing,
    and every term-b message is obeyed."""
    clock = FakeClock()
    ex = Hangs()
    core = AdapterCore("d1", ex, clock=clock)
    term = dict(zip("ab", terms))
    fenced = False
    for planner, kind, goal, sequence in messages:
        clock.t += 1.0
        t = term[planner]
        before = state(core)
        if kind == "heartbeat":
            obeyed = core.heartbeat(t)
        else:
            obeyed = core.submit(seg(goal, sequence, t, cancel=kind == "stop"))
        if planner == "a" and fenced:
            assert not obeyed and state(core) == before
        else:
            assert obeyed
        fenced = fenced or planner == "b"
    assert ex.stops == 0 and ex.calls == []  # never started: nothing ran
    assert core.stale_term_drops == sum(1 for i, m in enumerate(messages)
                                        if m[0] == "a" and any(p == "b" for p, *_ in messages[:i]))


def test_the_planner_term_parameter_is_an_integer_of_at_least_one():
    import pytest

    from timely_robot.config import ParamError
    from llm_planner_node.config.params import parse_params

    assert parse_params({}).planner.term == 1
    assert parse_params({"planner": {"term": 7}}).planner.term == 7
    for bad, why in ((0, "planner.term must be >= 1, got 0"), (1.5, "planner.term must be an integer, got 1.5")):
        with pytest.raises(ParamError, match=why.replace(".", r"\.")):
            parse_params({"planner": {"term": bad}})
