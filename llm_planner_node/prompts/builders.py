"""Prompt builders of the live engines: a goal (instruction, robot kind, skill set, known
objects) to the model's prompt, in the shipped planner's own format or through a model's chat
template.

A robot that declares no objects (a simulated drone, a camera drone whose grammar admits any
name) is prompted with the instruction's own words as its known objects
(:func:`~llm_planner_node.core.text.instruction_names`, the names its grammar would offer): with
no list, the planner model (``smollm2-135m-planner``, trained with a known-objects list in 40% of
its prompts) starts an object name it was not given with a bare prefix token and completes it into
another word ("check the book on the cabinet" -> ``is_visible(`` ``b`` ``oss``), which the object
check then refuses; given the instruction's words it names the book."""

from __future__ import annotations

from typing import Any, Callable

from timely_robot.skills import DEFAULT_SKILL_SETS
from llm_planner_node.core.text import instruction_names
from llm_planner_node.prompts.prompt import PromptOptions, build_chat_prompt_ids, build_prompt, has_chat_template

#: Goals whose chat-template prompt ids a builder remembers.
CHAT_PROMPT_CACHE_MAX = 256


def vllm_prompt_builder(instruction: str, robot_kind: str, skill_set_id: str, objects: tuple[str, ...] = (),
                        scene: tuple[str, ...] | None = None, done: str | None = None) -> object:
    """The shipped planner model's prompt for a goal (skill set + guidance + examples + task; it
    was trained without object lists and scenes)."""
    return build_prompt(instruction, robot_kind, DEFAULT_SKILL_SETS[skill_set_id])


def prompt_objects(instruction: str, robot_kind: str) -> tuple[str, ...]:
    """The known objects of the prompt of a goal whose robot declares none: the instruction's own
    words (a chat robot's prompt lists no objects), but a leading verb that takes its thing
    directly ("check the book on the cabinet": listed, the shipped planner took the verb for the
    object, ``is_visible(check)``). A verb followed by "for" stays ("look for the cat": without
    it the planner checked once with ``is_visible`` instead of turning to ``scan``); so does a
    one-word instruction. The grammar admits every word either way."""
    if robot_kind == "chat":
        return ()
    names = instruction_names(instruction)
    words = instruction.lower().split()
    if len(words) < 2 or words[1] == "for":
        return names
    rest = tuple(n for n in names if n != words[0] and not n.startswith(words[0] + "_"))
    return rest or names


def chat_template_prompt_builder(model_path: str, options: PromptOptions | None = None) -> Callable[..., object] | None:
    """For a Hugging Face model whose tokenizer has a chat template: a builder that renders the
    goal as chat messages (system: skills, rules, known objects, for a robot that declares none
    the instruction's words, :func:`prompt_objects`; retrieved examples; user: the instruction;
    :mod:`llm_planner_node.prompts.prompt`) to token ids with that template. None if the
    tokenizer has no chat template."""
    from transformers import AutoTokenizer

    options = options or PromptOptions()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if not has_chat_template(tokenizer):
        return None
    cache: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def build(instruction: str, robot_kind: str, skill_set_id: str, objects: tuple[str, ...] = (),
              scene: tuple[str, ...] | None = None, done: str | None = None) -> object:
        objects = tuple(objects) or prompt_objects(instruction, robot_kind)
        key = (instruction, robot_kind, skill_set_id, objects, None if scene is None else tuple(scene), done)
        ids = cache.get(key)
        if ids is None:
            ids = cache[key] = tuple(build_chat_prompt_ids(tokenizer, instruction, robot_kind,
                                                           DEFAULT_SKILL_SETS[skill_set_id], objects=objects,
                                                           options=options, scene=scene, done=done))
            while len(cache) > CHAT_PROMPT_CACHE_MAX:
                cache.pop(next(iter(cache)))
        return list(ids)

    return build
