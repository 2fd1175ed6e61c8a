"""Prompts of the simulated and scripted engines: a goal's plan, looked up among what the
shipped planner knows (simulated engine) or given as the instruction itself (scripted engine),
cut into the segments the engine generates."""

from __future__ import annotations

import re

#: Longest instruction / plan list quoted in a rejection message (characters).
MAX_QUOTED_INSTRUCTION = 80
MAX_PLAN_LIST = 600


def _sim_prompt_from_plan(plan: str, robot_kind: str, skill_set_id: str) -> object:
    """A simulated plan from a corpus plan's text, cut by the robot's segmenter (the segments the
    shipped model's plan would give on vLLM), ~2 characters per token as in the LRTrace traces."""
    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.segmenters import get_segmenter, segment_all
    from llm_planner_node.engines.sim_traces import ARM_PREFIX_TOKENS, DRONE_PREFIX_TOKENS, TASK_TOKENS, _tokens
    from llm_planner_node.engines.sim_engine import SimPrompt, SimSegment

    skills = DEFAULT_SKILL_SETS[skill_set_id]
    segs = segment_all(get_segmenter(robot_kind, skills), [plan])
    out = [SimSegment(s.text, _tokens(s.text) + (1 if i == len(segs) - 1 else 0), tuple(s.calls))
           for i, s in enumerate(segs)]
    prefix = ARM_PREFIX_TOKENS if robot_kind == "arm" else DRONE_PREFIX_TOKENS
    return SimPrompt(prefix, TASK_TOKENS, tuple(out), skills.id)


def _sim_chat_prompt(instruction: str, story: str) -> object:
    """A chat goal of the simulated engine: the story in sentences, as the chat workload does."""
    import math

    from timely_robot.skills import CHAT
    from llm_planner_node.engines.sim_stories import CHAT_PREFIX_TOKENS, TOKENS_PER_WORD, chat_segments
    from llm_planner_node.engines.sim_engine import SimPrompt

    task_tokens = max(1, math.ceil(TOKENS_PER_WORD * len(instruction.split()))) + 16
    return SimPrompt(CHAT_PREFIX_TOKENS, task_tokens, chat_segments(story, "sentence"), CHAT.id)


def _chat_workload_story(instruction: str) -> str | None:
    """The chat workload's requests ("Write a short story: <prompt>", ``evaluation/traces.py``):
    a story composed from the prompt, the same for the same prompt."""
    import numpy as np

    from llm_planner_node.engines.sim_stories import CHAT_PROMPTS, compose_story
    from llm_planner_node.planner_model.known import normalize_instruction

    key = normalize_instruction(instruction)
    for i, p in enumerate(CHAT_PROMPTS):
        if key == normalize_instruction(f"Write a short story: {p}"):
            return compose_story(np.random.default_rng([i, 7]))[1]
    return None


def sim_no_plan_message(instruction: str, robot_kind: str) -> str:
    """Why the simulated engine rejects an instruction: what it can plan for the robot's kind."""
    from llm_planner_node.planner_model.known import PLAN_KIND, describe_chat_family, kind_of_known, known_instructions

    shown = instruction if len(instruction) <= MAX_QUOTED_INSTRUCTION else instruction[:MAX_QUOTED_INSTRUCTION - 3] + "..."
    kind = PLAN_KIND.get(robot_kind)
    known = known_instructions()
    if kind is None:
        return (f"the simulated engine has no plans for robot kind '{robot_kind}' "
                f"(it plans for {', '.join(sorted(PLAN_KIND))} robots)")
    other = kind_of_known(instruction)
    why = f"; that is a{'n' if other == 'arm' else ''} {other} task" if other and other != kind else ""
    listed = ", ".join(f'"{i}"' for i in known[kind])
    if len(listed) > MAX_PLAN_LIST:
        listed = listed[:MAX_PLAN_LIST - 4].rsplit(", ", 1)[0] + ", ..."
    more = (f", or any {describe_chat_family()}" if kind == "chat"
            else ", or a paraphrase from the planner's training corpus")
    return (f"the simulated engine has no plan for \"{shown}\" on a {robot_kind} robot{why}; "
            f"it plans: {listed}{more} (README: What the shipped planner knows)")


