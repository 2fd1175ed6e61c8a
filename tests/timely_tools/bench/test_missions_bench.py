"""bench missions: its instructions file, the randomised fleet and the figures, from hand-made
outcomes (the ROS run itself is the bench's)."""

import json
import random

import pytest
import yaml

from timely_tools.bench.missions_bench import (DEFAULT_FLEET, DEFAULT_INSTRUCTIONS, MissionCase, MissionOutcome,
                                               allocation_correct, fault_fleet, faults_of, figures, load_cases,
                                               randomised_fleet, renamed)
from llm_planner_node.config.params import load_params


def outcome(status, robots, plans=("_1=scan(cat);",), task_status=0, message="m", t=1.0, first=0.5, events=()):
    tasks = [{"task": f"t{i + 1}", "robot_id": r, "goal_id": f"g{i}", "status": task_status, "message": "",
              "plans": list(plans) if r else [], "tried": []} for i, r in enumerate(robots)]
    return MissionOutcome(status, message, tasks, list(events), t, first)


def test_the_held_out_set_has_40_missions_of_every_kind_asked_for():
    cases = load_cases(DEFAULT_INSTRUCTIONS)
    assert len(cases) >= 40
    assert sum(c.impossible for c in cases) >= 5
    assert sum(len(c.kinds) >= 2 for c in cases) >= 10  # two robots, data flow, events for k robots
    assert all(c.kinds == tuple(sorted(c.kinds)) for c in cases)


@pytest.mark.parametrize("line, error", [
    ('{"kinds": ["drone"]}', "line 1: needs a non-empty 'instruction'"),
    ('{"instruction": "x", "kinds": "drone"}', "'kinds' must be a list"),
    ('{"instruction": "x", "kinds": ["drone"], "impossible": true}', "an impossible mission uses no robot"),
    ('{"instruction": "x", "kinds": []}', "names the kinds"),
    ('not json', "line 1"),
])
def test_a_bad_instructions_line_is_named(tmp_path, line, error):
    p = tmp_path / "m.jsonl"
    p.write_text(line + "\n")
    with pytest.raises(ValueError, match=error):
        load_cases(p)


def test_the_randomised_fleet_renames_every_robot_and_its_topics_and_still_loads(tmp_path):
    base = yaml.safe_load(DEFAULT_FLEET.read_text())
    params, ids = randomised_fleet(base, random.Random(3))
    assert set(ids) == {r["id"] for r in base["robots"]}
    assert len(set(ids.values())) == len(ids) and not set(ids) & set(ids.values())
    assert all(new.startswith(next(r["kind"] for r in base["robots"] if r["id"] == old)) for old, new in ids.items())
    text = json.dumps(params)
    assert not any(f'"{old}"' in text or f"/{old}/" in text for old in ids)  # the base's detections topic too
    again, ids2 = randomised_fleet(base, random.Random(3))
    assert again == params and ids2 == ids  # a seed gives the same run
    orders = {tuple(r["kind"] for r in randomised_fleet(base, random.Random(s))[0]["robots"]) for s in range(8)}
    assert len(orders) > 1
    p = tmp_path / "f.yaml"
    p.write_text(yaml.safe_dump(params))
    assert {r.id for r in load_params(p).robots} == set(ids.values())


def test_renamed_moves_the_ids_of_robots_and_of_the_words():
    c = renamed(MissionCase("land tello_2 now, not tello_20", ("drone",), ("tello_2",)), {"tello_2": "drone_abcd"})
    assert c.instruction == "land drone_abcd now, not tello_20" and c.robots == ("drone_abcd",)


def test_allocation_is_correct_for_the_kinds_and_ids_asked_and_for_none_when_impossible():
    kind_of = {"d1": "drone", "d2": "drone", "b": "base"}
    two = MissionCase("x", ("base", "drone"))
    assert allocation_correct(two, outcome(0, ["d1", "b"]), kind_of)
    assert not allocation_correct(two, outcome(0, ["d1"]), kind_of)        # one task: half the mission
    assert not allocation_correct(MissionCase("x", ("drone",), ("d2",)), outcome(0, ["d1"]), kind_of)
    impossible = MissionCase("x", (), impossible=True)
    assert allocation_correct(impossible, outcome(2, [""]), kind_of)
    assert not allocation_correct(impossible, outcome(0, ["d1"]), kind_of)


def test_figures_by_hand():
    kind_of = {"d1": "drone", "a": "arm"}
    cases = [MissionCase("a", ("drone",)), MissionCase("b", ("arm",)), MissionCase("c", ("arm", "drone")),
             MissionCase("d", (), impossible=True), MissionCase("e", (), impossible=True)]
    outs = [outcome(0, ["d1"], t=2.0, first=1.0),
            outcome(1, ["a"], task_status=3, t=4.0, first=None),          # INVALID_PLAN
            outcome(0, ["d1"], t=6.0, first=3.0),                          # one of its two robots
            outcome(2, [""], message="no robot can do it: ...", t=0.1, first=None),
            outcome(0, ["d1"], t=8.0, first=2.0)]                          # an impossible one that ran
    f = figures(cases, outs, kind_of, {"faults": 2, "reallocated": 1})
    assert f["missions"] == 5
    assert f["valid_plans"] == 0.75            # 3 of the 4 tasks that reached a robot
    assert f["allocation_correct"] == 0.6      # a, b (its plan was invalid, its robot right) and d
    assert f["succeeded"] == round(2 / 3, 3)   # a and c (c's status is the mission's own)
    assert f["impossible_refused"] == 0.5      # d, not e
    assert f["mission_s_median"] == 4.0 and f["first_task_response_s_median"] == 2.0
    assert f["reallocated_after_fault"] == {"faults": 2, "reallocated": 1}


def test_faults_are_the_flat_robots_failures_and_moves_follow_them():
    ev = [(0.1, "allocated", "f0", ""), (3.0, "ended", "f0", "robot_failed: battery low"), (3.1, "moved", "f0", ""),
          (3.2, "allocated", "f1", ""), (6.0, "refused", "f1", "refused: battery"), (9.0, "ended", "full", "succeeded")]
    assert faults_of(outcome(0, ["full"], events=ev), {"f0", "f1"}) == {"faults": 2, "reallocated": 1}


def test_the_fault_fleet_lists_its_flat_drones_first_and_loads(tmp_path):
    base = yaml.safe_load(DEFAULT_FLEET.read_text())
    params = fault_fleet(base, 2)
    assert [r["id"] for r in params["robots"]] == ["drone_flat0", "drone_flat1", "drone_full"]
    p = tmp_path / "f.yaml"
    p.write_text(yaml.safe_dump(params))
    robots = load_params(p).robots
    assert robots[0].simulator["battery_drain_per_s"] == 4.0 and robots[2].simulator is None
