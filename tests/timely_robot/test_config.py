"""The robot side of the fleet YAML (timely_robot.config.load_robot_side): a robot's computer reads
the planner's file for its robots and the link's security, without the planner's settings."""

from __future__ import annotations

import pytest
import yaml

from timely_robot.config import ParamError, load_robot_side


def _write(tmp_path, data):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_planner_section_is_not_read_and_the_robots_and_security_are(tmp_path):
    path = _write(tmp_path, {"planner": {"engine": {"kind": "no-such-engine"}, "policy": "unknown"},
                             "security": {"mode": "sign", "keystore": "/k", "lease_s": 2.5},
                             "robots": [{"id": "tello_1", "kind": "drone", "adapter": "tello", "host": "192.168.10.1"},
                                        {"id": "a1", "kind": "arm", "adapter": "sim"}]})
    robots, security = load_robot_side(path)
    assert [(r.id, r.kind, r.skill_set, r.adapter, r.host) for r in robots] == [
        ("tello_1", "drone", "tello_minispec", "tello", "192.168.10.1"), ("a1", "arm", "indy7_arm", "sim", "")]
    assert (security.mode, security.keystore, security.lease_s) == ("sign", "/k", 2.5)


def test_the_planner_parses_the_same_robots(tmp_path):
    from llm_planner_node.config.params import load_params

    path = _write(tmp_path, {"planner": {"engine": {"kind": "sim"}},
                             "robots": [{"id": "d1", "kind": "drone", "budget": {"max_calls": 7}}]})
    robots, _ = load_robot_side(path)
    assert load_params(path).robots == robots and robots[0].effective_budget.max_calls == 7


@pytest.mark.parametrize("data, message", [
    ({"robots": [{"id": "d 1", "kind": "drone"}]}, "robots[0].id 'd 1' must be letters, digits and '_'"),
    ({"robots": [{"id": "d1", "kind": "boat"}]}, "robots[0].kind 'boat' must be one of"),
    ({"robots": [{"id": "d1", "kind": "drone", "adapter": "tello"}]}, "adapter 'tello' needs the robot's 'host'"),
    ({"security": {"mode": "maybe"}}, "security.mode must be one of off, sign, got 'maybe'"),
    ({"robotz": []}, "unknown top-level section 'robotz' (did you mean 'robots'?)"),
])
def test_a_mistake_is_one_sentence_naming_the_file_and_the_key(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(ParamError) as e:
        load_robot_side(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
