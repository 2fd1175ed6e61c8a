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

Instruct models (a Hugging Face model whose tokenizer has a chat template) get the same content
as chat messages (:func:`chat_messages`): a system message with the header, the skill list, the
rules and the worked examples, and a user message with the instruction;
:func:`build_chat_prompt_ids` renders them with the model's own template (generation prompt
added) to token ids, which the engine uses as they are. The system message is the same for
every goal of a skill set, so the prefix cache still serves it. The shipped model has no chat
template and keeps its own format. The plan grammar (vLLM structured outputs) makes the
answer a plan of the skill set whatever the model would rather write.
"""

from __future__ import annotations

from functools import lru_cache

from ..core.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, SkillSet

PLAN_MARKER = "Plan:"

_HEADER = {
    "drone": "You plan for a drone. Write MiniSpec.",
    "arm": "You plan for a robot arm. Write skill calls.",
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


def system_message(robot_kind: str = "drone", skill_set: SkillSet | None = None) -> str:
    """The system message for an instruct model: header, skills, rules and worked examples."""
    if skill_set is None:
        skill_set = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[robot_kind]]
    kind = robot_kind if robot_kind in _HEADER else _kind_of(skill_set)
    answer = ("Answer with the story only." if kind == "chat"
              else "Answer with the plan only, on one line, no explanation.")
    lines = [_HEADER[kind], skills_line(skill_set), _RULES[kind], answer, "Examples:"]
    for instr, plan in _EXAMPLES[kind]:
        lines.append(f"Task: {instr}")
        lines.append(f"{PLAN_MARKER} {plan}")
    return "\n".join(lines)


def chat_messages(instruction: str, robot_kind: str = "drone", skill_set: SkillSet | None = None) -> list[dict]:
    """System message (skill list, rules, examples) + user message (the instruction)."""
    instruction = " ".join(instruction.strip().split())
    return [{"role": "system", "content": system_message(robot_kind, skill_set)},
            {"role": "user", "content": instruction}]


def build_chat_prompt_ids(tokenizer: object, instruction: str, robot_kind: str = "drone",
                          skill_set: SkillSet | None = None) -> list[int]:
    """The goal's prompt as token ids, rendered with the tokenizer's chat template."""
    ids = tokenizer.apply_chat_template(chat_messages(instruction, robot_kind, skill_set),  # type: ignore[attr-defined]
                                        add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in some transformers versions
        ids = ids["input_ids"]
    return [int(t) for t in ids]
