"""A mobile base in the fleet YAML (timely_robot/config.py, llm_planner_node/config/params.py): its
places become names its plans may use, its Nav2 settings are completed with Nav2's defaults, its
adapter must be a base's, and without a perception source it perceives nothing (a plan that
looks for something is refused, saying why)."""

from __future__ import annotations

import pytest

from llm_planner_node.config.params import parse_params, perceivable_objects, plan_objects
from timely_robot.config import NAV2_KEYS, ParamError, parse_robots


def base(**kw):
    return {"id": "base_1", "kind": "base", "adapter": "nav2-sim", **kw}


def test_places_are_the_bases_known_names_and_nav2_settings_get_nav2s_defaults():
    (r,) = parse_robots([base(places={"kitchen": [16, 3, 90], "dock": [2, 2]}, objects=["chair"],
                              nav2={"namespace": "b1", "cmd_vel_stamped": False})])
    assert r.skill_set == "nav2_base" and r.places == {"kitchen": [16.0, 3.0, 90.0], "dock": [2.0, 2.0, 0.0]}
    assert r.objects == ("chair", "kitchen", "dock") and plan_objects(r) == ("chair", "kitchen", "dock")
    assert r.nav2 == {**NAV2_KEYS, "namespace": "b1", "cmd_vel_stamped": False}


@pytest.mark.parametrize("entry, why", [
    (base(places={"kitchen": [1]}), r"robots\[0\]\.places\.kitchen must be \[x, y\] or \[x, y, yaw\]"),
    (base(places={"the kitchen": [1, 2]}), "place name 'the kitchen' must be letters, digits and '_'"),
    (base(nav2={"namespace": 3}), r"robots\[0\]\.nav2\.namespace must be a str, got 3"),
    (base(nav2={"frame": "map"}), r"robots\[0\]\.nav2"),
    ({"id": "d1", "kind": "drone", "adapter": "nav2"}, r"adapter 'nav2' is for mobile bases \(kind: base\)"),
    ({"id": "b1", "kind": "base", "adapter": "tello-sim"}, "a base's adapter is one of nav2, nav2-sim, ros, sim, external"),
    ({"id": "d1", "kind": "drone", "places": {"a": [1, 2]}}, "named places are a mobile base's"),
    (base(perception={"source": "camera"}), "a base's source is topic \\(a detections topic\\) or none, not 'camera'"),
    (base(perception={"source": "topic", "topic": "b/d"}), "source topic needs classes, the labels the detector reports"),
    (base(perception={"source": "topic", "classes": ["box"]}), "source topic needs topic, the DetectionArray topic"),
    (base(perception={"source": "topic", "topic": "b/d", "classes": ["box"], "max_age_s": 0}),
     r"perception\.max_age_s must be a number > 0"),
    (base(simulator={"scene": {"objects": {"box": {"pos": [1, 2, 3]}}}}), r"scene must be \{objects: \{NAME: \{pos: \[x, y\]"),
    (base(adapter="ros"), "adapter 'ros' needs skills, the robot's ROS actions and services"),
    (base(skills={"t": {}}), r"robots\[0\]\.skills: declared skills are for adapter 'ros', not 'nav2-sim'"),
    ({"id": "c1", "kind": "chat", "adapter": "ros", "skills": {"t": {}}}, "a chat robot has no ROS actions"),
])
def test_a_bases_yaml_mistakes_are_one_sentence_naming_the_key(entry, why):
    with pytest.raises(ParamError, match=why):
        parse_robots([entry])


def test_a_base_without_perception_perceives_nothing_and_its_refusal_says_why():
    from llm_planner_node.grounding.objects import unperceivable_refusal
    from timely_robot.outcomes import RejectReason
    from timely_robot.perceivable import unperceivable

    p = parse_params({"planner": {"engine": {"kind": "scripted"}},
                      "robots": [base(places={"kitchen": [1, 1], "couch": [2, 2]})]})
    r = p.robot("base_1")
    assert perceivable_objects(r) == ()
    # a place named like a detector class is somewhere to go, not something to find
    assert unperceivable("go to the couch and look for a person", (*perceivable_objects(r), *r.objects)) == ["person"]
    why = unperceivable_refusal("base_1", "base", ["person"], ())
    assert why.reason is RejectReason.UNPERCEIVABLE
    assert why.startswith("base_1 cannot perceive 'person': it has no perception source")


def test_a_bases_detections_topic_declares_what_it_perceives_and_its_plans_may_name():
    p = parse_params({"planner": {"engine": {"kind": "scripted"}}, "robots": [base(
        places={"kitchen": [1, 1]},
        perception={"source": "topic", "topic": "/base_1/detections", "classes": ["person", "Trash Can"]},
        simulator={"scene": {"objects": {"person": {"pos": [1.5, 1]}}}})]})
    r = p.robot("base_1")
    assert r.perception == {"source": "topic", "topic": "/base_1/detections", "max_age_s": 1.0,
                            "classes": ["person", "trash_can"]}
    assert perceivable_objects(r) == ("person", "trash_can")
    assert r.objects == ("kitchen", "person", "trash_can")  # in its prompt and its grammar


def test_a_robot_with_declared_skills_survives_the_ros_parameter_round_trip():
    from llm_planner_node.config.schema import from_flat, to_flat

    spin = {"alias": "tc", "args": [{"name": "degrees", "type": "int", "min": 1, "max": 360}],
            "action": "nav2_msgs/action/Spin", "server": "/b/spin",
            "goal": {"target_yaw": {"arg": "degrees", "radians": True}}, "motion": {"rotation_deg": "degrees"}}
    p = parse_params({"planner": {"engine": {"kind": "scripted"}},
                      "robots": [base(adapter="ros", places={"dock": [1, 2]}, skills={"turn_cw": spin})]})
    r = p.robot("base_1")
    assert r.skill_set == "base_1_skills" and r.skills == {"turn_cw": spin}
    assert from_flat(to_flat(p)) == p
