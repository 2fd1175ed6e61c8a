"""The held-out instruction set (``heldout.jsonl``): instructions no training script saw.

Each line: ``instruction``, ``robot_kind``, ``skill_set``, ``expected_plan`` (the corpus-style
plan, or null when there is none: requests outside the safe ranges or the skill set, where the
only right outcomes are a valid plan or no plan), ``category`` (``paraphrase``,
``unseen_object``, ``unseen_number``, ``out_of_range``). None of them is in the shipped model's
training corpus, the held-out variations its training report evaluates, or the prompt's worked
examples (:func:`check_unseen`, tested). ``timely-fleet bench grammar`` runs them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HELDOUT_PATH = Path(__file__).resolve().parent / "heldout.jsonl"
CATEGORIES = ("paraphrase", "unseen_object", "unseen_number", "out_of_range")


@dataclass(frozen=True)
class HeldOut:
    instruction: str
    robot_kind: str
    skill_set: str
    expected_plan: str | None
    category: str


def load_heldout(path: str | Path = HELDOUT_PATH) -> list[HeldOut]:
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(HeldOut(d["instruction"], d["robot_kind"], d["skill_set"], d.get("expected_plan"),
                               d["category"]))
    return out


def check_unseen(items: list[HeldOut]) -> list[str]:
    """The instructions a training script saw (training corpus, training-report held-out
    variations, prompt examples); empty when the set is truly held out."""
    from llm_planner_node.planner_model.corpus import held_out_chat_variations, held_out_variations
    from llm_planner_node.planner_model.known import _corpus_index, normalize_instruction
    from llm_planner_node.prompts.prompt import _EXAMPLES

    seen = set(_corpus_index())
    seen |= {normalize_instruction(e.instruction) for e in held_out_variations(50) + held_out_chat_variations(50)}
    seen |= {normalize_instruction(i) for ex in _EXAMPLES.values() for i, _ in ex}
    return [h.instruction for h in items if normalize_instruction(h.instruction) in seen]


__all__ = ["CATEGORIES", "HELDOUT_PATH", "HeldOut", "check_unseen", "load_heldout"]
