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
