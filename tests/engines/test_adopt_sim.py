"""Engine.adopt on the simulated engines (sim, real-time sim, and the scripted kind's plans): a
generation adopted from the token ids of its first segments goes on, once resumed, exactly as
the uninterrupted one did; ids that do not end at the boundary named are refused."""

from __future__ import annotations

import dataclasses

import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import FinishedEvent, GenerationSpec, SegmentEvent, TokensEvent
from timely_robot.skills import SkillCall
from llm_planner_node.engines.sim_engine import RealtimeSimEngine, SimEngine, SimPrompt, SimSegment
from llm_planner_node.engines.sim_prompts import scripted_prompt_builder

PLAN = SimPrompt(100, 20, (SimSegment("takeoff;", 3, (SkillCall("takeoff"),)),
                           SimSegment("mf,50;", 4, (SkillCall("move_forward", (50,)),)),
                           SimSegment("land;", 2, (SkillCall("land"),))), "skills")


def _scripted() -> object:  # the scripted engine's plan of a given MiniSpec text
    return scripted_prompt_builder("mu,100;tc,90;mf,50;", "drone", "tello_minispec")


def _run(engine, clock, spec: GenerationSpec, adopt: tuple[list[int], int] | None = None) -> list:
    """Add ``spec`` (or adopt it from ``adopt`` = (ids, segments) and resume it) and run it to its
    end, resuming it at every suspension; its events."""
    if adopt is None:
        engine.add(spec)
    else:
        engine.adopt(spec, *adopt)
        engine.resume(spec.gen_id)
    events: list = []
    for _ in range(1000):
        engine.start_iteration()  # (no-op while one is in flight: the real-time engine starts its own)
        clock.advance_to(engine.in_flight_end())
        for ev in engine.step():
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                engine.resume(ev.gen_id)
            if isinstance(ev, FinishedEvent):
                return events
    raise AssertionError("the generation did not end")


def _segments(events) -> list[tuple]:
    return [(s.index, s.text, s.calls, s.token_ids, s.suspended, s.final) for s in events
            if isinstance(s, SegmentEvent)]


@pytest.mark.parametrize("engine_class", [SimEngine, RealtimeSimEngine])
@pytest.mark.parametrize("prompt", [PLAN, _scripted()], ids=["sim", "scripted"])
def test_an_adopted_generation_resumes_as_the_uninterrupted_one_went_on(engine_class, prompt):
    clock_a = VirtualClock()
    a = engine_class(clock_a)
    spec = GenerationSpec(1, prompt, 50, "drone", "skills", suspend_at_segments=True)
    whole = _run(a, clock_a, spec)
    segs = [ev for ev in whole if isinstance(ev, SegmentEvent)]
    assert len(segs) == 3 and [s.suspended for s in segs] == [True, True, False]

    for k in (1, 2):  # adopted after segment 0, after segment 1
        clock_b = VirtualClock(7.0)
        b = engine_class(clock_b)
        ids = [t for s in segs[:k] for t in s.token_ids]
        adopted = _run(b, clock_b, dataclasses.replace(spec, gen_id=2), (ids, k))
        assert _segments(adopted) == _segments(segs[k:])  # index, text, calls, token ids; none before k
        assert (sum(ev.count for ev in adopted if isinstance(ev, TokensEvent))
                == sum(len(s.token_ids) for s in segs[k:]))
        assert adopted[-1].reason == whole[-1].reason
        # its context was in no cache on engine B: its first resume re-prefilled all of it (a
        # miss; later resumes hit the cache)
        assert b.stats.resume_misses == 1
        assert b.stats.recompute_tokens == prompt.prompt_tokens + len(ids)


@pytest.mark.parametrize("ids,segments,max_tokens", [
    (list(range(3)), 2, 50),     # the ids of one segment, said to be two
    (list(range(4)), 1, 50),     # one token past the boundary
    (list(range(2)), 1, 50),     # short of it
    (list(range(3)), 0, 50),     # ids before the first segment ended
    (list(range(9)), 3, 50),     # the whole plan: it had ended
    ([], -1, 50),
    (list(range(7)), 2, 7),      # max_tokens reached: it had ended
])
def test_ids_that_do_not_end_at_the_boundary_named_are_refused(ids, segments, max_tokens):
    e = SimEngine(VirtualClock())
    with pytest.raises(ValueError):
        e.adopt(GenerationSpec(1, PLAN, max_tokens, "drone", "skills", True), ids, segments)
    assert not e._suspended and not e._running
    e.adopt(GenerationSpec(1, PLAN, 50, "drone", "skills", True), [], 0)  # nothing generated yet: fine
    assert e.free_kv_tokens() == e.kv_capacity_tokens()  # a suspended generation reserves nothing
