"""vLLM's frontend parses a request's grammar on every add and resume; the engine validates each
grammar text once per process instead (vllm_engine.memoize_grammar_validation)."""

from __future__ import annotations

import inspect
import uuid

import pytest

vllm = pytest.importorskip("vllm")


def _counting(monkeypatch):
    import xgrammar as xgr

    parsed: list[str] = []
    real = xgr.Grammar.from_ebnf

    def from_ebnf(text, *args, **kwargs):
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(xgr.Grammar, "from_ebnf", staticmethod(from_ebnf))
    return parsed


def _params(**so):
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    return SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(**so))


def test_vllm_validates_through_the_module_attribute_the_engine_wraps():
    """The assumption the wrap rests on: SamplingParams looks the validator up at call time."""
    from vllm.sampling_params import SamplingParams

    src = inspect.getsource(SamplingParams._validate_structured_outputs)
    assert "from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar" in src


def test_a_grammar_text_is_parsed_once_and_a_bad_one_is_never_remembered(monkeypatch):
    import vllm.v1.structured_output.backend_xgrammar as bx

    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.engines.vllm_engine import memoize_grammar_validation
    from llm_planner_node.prompts.grammar import plan_grammar

    memoize_grammar_validation()
    memoize_grammar_validation()  # idempotent: one wrap
    assert bx.validate_xgrammar_grammar.memoized and not getattr(bx.validate_xgrammar_grammar.original,
                                                                 "memoized", False)
    parsed = _counting(monkeypatch)
    text = plan_grammar(DEFAULT_SKILL_SETS["indy7_arm"]) + f'\nunused_{uuid.uuid4().hex} ::= "x"\n'
    for _ in range(3):
        bx.validate_xgrammar_grammar(_params(grammar=text))
    assert parsed == [text]

    bad = f'root ::= "a" unknown_rule_{uuid.uuid4().hex}'
    for _ in range(2):
        with pytest.raises(Exception, match="Invalid grammar"):
            bx.validate_xgrammar_grammar(_params(grammar=bad))
    assert parsed == [text, bad, bad]
