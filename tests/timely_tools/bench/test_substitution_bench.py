"""`bench substitution` (timely_tools/bench/substitution_bench.py): its instruction sets and its judge,
with the real object check (no generation: plans are given as the engine's segments)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from timely_robot.skills import SkillCall
from llm_planner_node.grounding.objects import CALIBRATION_FILE, ObjectCheck, content_words
from timely_tools.bench import substitution_bench as sb


def test_the_held_out_set_is_large_enough_and_kept_apart_from_the_calibration_set():
    held, cal = sb.load_items(sb.HELDOUT), sb.load_items(CALIBRATION_FILE)
    assert sum(not it.perceivable for it in held) >= 60 and sum(it.perceivable for it in held) >= 60
    assert not {it.thing for it in held if not it.perceivable} & {it.thing for it in cal if not it.perceivable}
    assert not {it.instruction for it in held} & {it.instruction for it in cal}
    # purpose phrasings among the perceivable ones, and the issue's own examples
    said = {it.instruction for it in held}
    assert {"find my wristwatch", "look for the cat", "find a tool for cutting paper"} <= said
    assert all(it.accept for it in held if it.perceivable) and not any(it.accept for it in held if not it.perceivable)


def _run(plan: str, *segments: tuple[SkillCall, ...]) -> SimpleNamespace:
    return SimpleNamespace(plan=plan, status="eos", segments=[SimpleNamespace(calls=c) for c in segments])


@pytest.fixture(scope="module")
def check() -> ObjectCheck:
    return ObjectCheck()


def test_a_substitute_counts_only_when_it_would_have_run(check):
    item = next(it for it in sb.load_items(sb.HELDOUT) if it.instruction == "find my wristwatch")
    run = _run("_1=scan(woman);->_1;", (SkillCall("scan", ("woman",)),))
    before = sb.judge_item(item, run, None)  # nothing checks: the search for a person runs
    assert before["substitutes_dispatched"] == ["woman"] and not before["refused"]
    after = sb.judge_item(item, run, check)
    assert after["refused"] and after["refusal_reason"] == "substituted" and after["substitutes_dispatched"] == []
    assert after["refusal_names_thing"]  # the refusal quotes the instruction, wristwatch and all
    own = sb.judge_item(item, _run("_1=scan(wristwatch);->_1;", (SkillCall("scan", ("wristwatch",)),)), check)
    assert own["refusal_reason"] == "unperceivable" and own["refusal_names_thing"]
    assert sb.summarize([before, after, own])["substituted_dispatched"] == 1


def test_a_purpose_served_matches_and_the_table_adds_up(check):
    item = next(it for it in sb.load_items(sb.HELDOUT) if it.instruction == "find a tool for cutting paper")
    calls = (SkillCall("scan", ("scissors",)), SkillCall("goto", ("scissors",)))
    res = sb.judge_item(item, _run("_1=scan(scissors);?_1==True{goto(scissors);};->_1;", calls), check)
    assert not res["refused"] and res["semantic_match"] and res["substitutes_dispatched"] == []
    s = sb.summarize([res])
    assert (s["in_class"], s["in_class_match"], s["in_class_refused"], s["out_of_class"]) == (1, 1, 0, 0)


def test_names_thing_reads_quoted_names_singular_or_plural():
    assert sb.names_thing("tello_1 cannot perceive 'tweezer': ...", "tweezers")
    assert sb.names_thing("... ('find my wristwatch'; ...)", "wristwatch") is False  # inside a longer quote
    assert sb.names_thing("cannot perceive 'extension cord'", "extension_cord")
    assert content_words("find my wristwatch") == (("find",), ("wristwatch",))
