"""The mission language (llm_planner_node/service/mission_plan.py): its grammar against xgrammar's
matcher (GrammarChecker) and against the parser on random texts, the parser's sentences, tasks
released line by line whatever the chunking, latest finishes by the critical-path rule (hand
computed, and against every path's sum of durations), and the decomposition prompt."""

from __future__ import annotations

import random
import re
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llm_planner_node.config.params import load_params, parse_params
from llm_planner_node.service.mission_plan import (
    MAX_INSTRUCTION_CHARS, MAX_TASKS, TaskLineReleaser, TaskSpec, critical_path_deadlines, decomposition_prompt,
    max_line_chars, mission_grammar, parse_mission_plan, parse_task_line)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = ("tello_1", "base_1", "indy_1")
KINDS = ("drone", "base", "arm")
EXAMPLE = ('t1: drone "look for the cat"\n'
           't2: base_1 after t1 uses t1 "go to where the cat was seen"\n'
           't3: any uses t1,t2 "say in one sentence what was found"\n'
           'end')
EXAMPLE_TASKS = [TaskSpec("t1", "drone", (), (), "look for the cat"),
                 TaskSpec("t2", "base_1", ("t1",), ("t1",), "go to where the cat was seen"),
                 TaskSpec("t3", "any", (), ("t1", "t2"), "say in one sentence what was found")]


def plan_of(n: int) -> str:
    return "".join(f't{k}: any "task {k}"\n' for k in range(1, n + 1)) + "end"


@lru_cache(maxsize=None)
def checker():
    pytest.importorskip("xgrammar")
    from llm_planner_node.prompts.grammar import GrammarChecker

    return GrammarChecker(mission_grammar(IDS, KINDS))


def parses(text: str) -> bool:
    try:
        parse_mission_plan(text, IDS, KINDS)
    except ValueError:
        return False
    return True


# -- the grammar ------------------------------------------------------------------------------
VALID = [
    EXAMPLE,
    EXAMPLE + "\n",
    't1: tello_1 "take off"\nend',
    plan_of(MAX_TASKS),
    't1: arm "look"\nt2: indy_1 "x"\nt3: base after t1,t2 uses t2 "go"\nt4: any after t1,t3 "y"\nend',
    't1: any "' + "a" * MAX_INSTRUCTION_CHARS + '"\nend',
    't1: any "it\'s #1 of {many} \\ ~ !"\nend',
]
INVALID = {
    "forward reference": 't1: drone "a"\nt2: any uses t2 "b"\nend',
    "reference to a later task": 't1: drone "a"\nt2: any after t3 "b"\nt3: any "c"\nend',
    "unknown robot": 't1: tello_9 "a"\nend',
    "t2 before t1": 't2: drone "a"\nt1: drone "b"\nend',
    "nine tasks": plan_of(MAX_TASKS + 1),
    "missing quote": 't1: drone "look for the cat\nend',
    "unquoted instruction": "t1: drone look for the cat\nend",
    "references out of order": 't1: any "a"\nt2: any "b"\nt3: any uses t2,t1 "c"\nend',
    "a reference twice": 't1: any "a"\nt2: any "b"\nt3: any uses t1,t1 "c"\nend',
    "uses before after": 't1: any "a"\nt2: any uses t1 after t1 "b"\nend',
    "t1 waits": 't1: any after t1 "a"\nend',
    "no end": 't1: any "a"\n',
    "end without a task": "end",
    "text after end": 't1: any "a"\nend\nt2: any "b"\n',
    "instruction too long": 't1: any "' + "a" * (MAX_INSTRUCTION_CHARS + 1) + '"\nend',
    "empty instruction": 't1: any ""\nend',
    "instruction starts with a space": 't1: any " a"\nend',
    "two spaces": 't1:  any "a"\nend',
    "a quote inside": 't1: any "say "hi""\nend',
    "a tab inside": 't1: any "a\tb"\nend',
    "a blank line": 't1: any "a"\n\nend',
}


def test_the_grammar_compiles_and_has_one_rule_per_position():
    text = mission_grammar(IDS, KINDS)
    assert checker() is not None
    for k in range(1, MAX_TASKS + 1):
        assert f"\ntask_{k} ::= \"t{k}: \" performer" in text
    assert "task_9" not in text
    assert 'performer ::= "tello_1" | "base_1" | "indy_1" | "drone" | "base" | "arm" | "any"' in text


