"""Simulated engine: iteration time model, prefix cache, suspend/resume, KV memory."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    d = e.diagnostics()  # what the planner's diagnostics show of it: 5 iterations, 130 + 2 x 10.5 + 21 + 10.5 ms
    assert (d["sim iterations"], d["sim tokens"], d["sim resume hits"], d["sim resume misses"]) == ("5", "5", "1", "0")
    assert float(d["sim busy s"]) == pytest.approx(0.1825, abs=1e-3) and d["sim mean running"] == "1.00"


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
    clock, e = _engine(capacity=300)
    e.prewarm("skills", 100)  # a cache entry in free memory
    assert e.free_kv_tokens() == 300 and e.resident_prefixes() == {"skills"}
    e.add(_spec(0, max_tokens=50))  # reserves 120 + 50, the prefix's blocks included
    assert e.free_kv_tokens() == 130
    with pytest.raises(KVCapacityError):  # the core admitted more than free_kv_tokens()
        e.add(_spec(1, max_tokens=50))
    e.abort(0)
    assert e.free_kv_tokens() == 300 and e.resident_prefixes() == {"skills"}
    e.abort(12345)  # unknown: no-op
    e.resume(12345)
    e.suspend(12345)


def test_evicted_context_is_re_prefilled():
    clock, e = _engine(capacity=380)
    e.add(_spec(0, max_tokens=50))
    for _ in range(3):
        _iterate(clock, e)  # suspended after segment 0: 123-token context and 100-token prefix cached
    e.add(_spec(1, max_tokens=150))  # its prefix hit; reserves 270 of 380: 110 free evicts gen 0's context
    _iterate(clock, e)
    e.abort(1)
    e.resume(0)
    t0 = clock.now()
    _iterate(clock, e)
    # miss: only the shared prefix (96 tokens in full blocks) is cached -> 27 tokens: 37 ms
    assert clock.now() - t0 == pytest.approx(0.037)
    assert e.stats.resume_misses == 1


def _keyed(key):
    return SimPrompt(100, 20, PROMPT.segments, key)


def test_a_generation_that_fits_takes_nothing_beside_its_reservation():
    clock, e = _engine(capacity=170)  # exactly one 120 + 50 reservation, prefix not resident
    e.add(_spec(0, suspend=False, prompt=_keyed("nav2_base")))  # the prefix loads inside it
    assert e.free_kv_tokens() == 0 and e.resident_prefixes() == {"nav2_base"}
    evs = [ev for _ in range(5) for ev in _iterate(clock, e)]
    assert evs[0].cached_prompt_tokens == 0 and isinstance(evs[-1], FinishedEvent)
    assert e.free_kv_tokens() == 170 and e.resident_prefixes() == {"nav2_base"}  # cached, evictable


def test_four_shared_prefixes_beyond_free_memory_give_way_lru():
    clock, e = _engine(capacity=400)
    for key in "abcd":
        e.prewarm(key, 100)  # 4 x 100 tokens of cache: all resident, all of it free
    assert e.resident_prefixes() == set("abcd") and e.free_kv_tokens() == 400
    e.add(_spec(0, prompt=_keyed("a")))  # hit; reserves 170: 230 free < b, c, d's 300 -> b evicted
    assert e.resident_prefixes() == set("acd") and e.free_kv_tokens() == 230
    e.add(_spec(1, prompt=_keyed("b")))  # miss: prefills its prefix; 60 free -> c and d evicted
    assert e.resident_prefixes() == set("ab") and e.free_kv_tokens() == 60
    t0 = clock.now()
    evs = _iterate(clock, e)
    # prefills 120 - 96 (a's full blocks) + 120: 10 + 144 * 1 = 154 ms
    assert clock.now() - t0 == pytest.approx(0.154)
    assert [ev.cached_prompt_tokens for ev in evs] == [96, 0]
    e.abort(0)  # a is used by no running generation: cached again in the 230 free
    assert e.resident_prefixes() == set("ab") and e.free_kv_tokens() == 230
    e.add(_spec(2, prompt=_keyed("c")))  # reloads c; 60 free -> a evicted, b (in use) stays
    assert e.resident_prefixes() == set("bc")
    e.abort(1)
    e.abort(2)
    assert e.free_kv_tokens() == 400 and e.resident_prefixes() == set("bc")


def test_a_prefix_in_use_is_shared_and_never_evicted():
    clock, e = _engine(capacity=400)
    e.prewarm("b", 100)
    e.add(_spec(0, prompt=_keyed("a")))  # loads a inside its reservation: 230 free, b cached
    e.add(_spec(1, prompt=_keyed("a")))  # hit on the running generation's prefix; 60 free: b evicted
    assert e.resident_prefixes() == {"a"} and e.free_kv_tokens() == 60
    evs = _iterate(clock, e)
    assert [ev.cached_prompt_tokens for ev in evs] == [0, 96]
    e.abort(0)
    assert e.resident_prefixes() == {"a"}  # still in use by generation 1


@st.composite
def _engine_runs(draw):
    """Generations of 1..6 prefix keys (prefix 16..300 tokens), each alone fitting the capacity,
    arriving over a random number of iterations."""
    keys = draw(st.lists(st.integers(16, 300), min_size=1, max_size=6))
    gens = draw(st.lists(st.tuples(st.integers(0, len(keys) - 1), st.integers(1, 40), st.integers(5, 60),
                                   st.booleans(), st.integers(0, 12)), min_size=1, max_size=12))
    largest = max(keys[k] + task + mt for k, task, mt, _, _ in gens)
    return keys, gens, draw(st.integers(largest, 3 * largest))


@settings(max_examples=60, deadline=None)
@given(_engine_runs())
def test_admitting_only_what_fits_never_overcommits_and_every_generation_finishes(run):
    keys, gens, capacity = run
    clock, e = _engine(capacity)
    for k, size in enumerate(keys):
        e.prewarm(f"k{k}", size)
    segs = (SimSegment("a;", 2, CALL), SimSegment("b;", 2, CALL), SimSegment("c;", 1, CALL))
    specs = [_spec(i, suspend, mt, SimPrompt(keys[k], task, segs, f"k{k}"))
             for i, (k, task, mt, suspend, _) in enumerate(gens)]
    arrive = [a for *_, a in gens]
    waiting, suspended, finished = [], set(), set()  # waiting: in arrival order (FCFS admission)
    for it in range(2000):
        waiting += [i for i, a in enumerate(arrive) if a == it]
        waiting += sorted(suspended)
        suspended.clear()
        while waiting:  # the core's rule: admit while the worst case fits in free_kv_tokens()
            i = waiting[0]
            need = specs[i].prompt.prompt_tokens + specs[i].max_tokens
            if need > e.free_kv_tokens():
                break  # waits (queued) until running generations free room
            waiting.pop(0)
            if i in e._suspended:
                e.resume(i)
            else:
                e.add(specs[i])
        reserved = capacity - e.free_kv_tokens()
        assert 0 <= reserved <= capacity
        assert e._cache_tokens == sum(e._cache.values()) <= e.free_kv_tokens()
        assert {s.prompt.prefix_key for s in specs if s.gen_id in e._running} <= e.resident_prefixes()
        if len(finished) == len(specs):
            break
        if e._running:
            for ev in _iterate(clock, e):
                if isinstance(ev, FinishedEvent):
                    finished.add(ev.gen_id)
                elif isinstance(ev, SegmentEvent) and ev.suspended:
                    suspended.add(ev.gen_id)
    assert finished == set(range(len(specs)))
    assert e.free_kv_tokens() == capacity and e.stats.peak_reserved_tokens <= capacity


def test_aborted_generation_produces_no_more_events():
    clock, e = _engine()
    e.add(_spec(0))
    e.add(_spec(1))
    e.start_iteration()
    e.abort(0)  # during the iteration
    clock.advance_to(e.in_flight_end())
    assert {ev.gen_id for ev in e.step()} == {1}
