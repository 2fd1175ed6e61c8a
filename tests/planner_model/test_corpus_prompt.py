"""Plan corpus and prompt format."""

from llm_planner_node.planner_model.corpus import (
    TASKS, canonical_examples, generate_corpus, held_out_variations, validate_corpus,
)
from llm_planner_node.planner_model.prompt import PLAN_MARKER, build_prompt, prompt_prefix


def test_eleven_lrtrace_tasks():
    ex = canonical_examples()
    assert [e.task_id for e in ex] == list(range(1, 12))
    assert [e.robot_kind for e in ex] == ["drone"] * 8 + ["arm"] * 3
    assert [e.tuf_class for e in ex] == ["normal"] * 5 + ["urgent"] * 3 + ["normal"] * 3
    assert TASKS[1].name == "look for the cat" and TASKS[11].name == "fruit and vegetable classification"


def test_corpus_is_valid_deterministic_and_varied():
    c = generate_corpus()
    validate_corpus(c)
    validate_corpus(canonical_examples())
    assert c == generate_corpus()
    assert len({e.instruction for e in c}) > 1000
    for tid in TASKS:
        assert sum(e.task_id == tid for e in c) >= 20
    held = held_out_variations(5, exclude={e.instruction for e in c})
    validate_corpus(held)
    assert not ({e.instruction for e in held} & {e.instruction for e in c})


def test_prompt_prefix_identical_per_kind():
    for kind in ("drone", "arm"):
        ps = [build_prompt(e.instruction, e.robot_kind) for e in generate_corpus() if e.robot_kind == kind][:50]
        pre = prompt_prefix(kind)
        assert all(p.startswith(pre) for p in ps)
        assert all(p.endswith(PLAN_MARKER) for p in ps)
        assert "Skills:" in pre and "Rules:" in pre and pre.count("Task:") == 2
    assert prompt_prefix("drone") != prompt_prefix("arm")
    assert prompt_prefix("sim") == prompt_prefix("drone")
