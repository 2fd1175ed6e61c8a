"""Prompt format of the planning node (used for training the embedded model and at run time).

    prompt = prefix(robot kind / skill set)  +  "Task: <instruction>\\nPlan:"
    prefix = header line + "Skills: ..." (from the SkillSet) + "Rules: ..." (guidance)
             + two worked examples

Chat robots (skill set ``chat``) get their own prefix (storyteller header, sentence rules, two
examples), identical for every chat goal; their "plan" is plain sentences that the chat
sentence segmenter cuts (``get_segmenter("chat")``).

The prefix depends only on the skill set (never on the task), so all goals of one robot kind
share it byte for byte and the engine's prefix cache serves it. The model writes the plan after
"Plan:" (a leading space, then the plan) and ends it with EOS. Prompts are ~150-250 tokens with
the embedded tokenizer.

Instruct models (a Hugging Face model whose tokenizer has a chat template) get chat messages
(:func:`chat_messages`, TypeFly's planning prompt in spirit): a system message naming every skill
with its full name, typed arguments with units and safe ranges and a one-line description, the
objects the robot knows (when its YAML entry lists them) and the rules; then worked examples
retrieved for the instruction (:mod:`.examples`) as user/assistant turns; then the instruction.
:func:`build_chat_prompt_ids` renders them with the model's own template (generation prompt
added) to token ids, which the engine uses as they are. The system message is the same for
every goal of a robot, so the prefix cache serves it. :class:`PromptOptions` switches each part
off (the ablation of ``timely-fleet bench plans``). The shipped model has no chat template and
keeps its own format. The plan grammar (vLLM structured outputs) makes the answer a bounded plan
of the skill set whatever the model would rather write.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, ArgSpec, SkillSet
from llm_planner_node.prompts.grammar import object_names
from llm_planner_node.prompts.examples import retrieve
from llm_planner_node.prompts.quantities import normalise_quantities

PLAN_MARKER = "Plan:"

_HEADER = {
    "drone": "You plan for a drone. Write MiniSpec.",
    "arm": "You plan for a robot arm. Write skill calls.",
    "base": "You plan for a mobile base. Write MiniSpec.",
    "chat": "You are a friendly storyteller. Answer in plain sentences.",
}
_RULES = {
    "drone": (
        "Rules: end each statement with ;. Calls: name,arg. Blocks: ?cond{...}; and n{...};. "
        "Variables _1=call;. Return ->value;. Moves 20-500 cm, turns 1-360 degrees."
    ),
    "arm": (
        "Rules: one call per statement, end each with ;. Objects are snake_case names. "
        "Positions in mm. Start and end with home();."
    ),
    "base": (
        "Rules: end each statement with ;. Calls: name,arg. Blocks: ?cond{...}; and n{...};. "
        "Variables _1=call;. Return ->value;. Go to places by name; poses x,y in metres on the map. "
        "Moves 10-300 cm, turns 1-360 degrees."
    ),
    "chat": "Rules: tell the story in 3 to 5 short sentences, about 40 to 70 words. End each sentence with a period.",
}
_EXAMPLES = {
    "drone": (
        ("find the bottle", "_1=s,bottle;?_1==True{g,bottle;tp};->_1;"),
        ("fly up 50 cm and turn around", "mu,50;tc,180;"),
    ),
    "arm": (
        ("put the pen in the cup", "home(); look(pen); pick(pen); place(pen, cup); home();"),
        ("push the book 50 mm", "home(); push(book, 50); home();"),
    ),
    "base": (
        ("go to the kitchen", "gt,kitchen;"),
        ("check whether anyone is in the hall", "gt,hall;_1=s,person;->_1;"),
    ),
    "chat": (
        ("say hello", "Hello there."),
        ("tell a tiny story about a seed", "A seed slept in the ground. Rain woke it up. It grew into a tall tree."),
    ),
}


def skills_line(skill_set: SkillSet) -> str:
    """Compact one-line skill list: ``Skills: mf(distance) ... tp`` (MiniSpec aliases if any)."""
    parts = []
    for s in skill_set.skills:
        head = s.alias or s.name
        parts.append(f"{head}({','.join(a.name for a in s.args)})" if s.args else head)
    return "Skills: " + " ".join(parts) + "."


def _kind_of(skill_set: SkillSet) -> str:
    return skill_set.robot_kind if skill_set.robot_kind in _HEADER else "drone"


@lru_cache(maxsize=32)
def prompt_prefix(robot_kind: str = "drone", skill_set: SkillSet | None = None) -> str:
    """The task-independent prefix for a robot kind (or an explicit skill set)."""
    if skill_set is None:
        skill_set = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[robot_kind]]
    kind = robot_kind if robot_kind in _HEADER else _kind_of(skill_set)
    lines = [_HEADER[kind], skills_line(skill_set), _RULES[kind]]
    for instr, plan in _EXAMPLES[kind]:
        lines.append(f"Task: {instr}")
        lines.append(f"{PLAN_MARKER} {plan}")
    return "\n".join(lines) + "\n"


def build_prompt(instruction: str, robot_kind: str = "drone", skill_set: SkillSet | None = None) -> str:
    """Full prompt for one goal. The model continues with " <plan>" then EOS."""
    instruction = " ".join(instruction.strip().split())
    return f"{prompt_prefix(robot_kind, skill_set)}Task: {instruction}\n{PLAN_MARKER}"


def strip_plan(generated: str) -> str:
    """The plan text from what the model generated after the prompt."""
    return generated.strip()


def has_chat_template(tokenizer: object) -> bool:
    """Whether a Hugging Face tokenizer carries a chat template (instruct models)."""
    return bool(getattr(tokenizer, "chat_template", None))


@dataclass(frozen=True)
class PromptOptions:
    """What an instruct model's prompt carries (each part can be switched off for the ablation in
    ``timely-fleet bench plans``): skill descriptions with units and ranges, the robot's known
    objects, ``examples`` worked examples retrieved for the instruction, and ``quantities``: the
    instruction's distances, durations and turns rewritten in the skills' units
    (:mod:`.quantities`, in the examples' instructions too)."""

    descriptions: bool = True
    objects: bool = True
    examples: int = 4
    quantities: bool = True


#: Prompt parts per named model: the planner model was adapted to plans without worked examples
#: and on instructions as users write them (its prompt is shorter; ``planner_model/train_lora.py``
#: trains with exactly these options).
PLANNER_PROMPT_OPTIONS = PromptOptions(examples=0, quantities=False)
MODEL_PROMPT_OPTIONS: dict[str, PromptOptions] = {"smollm2-135m-planner": PLANNER_PROMPT_OPTIONS}


def prompt_options_for(model: str) -> PromptOptions:
    """The prompt parts a model is prompted with (the defaults unless it was trained otherwise).
    ``model``: a registry name or its prepared directory (``<cache>/<name>``: ``up --model``
    resolves the name to that path before the prompt builder is made)."""
    key = model if model in MODEL_PROMPT_OPTIONS else Path(str(model)).name
    return MODEL_PROMPT_OPTIONS.get(key, PromptOptions())


_INSTRUCT_HEADER = {
    "drone": "You are the planner of a small indoor drone. Turn the user's request into a plan.",
    "arm": "You are the planner of a robot arm over a table. Turn the user's request into a plan.",
    "base": "You are the planner of a mobile robot base in a building. Turn the user's request into a plan.",
    "chat": "You are a friendly robot that talks with people.",
}
_INSTRUCT_RULES = {
    "drone": ("Write only the plan: skill calls like move_up(100); one after another, each ending with ;. "
              "Distances are in cm (1 m = 100 cm); turning around is 180 degrees. Optional: loops 3{...}; "
              "conditions _1=scan(cat);?_1==True{goto(cat);}; and ->_1; to end with an answer. "
              "Use only the skills listed."),
    "arm": ("Write only the plan: skill calls like pick(cup); one after another, each ending with ;. "
            "Objects are snake_case names. Positions and distances are in mm (1 cm = 10 mm). "
            "Use only the skills listed."),
    "base": ("Write only the plan: skill calls like go_to(kitchen); one after another, each ending with ;. "
             "Go to places by their names; poses are x, y in metres on the map; distances are in cm "
             "(1 m = 100 cm); turning around is 180 degrees. Optional: conditions _1=scan(person);?_1==True{log(found);}; "
             "and ->_1; to end with an answer. Use only the skills listed."),
    "chat": "Answer in 1 to 4 short, plain sentences. Do not repeat yourself.",
}


#: a re-plan's prompt names the plans already run after this
DONE_PREFIX = "Done so far: "


def _arg_text(a: ArgSpec, descriptions: bool) -> str:
    if not descriptions:
        return a.name
    rng = ""
    if a.min is not None and a.max is not None:
        rng = f" {a.min:g}-{a.max:g}"
    unit = f" {a.unit}" if a.unit else ""
    opt = "optional " if a.optional else ""
    return f"{opt}{a.name}{(':' + rng + unit) if (rng or unit) else ''}"


def skill_lines(skill_set: SkillSet, descriptions: bool = True) -> list[str]:
    """One line per skill: full name, arguments (units and safe ranges) and what it does."""
    lines = []
    for s in skill_set.skills:
        sig = f"{s.name}({', '.join(_arg_text(a, descriptions) for a in s.args)})"
        desc = f": {s.description}" if descriptions and s.description else ""
        ret = f" (returns {s.returns})" if descriptions and s.returns else ""
        lines.append(f"- {sig}{desc}{ret}")
    return lines


def system_message(robot_kind: str = "drone", skill_set: SkillSet | None = None, *,
                   objects: Sequence[str] = (), options: PromptOptions = PromptOptions()) -> str:
    """The system message for an instruct model: who it plans for, the skills (full names,
    arguments with units and safe ranges, descriptions), the rules, and the known objects. The
    same for every goal of one robot, so the prefix cache serves it."""
    if skill_set is None:
        skill_set = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[robot_kind]]
    kind = robot_kind if robot_kind in _INSTRUCT_HEADER else _kind_of(skill_set)
    lines = [_INSTRUCT_HEADER[kind]]
    if kind != "chat":
        lines += ["Skills:", *skill_lines(skill_set, options.descriptions)]
        if options.objects and objects:
            lines.append("Known objects: " + ", ".join(object_names(objects)) + ".")
    lines.append(_INSTRUCT_RULES[kind])
    return "\n".join(lines)


