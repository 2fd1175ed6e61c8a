"""Quantities rewritten in the skills' units before an instruct model reads the instruction."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from llm_planner_node.prompts.prompt import PromptOptions, chat_messages, prompt_options_for
from llm_planner_node.prompts.quantities import normalise_quantities


@pytest.mark.parametrize("text, drone", [
    ("go up one meter and then land", "go up 100 cm and then land"),
    ("back up half a meter", "back up 50 cm"),
    ("go back 2.5 meters", "go back 250 cm"),
    ("go down twenty centimeters", "go down 20 cm"),
    ("one hundred fifty centimetres up", "150 cm up"),
    ("two and a half meters", "250 cm"),
    ("5m up", "500 cm up"),
    ("pause for half a second", "pause for 500 ms"),
    ("wait a second", "wait 1000 ms"),
    ("wait 10 seconds before landing", "wait 10000 ms before landing"),
    ("rotate forty-five degrees left", "rotate 45 degrees left"),
    ("rotate 45° left", "rotate 45 degrees left"),
    ("make a quarter turn to the left", "make a 90 degree turn to the left"),
    ("turn around and fly 3 meters forward", "turn around 180 degrees and fly 300 cm forward"),
    ("do a 360", "do a 360 degree turn"),
    ("fly 40 cm forward and 40 cm up", "fly 40 cm forward and 40 cm up"),
    ("look for the cat", "look for the cat"),
])
def test_drone_units(text: str, drone: str) -> None:
    assert normalise_quantities(text, "minispec") == drone


@pytest.mark.parametrize("text, arm", [
    ("push the book 5 cm", "push the book 50 mm"),
    ("push it 30mm", "push it 30 mm"),
    ("move the cup half a meter left", "move the cup 500 mm left"),
    ("wait two seconds", "wait 2 s"),
    ("wait 500 ms", "wait 0.5 s"),
])
def test_arm_units(text: str, arm: str) -> None:
    assert normalise_quantities(text, "arm") == arm


def test_chat_is_unchanged() -> None:
    assert normalise_quantities("tell me a joke in two sentences", "chat") == "tell me a joke in two sentences"


@given(st.integers(min_value=1, max_value=999), st.sampled_from(["cm", "centimeters", "m", "meters", "mm"]))
def test_digit_distances_convert_exactly(n: int, unit: str) -> None:
    per_mm = {"cm": 10, "centimeters": 10, "m": 1000, "meters": 1000, "mm": 1}[unit]
    arm = normalise_quantities(f"move {n} {unit} left", "arm")
    assert arm == f"move {n * per_mm} mm left"
    drone = normalise_quantities(f"move {n} {unit} left", "minispec")
    assert float(drone.split()[1]) == pytest.approx(n * per_mm / 10) and drone.split()[2] == "cm"


def test_prompt_rewrites_the_instruction_and_examples_for_the_instruct_model() -> None:
    msgs = chat_messages("climb two meters", "drone", options=PromptOptions())
    assert msgs[-1]["content"] == "climb 200 cm"
    users = [m["content"] for m in msgs[1:-1] if m["role"] == "user"]
    assert users and not any("meter" in u for u in users)
    raw = chat_messages("climb two meters", "drone", options=PromptOptions(quantities=False))
    assert raw[-1]["content"] == "climb two meters"


def test_planner_model_reads_instructions_as_written() -> None:
    """The LoRA planner was trained on raw instructions (train_lora uses these options)."""
    assert prompt_options_for("smollm2-135m-planner").quantities is False
    assert prompt_options_for("smollm2-135m-instruct").quantities is True


def test_the_scene_follows_the_instruction_in_the_last_turn_only() -> None:
    scene = ["cat x:0.28 y:0.52 width:0.10 height:0.12"]
    plain = chat_messages("look for the cat", "drone", options=PromptOptions())
    seen = chat_messages("look for the cat", "drone", options=PromptOptions(), scene=scene)
    assert seen[:-1] == plain[:-1]  # system message and examples unchanged: the prefix cache serves them
    assert seen[-1]["content"] == plain[-1]["content"] + "\nScene: [cat x:0.28 y:0.52 width:0.10 height:0.12]"
    empty = chat_messages("look for the cat", "drone", options=PromptOptions(), scene=[])
    assert empty[-1]["content"].endswith("\nScene: []")  # the robot looked and saw nothing
    chat = chat_messages("tell me a joke", "chat", options=PromptOptions(), scene=scene)
    assert "Scene" not in chat[-1]["content"]
