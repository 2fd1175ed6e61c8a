"""The known objects a goal's prompt lists when its robot declares none (prompts/builders.py):
the instruction's own names, but a leading verb that takes its thing directly."""

from __future__ import annotations

from llm_planner_node.core.text import instruction_names
from llm_planner_node.prompts.builders import prompt_objects


def test_a_leading_verb_is_not_offered_as_an_object_but_one_followed_by_for_is():
    assert prompt_objects("check the book on the cabinet", "drone") == ("book", "cabinet")
    assert prompt_objects("Find my fire extinguisher", "drone") == ("fire", "extinguisher", "fire_extinguisher")
    assert "check" in instruction_names("check the book on the cabinet")  # the grammar still admits it
    assert prompt_objects("look for the cat", "drone") == instruction_names("look for the cat")


def test_a_one_word_instruction_keeps_its_word_and_a_chat_robot_gets_none():
    assert prompt_objects("cat", "drone") == ("cat",)
    assert prompt_objects("tell me a joke about robots", "chat") == ()
