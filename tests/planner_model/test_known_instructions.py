"""What the shipped planner knows: ``known_instructions()`` is the source of
truth, the README's section lists exactly it, and every robot of the default fleet has a README
example instruction its planner knows."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import yaml

from llm_planner_node.planner_model import DEFAULT_MODEL_PATH
from llm_planner_node.planner_model.corpus import TASKS, canonical_chat_examples
from llm_planner_node.planner_model.known import (PLAN_KIND, TRAINING_CORPUS, _corpus_index, find_known,
                                                  known_instructions, normalize_instruction)

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## What the shipped planner knows"


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, "README has no section 'What the shipped planner knows'"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def fleet_robots() -> list[dict]:
    return yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())["robots"]


def test_known_instructions_are_the_11_lrtrace_tasks_and_the_chat_stories():
    known = known_instructions()
    assert list(known) == ["drone", "arm", "chat"]
    assert known["drone"] + known["arm"] == [TASKS[i].instruction for i in range(1, 12)]
    assert len(known["drone"]) == 8 and len(known["arm"]) == 3
    assert known["chat"] == [e.instruction for e in canonical_chat_examples()]
    for kind, instrs in known.items():
        for i in instrs:
            ex = find_known(i, kind)
            assert ex is not None and ex.canonical and ex.instruction == i


def test_training_corpus_arguments_are_the_shipped_weights():
    report = json.loads((Path(DEFAULT_MODEL_PATH) / "training_report.json").read_text())
    for key, value in TRAINING_CORPUS.items():
        assert report["args"][key] == value, key


def test_normalisation_and_corpus_index():
    assert normalize_instruction("  Stack the RED, blue   and green boxes! ") == "stack the red blue and green boxes"
    assert len(_corpus_index()) > 1000
    assert find_known("find the dog", "drone").plan == "_1=s,dog;?_1==True{g,dog;tp};->_1;"
    assert find_known("find the dog", "sim") is not None and find_known("find the dog", "arm") is None
    assert find_known("fly up one meter and land") is None
    assert find_known("tell a sad story about a whale in the harbor", "chat").task_id == 12


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_readme_lists_exactly_the_known_instructions_with_the_fleets_robots():
    rows = _table_rows(readme_section())
    header, body = rows[0], rows[1:]
    assert header[0] == "robot kind" and header[-1] == "instruction"
    listed: dict[str, list[str]] = {}
    robots_of = {}
    for row in body:
        kind = row[0]
        (instr,) = re.findall(r'"([^"]+)"', row[-1])
        listed.setdefault(kind, []).append(instr)
        robots_of.setdefault(kind, set()).update(re.findall(r"`([^`]+)`", row[1]))
    assert listed == known_instructions()
    fleet = fleet_robots()
    for kind in listed:
        expected = {r["id"] for r in fleet if PLAN_KIND.get(r["kind"]) == kind}
        assert robots_of[kind] == expected, kind


def readme_goal_examples() -> list[tuple[str, str]]:
    """(robot id, instruction) of every `timely-fleet goal ROBOT "..."` example in the README."""
    out = []
    for line in (ROOT / "README.md").read_text().splitlines():
        m = re.match(r"\s*(?:\.venv/bin/)?timely-fleet goal (\S+) (\"[^\"]*\")", line)
        if m:
            out.append((m[1], shlex.split(m[2])[0]))
    return out


def test_every_fleet_robot_has_a_readme_first_goal_in_a_users_own_words():
    """The README's first goals go to the default planner (smollm2-135m-planner): every robot of
    the fleet gets one, and most are not the shipped 1M model's canonical wording (its table of
    what it knows is tested below); tests/e2e/test_first_user.py runs them on plain `up`."""
    examples = readme_goal_examples()
    kinds = {r["id"]: r["kind"] for r in fleet_robots()}
    assert {rid for rid, _ in examples} == set(kinds), examples
    own = [(rid, i) for rid, i in examples if i not in known_instructions().get(PLAN_KIND.get(kinds[rid], ""), [])]
    assert len(own) >= len(examples) // 2, examples
