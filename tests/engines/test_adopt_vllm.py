"""Engine.adopt on the live vLLM engine with real models (the shipped ``embedded`` planner model,
and ``smollm2-135m-planner`` prompted with its chat template), greedy, under the plan grammar: a
generation adopted from the token ids of its first k segments and resumed writes, token for
token, the rest of the plan an uninterrupted generation wrote; and at every suspension the
segments' concatenated token ids are exactly the ids the engine kept (what a caller passes).

One engine per model; the adopted generation runs on the same engine instance as the
uninterrupted one (a new gen id: a fresh Generation, its segmenter, detokeniser and grammar state
rebuilt from the ids alone)."""

from __future__ import annotations

import dataclasses
import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("vllm")

from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import (FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent,  # noqa: E402
                                              TokensEvent)
from llm_planner_node.core.plan_limits import limits_for  # noqa: E402
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND  # noqa: E402
from llm_planner_node.config.params import EngineParams  # noqa: E402
from llm_planner_node.planner_model.corpus import canonical_examples  # noqa: E402

from engine_runs import BLOCK, next_gen_id, token_ids  # noqa: E402

PLANNER = "smollm2-135m-planner"
ENGINES = {  # model -> its engine's parameters (test_vllm_engine.py's and test_real_model_grammar.py's)
    "embedded": dict(max_model_len=512, kv_cache_gib=0.0625),
    PLANNER: dict(max_model_len=2048, kv_cache_gib=0.5),
}
_CANON = {e.task_id: e for e in canonical_examples()}
#: (model, robot kind, instruction, max_tokens): a plan with blocks (drone, the shipped model), and
#: one whose statements' tokens straddle segment boundaries (arm, the real instruct model); one goal
#: per model keeps the file to two engine loads and about a minute
GOALS = [
    ("embedded", "drone", _CANON[2].instruction, 160),
    (PLANNER, "arm", "put the apple in the basket", 200),
]
OBJECTS = ("apple", "basket", "cup", "drawer", "sponge")


@pytest.fixture(scope="module")
def engine_for():
    """``engine_for(model)``: (engine, prompt builder) of the model, loaded on first use; one
    engine at a time (GOALS are in model order: one load per model)."""
    from llm_planner_node import models
    from llm_planner_node.engines.factory import prompt_builder_for
    from llm_planner_node.engines.vllm_engine import VllmEngine

    held: dict = {}

    def get(model: str):
        if model not in held:
            for other in list(held):
                held.pop(other)[0].close()
            if model != "embedded" and not models.is_prepared(model):
                pytest.fail(f"{model} is not prepared: `make setup` prepares it "
                            f"(timely-fleet models prepare {model})")
            params = EngineParams(kind="vllm", model=model, block_size=BLOCK, max_num_seqs=16, **ENGINES[model])
            held[model] = (VllmEngine(params, WallClock(), constrained_decoding="grammar"), prompt_builder_for(params))
        return held[model]

    yield get
    for engine, _ in held.values():
        engine.close()


def _drive(engine, gid: int, kept_at_suspensions: list | None = None, timeout_s: float = 180.0) -> list:
    """Step ``engine`` until generation ``gid`` ends, resuming it at every suspension (and
    recording there the ids the engine kept); its events."""
    events: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ev in engine.step():
            if ev.gen_id != gid:
                continue
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                if kept_at_suspensions is not None:  # suspended: its kept ids hold still until resumed
                    kept_at_suspensions.append((ev.index, list(engine.streams.gens[gid].kept)))
                engine.resume(gid)
            if isinstance(ev, (FinishedEvent, FailedEvent)):
                return events
    raise AssertionError(f"generation {gid} did not end within {timeout_s} s")


def _fields(segs) -> list[tuple]:
    return [(s.index, s.text, s.calls, s.token_ids, s.final) for s in segs]


@pytest.mark.parametrize("goal", GOALS, ids=[f"{g[0]}-{g[1]}" for g in GOALS])
def test_an_adopted_generation_goes_on_token_for_token_as_the_uninterrupted_one(engine_for, goal):
    model, kind, instruction, max_tokens = goal
    engine, build = engine_for(model)
    objects = OBJECTS if kind == "arm" and model != "embedded" else ()
    spec = GenerationSpec(next_gen_id(), build(instruction, kind, DEFAULT_SKILL_SET_FOR_KIND[kind], objects=objects),
                          max_tokens, kind, DEFAULT_SKILL_SET_FOR_KIND[kind], suspend_at_segments=True,
                          objects=objects, plan_limits=limits_for("arm" if kind == "arm" else "minispec"))
    assert isinstance(spec.prompt, str if model == "embedded" else list)  # the chat template's token ids
    kept: list = []
    engine.add(spec)
    whole = _drive(engine, spec.gen_id, kept)
    assert isinstance(whole[-1], FinishedEvent), whole[-1]
    segs = [ev for ev in whole if isinstance(ev, SegmentEvent)]
    assert len(segs) >= 3, [s.text for s in segs]
    # the invariant a caller relies on: at each suspension after segment i, segments 0..i's ids
    # are the engine's kept ids
    assert kept and all([t for s in segs[: i + 1] for t in s.token_ids] == ids for i, ids in kept)
    suspended_after = [i + 1 for i, _ in kept]

    for k in suspended_after:
        ids = [t for s in segs[:k] for t in s.token_ids]
        adopted_spec = dataclasses.replace(spec, gen_id=next_gen_id())
        engine.adopt(adopted_spec, ids, k)
        engine.resume(adopted_spec.gen_id)
        rest = _drive(engine, adopted_spec.gen_id)
        assert isinstance(rest[-1], FinishedEvent) and rest[-1].reason == whole[-1].reason, rest[-1]
        rest_segs = [ev for ev in rest if isinstance(ev, SegmentEvent)]
        # nothing reported for segments 0..k-1 (after the last one: only the end of the plan)
        assert [s.index for s in rest_segs] == list(range(k, len(segs)))
        assert _fields(rest_segs) == _fields(segs[k:]), f"adopted after segment {k - 1}"
        assert ids + token_ids(rest) == token_ids(whole)
        reported = [t for ev in rest if isinstance(ev, TokensEvent) for t in ev.token_ids]
        assert reported[: len(token_ids(rest))] == token_ids(rest)  # no TokensEvent for the adopted ids either
        assert (engine.tokenizer.decode(ids + token_ids(rest), skip_special_tokens=True)
                == engine.tokenizer.decode(token_ids(whole), skip_special_tokens=True))

    # ids that do not end at the boundary named are refused at once, and nothing is registered
    k = suspended_after[0]
    ids = [t for s in segs[:k] for t in s.token_ids]
    for bad_ids, bad_k in ((ids, k + 1), (ids, k - 1), (ids[:-1], k), (ids + list(segs[k].token_ids[:1]), k)):
        bad = dataclasses.replace(spec, gen_id=next_gen_id())
        with pytest.raises(ValueError):
            engine.adopt(bad, bad_ids, bad_k)
        engine.resume(bad.gen_id)  # an unknown id: nothing happens
    time.sleep(0.2)
    assert engine.running() == 0 and not [ev for ev in engine.step() if ev.gen_id > spec.gen_id]
