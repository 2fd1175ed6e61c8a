"""The resume grammars the engine's warm-up compiles (GenerationStreams.warm_up_resumes): exactly
the distinct non-base grammars that segmented generation of the example plans resumes with,
computed from the tokenizer and the plan grammar alone (no vLLM start)."""

from __future__ import annotations

import pytest

pytest.importorskip("xgrammar")

from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import GenerationSpec  # noqa: E402
from llm_planner_node.planner_model.corpus import canonical_chat_examples, canonical_examples  # noqa: E402

KINDS = {"drone": "tello_minispec", "arm": "indy7_arm", "chat": "chat"}


@pytest.fixture(scope="module")
def engine():
    """The engine's tokenizer, segmenters and grammars, without vLLM itself."""
    from llm_planner_node.engines.stream import GenerationStreams, default_grammar_factory, default_segmenter_factory
    from llm_planner_node.engines.vllm_engine import resolve_model_path
    from llm_planner_node.config.params import EngineParams

    return GenerationStreams(EngineParams(kind="vllm", model="embedded"), WallClock(), resolve_model_path("embedded"),
                             constrained_decoding="grammar", segmenter_factory=default_segmenter_factory,
                             grammar_factory=default_grammar_factory, stop_stream=lambda gen: None)


def _plans(kind):
    return [ex.plan for ex in canonical_examples() + canonical_chat_examples() if ex.robot_kind == kind]


def _resumes(engine, spec, plan):
    """Every (kept ids, resume grammar) of a segmented generation of ``plan``, one suspension
    per segment boundary, through the engine's own grammar path (what a resume sends)."""
    gen = engine.new_gen(spec)
    ids = engine.tokenizer(plan, add_special_tokens=False)["input_ids"]
    out = []
    for tid in ids[:-1]:
        gen.kept.append(tid)
        engine.grammar_feed(gen, tid)
        if gen.segmenter.feed(gen.detok.push(tid)):
            out.append((list(gen.kept), engine.grammar_text(gen)))
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_warm_up_covers_every_resume_grammar_of_the_plans_and_nothing_else(engine, kind):
    spec = GenerationSpec(-1, "x", 1, kind, KINDS[kind], False)
    base = engine.new_gen(spec).grammar.d.base_ebnf
    warmed = engine.warm_up_resumes(spec, _plans(kind))
    texts = [t for _, t in warmed]
    assert len(set(texts)) == len(texts) and base not in texts
    resumes = [r for plan in _plans(kind) for r in _resumes(engine, spec, plan)]
    assert resumes, "every canonical plan has several segments"
    assert {t for _, t in resumes} - {base} == set(texts)
    for kept, text in warmed:  # each with the context of its first resume
        assert (kept, text) in resumes and text not in [t for k, t in resumes[:resumes.index((kept, text))]]


def test_canonical_drone_plans_resume_mostly_under_derived_grammars(engine):
    """Why the warm-up compiles them: after a MiniSpec variable is assigned, or a statement cut by
    a token that straddles its end, a resume's grammar is not the base grammar."""
    spec = GenerationSpec(-1, "x", 1, "drone", KINDS["drone"], False)
    base = engine.new_gen(spec).grammar.d.base_ebnf
    resumes = [t for plan in _plans("drone") for _, t in _resumes(engine, spec, plan)]
    assert sum(t != base for t in resumes) > len(resumes) / 2
    assert 2 <= len(engine.warm_up_resumes(spec, _plans("drone"))) <= 10


def test_the_resume_record_is_not_touched(engine):
    engine.resume_grammars.clear()
    engine.warm_up_resumes(GenerationSpec(-1, "x", 1, "drone", KINDS["drone"], False), _plans("drone"))
    assert engine.resume_grammars == []
