"""Skills declared as a robot's ROS actions and services (timely_robot/declared.py), without ROS:
the declaration's mistakes are one sentence naming the key, and a call fills its goal with
hand-computed values (degrees to radians and quaternions, units, stamps, durations, places)."""

from __future__ import annotations

import math

import pytest

from timely_robot.budgets import call_cost
from timely_robot.declared import DeclarationError, declared_skills, fill
from timely_robot.skills import SkillCall

SPIN = {"alias": "tc", "args": [{"name": "degrees", "type": "int", "min": 1, "max": 360}],
        "action": "nav2_msgs/action/Spin", "server": "/b/spin",
        "goal": {"target_yaw": {"arg": "degrees", "radians": True, "scale": -1}, "time_allowance": {"seconds": 2.25}},
        "success": {"field": "error_code", "equals": 0}, "motion": {"rotation_deg": "degrees"}}
GOTO = {"alias": "gt", "args": [{"name": "place", "type": "str"}], "action": "nav2_msgs/action/NavigateToPose",
        "server": "/b/navigate_to_pose",
        "goal": {"pose.header.frame_id": "map", "pose.header.stamp": {"now": True},
                 "pose.pose.position.x": {"place_x": "place"}, "pose.pose.position.y": {"place_y": "place"},
                 "pose.pose.orientation": {"place_yaw_quaternion": "place"}}}
FORWARD = {"args": [{"name": "distance", "type": "int", "min": 10, "max": 300, "unit": "cm"},
                    {"name": "yaw", "type": "float", "min": -180, "max": 180, "optional": True}],
           "action": "nav2_msgs/action/DriveOnHeading", "server": "/b/drive_on_heading",
           "goal": {"target.x": {"arg": "distance", "scale": 0.01}, "speed": 0.25,
                    "q": {"yaw_quaternion": "yaw"}}, "motion": {"translation_cm": "distance"}}


def test_a_declared_skill_set_is_planned_like_a_built_in_one_and_costs_what_it_declares():
    d = declared_skills("b", "base", {"turn_cw": SPIN, "go_to": GOTO, "move_forward": FORWARD}, "robots[0].skills")
    ss = d.skill_set
    assert ss.id == "b_skills" and ss.robot_kind == "base" and ss.names() == ["turn_cw", "go_to", "move_forward"]
    assert ss.validate("tc", [90]) == SkillCall("turn_cw", (90,))
    assert call_cost(SkillCall("turn_cw", (90,)), ss).rotation_deg == 90.0
    assert call_cost(SkillCall("move_forward", (120,)), ss).translation_cm == 120.0


def test_a_call_fills_its_goal_with_radians_units_quaternions_stamps_durations_and_places():
    d = declared_skills("b", "base", {"turn_cw": SPIN, "go_to": GOTO, "move_forward": FORWARD}, "s")
    ss, now = d.skill_set, {"sec": 12, "nanosec": 5}
    spin = fill(d.bindings["turn_cw"], SkillCall("turn_cw", (90,)), ss.spec("turn_cw"), now)
    assert spin["target_yaw"] == pytest.approx(-math.pi / 2) and spin["time_allowance"] == {"sec": 2, "nanosec": 250_000_000}
    goto = fill(d.bindings["go_to"], SkillCall("go_to", ("kitchen",)), ss.spec("go_to"), now,
                {"kitchen": [16.0, 3.0, 90.0]})
    assert goto["pose.header.frame_id"] == "map" and goto["pose.header.stamp"] == now
    assert (goto["pose.pose.position.x"], goto["pose.pose.position.y"]) == (16.0, 3.0)
    q = goto["pose.pose.orientation"]  # 90 degrees about z: (0, 0, sin 45, cos 45)
    assert (q["x"], q["y"]) == (0.0, 0.0) and q["z"] == pytest.approx(math.sqrt(0.5)) and q["w"] == pytest.approx(math.sqrt(0.5))
    fwd = fill(d.bindings["move_forward"], SkillCall("move_forward", (120,)), ss.spec("move_forward"), now)
    assert fwd["target.x"] == pytest.approx(1.2) and fwd["speed"] == 0.25 and fwd["q"]["w"] == 1.0  # no yaw: 0
    with pytest.raises(DeclarationError, match=r"unknown place 'garage' \(places: kitchen\)"):
        fill(d.bindings["go_to"], SkillCall("go_to", ("garage",)), ss.spec("go_to"), now, {"kitchen": [1, 2]})


@pytest.mark.parametrize("skill, why", [
    ({**SPIN, "server": ""}, r"s\.t: server \(the action's name"),
    ({**SPIN, "action": "nav2_msgs/Spin"}, r"s\.t\.action 'nav2_msgs/Spin' must be a type such as"),
    ({**SPIN, "service": "std_srvs/srv/Trigger"}, "give exactly one of action"),
    ({**SPIN, "goal": {"target_yaw": {"arg": "angle"}}}, r"'angle' is not an argument of this skill \(degrees\)"),
    ({**SPIN, "goal": {"Target": 1}}, "is not a field path"),
    ({**SPIN, "goal": {"target_yaw": {"turn": 1}}}, "is not a value form"),
    ({**SPIN, "args": [{"name": "degrees", "type": "int"}]}, "a number needs its safe range"),
    ({**SPIN, "answer": "error_code"}, "an answer needs returns"),
    ({**SPIN, "motion": {"rotation_deg": "angle"}}, r"motion\.rotation_deg: 'angle' is not an argument"),
    ({**SPIN, "colour": "red"}, "unknown key 'colour'"),
])
def test_a_declarations_mistakes_are_one_sentence_naming_the_key(skill, why):
    with pytest.raises(DeclarationError, match=why):
        declared_skills("b", "base", {"t": skill}, "s")