@pytest.mark.parametrize("text", VALID)
def test_valid_plans_are_in_the_grammar_and_parse(text):
    assert checker().accepts(text)
    assert parses(text)


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_plans_are_neither_in_the_grammar_nor_parsed(case):
    text = INVALID[case]
    assert not checker().accepts(text)
    assert not parses(text)


def test_a_fleet_with_fewer_tasks_allowed_stops_there():
    c = checker_for(IDS, KINDS, 2)
    assert c.accepts(plan_of(2)) and not c.accepts(plan_of(3))
    with pytest.raises(ValueError, match="at most 2 tasks: t3"):
        parse_mission_plan(plan_of(3), IDS, KINDS, max_tasks=2)


def checker_for(ids, kinds, max_tasks=MAX_TASKS):
    pytest.importorskip("xgrammar")
    from llm_planner_node.prompts.grammar import GrammarChecker

    return GrammarChecker(mission_grammar(ids, kinds, max_tasks))


def test_a_name_the_language_cannot_carry_is_refused():
    for bad in ("my robot", 'a"b', "any", "t1,t2", "end"):
        with pytest.raises(ValueError, match="cannot be a performer"):
            mission_grammar([bad], KINDS)


# random texts near the language: the grammar admits exactly what the parser accepts
PIECE_PERFORMERS = [*IDS, *KINDS, "any", "tello_9", "Drone", ""]
INSTR_CHARS = "ab \"'#~\\\t"


@st.composite
def near_plans(draw) -> str:
    n = draw(st.integers(0, MAX_TASKS + 1))
    lines = []
    for k in range(1, n + 1):
        name = draw(st.sampled_from([f"t{k}"] * 6 + [f"t{k + 1}", f"t{max(k - 1, 0)}", "t", f"t{k}:"]))
        line = f"{name}: " if not name.endswith(":") else name
        line += draw(st.sampled_from(PIECE_PERFORMERS))
        for word in ("after", "uses"):
            if draw(st.booleans()):
                refs = draw(st.lists(st.integers(0, k + 1), min_size=0, max_size=3))
                if draw(st.integers(0, 3)):  # mostly the canonical order
                    refs = sorted(set(refs))
                line += f" {word} " + ",".join(f"t{j}" for j in refs)
        instr = draw(st.text(alphabet=INSTR_CHARS, min_size=0, max_size=8))
        if draw(st.integers(0, 20)) == 0:
            instr = "a" * draw(st.integers(MAX_INSTRUCTION_CHARS - 1, MAX_INSTRUCTION_CHARS + 1))
        line += draw(st.sampled_from([" ", "  ", ""])) + draw(st.sampled_from(['"', "", '"' * 2])) + instr + '"'
        lines.append(line + "\n")
    tail = draw(st.sampled_from(["end", "end\n", "end\n\n", "", "end\nend", "end "]))
    return "".join(lines) + tail


@SETTINGS
@given(near_plans())
def test_the_grammar_is_the_parsers_language(text):
    assert checker().accepts(text) == parses(text), text


@st.composite
def valid_plans(draw) -> list[TaskSpec]:
    n = draw(st.integers(1, MAX_TASKS))
    tasks = []
    for k in range(1, n + 1):
        earlier = [f"t{j}" for j in range(1, k)]
        after = tuple(t for t in earlier if draw(st.booleans()))
        uses = tuple(t for t in earlier if draw(st.booleans()))
        first = draw(st.characters(min_codepoint=0x21, max_codepoint=0x7E, blacklist_characters='"'))
        rest = draw(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"'),
                            max_size=MAX_INSTRUCTION_CHARS - 1))
        tasks.append(TaskSpec(f"t{k}", draw(st.sampled_from([*IDS, *KINDS, "any"])), after, uses, first + rest))
    return tasks


@SETTINGS
@given(valid_plans())
def test_every_written_plan_is_in_the_grammar_and_parses_back(tasks):
    text = "".join(t.line() + "\n" for t in tasks) + "end"
    assert checker().accepts(text)
    assert parse_mission_plan(text, IDS, KINDS) == tasks
    longest = max(len(t.line()) for t in tasks)
    assert longest <= max_line_chars(IDS, KINDS)


