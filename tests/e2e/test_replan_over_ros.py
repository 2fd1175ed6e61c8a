"""Re-planning over ROS: a plan whose robot runs ``re_plan`` goes on in a new generation for the
same goal (the scripted engine writes the plans given, ``//`` between a goal's plans), on the
real planner node and drone adapter; the result lists every plan, the robot's sequence numbers
run on, budgets count across plans, and ``planner.max_replans`` bounds it."""

from __future__ import annotations

import pytest

from tests.conftest import fleet_with_client

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
SUCCEEDED, INVALID_PLAN, REPLAN_REFUSED = 0, 3, 9


@pytest.fixture
def fleet(ros_context):
    from llm_planner_node.config.params import parse_params

    params = parse_params({
        "planner": {"policy": "timelyllm", "engine": {"kind": "scripted"}, "robot_timeout_s": 10.0,
                    "max_replans": 2},
        "robots": [{"id": "d1", "kind": "drone"},
                   {"id": "d2", "kind": "drone", "budget": {"max_calls": 4}}],
    })
    with fleet_with_client(params, ros_context, time_scale=0.01) as f:
        yield f


def test_a_plan_that_re_plans_runs_its_second_plan_on_the_same_goal(fleet):
    h = fleet.client.send("d1", "tc,90;rp; // tu,180;", tuf=NORMAL)
    res = h.result(30)
    assert res.status == SUCCEEDED, res.message
    assert list(res.plans) == ["tc,90;rp;", "tu,180;"]
    assert res.plan_text == "tc,90;rp;tu,180;"
    assert "over 2 plans" in res.message
    # the robot's sequence numbers run on across the plans, each segment ran once
    assert [int(s.index) for s in res.segments] == list(range(len(res.segments)))
    assert all(s.execution_end_s >= 0 for s in res.segments)
    assert [a.skill for a in res.answers if a.skill.startswith("re_plan")] == ["re_plan()"]
    # feedback says which plan each segment belongs to
    assert [int(fb.plan) for fb in h.feedback] == [0] * (len(h.feedback) - 1) + [1]


def test_a_re_plan_in_a_condition_that_was_false_does_not_re_plan(fleet):
    # the simulated drone answers is_visible True: the re_plan under ==False never runs
    res = fleet.client.send("d1", "_1=iv,unicorn;?_1==False{rp;};tc,45; // tu,180;", tuf=NORMAL).result(30)
    assert res.status == SUCCEEDED, res.message
    assert len(res.plans) == 1 and "tu,180" not in res.plan_text


def test_a_goal_that_keeps_re_planning_stops_at_max_replans_with_its_status(fleet):
    res = fleet.client.send("d1", "tc,10;rp;", tuf=NORMAL).result(30)
    assert res.status == REPLAN_REFUSED, res.message
    assert len(res.plans) == 3  # the first and max_replans = 2 more, each executed
    assert "planner.max_replans is 2" in res.message, res.message


def test_the_budget_counts_every_plan_of_the_goal(fleet):
    res = fleet.client.send("d2", "tc,10;tc,10;rp; // tc,10;tc,10;", tuf=NORMAL).result(30)
    assert res.status == INVALID_PLAN, res.message
    assert "exceeds budget" in res.message and "> 4" in res.message, res.message
    assert len(res.plans) == 2