def language_key(robot_kind: str, skill_set: SkillSet) -> str:
    """The example library of a goal: its plan language."""
    return {"drone": "minispec", "sim": "minispec", "arm": "arm", "base": "base", "chat": "chat"}.get(
        robot_kind, {"drone": "minispec", "arm": "arm", "base": "base", "chat": "chat"}.get(skill_set.robot_kind,
                                                                                           "minispec"))


def chat_messages(instruction: str, robot_kind: str = "drone", skill_set: SkillSet | None = None, *,
                  objects: Sequence[str] = (), options: PromptOptions = PromptOptions(),
                  scene: Sequence[str] | None = None, done: str | None = None) -> list[dict]:
    """System message, then ``options.examples`` retrieved worked examples as user/assistant
    turns, then the instruction (quantities in the skills' units when ``options.quantities``),
    for a re-plan the plans already run (``Done so far: ...``), and for a robot that reported what
    it sees TypeFly's ``Scene: [...]`` line (all in the last turn, so the system message and the
    examples stay a shared prefix for the cache)."""
    if skill_set is None:
        skill_set = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[robot_kind]]
    instruction = " ".join(instruction.strip().split())
    language = language_key(robot_kind, skill_set)

    def said(text: str) -> str:
        return normalise_quantities(text, language) if options.quantities else text

    msgs = [{"role": "system", "content": system_message(robot_kind, skill_set, objects=objects, options=options)}]
    for instr, plan in retrieve(instruction, language, options.examples):
        msgs += [{"role": "user", "content": said(instr)}, {"role": "assistant", "content": plan}]
    last = said(instruction)
    if done is not None and robot_kind != "chat":
        last = f"{last}\n{DONE_PREFIX}{' '.join(done.split())}"
    if scene is not None and robot_kind != "chat":
        from timely_robot.perceivable import scene_line

        last = f"{last}\n{scene_line(scene)}"
    msgs.append({"role": "user", "content": last})
    return msgs


def build_chat_prompt_ids(tokenizer: object, instruction: str, robot_kind: str = "drone",
                          skill_set: SkillSet | None = None, *, objects: Sequence[str] = (),
                          options: PromptOptions = PromptOptions(), scene: Sequence[str] | None = None,
                          done: str | None = None) -> list[int]:
    """The goal's prompt as token ids, rendered with the tokenizer's chat template."""
    msgs = chat_messages(instruction, robot_kind, skill_set, objects=objects, options=options, scene=scene,
                         done=done)
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)  # type: ignore[attr-defined]
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in some transformers versions
        ids = ids["input_ids"]
    return [int(t) for t in ids]
