"""Plan corpus and prompt format."""

from llm_planner_node.planner_model.corpus import (
    TASKS, canonical_examples, generate_corpus, held_out_variations, validate_corpus,
)
from llm_planner_node.prompts.prompt import PLAN_MARKER, build_prompt, prompt_prefix


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


def test_chat_corpus_stories_are_3_to_5_sentences_of_40_to_70_words():
    from llm_planner_node.planner_model.corpus import (CHAT_MOODS, canonical_chat_examples, chat_story,
                                                       generate_chat_corpus)
    from llm_planner_node.segmenters import get_segmenter

    chat = generate_chat_corpus()
    assert chat == generate_chat_corpus()  # deterministic
    assert len({e.instruction for e in chat}) >= 300  # many variations from the slot vocabularies
    assert len({e.plan for e in chat}) >= 300
    assert all(e.robot_kind == "chat" for e in chat)
    validate_corpus(chat)
    for mood in CHAT_MOODS:
        for story in (chat_story("owl", mood), chat_story("elephant", mood, "lighthouse")):
            seg = get_segmenter("chat")
            sentences = seg.feed(story) + seg.finish()
            assert 3 <= len(sentences) <= 5, story
            assert 40 <= len(story.split()) <= 70, story
    canon = canonical_chat_examples()
    assert [e.instruction for e in canon] == [f"tell a short story about a {s}" for s in ("fox", "robot", "dragon")]
    # the robot canonical tasks stay the 11 LRTrace ones
    assert not {e.instruction for e in canonical_examples()} & {e.instruction for e in chat}


def test_chat_prompt_prefix_identical_for_all_chat_tasks():
    from llm_planner_node.planner_model.corpus import generate_chat_corpus

    pre = prompt_prefix("chat")
    ps = [build_prompt(e.instruction, "chat") for e in generate_chat_corpus()[:50]]
    assert all(p.startswith(pre) and p.endswith(PLAN_MARKER) for p in ps)
    assert "Rules:" in pre and "sentences" in pre
    assert pre not in (prompt_prefix("drone"), prompt_prefix("arm"))