# -- the parser's sentences -------------------------------------------------------------------
def test_the_example_parses_to_its_tasks():
    tasks = parse_mission_plan(EXAMPLE, IDS, KINDS)
    assert tasks == EXAMPLE_TASKS
    assert tasks[1].waits_for == ("t1",) and tasks[2].waits_for == ("t1", "t2")


@pytest.mark.parametrize("line, earlier, sentence", [
    ('t2: drone "a"', [], "the task named t2 comes where t1 is due"),
    ('t1: drone "a"', ["t1"], "the task named t1 comes where t2 is due"),
    ('t2: any uses t2 "b"', ["t1"], "'uses' names t2, which is not an earlier task (earlier: t1)"),
    ('t1: any after t1 "b"', [], "'after' names t1, which is not an earlier task (there is none)"),
    ('t1: tello_9 "a"', [], "'tello_9' is no performer of this fleet"),
    ("t1: drone look", [], "the instruction is missing"),
    ('t1: drone "look', [], "must end with a double quote"),
    ('t1: drone "say "hi""', [], "contain no double quote inside"),
    ('t3: any uses t2,t1 "c"', ["t1", "t2"], "increasing order, each once"),
    ('t3: any uses t1,,t2 "c"', ["t1", "t2"], "an empty name"),
    ('t2: any uses t1 after t1 "b"', ["t1"], "'after t1' is not understood"),
    ('t2: any after "b"', ["t1"], "'after' names no task"),
    ('t1: any  "a"', [], "single spaces"),
    ('t1: any ""', [], "the instruction is empty"),
    ('t1: any " a"', [], "starts with a space"),
    ('t1: any "' + "a" * 161 + '"', [], "has 161 characters, at most 160"),
    ('t1: any "\x07"', [], "not printable ASCII"),
    ('t9: any "a"', [f"t{k}" for k in range(1, 9)], "at most 8 tasks: t9 is one too many"),
    ("hello", [], "'hello' is not a task line: expected 't1: PERFORMER"),
])
def test_a_bad_line_is_named_in_one_sentence(line, earlier, sentence):
    with pytest.raises(ValueError) as e:
        parse_task_line(line, IDS, KINDS, earlier)
    assert sentence in str(e.value)
    assert not re.search(r"[.!?]\s+[A-Z]", str(e.value)) and "\n" not in str(e.value)  # one sentence


def test_a_line_with_its_newline_parses():
    assert parse_task_line('t1: arm "pick the cup"\n', IDS, KINDS, []) == TaskSpec("t1", "arm", (), (), "pick the cup")


# -- releasing tasks line by line -------------------------------------------------------------
def releases(text: str, cuts: list[int]) -> list[tuple[int, TaskSpec]]:
    """(end of the chunk that released it, task) feeding ``text`` cut at ``cuts``."""
    r = TaskLineReleaser(IDS, KINDS)
    out, start = [], 0
    for end in [*sorted(set(cuts)), len(text)]:
        out += [(end, t) for t in r.feed(text[start:end])]
        start = end
    assert r.done
    return out


def test_each_task_is_released_at_its_newline_char_by_char_and_the_whole_text_gives_the_same():
    by_char = releases(EXAMPLE, list(range(1, len(EXAMPLE))))
    newlines = [i + 1 for i, c in enumerate(EXAMPLE) if c == "\n"]
    assert [t for _, t in by_char] == EXAMPLE_TASKS
    assert [at for at, _ in by_char] == newlines  # the moment its newline arrived, not later
    whole = TaskLineReleaser(IDS, KINDS)
    assert whole.feed(EXAMPLE) == EXAMPLE_TASKS and whole.done
    assert whole.close() == EXAMPLE_TASKS


@SETTINGS
@given(valid_plans(), st.lists(st.integers(0, 2000), max_size=40))
def test_any_chunking_releases_each_task_once_in_the_chunk_with_its_newline(tasks, cuts):
    text = "".join(t.line() + "\n" for t in tasks) + "end"
    cuts = [c for c in cuts if c < len(text)]
    got = releases(text, cuts)
    assert [t for _, t in got] == tasks  # each once, in order
    newlines = [i + 1 for i, c in enumerate(text) if c == "\n"]
    bounds = [*sorted(set(cuts)), len(text)]
    assert [at for at, _ in got] == [min(b for b in bounds if b >= n) for n in newlines]


