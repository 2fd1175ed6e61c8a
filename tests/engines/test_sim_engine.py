"""Simulated engine: iteration time model, prefix cache, suspend/resume, KV memory."""

import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import FinishedEvent, GenerationSpec, SegmentEvent, TokensEvent
from timely_robot.skills import SkillCall
from llm_planner_node.engines.sim_engine import (LLAMA3_8B_RTX4090, IterationModel, KVCapacityError,
                                                 SimEngine, SimEngineConfig, SimPrompt, SimSegment)

MODEL = IterationModel(0.010, 0.001, 0.0005)  # a = 10 ms, b = 1 ms/token, c = 0.5 ms/seq
CALL = (SkillCall("takeoff"),)
PROMPT = SimPrompt(100, 20, (SimSegment("a;", 3, CALL), SimSegment("b;", 2, CALL)), "skills")


def _engine(capacity=10_000):
    clock = VirtualClock()
    return clock, SimEngine(clock, SimEngineConfig(MODEL, capacity, block_size=16))


def _spec(gid, suspend=True, max_tokens=50, prompt=PROMPT):
    return GenerationSpec(gid, prompt, max_tokens, "drone", "skills", suspend)


def _iterate(clock, engine):
    engine.start_iteration()
    clock.advance_to(engine.in_flight_end())
    return engine.step()


def test_calibration_matches_table1():
    # a + b * 2884 = 328 ms prefill; a + c = 22 ms decode at batch 1 (TimelyLLM Table 1)
    assert LLAMA3_8B_RTX4090.time(2884, 0) == pytest.approx(0.328)
    assert LLAMA3_8B_RTX4090.time(0, 1) == pytest.approx(0.022)


def test_prefill_uses_shared_prefix_cache():
    clock, e = _engine()
    e.add(_spec(0))
    _iterate(clock, e)
    # cold: prefill 120 tokens -> 10 + 120 * 1 = 130 ms
    assert clock.now() == pytest.approx(0.130)
    e.add(_spec(1))
    t0 = clock.now()
    evs = _iterate(clock, e)
    # gen 1: 100-token prefix resident, 96 tokens in full blocks -> prefill 24; gen 0 decodes:
    # 10 + 24 * 1 + 1 * 0.5 = 34.5 ms
    assert clock.now() - t0 == pytest.approx(0.0345)
    assert TokensEvent(1, clock.now(), 1, 96) in evs


def test_suspend_at_segment_then_resume_hits_cache():
    clock, e = _engine()
    e.add(_spec(0))
    evs = [ev for _ in range(3) for ev in _iterate(clock, e)]
    seg = [ev for ev in evs if isinstance(ev, SegmentEvent)]
    assert len(seg) == 1 and seg[0].index == 0 and seg[0].suspended and seg[0].token_ids == (0, 1, 2)
    e.start_iteration()  # nothing running: stays idle
    assert e.in_flight_end() is None
    e.resume(0)
    t0 = clock.now()
    evs = _iterate(clock, e)
    # context 123 tokens, 112 in full cached blocks -> recompute 11: 10 + 11 = 21 ms
    assert clock.now() - t0 == pytest.approx(0.021)
    assert evs[0] == TokensEvent(0, clock.now(), 1, 112)
    evs = _iterate(clock, e)
    assert [type(ev) for ev in evs] == [TokensEvent, SegmentEvent, FinishedEvent]
    assert evs[1].index == 1 and not evs[1].suspended and evs[2].reason == "eos"
    assert e.stats.resume_hits == 1 and e.stats.tokens == 5


def test_no_suspension_when_streaming():
    clock, e = _engine()
    e.add(_spec(0, suspend=False))
    evs = [ev for _ in range(5) for ev in _iterate(clock, e)]
    segs = [ev for ev in evs if isinstance(ev, SegmentEvent)]
    assert [s.index for s in segs] == [0, 1] and not any(s.suspended for s in segs)
    assert isinstance(evs[-1], FinishedEvent)


def test_max_tokens_truncates_plan():
    clock, e = _engine()
    e.add(_spec(0, suspend=False, max_tokens=4))
    evs = [ev for _ in range(4) for ev in _iterate(clock, e)]
    assert [ev.index for ev in evs if isinstance(ev, SegmentEvent)] == [0]
    assert evs[-1] == FinishedEvent(0, clock.now(), "max_tokens")
    assert e.in_flight_end() is None


def test_kv_reservation_and_capacity():
    clock, e = _engine(capacity=400)
    e.prewarm("skills", 100)
    assert e.free_kv_tokens() == 300
    e.add(_spec(0, max_tokens=50))  # reserves 120 + 50
    assert e.free_kv_tokens() == 130
    with pytest.raises(KVCapacityError):
        e.add(_spec(1, max_tokens=50))
    e.abort(0)
    assert e.free_kv_tokens() == 300
    e.abort(12345)  # unknown: no-op
    e.resume(12345)
    e.suspend(12345)


def test_evicted_context_is_re_prefilled():
    clock, e = _engine(capacity=420)
    e.add(_spec(0, max_tokens=50))
    for _ in range(3):
        _iterate(clock, e)  # suspended after segment 0, 123-token context cached
    e.add(_spec(1, max_tokens=150))  # reserves 270 of 320 free: evicts gen 0's context
    _iterate(clock, e)
    e.abort(1)
    e.resume(0)
    t0 = clock.now()
    _iterate(clock, e)
    # miss: only the shared prefix (96 tokens in full blocks) is cached -> 27 tokens: 37 ms
    assert clock.now() - t0 == pytest.approx(0.037)
    assert e.stats.resume_misses == 1


def test_aborted_generation_produces_no_more_events():
    clock, e = _engine()
    e.add(_spec(0))
    e.add(_spec(1))
    e.start_iteration()
    e.abort(0)  # during the iteration
    clock.advance_to(e.in_flight_end())
    assert {ev.gen_id for ev in e.step()} == {1}
