"""What the shipped planner model knows: the instructions it was trained on, as data.

The source of truth for the README section "What the shipped planner knows" and for the
simulated engine, which plans only instructions the planner knows (it never substitutes another
task's plan):

* :func:`known_instructions` — the canonical instructions per robot kind: the 11 LRTrace tasks
  (TimelyLLM Table 2; 8 drone, 3 arm) and the 3 canonical chat stories. The shipped model
  reproduces the corpus plan for every one of them (``weights/training_report.json``).
* :func:`find_known` — the corpus example an instruction names: a canonical instruction, one of
  the paraphrases in the model's training corpus (``generate_corpus`` / ``generate_chat_corpus``
  with the arguments the shipped weights were trained with), or any instruction of the chat
  story family ("tell a <mood> story about <a subject> [in the <place>]", the corpus's
  vocabularies). Matching ignores case, punctuation and repeated whitespace.
"""

from __future__ import annotations

import functools
import re

from llm_planner_node.planner_model.corpus import (CHAT_MOODS, CHAT_PLACES, CHAT_SUBJECTS, CHAT_VERBS,
                     PlanExample, _chat_example, canonical_chat_examples, canonical_examples, chat_instruction,
                     chat_story, generate_chat_corpus, generate_corpus)

#: Corpus arguments of the shipped weights (``train.py`` defaults; ``weights/training_report.json``).
TRAINING_CORPUS = {"n_per_task": 120, "seed": 0, "chat_n": 400}
#: Robot kinds in the order the README lists them; ``sim`` robots plan like drones (MiniSpec).
KINDS = ("drone", "arm", "chat")
PLAN_KIND = {"drone": "drone", "sim": "drone", "arm": "arm", "chat": "chat"}


def normalize_instruction(text: str) -> str:
    """Lower case, punctuation removed, whitespace collapsed: the key instructions match on."""
    return " ".join(re.sub(r"[^0-9a-z_]+", " ", text.lower()).split())


def known_instructions() -> dict[str, list[str]]:
    """The canonical instructions of the shipped planner, per robot kind (``drone``, ``arm``,
    ``chat``), in task order: LRTrace tasks 1-8 (drone), 9-11 (arm), then the chat stories."""
    out: dict[str, list[str]] = {k: [] for k in KINDS}
    for ex in canonical_examples() + canonical_chat_examples():
        out[ex.robot_kind].append(ex.instruction)
    return out


@functools.lru_cache(maxsize=1)
def _canonical_index() -> dict[str, PlanExample]:
    return {normalize_instruction(ex.instruction): ex for ex in canonical_examples() + canonical_chat_examples()}


@functools.lru_cache(maxsize=1)
def _corpus_index() -> dict[str, PlanExample]:
    """Normalised instruction -> example, over the shipped model's training corpus."""
    corpus = generate_corpus(n_per_task=TRAINING_CORPUS["n_per_task"], seed=TRAINING_CORPUS["seed"],
                             canonical_repeats=1)
    corpus += generate_chat_corpus(TRAINING_CORPUS["chat_n"], seed=TRAINING_CORPUS["seed"], canonical_repeats=1)
    index: dict[str, PlanExample] = {}
    for ex in sorted(corpus, key=lambda e: (not e.canonical, e.task_id, e.instruction)):
        index.setdefault(normalize_instruction(ex.instruction), ex)
    return index


_CHAT_RE = re.compile(
    r"^(?P<verb>{verbs}) (?P<mood>{moods}) story about (?:a|an) (?P<subj>{subjects})"
    r"(?: in the (?P<place>{places}))?$".format(
        verbs="|".join(map(re.escape, CHAT_VERBS)), moods="|".join(CHAT_MOODS),
        subjects="|".join(CHAT_SUBJECTS), places="|".join(CHAT_PLACES)))


def chat_example(instruction: str) -> PlanExample | None:
    """The story of an instruction of the chat family, or None if it is not one."""
    m = _CHAT_RE.match(normalize_instruction(instruction))
    if m is None:
        return None
    subj, mood, place = m["subj"], m["mood"], m["place"]
    return _chat_example(chat_instruction(subj, mood, place, m["verb"]), chat_story(subj, mood, place))


def find_known(instruction: str, robot_kind: str | None = None) -> PlanExample | None:
    """The corpus example ``instruction`` names (canonical first, then the training corpus's
    paraphrases, then the chat family), restricted to ``robot_kind``'s plans if given."""
    key = normalize_instruction(instruction)
    ex = _canonical_index().get(key) or _corpus_index().get(key) or chat_example(instruction)
    if ex is None or (robot_kind is not None and PLAN_KIND.get(robot_kind) != ex.robot_kind):
        return None
    return ex


def kind_of_known(instruction: str) -> str | None:
    """The robot kind whose plan ``instruction`` names, whatever robot it was sent to."""
    ex = find_known(instruction)
    return ex.robot_kind if ex is not None else None


def describe_chat_family() -> str:
    """One line describing the chat instructions the planner knows (README and messages)."""
    return (f"\"<{'|'.join(CHAT_VERBS)}> <{'|'.join(CHAT_MOODS)}> story about a <subject> "
            "[in the <place>]\" (subjects and places of the corpus)")


__all__ = ["KINDS", "TRAINING_CORPUS", "chat_example", "describe_chat_family", "find_known",
           "kind_of_known", "known_instructions", "normalize_instruction"]