def test_done_at_end_and_a_newline_after_it_is_allowed_but_nothing_else():
    r = TaskLineReleaser(IDS, KINDS)
    assert r.feed('t1: any "a"\nen') == [TaskSpec("t1", "any", (), (), "a")] and not r.done
    assert r.feed("d") == [] and r.done
    assert r.feed("\n") == []
    with pytest.raises(ValueError, match="text after the line 'end'"):
        r.feed("\n")  # one newline, no blank lines
    r = TaskLineReleaser(IDS, KINDS)
    r.feed('t1: any "a"\nend')
    with pytest.raises(ValueError, match="text after the line 'end'"):
        r.feed("t2")
    with pytest.raises(ValueError, match="text after the line 'end'"):  # closed: the same sentence again
        r.feed("")


def test_a_malformed_line_fails_at_its_newline_and_a_wrong_name_at_once():
    r = TaskLineReleaser(IDS, KINDS)
    assert r.feed('t1: tello_9 "look"') == []  # a prefix of some other line still
    with pytest.raises(ValueError, match="'tello_9' is no performer"):
        r.feed("\n")
    r = TaskLineReleaser(IDS, KINDS)
    r.feed('t1: any "a"\nt')
    with pytest.raises(ValueError, match="the task named t3 comes where t2 is due"):
        r.feed("3")
    r = TaskLineReleaser(IDS, KINDS, max_tasks=2)
    r.feed('t1: any "a"\nt2: any "b"\n')
    with pytest.raises(ValueError, match="at most 2 tasks: t3 is one too many"):
        r.feed("t")


def test_a_line_that_never_ends_fails_once_longer_than_any_line():
    r = TaskLineReleaser(IDS, KINDS)
    limit = max_line_chars(IDS, KINDS)
    r.feed('t1: any "' + "a" * (limit - 9))
    assert not r.done
    with pytest.raises(ValueError, match="longer than any task line"):
        r.feed("a")


@pytest.mark.parametrize("text, sentence", [
    ('t1: any "a"\n', "does not end with a line 'end'"),
    ('t1: any "a"\nt2: any', "ends inside a line"),
    ("", "does not end with a line 'end'"),
    ("end", "no task before 'end'"),
])
def test_a_plan_must_end_with_end_after_a_task(text, sentence):
    with pytest.raises(ValueError, match=sentence):
        parse_mission_plan(text, IDS, KINDS)


# -- latest finishes --------------------------------------------------------------------------
def T(name, after=(), uses=()):
    return TaskSpec(name, "any", tuple(after), tuple(uses), "x")


def test_a_chain_is_due_by_the_durations_after_each_task():
    tasks = [T("t1"), T("t2", after=["t1"]), T("t3", uses=["t2"])]
    assert critical_path_deadlines(tasks, {"t1": 2, "t2": 3, "t3": 4}, 20.0) == {"t1": 13.0, "t2": 16.0, "t3": 20.0}


def test_a_fork_is_due_by_its_longer_branch():
    tasks = [T("t1"), T("t2", after=["t1"]), T("t3", after=["t1"])]
    assert critical_path_deadlines(tasks, {"t1": 1, "t2": 5, "t3": 2}, 10.0) == {"t1": 5.0, "t2": 10.0, "t3": 10.0}


def test_a_join_makes_both_inputs_due_before_it_and_a_diamond_takes_the_longer_side():
    join = [T("t1"), T("t2"), T("t3", uses=["t1", "t2"])]
    assert critical_path_deadlines(join, {"t1": 1, "t2": 2, "t3": 4}, 10.0) == {"t1": 6.0, "t2": 6.0, "t3": 10.0}
    diamond = [T("t1"), T("t2", after=["t1"]), T("t3", uses=["t1"]), T("t4", after=["t2"], uses=["t3"])]
    got = critical_path_deadlines(diamond, {"t1": 1, "t2": 3, "t3": 1, "t4": 2}, 30.0)
    assert got == {"t1": 25.0, "t2": 28.0, "t3": 28.0, "t4": 30.0}


def test_durations_and_references_are_checked():
    with pytest.raises(ValueError, match="t2: its duration"):
        critical_path_deadlines([T("t1"), T("t2")], {"t1": 1}, 5.0)
    with pytest.raises(ValueError, match="t1: its duration"):
        critical_path_deadlines([T("t1")], {"t1": -1}, 5.0)
    with pytest.raises(ValueError, match="t1 waits for t2, which is not an earlier task"):
        critical_path_deadlines([T("t1", after=["t2"]), T("t2")], {"t1": 1, "t2": 1}, 5.0)