def sim_prompt_builder(instruction: str, robot_kind: str, skill_set_id: str, objects: tuple[str, ...] = (),
                       scene: tuple[str, ...] | None = None, done: str | None = None) -> object:
    """The simulated plan for a goal, only for an instruction the shipped planner knows
    (:func:`llm_planner_node.planner_model.known.find_known`; case, punctuation and whitespace do
    not matter):

    * a canonical LRTrace instruction or the LRTrace task's name ("desk cleaning") -> that
      trace's plan (:mod:`.sim_traces`, the calibrated LRTrace plans); on a base, one of
      :data:`~.sim_traces.BASE_TRACES`' tasks;
    * a paraphrase from the planner's training corpus -> the corpus plan for it, segmented;
    * a chat story instruction -> the corpus story in sentences; the chat workload's
      "Write a short story: <prompt>" requests -> a story composed from the prompt.

    Anything else raises ValueError with the instructions it can plan (the node rejects the goal
    with that message); it never runs another task's plan.
    """
    from llm_planner_node.planner_model.known import PLAN_KIND, find_known, normalize_instruction
    from llm_planner_node.engines.sim_traces import BASE_TRACES, TRACES

    kind = PLAN_KIND.get(robot_kind)
    key = normalize_instruction(instruction)
    if robot_kind == "base":
        for t in BASE_TRACES.values():
            if normalize_instruction(t.description) == key:
                return t.prompt
        listed = ", ".join(f'"{t.description}"' for t in BASE_TRACES.values())
        raise ValueError(f"the simulated engine has no plan for \"{instruction[:MAX_QUOTED_INSTRUCTION]}\" on a base "
                         f"robot; it plans: {listed}")
    if kind in ("drone", "arm"):
        for t in TRACES.values():
            if t.robot_kind == kind and normalize_instruction(t.description) == key:
                return t.prompt
    ex = find_known(instruction, robot_kind) if kind is not None else None
    if ex is not None:
        if ex.robot_kind == "chat":
            return _sim_chat_prompt(instruction, ex.plan)
        if ex.canonical and ex.task_id in TRACES:
            return TRACES[ex.task_id].prompt
        return _sim_prompt_from_plan(ex.plan, ex.robot_kind, skill_set_id)
    if kind == "chat":
        story = _chat_workload_story(instruction)
        if story is not None:
            return _sim_chat_prompt(instruction, story)
    raise ValueError(sim_no_plan_message(instruction, robot_kind))


#: separates the plans of a scripted goal that re-plans
REPLAN_SCRIPT_SEPARATOR = "//"


def scripted_prompt_builder(instruction: str, robot_kind: str, skill_set_id: str,
                            objects: tuple[str, ...] = (), scene: tuple[str, ...] | None = None, done: str | None = None) -> object:
    """The scripted engine (``engine.kind: scripted``): the instruction *is* the plan the engine
    writes, cut by the robot's segmenter and generated at the simulated engine's speed, so given
    plans (adversarial ones: deep loops, long plans, moves out of a fence) reach the real planner
    and adapters. A text the segmenter refuses is rejected with its reason. Plans separated by
    ``//`` script a goal that re-plans: its first plan is the first part, and each re-plan
    (``done``: the plans already run) writes the part after the last one run (one ``re_plan``
    per part)."""
    from timely_robot.skills import REPLAN_SKILLS
    from timely_robot.plans import PlanError

    if robot_kind == "chat":
        return _sim_chat_prompt(instruction, instruction)
    parts = [p.strip() for p in instruction.split(REPLAN_SCRIPT_SEPARATOR)]
    instruction = parts[min(len(parts) - 1, sum(len(re.findall(rf"\b{name}\b", done or "")) for name in REPLAN_SKILLS))]
    try:
        return _sim_prompt_from_plan(instruction, robot_kind, skill_set_id)
    except PlanError as e:
        raise ValueError(f"the scripted engine cannot write this plan: {e}") from None
