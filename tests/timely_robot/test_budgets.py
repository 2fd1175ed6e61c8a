"""Per-robot budgets and the drone geofence (timely_robot/budgets.py), checked by the planner before
dispatch (worst case of each segment, loops multiplied out) and enforced by the adapter on what
actually runs, whatever the segmentation."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings, strategies as st

from timely_robot.budgets import (
    Budget, BudgetExceeded, BudgetMeter, Cost, StaticBudget, budget_for, call_cost, inside, pose_after)
from timely_robot.skills import INDY7_ARM, TELLO_MINISPEC as T, SkillCall
from timely_robot.plan_cost import minispec_cost, segment_cost
from robot_adapters.adapter_core import STATE_DONE, STATE_FAILED, STATE_IDLE, SegmentIn
from robot_adapters.adapter_core import AdapterCore
from robot_adapters.executor import SimulatedExecutor

FENCE = (-300.0, 300.0, -300.0, 300.0, -100.0, 200.0)


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


# -- the planner's static worst case -------------------------------------------------------------
def test_the_issue_plan_costs_362000_skills():
    c = minispec_cost("1000{g,bottle;tp;180{g,bottle;tc,180;}};", T)
    # per outer iteration: goto + take_picture + 180 x (goto + turn_cw 180)
    assert c.calls == 1000 * (2 + 180 * 2)
    assert c.rotation_deg == 1000 * 180 * 180
    assert StaticBudget(budget_for("drone")).add(c) == "362000 skills > 50"


def test_if_costs_its_condition_plus_the_costlier_branch_and_variables_their_maximum():
    c = minispec_cost("_1=s,cat;?_1==True{mf,100;tc,90}:{mb,300};->_1;", T)
    assert (c.calls, c.translation_cm, c.rotation_deg) == (1 + 2, 300, 90)  # the else branch flies further
    v = minispec_cost("_1=od,cat;mf,_1;", T)
    assert v.translation_cm == 500  # a variable distance counts as the safe maximum (500 cm)
    arm = segment_cost("", [SkillCall("pick", ("cup",)), SkillCall("home")], INDY7_ARM, "arm")
    assert arm == Cost(2)


def test_static_budget_adds_segments_up():
    sb = StaticBudget(Budget(max_calls=5, max_translation_cm=250.0))
    assert sb.add(Cost(2, 100.0)) is None
    assert sb.add(Cost(2, 100.0)) is None
    assert sb.add(Cost(1, 100.0)) == "300 cm of flight > 250 cm"
    assert sb.total == Cost(4, 200.0)  # the refused segment is not counted
    assert sb.add(Cost(2)) == "6 skills > 5"


# -- geometry -------------------------------------------------------------------------------------
def test_pose_after_moves_and_turns():
    p = (0.0, 0.0, 0.0, 0.0)
    p = pose_after(p, SkillCall("takeoff"))
    assert p[2] == 80.0
    p = pose_after(p, SkillCall("move_forward", (100,)))
    assert p[:2] == (100.0, 0.0)
    p = pose_after(p, SkillCall("turn_cw", (90,)))  # now facing +y (right)
    p = pose_after(p, SkillCall("move_forward", (50,)))
    assert p[0] == pytest.approx(100.0) and p[1] == pytest.approx(50.0)
    p = pose_after(p, SkillCall("move_left", (20,)))  # left of +y is +x
    assert p[0] == pytest.approx(120.0) and p[1] == pytest.approx(50.0)
    assert pose_after(p, SkillCall("goto", ("cat",))) is None
    assert pose_after(p, SkillCall("land"))[2] == 0.0


def test_meter_refuses_a_move_out_of_the_fence_and_charges_nothing():
    m = BudgetMeter(Budget(fence_cm=FENCE), fence=True)
    m.admit(SkillCall("move_forward", (250,)), (0.0, 0.0, 0.0, 0.0))
    with pytest.raises(BudgetExceeded, match="outside the geofence"):
        m.admit(SkillCall("move_forward", (100,)), (250.0, 0.0, 0.0, 0.0))
    assert m.used == Cost(1, 250.0)


# -- the adapter: what actually runs never exceeds the budget, whatever the segmentation ----------
moves = st.sampled_from(["move_forward", "move_backward", "move_left", "move_right", "move_up", "move_down"])
drone_call = st.one_of(
    st.builds(lambda n, d: (n, [str(d)]), moves, st.integers(20, 200)),
    st.builds(lambda n, d: (n, [str(d)]), st.sampled_from(["turn_cw", "turn_ccw"]), st.integers(1, 360)),
    st.just(("take_picture", [])), st.just(("takeoff", [])),
)


@settings(max_examples=40, deadline=None)
@given(calls=st.lists(drone_call, min_size=1, max_size=30), cuts=st.lists(st.integers(1, 29), max_size=10),
       max_calls=st.integers(1, 20), max_tr=st.integers(100, 1500), max_rot=st.integers(90, 1500))
def test_no_executed_call_sequence_exceeds_the_budget_whatever_the_segmentation(calls, cuts, max_calls, max_tr,
                                                                                  max_rot):
    budget = Budget(max_calls=max_calls, max_translation_cm=float(max_tr), max_rotation_deg=float(max_rot),
                    fence_cm=FENCE)
    events = []
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.0)
    core = AdapterCore("d", ex, events.append, budget=budget).start()
    bounds = sorted({c for c in cuts if c < len(calls)} | {0, len(calls)})
    segs = [calls[a:b] for a, b in zip(bounds, bounds[1:])]
    try:
        for i, seg in enumerate(segs):
            core.submit(SegmentIn("g", i, skills=seg, final=i == len(segs) - 1))
        last = len(segs) - 1
        assert _wait(lambda: any(e.sequence == last and e.state in (STATE_DONE, STATE_FAILED) for e in events)
                     or any(e.state == STATE_FAILED for e in events))
        assert _wait(lambda: core.idle())
    finally:
        core.shutdown()
    ran = list(ex.executed)
    total = Cost()
    pose = (0.0, 0.0, 0.0, 0.0)
    for c in ran:
        total = total + call_cost(c)
        pose = pose_after(pose, c)
        assert inside(FENCE, pose), (ran, pose)
    assert total.calls <= max_calls and total.translation_cm <= max_tr and total.rotation_deg <= max_rot
    # what ran is a prefix of the plan: refused from the first call that would not fit
    flat = [T.validate(n, a) for n, a in calls]
    assert ran == flat[:len(ran)]
    if len(ran) < len(flat):
        failed = [e for e in events if e.state == STATE_FAILED]
        assert failed and ("exceeds budget" in failed[0].error or "outside the geofence" in failed[0].error)


def test_a_plan_split_into_many_small_segments_cannot_add_up_past_the_budget_and_the_robot_is_halted():
    events = []
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.0)
    halts = []
    ex.halt = lambda: halts.append(1) or "hovering"  # the drone's idle state after a stop
    core = AdapterCore("d", ex, events.append, budget=Budget(max_calls=3)).start()
    try:
        for i in range(6):
            core.submit(SegmentIn("g", i, skills=[("tc", ["10"])], final=i == 5))
        assert _wait(lambda: any(e.state == STATE_IDLE and e.error.startswith("stopped") for e in events))
    finally:
        core.shutdown()
    assert len(ex.executed) == 3
    failed = [e for e in events if e.state == STATE_FAILED]
    assert failed[0].sequence == 3 and "refused: exceeds budget: 4 skills > 3" in failed[0].error
    assert halts == [1]  # brought to idle by the adapter itself, without waiting for the planner


def test_the_plan_duration_budget_stops_a_plan_that_runs_too_long():
    events = []
    now = [0.0]
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.0)
    core = AdapterCore("d", ex, events.append, clock=lambda: now[0],
                       budget=Budget(duration_factor=2.0, duration_floor_s=5.0)).start()
    try:
        core.submit(SegmentIn("g", 0, skills=[("tp", [])]))
        assert _wait(lambda: any(e.state == STATE_DONE for e in events))
        now[0] = 6.0  # longer than max(5 s floor, 2 x the predicted time of one take_picture)
        core.submit(SegmentIn("g", 1, skills=[("tp", [])], final=True))
        assert _wait(lambda: any(e.state == STATE_FAILED for e in events))
    finally:
        core.shutdown()
    failed = [e for e in events if e.state == STATE_FAILED][0]
    assert "exceeds budget: plan running 6.0 s > 5.0 s" in failed.error and len(ex.executed) == 1


def test_budget_from_yaml_merges_kind_defaults():
    from timely_robot.config import ParamError
    from llm_planner_node.config.params import parse_params

    p = parse_params({"robots": [{"id": "d", "kind": "drone", "budget": {"max_calls": 7,
                                                                       "fence_cm": [-1, 1, -1, 1, 0, 2]}}]})
    b = p.robots[0].effective_budget
    assert b.max_calls == 7 and b.max_translation_cm == 3000.0 and b.fence_cm == (-1.0, 1.0, -1.0, 1.0, 0.0, 2.0)
    with pytest.raises(ParamError, match="robots\\[0\\].budget: unknown budget setting 'max_call'"):
        parse_params({"robots": [{"id": "d", "kind": "drone", "budget": {"max_call": 7}}]})
    with pytest.raises(ParamError, match="fence_cm"):
        parse_params({"robots": [{"id": "d", "kind": "drone", "budget": {"fence_cm": [1, 0, 0, 1, 0, 1]}}]})
    assert math.isinf(float("inf"))


# -- a base's map fence and speed limit ----------------------------------------------------------
def test_a_point_is_inside_a_concave_fence_only_where_the_polygon_covers_it():
    from timely_robot.budgets import in_polygon, polygon_area

    ell = ((0, 0), (10, 0), (10, 4), (4, 4), (4, 10), (0, 10))  # an L: the corner x>4, y>4 is out
    assert polygon_area(ell) == 10 * 4 + 4 * 6 == 64
    assert in_polygon(ell, 2, 8) and in_polygon(ell, 8, 2) and in_polygon(ell, 10, 2)  # on an edge: in
    assert not in_polygon(ell, 6, 6) and not in_polygon(ell, -0.1, 5)


def test_a_route_that_cuts_the_corner_of_an_l_shaped_fence_is_refused_and_one_around_it_is_charged():
    from timely_robot.budgets import Budget, BudgetMeter

    ell = ((0.0, 0.0), (10.0, 0.0), (10.0, 4.0), (4.0, 4.0), (4.0, 10.0), (0.0, 10.0))
    m = BudgetMeter(Budget(max_translation_cm=2000.0, fence_map_m=ell))
    why = m.route_problem([(8, 2), (2, 8)])  # the straight line crosses (5, 5): outside
    assert why is not None and why.startswith("outside the geofence: the route passes x=") and m.used.translation_cm == 0
    assert m.route_problem([(8, 2), (2, 2), (2, 8)]) is None  # 6 m + 6 m, inside
    assert m.used.translation_cm == pytest.approx(1200.0)
    assert m.route_problem([(2, 8), (2, 0), (3, 0)]) == "exceeds budget: the route is 9.0 m; 2100 cm of flight > 2000 cm"
    assert m.used.translation_cm == pytest.approx(1200.0)  # a refused route is not charged


def test_a_long_drive_expected_at_its_start_extends_the_plan_duration_budget():
    from timely_robot.budgets import Budget, BudgetMeter

    m = BudgetMeter(Budget(), t0=0.0)  # factor 3, floor 60 s
    m.predicted_s = 10.0  # what the execution-time model predicted for the calls
    assert m.over_time(100.0) == "exceeds budget: plan running 100.0 s > 60.0 s"
    m.expect(40.0 / 0.25)  # a 40 m route at 0.25 m/s: 160 s
    assert m.over_time(100.0) is None and m.over_time(509.0) is None  # 3 x (10 + 160) = 510 s
    assert m.over_time(511.0) == "exceeds budget: plan running 511.0 s > 510.0 s"
    m.expect(-5.0)  # nothing negative is expected
    assert m.predicted_s == 170.0
    m.worst_s = 600.0  # the calls' worst cases: never cut shorter than them
    assert m.over_time(599.0) is None and m.over_time(601.0) == "exceeds budget: plan running 601.0 s > 600.0 s"


def test_a_moving_base_outside_its_fence_or_over_its_speed_limit_must_stop():
    from timely_robot.budgets import Budget, BudgetMeter

    m = BudgetMeter(Budget(fence_map_m=((0, 0), (5, 0), (5, 5), (0, 5)), max_speed_mps=0.8))
    assert m.watch(2.5, 2.5, 0.8) is None
    assert m.watch(5.2, 2.5, 0.1) == "left the geofence at x=5.20 y=2.50 m (map)"
    assert m.watch(1.0, 1.0, 0.81) == "exceeds the speed limit: 0.81 m/s > 0.8 m/s"


def test_a_map_fence_needs_three_corners_around_an_area_and_reads_from_yaml_lists():
    from timely_robot.budgets import Budget, budget_for

    for bad in (((0, 0), (1, 1)), ((0, 0), (1, 1), (2, 2))):  # too few corners; no area
        with pytest.raises(ValueError, match="fence_map_m must be a polygon"):
            Budget(fence_map_m=bad)
    b = budget_for("base").merged({"fence_map_m": [[0, 0], [4, 0], [4, 3]]})
    assert b.fence_map_m == ((0.0, 0.0), (4.0, 0.0), (4.0, 3.0)) and b.max_speed_mps == 1.0
    with pytest.raises(ValueError, match=r"list of \[x, y\] corners"):
        budget_for("base").merged({"fence_map_m": [[0, 0, 1]]})
