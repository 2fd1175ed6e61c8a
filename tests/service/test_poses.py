"""Robots' positions in the fleet frame (llm_planner_node/service/poses.py): a reported pose placed
by the robot's declared origin (hand-computed), an arm at its origin, unknown otherwise; the YAML
``origin:`` key and its parameter; the planner service fed by statuses and idle reports."""

from __future__ import annotations

import math

import pytest

from llm_planner_node.config.params import ParamError, parse_params
from llm_planner_node.config.schema import from_flat, to_flat
from llm_planner_node.core.clock import WallClock
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.service.planner_service import EXECUTING, PlannerService, StatusIn
from llm_planner_node.service.poses import RobotPoses
from timely_robot.config import Origin
from testkit import QuietPorts

ROBOTS = [{"id": "d1", "kind": "drone", "adapter": "sim", "origin": {"x": 10.0, "y": 5.0, "z": 2.0, "yaw_deg": 90}},
          {"id": "d2", "kind": "drone", "adapter": "sim"},
          {"id": "arm1", "kind": "arm", "adapter": "indy-sim", "origin": {"x": 3.0, "y": -4.0, "z": 0.75}},
          {"id": "arm2", "kind": "arm", "adapter": "indy-sim"},
          {"id": "base1", "kind": "base", "adapter": "sim", "origin": {"x": -2.0, "yaw_deg": 180}}]


def fleet(robots=ROBOTS):
    return parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": robots})


def close(a, b):
    return a is not None and all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(a, b, strict=True))


def test_a_pose_is_rotated_by_the_origins_yaw_then_translated():
    poses = RobotPoses(fleet())
    poses.update("d1", (1.0, 0.0, 0.0, 0.0), at=1.0)
    assert close(poses.fleet_position("d1"), (10.0, 6.0, 2.0))  # x forward at take-off is the fleet's +y
    poses.update("d1", (1.0, 2.0, 0.5, 0.3), at=2.0)
    assert close(poses.fleet_position("d1"), (10.0 - 2.0, 5.0 + 1.0, 2.5))
    poses.update("base1", (1.0, 1.0, 0.0, 0.0), at=1.0)  # turned half round, 2 m behind the fleet's origin
    assert close(poses.fleet_position("base1"), (-3.0, -1.0, 0.0))
    poses.update("d2", (1.5, -0.5, 1.0, 0.0), at=1.0)  # no origin declared: its frame is the fleet's
    assert close(poses.fleet_position("d2"), (1.5, -0.5, 1.0))


def test_an_arm_that_reported_nothing_is_at_its_origin_and_anything_else_unknown_is_none():
    poses = RobotPoses(fleet())
    assert poses.fleet_position("arm1") == (3.0, -4.0, 0.75)
    assert poses.fleet_position("arm2") is None  # no origin declared: nowhere known
    assert poses.fleet_position("d1") is None  # a drone moves: its origin is not where it is
    assert poses.fleet_position("ghost") is None
    assert poses.age_s("arm1") is None


def test_a_report_without_a_pose_or_with_a_malformed_or_older_one_keeps_the_last():
    now = [100.0]
    poses = RobotPoses(fleet(), clock=lambda: now[0])
    poses.update("d2", (1.0, 0.0, 0.0, 0.0), at=99.0)
    for bad in (None, (math.nan, 0.0, 0.0, 0.0), (1.0, 2.0), (math.inf, 0, 0, 0), ("a", 0, 0, 0)):
        poses.update("d2", bad, at=99.5)
    poses.update("d2", (7.0, 7.0, 7.0, 0.0), at=98.0)  # measured before the one held
    assert poses.fleet_position("d2") == (1.0, 0.0, 0.0)
    assert poses.age_s("d2") == 1.0
    now[0] = 104.0
    assert poses.age_s("d2") == 5.0


def test_origin_in_the_yaml_and_as_a_ros_parameter():
    params = fleet()
    assert params.robot("d1").origin == Origin(10.0, 5.0, 2.0, 90.0)
    assert params.robot("base1").origin == Origin(-2.0, 0.0, 0.0, 180.0)  # absent keys are 0
    assert params.robot("d2").origin is None
    flat = to_flat(params)
    assert flat["robots.d2.origin"] == ""
    assert from_flat(flat).robot("d1").origin == Origin(10.0, 5.0, 2.0, 90.0)
    bad = {**flat, "robots.d1.origin": "{x: 1, heading: 90}"}
    with pytest.raises(ParamError, match=r"robots\.d1\.origin: unknown parameter 'heading'"):
        from_flat(bad)


