"""Grammar-safe generation on the live vLLM engine: the plan grammar goes with every
add and every resume, and a segmented generation under the grammar is token for token the
unsegmented one on every corpus task, although the shipped tokenizer has tokens that straddle
top-level statement boundaries (``;_``, ``};->_``): each resume passes the resume grammar of
what was generated (``grammar.GrammarState``)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

vllm = pytest.importorskip("vllm")

from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, SegmentEvent  # noqa: E402
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS  # noqa: E402
from llm_planner_node.prompts.grammar import GrammarChecker, plan_grammar  # noqa: E402
from llm_planner_node.config.params import EngineParams  # noqa: E402
from llm_planner_node.planner_model.corpus import canonical_chat_examples, canonical_examples  # noqa: E402

from engine_runs import run_generation, token_ids  # noqa: E402

BLOCK = 32
EXAMPLES = canonical_examples() + canonical_chat_examples()[:1]


@pytest.fixture(scope="module")
def engine():
    from llm_planner_node.engines.vllm_engine import VllmEngine

    eng = VllmEngine(EngineParams(kind="vllm", model="embedded", max_model_len=512, block_size=BLOCK,
                                  kv_cache_gib=0.0625, max_num_seqs=16), WallClock(),
                     constrained_decoding="grammar")
    yield eng
    eng.close()


def test_the_engine_runs_with_structured_outputs_and_token_id_prompts(engine):
    cfg = engine._engine.vllm_config
    assert not cfg.model_config.skip_tokenizer_init
    assert cfg.structured_outputs_config.backend == "xgrammar"
    assert engine.constrained_decoding == "grammar"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"task{e.task_id}")
def test_segmented_is_token_identical_to_unsegmented_under_the_grammar(engine, example):
    before = len(engine.resume_grammars)
    whole = run_generation(engine, example.instruction, example.robot_kind, segmented=False)
    parts = run_generation(engine, example.instruction, example.robot_kind, segmented=True)
    assert isinstance(whole[-1], FinishedEvent) and isinstance(parts[-1], FinishedEvent)
    assert token_ids(parts) == token_ids(whole)
    segs = [ev for ev in parts if isinstance(ev, SegmentEvent)]
    assert [s.text for s in segs] == [s.text for s in whole if isinstance(s, SegmentEvent)]
    assert len(segs) >= 2 and sum(s.suspended for s in segs) >= len(segs) - 1
    # every resume carried a grammar
    assert len(engine.resume_grammars) - before == sum(s.suspended for s in segs)
    # the plan is in the grammar's language and is the canonical plan
    text = engine.tokenizer.decode(token_ids(parts), skip_special_tokens=True)
    ss = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[example.robot_kind]]
    assert GrammarChecker(plan_grammar(ss)).accepts(text)
    assert text.strip() == example.plan


def test_resumes_inside_a_statement_were_exercised(engine):
    """The corpus runs above resumed both at a top-level boundary (the grammar's own rules: fewer
    statements left) and inside a statement (a token straddled the boundary: derived rules): the
    resume grammar is what kept them identical."""
    assert True in engine.resume_grammars and False in engine.resume_grammars


def test_the_grammar_makes_an_unsafe_request_a_safe_plan(engine):
    """Free decoding writes out-of-range or unknown text for requests like these; under the
    grammar every plan is a valid one (the segmenter, which still checks, never fails)."""
    for instruction, kind in (("fly up 20 meters", "drone"), ("put the cup on the shelf", "arm"),
                              ("fly up one meter and land", "drone")):
        events = run_generation(engine, instruction, kind, segmented=True, max_tokens=96)
        assert not isinstance(events[-1], FailedEvent), events[-1]


def test_no_invalid_plan_with_the_grammar_on_the_held_out_set(engine):
    """Held-out instructions no training script saw (paraphrases, unseen objects and numbers,
    requests outside the safe ranges): under the grammar no plan is INVALID_PLAN and the robot
    adapter's own validation accepts every segment (bench grammar measures the rest)."""
    from timely_tools.bench.grammar_bench import run_items, summarize
    from llm_planner_node.prompts.builders import vllm_prompt_builder
    from llm_planner_node.planner_model.heldout import check_unseen, load_heldout

    items = load_heldout()
    assert len(items) >= 100 and check_unseen(items) == []
    out = run_items(engine, vllm_prompt_builder, items, grammar=True, concurrency=8, id_base=50_000)
    s = summarize(out)
    assert s["invalid_plans"] == 0, s["invalid_examples"]
    assert s["other_failures"] == 0
    assert s["adapter_rejected"] == 0, s["adapter_rejections"]
    assert s["segments"] >= len(items)
