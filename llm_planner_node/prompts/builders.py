"""Prompt builders of the live engines: a goal (instruction, robot kind, skill set, known
objects) to the model's prompt, in the shipped planner's own format or through a model's chat
template."""

from __future__ import annotations

from typing import Any, Callable

from timely_robot.skills import DEFAULT_SKILL_SETS
from llm_planner_node.prompts.prompt import PromptOptions, build_chat_prompt_ids, build_prompt, has_chat_template

#: Goals whose chat-template prompt ids a builder remembers.
CHAT_PROMPT_CACHE_MAX = 256


def vllm_prompt_builder(instruction: str, robot_kind: str, skill_set_id: str, objects: tuple[str, ...] = (),
                        scene: tuple[str, ...] | None = None, done: str | None = None) -> object:
    """The shipped planner model's prompt for a goal (skill set + guidance + examples + task; it
    was trained without object lists and scenes)."""
    return build_prompt(instruction, robot_kind, DEFAULT_SKILL_SETS[skill_set_id])


def chat_template_prompt_builder(model_path: str, options: PromptOptions | None = None) -> Callable[..., object] | None:
    """For a Hugging Face model whose tokenizer has a chat template: a builder that renders the
    goal as chat messages (system: skills, rules, known objects; retrieved examples; user: the
    instruction; :mod:`llm_planner_node.prompts.prompt`) to token ids with that template. None if
    the tokenizer has no chat template."""
    from transformers import AutoTokenizer

    options = options or PromptOptions()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if not has_chat_template(tokenizer):
        return None
    cache: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def build(instruction: str, robot_kind: str, skill_set_id: str, objects: tuple[str, ...] = (),
              scene: tuple[str, ...] | None = None, done: str | None = None) -> object:
        key = (instruction, robot_kind, skill_set_id, tuple(objects), None if scene is None else tuple(scene), done)
        ids = cache.get(key)
        if ids is None:
            ids = cache[key] = tuple(build_chat_prompt_ids(tokenizer, instruction, robot_kind,
                                                           DEFAULT_SKILL_SETS[skill_set_id], objects=tuple(objects),
                                                           options=options, scene=scene, done=done))
            while len(cache) > CHAT_PROMPT_CACHE_MAX:
                cache.pop(next(iter(cache)))
        return list(ids)

    return build