@st.composite
def dags(draw):
    n = draw(st.integers(1, MAX_TASKS))
    tasks = []
    for k in range(1, n + 1):
        earlier = [f"t{j}" for j in range(1, k)]
        tasks.append(T(f"t{k}", after=[t for t in earlier if draw(st.booleans())],
                       uses=[t for t in earlier if draw(st.integers(0, 3)) == 0]))
    durations = {t.name: draw(st.floats(0, 100, allow_nan=False)) for t in tasks}
    return tasks, durations, draw(st.floats(-50, 1000, allow_nan=False))


@SETTINGS
@given(dags())
def test_latest_finishes_leave_room_for_every_successor_and_sinks_end_at_the_deadline(dag):
    tasks, durations, deadline = dag
    latest = critical_path_deadlines(tasks, durations, deadline)
    successors = {t.name: [s.name for s in tasks if t.name in s.waits_for] for t in tasks}
    for t in tasks:
        for s in successors[t.name]:
            assert latest[t.name] <= latest[s] - durations[s] + 1e-9
        if not successors[t.name]:
            assert latest[t.name] == deadline

    def tail(name: str) -> float:  # the longest chain of durations after ``name``, by every path
        return max((durations[s] + tail(s) for s in successors[name]), default=0.0)

    for t in tasks:
        assert latest[t.name] == pytest.approx(deadline - tail(t.name), abs=1e-6)


# -- the prompt -------------------------------------------------------------------------------
def default_fleet():
    return load_params(Path(__file__).resolve().parents[2] / "config" / "fleet.yaml", check=False).robots


def test_the_prompt_names_the_fleet_the_language_and_the_instruction_in_under_1500_characters():
    robots = default_fleet()
    assert len(robots) == 5
    text = decomposition_prompt("find the cat and send the base there", robots)
    assert len(text) <= 1500, len(text)
    lines = text.splitlines()
    assert "- tello_1 (drone): sees COCO's 80 classes (person, cat, dog, car, ...)" in lines
    assert "- tello_2 (drone): perception unknown" in lines  # adapter sim, no detector declared
    assert "- base_1 (base): sees person, chair, box; places dock, kitchen, hall, office, lab" in lines
    indy = next(line for line in lines if line.startswith("- indy_1 (arm): sees apple, banana"))
    assert indy.endswith("+25 more")  # 31 objects, 6 shown
    assert "- chat_1 (chat): perception unknown" in lines
    assert lines[-1] == 'Instruction: "find the cat and send the base there"'


def test_the_prompt_examples_use_generic_robots_and_are_plans_of_the_language():
    robots = default_fleet()
    text = decomposition_prompt("x", robots)
    examples = text[text.index("Examples:"):text.index("Instruction:")]
    assert not any(r.id in examples for r in robots)
    plans = [p.split(":\n", 1)[1] for p in examples.split('\n"')[1:]]
    assert len(plans) == 3
    ids, kinds = ("drone_x", "arm_x", "base_x"), ("drone", "arm", "base")
    for plan in plans:
        assert parse_mission_plan(plan.rstrip("\n"), ids, kinds)
        assert checker_for(ids, kinds).accepts(plan.rstrip("\n"))
    assert any(len(parse_mission_plan(p.rstrip("\n"), ids, kinds)) == 3 for p in plans)


def test_a_robot_with_places_and_objects_of_its_own_shows_each_once():
    params = parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": [
        {"id": "b1", "kind": "base", "adapter": "sim", "places": {"dock": [0, 0]}, "objects": ["crate"]}]})
    line = decomposition_prompt("x", params.robots).splitlines()[1]
    assert line == "- b1 (base): sees nothing; places dock; objects crate"


def test_random_fleets_of_five_stay_short():
    rng = random.Random(7)
    words = [f"thing_number_{i}" for i in range(40)]
    robots = [{"id": f"robot_{i}", "kind": "arm", "adapter": "indy-sim", "objects": rng.sample(words, 30)}
              for i in range(5)]
    params = parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": robots})
    assert len(decomposition_prompt("tidy the desks", params.robots)) <= 1500
