"""The simulated engine in real time runs beside the planner as a GPU does (engines/factory.py):
a late planner does not stall it, and an on-time planner's admissions join the next iteration.

Hand-computed with a = 10 ms, b = 1 ms/prefill token, c = 0.5 ms/decoding sequence, idle gap
between iterations while the planner is late ``max_idle_s`` = 2 ms: a cold 120-token prefill
takes 130 ms, a decode of one sequence 10.5 ms.
"""

import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import GenerationSpec, TokensEvent
from llm_planner_node.core.skills import SkillCall
from llm_planner_node.engines.factory import RealtimeSimEngine
from llm_planner_node.engines.sim_engine import IterationModel, SimEngineConfig, SimPrompt, SimSegment

MODEL = IterationModel(0.010, 0.001, 0.0005)
PROMPT = SimPrompt(100, 20, (SimSegment("x;", 40, (SkillCall("takeoff"),)),), "skills")


def _engine():
    clock = VirtualClock()
    return clock, RealtimeSimEngine(clock, SimEngineConfig(MODEL, 10_000, block_size=16), max_idle_s=0.002)


def _spec(gid):
    return GenerationSpec(gid, PROMPT, 50, "drone", "skills", False)


def _token_times(events, gid=0):
    return [ev.t for ev in events if isinstance(ev, TokensEvent) and ev.gen_id == gid]


def test_a_late_planner_gets_every_iteration_the_engine_ran_meanwhile():
    clock, e = _engine()
    e.add(_spec(0))
    assert e.step() == []  # starts the prefill iteration (ends at 0.130); not ended yet
    assert e.in_flight_end() == pytest.approx(0.130)
    clock.advance_to(0.1935)  # the planner comes back 63.5 ms late
    times = _token_times(e.step())
    # 0.130, then back to back with a 2 ms gap: 0.132 + 0.0105, 0.1445 + 0.0105, ...
    assert times == pytest.approx([0.130, 0.1425, 0.155, 0.1675, 0.180, 0.1925])
    assert e.in_flight_end() is None  # the next would start at 0.1945, after now
    assert e.stats.tokens == 6  # (an engine that waited for the planner: 1)


def test_an_on_time_planner_admits_into_the_very_next_iteration():
    clock, e = _engine()
    e.add(_spec(0))
    e.step()
    clock.advance_to(0.130)
    assert _token_times(e.step()) == [pytest.approx(0.130)]
    assert e.in_flight_end() is None  # waits for the planner's decision
    e.add(_spec(1))
    e.step()
    # gen 1 prefills 24 tokens (the shared prefix's 96 in full blocks are cached), gen 0 decodes
    assert e.in_flight_end() == pytest.approx(0.130 + 0.010 + 0.024 + 0.0005)


def test_a_late_admission_joins_the_iteration_after_the_one_in_flight():
    clock, e = _engine()
    e.add(_spec(0))
    e.step()
    clock.advance_to(0.140)  # late: the next iteration started at 0.132 and ends at 0.1425
    assert _token_times(e.step()) == [pytest.approx(0.130)]
    assert e.in_flight_end() == pytest.approx(0.1425)
    e.add(_spec(1))
    clock.advance_to(e.in_flight_end())
    evs = e.step()
    assert _token_times(evs) == [pytest.approx(0.1425)] and _token_times(evs, 1) == []
    e.step()  # on time: starts gen 1's prefill with gen 0's decode
    assert e.in_flight_end() == pytest.approx(0.1425 + 0.0345)
