"""Arm language and chat segmentation; the factory."""

import pytest

from timely_robot.skills import CHAT, INDY7_ARM, SkillCall, TELLO_MINISPEC
from llm_planner_node.planner_model.corpus import canonical_examples, generate_corpus
from llm_planner_node.segmenters import (
    PlanSyntaxError, UnsafePlanError, get_segmenter, segment_all,
)
from llm_planner_node.segmenters.arm import ArmSegmenter, parse_arm_plan
from llm_planner_node.segmenters.chat import ChatSegmenter
from llm_planner_node.segmenters.minispec import MiniSpecSegmenter

ARM_PLANS = sorted({e.plan for e in generate_corpus() + canonical_examples() if e.robot_kind == "arm"})


def semicolon_ends(plan):
    return [i + 1 for i, c in enumerate(plan) if c == ";"]


@pytest.mark.parametrize("plan", ARM_PLANS)
def test_arm_boundaries_are_statement_ends(plan):
    segs = segment_all(get_segmenter("arm"), list(plan))
    assert [s.end for s in segs] == semicolon_ends(plan)
    assert all(len(s.calls) == 1 for s in segs)
    assert all(plan[s.start : s.end] == s.text for s in segs)
    assert all(c.name in INDY7_ARM.names() for s in segs for c in s.calls)


def test_arm_parse_and_grouping():
    plan = "home(); pick(red_box);\nplace(red_box, tray); move_to(300, 0, 200, -90); push(cup, 50)"
    calls = parse_arm_plan(plan, INDY7_ARM)
    assert [c.skill_call for c in calls] == [
        SkillCall("home"), SkillCall("pick", ("red_box",)), SkillCall("place", ("red_box", "tray")),
        SkillCall("move_to", (300.0, 0.0, 200.0, -90.0)), SkillCall("push", ("cup", 50.0)),
    ]
    segs = segment_all(get_segmenter("arm", group_size=2), list(plan))
    assert [len(s.calls) for s in segs] == [2, 2, 1]
    assert segs[0].text == "home(); pick(red_box);"
    assert segs[0].end == len("home(); pick(red_box);")


@pytest.mark.parametrize(
    "bad,exc,frag",
    [
        ("move_to(900, 0, 200);", UnsafePlanError, "above the safe maximum 700"),
        ("move_to(0, 0, 10);", UnsafePlanError, "below the safe minimum 50"),
        ("push(cup, 500);", UnsafePlanError, "above"),
        ("fly(cup);", UnsafePlanError, "not in skill set"),
        ("pick();", UnsafePlanError, "takes 1 argument"),
        ("pick(cup) place(cup, tray);", PlanSyntaxError, "expected ';'"),
        ("pick(cup;", PlanSyntaxError, "expected ')'"),
        ("42;", PlanSyntaxError, "expected a skill name"),
    ],
)
def test_arm_invalid(bad, exc, frag):
    with pytest.raises(exc) as ei:
        segment_all(get_segmenter("arm"), list(bad))
    assert frag in str(ei.value)


def test_arm_unsafe_raises_before_emission_and_clamp():
    seg = get_segmenter("arm")
    got = []
    with pytest.raises(UnsafePlanError, match="move_to"):
        for ch in "home(); move_to(0, 0, 900); home();":
            got.extend(seg.feed(ch))
    assert [s.text for s in got] == ["home();"]
    (s,) = segment_all(get_segmenter("arm", repair="clamp"), ["move_to(0, 0, 900);"])
    assert s.calls[0].args == (0.0, 0.0, 800.0) and s.repairs


STORY = (
    'Dr. Smith paid $3.50 for it. Wow! The U.S. team won, e.g. twice. J. K. Rowling wrote this...\n'
    'A title line\n\nNew paragraph here. It ends here?! Yes.'
)


def test_chat_sentences():
    segs = segment_all(get_segmenter("chat-sentence"), list(STORY))
    assert [s.text for s in segs] == [
        "Dr. Smith paid $3.50 for it.", "Wow!", "The U.S. team won, e.g. twice.",
        "J. K. Rowling wrote this...", "A title line", "New paragraph here.", "It ends here?!", "Yes.",
    ]
    assert all(STORY[s.start : s.end] == s.text for s in segs)
    assert all(s.calls == (SkillCall("say", (s.text,)),) for s in segs)
    # same boundaries whatever the chunking
    assert [s.end for s in segment_all(get_segmenter("chat"), [STORY])] == [s.end for s in segs]


def test_chat_sentence_emitted_on_following_whitespace():
    seg = get_segmenter("chat-sentence")
    assert seg.feed("Hello there.") == []
    (s,) = seg.feed(" ")
    assert s.text == "Hello there." and s.end == 12


def test_chat_paragraphs():
    segs = segment_all(get_segmenter("chat-paragraph"), list(STORY))
    assert [s.text for s in segs] == [STORY.split("\n\n")[0], STORY.split("\n\n")[1]]
    segs = segment_all(get_segmenter("chat-paragraph"), ["One.\n  \n\nTwo.\n"])
    assert [s.text for s in segs] == ["One.", "Two."]


def test_chat_long_sentence_is_cut():
    segs = segment_all(get_segmenter("chat-sentence", max_segment_chars=20), ["word " * 20])
    assert all(len(s.text) <= 20 for s in segs) and len(segs) > 1


def test_factory():
    assert isinstance(get_segmenter("drone"), MiniSpecSegmenter)
    assert isinstance(get_segmenter("sim"), MiniSpecSegmenter)
    assert isinstance(get_segmenter("minispec", TELLO_MINISPEC), MiniSpecSegmenter)
    assert isinstance(get_segmenter("arm", "indy7_arm"), ArmSegmenter)
    s = get_segmenter("chat-paragraph", CHAT)
    assert isinstance(s, ChatSegmenter) and s.mode == "paragraph"
    assert get_segmenter("chat").mode == "sentence"
    with pytest.raises(ValueError):
        get_segmenter("nope")
    with pytest.raises(ValueError):
        get_segmenter("arm", "no_such_set")
