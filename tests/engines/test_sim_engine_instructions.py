"""The simulated engine plans only instructions the shipped planner knows:
an unknown instruction is rejected with the list of what it can plan, never given another
task's plan; chat robots get the corpus story."""

from __future__ import annotations

import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.engines.sim_prompts import sim_prompt_builder
from llm_planner_node.engines.sim_engine import SimEngine, SimPrompt
from llm_planner_node.planner_model.corpus import TASKS, chat_story
from llm_planner_node.planner_model.known import known_instructions
from llm_planner_node.engines.sim_traces import TRACES

SKILL_SET = {"drone": "tello_minispec", "sim": "tello_minispec", "arm": "indy7_arm", "chat": "chat"}


def build(instruction: str, kind: str) -> SimPrompt:
    p = sim_prompt_builder(instruction, kind, SKILL_SET[kind])
    assert isinstance(p, SimPrompt)
    return p


def texts(p: SimPrompt) -> list[str]:
    return [s.text for s in p.segments]


def skills(p: SimPrompt) -> list[str]:
    return [c.name for s in p.segments for c in s.calls]


@pytest.mark.parametrize("kind", ["drone", "sim"])
def test_unknown_drone_instruction_is_rejected_with_what_it_plans(kind):
    with pytest.raises(ValueError) as e:
        build("fly up one meter and land", kind)
    msg = str(e.value)
    assert msg.startswith('the simulated engine has no plan for "fly up one meter and land"')
    for instr in known_instructions()["drone"]:
        assert f'"{instr}"' in msg
    for instr in known_instructions()["arm"] + known_instructions()["chat"]:
        assert instr not in msg
    assert len(msg) < 800


def test_unknown_arm_and_chat_instructions_are_rejected_with_their_lists():
    with pytest.raises(ValueError) as arm:
        build("juggle three oranges", "arm")
    assert all(f'"{i}"' in str(arm.value) for i in known_instructions()["arm"])
    with pytest.raises(ValueError) as chat:
        build("what is the weather tomorrow", "chat")
    msg = str(chat.value)
    assert all(f'"{i}"' in msg for i in known_instructions()["chat"])
    assert "story about a <subject>" in msg


def test_another_kinds_task_is_rejected_and_named():
    with pytest.raises(ValueError, match="that is an arm task"):
        build("clean the desk", "drone")
    with pytest.raises(ValueError, match="that is a drone task"):
        build("look for the cat", "arm")
    with pytest.raises(ValueError, match="that is a chat task"):
        build("tell a short story about a fox", "drone")


def test_long_unknown_instruction_is_quoted_shortened():
    with pytest.raises(ValueError) as e:
        build("hover " * 300, "drone")
    msg = str(e.value)
    assert len(msg) < 800 and "..." in msg


def test_near_misses_are_not_guessed():
    # close to a known instruction, but none of them: refused, never planned as the cat search
    for instr in ("look for the cat and then land", "cat", "look for", "search the kitchen"):
        with pytest.raises(ValueError):
            build(instr, "drone")


def test_every_canonical_instruction_gets_its_own_lrtrace_plan():
    for tid, task in TASKS.items():
        kinds = ["drone", "sim"] if task.robot_kind == "drone" else [task.robot_kind]
        for kind in kinds:
            assert build(task.instruction, kind) is TRACES[tid].prompt, (tid, kind)
    assert len({id(TRACES[t].prompt) for t in TASKS}) == 11


@pytest.mark.parametrize("variant, tid", [
    ("Look for the CAT!", 1), ("  look   for the cat.  ", 1), ("Stack the red blue and green boxes", 9),
    ("CLEAN THE DESK", 10), ("Evade the dog, chasing you", 8),
])
def test_matching_ignores_case_whitespace_and_punctuation(variant, tid):
    kind = TASKS[tid].robot_kind
    assert build(variant, kind) is TRACES[tid].prompt


@pytest.mark.parametrize("name, tid", [("desk cleaning", 10), ("object stacking", 9),
                                       ("avoiding human injury", 6), ("Evading animal pursuit.", 8)])
def test_lrtrace_task_names_select_their_trace(name, tid):
    assert build(name, TRACES[tid].robot_kind) is TRACES[tid].prompt


def test_corpus_paraphrase_gets_its_corpus_plan_not_the_canonical_one():
    dog = build("find the dog", "drone")
    assert dog is not TRACES[1].prompt
    assert "".join(texts(dog)) == "_1=s,dog;?_1==True{g,dog;tp};->_1;"
    assert [c.args for s in dog.segments for c in s.calls][0] == ("dog",)
    assert dog.prefix_key == "tello_minispec"
    arm = build("clean the desk: put the book, cup and phone in the drawer, then wipe the desk", "arm")
    assert skills(arm)[0] == "home" and skills(arm).count("pick") == 3 and "wipe" in skills(arm)
    assert "pick(phone);" in " ".join(texts(arm)) and arm.prefix_key == "indy7_arm"
    assert arm.segments[-1].n_tokens >= 2  # end-of-sequence token on the last segment


def test_chat_canonical_instruction_gets_the_corpus_story_in_sentences():
    for instr in known_instructions()["chat"]:
        subject = instr.rsplit(" ", 1)[-1]
        p = build(instr, "chat")
        assert p.prefix_key == "chat"
        assert " ".join(texts(p)) == chat_story(subject)
        assert len(p.segments) == 5 and set(skills(p)) == {"say"}


def test_chat_story_family_beyond_the_canonical_three():
    p = build("Tell me a funny story about an owl in the castle.", "chat")
    assert " ".join(texts(p)) == chat_story("owl", "funny", "castle")


def test_chat_workload_requests_are_served():
    from timely_tools.evaluation.traces import CHAT_PROMPTS

    a = build(f"Write a short story: {CHAT_PROMPTS[0]}", "chat")
    b = build(f"Write a short story: {CHAT_PROMPTS[0]}", "chat")
    assert texts(a) == texts(b) and len(a.segments) >= 12 and set(skills(a)) == {"say"}
    with pytest.raises(ValueError):
        build("Write a short story: a prompt the workload does not have", "chat")


def test_unknown_robot_kind_says_which_kinds_it_plans_for():
    with pytest.raises(ValueError, match="no plans for robot kind 'boat'"):
        sim_prompt_builder("look for the cat", "boat", "tello_minispec")


@pytest.mark.parametrize("instr, kind", [("find the dog", "drone"), ("tell a short story about a robot", "chat"),
                                         ("sort the fruits and vegetables into baskets", "arm")])
def test_built_plans_run_to_completion_on_the_simulated_engine(instr, kind):
    from llm_planner_node.core.engine_api import FinishedEvent, GenerationSpec, SegmentEvent

    p = build(instr, kind)
    clock = VirtualClock()
    eng = SimEngine(clock)
    n_tokens = sum(s.n_tokens for s in p.segments)
    eng.add(GenerationSpec(1, p, n_tokens + 8, kind, SKILL_SET[kind], False))
    events = []
    for _ in range(10_000):
        eng.start_iteration()
        end = eng.in_flight_end()
        if end is None:
            break
        clock.advance_to(end)
        events += eng.step()
        if any(isinstance(e, FinishedEvent) for e in events):
            break
    segs = [e for e in events if isinstance(e, SegmentEvent)]
    assert [e.text for e in segs] == texts(p)
    assert [e.calls for e in segs] == [s.calls for s in p.segments]
    assert any(isinstance(e, FinishedEvent) for e in events)