@pytest.mark.parametrize("origin,says", [
    ({"x": "far"}, r"robots\[0\]\.origin\.x must be a finite number \(metres\), got 'far'"),
    ({"yaw_deg": float("nan")}, r"robots\[0\]\.origin\.yaw_deg must be a finite number \(degrees\)"),
    ({"x": True}, r"robots\[0\]\.origin\.x must be a finite number"),
    ([1, 2, 3], r"robots\[0\]\.origin must be a mapping such as \{x: 2\.0"),
    ({"x": 1, "roll": 2}, r"robots\[0\]\.origin: unknown parameter 'roll'"),
])
def test_a_bad_origin_is_one_sentence_naming_the_key(origin, says):
    with pytest.raises(ParamError, match=says):
        fleet([{"id": "d1", "kind": "drone", "origin": origin}])


def test_a_chat_robot_has_no_origin():
    with pytest.raises(ParamError, match="a chat robot has no position, so no origin"):
        fleet([{"id": "c1", "kind": "chat", "origin": {"x": 1}}])




def test_the_service_places_robots_from_their_statuses_and_idle_reports():
    # kinds whose plans name no objects: the service loads no object-meaning model for them
    params = fleet([{"id": "d1", "kind": "sim", "origin": {"x": 10.0, "y": 5.0, "z": 2.0, "yaw_deg": 90}},
                    {"id": "d2", "kind": "sim"}, ROBOTS[4]])
    poses = RobotPoses(params)
    svc = PlannerService(params, QuietPorts(), engine=RealtimeSimEngine(WallClock()), poses=poses)
    try:
        assert svc.poses is poses
        assert svc.on_status(StatusIn("d1", "a" * 32, 0, EXECUTING, pose=(1.0, 0.0, 0.0, 0.0), received=5.0))
        assert close(poses.fleet_position("d1"), (10.0, 6.0, 2.0))
        svc.on_vitals("base1", (-1.0, -1.0, -1.0, 0.1), pose=(0.0, 0.0, 0.0, 0.0), received=6.0)
        assert close(poses.fleet_position("base1"), (-2.0, 0.0, 0.0))
        svc.on_vitals("ghost", (-1.0, -1.0, -1.0, 0.1), pose=(0.0, 0.0, 0.0, 0.0))  # not of the fleet
        assert poses.pose("ghost") is None
        assert not svc.on_status(StatusIn("d2", "short", 0, EXECUTING, pose=(1.0, 0.0, 0.0, 0.0)))  # refused
        assert poses.fleet_position("d2") is None
    finally:
        svc.close()


def test_offers_built_from_the_poses_send_the_task_to_the_robot_nearest_its_thing():
    from llm_planner_node.service.allocation import TaskNeed, allocate
    from llm_planner_node.service.robot_offers import fleet_offers

    params = fleet([{"id": "b1", "kind": "base", "adapter": "sim", "origin": {"x": 100.0}},
                    {"id": "b2", "kind": "base", "adapter": "sim", "origin": {"yaw_deg": 90}}])
    poses = RobotPoses(params)
    poses.update("b1", (0.0, 0.0, 0.0, 0.0), at=1.0)   # fleet (100, 0, 0)
    poses.update("b2", (10.0, 0.0, 0.0, 0.0), at=1.0)  # fleet (0, 10, 0)
    offers = fleet_offers(params.robots, {}, lambda _r: 0.1, lambda _r: None, lambda _r: 5.0,
                          poses.fleet_position)
    assert [close(o.position, p) for o, p in zip(offers, [(100.0, 0.0, 0.0), (0.0, 10.0, 0.0)])] == [True, True]
    [near_b2] = allocate([TaskNeed("t1", kinds=("base",), near=(0.0, 12.0, 0.0))], offers)
    [near_b1] = allocate([TaskNeed("t1", kinds=("base",), near=(97.0, 0.0, 0.0))], offers)
    assert (near_b2.robot_id, near_b2.expected_s) == ("b2", pytest.approx(5.0 + 2.0 / 0.25))
    assert (near_b1.robot_id, near_b1.expected_s) == ("b1", pytest.approx(5.0 + 3.0 / 0.25))
