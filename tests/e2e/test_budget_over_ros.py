"""Budgets over ROS: the scripted engine writes given plans (the instruction is the plan), so the
adversarial plans a weak model wrote reach the real planner and adapters. The planner refuses a
plan whose worst case exceeds its robot's budget before dispatching it, and the adapter refuses,
call by call, what would exceed the budget or leave the geofence."""

from __future__ import annotations

import pytest

from tests.conftest import fleet_with_client

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
INVALID_PLAN, ROBOT_FAILED, SUCCEEDED = 3, 4, 0


@pytest.fixture
def fleet(ros_context):
    from llm_planner_node.config.params import parse_params

    params = parse_params({
        "planner": {"policy": "timelyllm", "engine": {"kind": "scripted"}, "robot_timeout_s": 10.0},
        "robots": [{"id": "d1", "kind": "drone", "budget": {"max_calls": 12, "max_rotation_deg": 720,
                                                            "fence_cm": [-300, 300, -300, 300, -100, 200]}},
                   {"id": "a1", "kind": "arm", "budget": {"max_calls": 4}}],
    })
    with fleet_with_client(params, ros_context, time_scale=0.01) as f:
        yield f


def test_the_issue_plan_is_refused_before_any_segment_is_dispatched(fleet):
    h = fleet.client.send("d1", "1000{g,bottle;tp;180{g,bottle;tc,180;}};", tuf=NORMAL)
    res = h.result(30)
    assert res.status == INVALID_PLAN
    assert res.message.startswith("exceeds budget: 362000 skills > 12"), res.message
    assert len(res.segments) == 0 and h.feedback == []


def test_small_segments_that_add_up_past_the_budget_stop_at_the_budget(fleet):
    plan = "tc,10;" * 20  # 20 one-call segments, 12 allowed
    h = fleet.client.send("d1", plan, tuf=NORMAL)
    res = h.result(30)
    assert res.status == INVALID_PLAN and "exceeds budget: 13 skills > 12" in res.message, res.message
    assert len(res.segments) == 12  # the twelve that fit were dispatched and ran


def test_rotation_budget_counts_turns_across_segments(fleet):
    h = fleet.client.send("d1", "tc,360;tc,360;tc,90;", tuf=NORMAL)
    res = h.result(30)
    assert res.status == INVALID_PLAN and "810 degrees of turns > 720 degrees" in res.message, res.message
    assert len(res.segments) == 2


def test_a_move_out_of_the_fence_is_refused_by_the_adapter_and_the_drone_stops(fleet):
    h = fleet.client.send("d1", "mf,200;mf,200;tp;", tuf=NORMAL)
    res = h.result(30)
    assert res.status == ROBOT_FAILED, res.message
    assert "outside the geofence" in res.message and "x=400" in res.message, res.message
    # the first move ran (its report came back), the second was never sent to the drone
    assert len(res.segments) >= 2


def test_a_plan_within_budget_succeeds(fleet):
    res = fleet.client.send("a1", "home();pick(cup);place(cup, tray);home();", tuf=NORMAL).result(30)
    assert res.status == SUCCEEDED, res.message
    res = fleet.client.send("a1", "home();pick(cup);place(cup, tray);home();wipe(desk);", tuf=NORMAL).result(30)
    assert res.status == INVALID_PLAN and "5 skills > 4" in res.message
