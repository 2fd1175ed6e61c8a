"""Instruct models: when the model's tokenizer has a chat template, the prompt builder
renders the goal as chat messages with it (system: skill list, rules, examples; user: the
instruction) to token ids; the shipped model keeps its own format."""

from __future__ import annotations

import shutil

import pytest

from timely_robot.skills import DEFAULT_SKILL_SETS
from llm_planner_node.engines.factory import prompt_builder_for
from llm_planner_node.config.params import EngineParams
from llm_planner_node.planner_model import DEFAULT_MODEL_PATH
from llm_planner_node.prompts.builders import vllm_prompt_builder
from llm_planner_node.prompts.prompt import (PromptOptions, build_chat_prompt_ids, build_prompt, chat_messages,
                                                   has_chat_template)

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory):
    """A model directory whose tokenizer has a chat template (the shipped tokenizer + a template)."""
    from transformers import AutoTokenizer

    d = tmp_path_factory.mktemp("instruct")
    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_PATH)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(d)
    shutil.copy(f"{DEFAULT_MODEL_PATH}/config.json", d / "config.json")
    return d


def test_messages_carry_skills_rules_examples_and_the_instruction():
    ss = DEFAULT_SKILL_SETS["tello_minispec"]
    msgs = chat_messages("  fly up   50 cm ", "drone", ss)
    system, user = msgs[0], msgs[-1]
    assert system["role"] == "system" and user == {"role": "user", "content": "fly up 50 cm"}
    # every skill by its full name, typed arguments with units and safe ranges, a description
    for needle in ("- move_up(distance: 20-500 cm): fly up", "- turn_ccw(degrees: 1-360 degrees)",
                   "- take_picture(): take a photo", "1 m = 100 cm"):
        assert needle in system["content"], needle
    # four retrieved examples as user/assistant turns between the system message and the goal
    roles = [m["role"] for m in msgs]
    assert roles == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert ("user", "descend 40 cm") not in [(m["role"], m["content"]) for m in msgs[:1]]
    # the same system message for every goal of a robot (prefix cache); the examples differ
    land = chat_messages("land", "drone", ss)
    assert land[0] == system and any("land();" in m["content"] for m in land if m["role"] == "assistant")
    arm = chat_messages("clean the desk", "arm", DEFAULT_SKILL_SETS["indy7_arm"], objects=["Red box", "cup"])
    assert "- pick(object): grasp an object" in arm[0]["content"]
    assert "Known objects: cup, red_box." in arm[0]["content"]
    off = chat_messages("land", "drone", ss, options=PromptOptions(descriptions=False, examples=0))
    assert len(off) == 2 and "- move_up(distance)\n" in off[0]["content"]


def test_chat_template_prompt_is_token_ids_of_the_rendered_template(chat_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_model_dir)
    assert has_chat_template(tok)
    ids = build_chat_prompt_ids(tok, "find the cat", "drone", DEFAULT_SKILL_SETS["tello_minispec"])
    assert all(isinstance(t, int) for t in ids)
    text = tok.decode(ids)
    assert text.startswith("<|system|>") and text.rstrip().endswith("<|assistant|>")
    assert "<|user|>\nfind the cat" in text and "Skills:\n- takeoff()" in text


def test_prompt_builder_uses_the_chat_template_of_an_hf_model(chat_model_dir):
    build = prompt_builder_for(EngineParams(kind="vllm", model=str(chat_model_dir)))
    prompt = build("find the cat", "drone", "tello_minispec")
    assert isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
    assert build("find the cat", "drone", "tello_minispec") == prompt  # cached ids


def test_a_robot_declaring_no_objects_is_prompted_with_the_instructions_words(chat_model_dir):
    """Without a known-objects list the planner model wrote ``is_visible(boss)`` for "check the
    book on the cabinet" (``b`` + ``oss``: a prefix token completed into another word), refused by
    the object check; its prompt now lists the instruction's words but a leading verb that takes
    its thing directly (listed, ``check`` was planned as the object)."""
    from transformers import AutoTokenizer

    from llm_planner_node.prompts.builders import chat_template_prompt_builder
    from llm_planner_node.prompts.prompt import PLANNER_PROMPT_OPTIONS

    tok = AutoTokenizer.from_pretrained(chat_model_dir)
    build = chat_template_prompt_builder(str(chat_model_dir), PLANNER_PROMPT_OPTIONS)
    text = tok.decode(build("check the book on the cabinet", "drone", "tello_minispec"))
    assert "Known objects: book, cabinet." in text
    # a robot's declared objects are its list, the instruction's words are not added
    arm = tok.decode(build("clean the desk", "arm", "indy7_arm", objects=("cup", "sponge")))
    assert "Known objects: cup, sponge." in arm
    assert "Known objects" not in tok.decode(build("tell me a story about a whale", "chat", "chat"))


def test_the_shipped_model_keeps_its_own_format():
    from transformers import AutoTokenizer

    assert not has_chat_template(AutoTokenizer.from_pretrained(DEFAULT_MODEL_PATH))
    assert prompt_builder_for(EngineParams(kind="vllm", model="embedded")) is vllm_prompt_builder
    # an HF directory without a chat template: the planner's own text format
    build = prompt_builder_for(EngineParams(kind="vllm", model=DEFAULT_MODEL_PATH))
    assert build("find the cat", "drone", "tello_minispec") == build_prompt(
        "find the cat", "drone", DEFAULT_SKILL_SETS["tello_minispec"])


def test_the_planner_model_is_prompted_as_it_was_trained_also_by_its_prepared_path():
    """`up --model smollm2-135m-planner` resolves the name to its prepared directory before the
    prompt builder is made: the options still follow the model (no worked examples)."""
    from llm_planner_node.prompts.prompt import prompt_options_for

    assert prompt_options_for("smollm2-135m-planner").examples == 0
    assert prompt_options_for("/root/.cache/timely_fleet/models/smollm2-135m-planner").examples == 0
    assert prompt_options_for("/root/.cache/timely_fleet/models/smollm2-135m-instruct").examples == 4
    assert prompt_options_for("smollm2-135m-instruct") == PromptOptions()

