"""Robot `approval` in the fleet YAML (timely_robot/approval.py via params.py): names or aliases of the
robot's skill set, `all`, `timeout_s`; every mistake is one sentence naming the key; the ROS
parameter (one string) round-trips."""

from __future__ import annotations

import pytest

from timely_robot.approval import Approval
from timely_robot.skills import SkillCall
from llm_planner_node.config.schema import from_flat, spec_map, to_flat
from timely_robot.config import ParamError
from llm_planner_node.config.params import parse_params


def fleet(approval, kind="drone"):
    return parse_params({"planner": {"engine": {"kind": "sim"}},
                         "robots": [{"id": "r1", "kind": kind, "approval": approval}]})


def test_skills_by_name_or_alias_become_canonical_names():
    a = fleet({"skills": ["lnd", "goto", "land"], "timeout_s": 12}).robot("r1").approval
    assert a == Approval(("land", "goto"), False, 12.0)
    assert fleet({"all": True}, kind="arm").robot("r1").approval == Approval((), True, 30.0)
    assert parse_params({"robots": [{"id": "r1", "kind": "drone"}]}).robot("r1").approval is None


def test_marked_names_the_marked_skills_a_segment_calls():
    a = Approval(("land", "goto"))
    assert a.marked([SkillCall("turn_cw", (90,)), SkillCall("goto", ("cat",)), SkillCall("land")]) == "goto, land"
    assert a.marked([SkillCall("turn_cw", (90,))]) == ""
    assert Approval(all=True).marked([]) == "every segment"


@pytest.mark.parametrize("approval, sentence", [
    ({"skills": ["fly_away"]}, "robots[0].approval: 'fly_away' is not a skill of skill set tello_minispec"),
    ({"skills": ["lnad"]}, "robots[0].approval: 'lnad' is not a skill of skill set tello_minispec (did you mean 'land'?)"),
    ({"skils": ["land"]}, "robots[0].approval: unknown approval setting 'skils' (did you mean 'skills'?)"),
    ({}, "robots[0].approval: holds nothing: give skills: [name, ...] or all: true"),
    ({"skills": "land"}, "robots[0].approval: skills must be a list of skill names, e.g. [land, goto], got 'land'"),
    ({"all": "yes"}, "robots[0].approval: all must be true or false, got 'yes'"),
    ({"skills": ["land"], "timeout_s": 0}, "robots[0].approval: timeout_s must be a number of seconds > 0 and <= 86400, got 0"),
    ("land", "robots[0].approval: must be a mapping such as {skills: [land], timeout_s: 30}, got 'land'"),
])
def test_mistakes_are_one_sentence(approval, sentence):
    with pytest.raises(ParamError) as e:
        fleet(approval)
    assert str(e.value).startswith(sentence), str(e.value)


def test_the_ros_parameter_is_one_string_that_round_trips():
    p = fleet({"skills": ["land"], "timeout_s": 5})
    spec = spec_map(p)["robots.r1.approval"]
    assert spec.type is str and spec.read_only and spec.default == "{all: false, skills: [land], timeout_s: 5.0}"
    flat = to_flat(p)
    assert from_flat(flat) == p
    with pytest.raises(ParamError, match=r"^robots\.r1\.approval: 'fly' is not a skill"):
        from_flat({**flat, "robots.r1.approval": "{skills: [fly]}"})
