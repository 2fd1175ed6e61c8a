"""The simulated engine in real time runs beside the planner as a GPU does (engines/factory.py):
it never waits for the planner; the planner's admissions join the next iteration.

Hand-computed with a = 10 ms, b = 1 ms/prefill token, c = 0.5 ms/decoding sequence: a cold
120-token prefill takes 130 ms, a decode of one sequence 10.5 ms, a 24-token prefill beside one
decode 34.5 ms.
"""

import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import GenerationSpec, TokensEvent
from timely_robot.skills import SkillCall
from llm_planner_node.engines.sim_engine import (
    IterationModel, RealtimeSimEngine, SimEngineConfig, SimPrompt, SimSegment)

MODEL = IterationModel(0.010, 0.001, 0.0005)
PROMPT = SimPrompt(100, 20, (SimSegment("x;", 40, (SkillCall("takeoff"),)),), "skills")


def _engine():
    clock = VirtualClock()
    return clock, RealtimeSimEngine(clock, SimEngineConfig(MODEL, 10_000, block_size=16))


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
    # 0.130, then decodes back to back, 10.5 ms each
    assert times == pytest.approx([0.130, 0.1405, 0.151, 0.1615, 0.172, 0.1825, 0.193])
    assert e.in_flight_end() == pytest.approx(0.2035)  # the one running now
    assert e.stats.tokens == 7  # (an engine that waited for the planner: 1)


def test_an_admission_joins_the_iteration_after_the_one_in_flight():
    clock, e = _engine()
    e.add(_spec(0))
    e.step()
    clock.advance_to(0.130)
    assert _token_times(e.step()) == [pytest.approx(0.130)]
    assert e.in_flight_end() == pytest.approx(0.1405)  # gen 0 went straight on
    e.add(_spec(1))
    clock.advance_to(e.in_flight_end())
    evs = e.step()
    assert _token_times(evs) == [pytest.approx(0.1405)] and _token_times(evs, 1) == []
    # then gen 1 prefills 24 tokens (the shared prefix's 96 in full blocks are cached) beside
    # gen 0's decode
    assert e.in_flight_end() == pytest.approx(0.1405 + 0.0345)


def test_an_idle_engine_starts_as_soon_as_the_planner_admits():
    clock, e = _engine()
    clock.advance_to(5.0)
    assert e.step() == [] and e.in_flight_end() is None
    e.add(_spec(0))
    e.step()
    assert e.in_flight_end() == pytest.approx(5.130)
