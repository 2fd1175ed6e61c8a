"""segmenters/plan_cost.minispec_calls: the calls a MiniSpec segment can make, in order, walked as
minispec_cost walks it (loops unrolled, both branches of an if, variables at their worst), the
first ``limit`` of them."""

from __future__ import annotations

from timely_robot.budgets import Cost, call_cost
from timely_robot.skills import TELLO_MINISPEC as T, SkillCall
from timely_robot.plan_cost import minispec_calls, minispec_cost


def test_loops_unroll_in_order():
    assert minispec_calls("tp;2{mf,100;tc,90;};lnd;", T) == [
        SkillCall("take_picture"), SkillCall("move_forward", (100,)), SkillCall("turn_cw", (90,)),
        SkillCall("move_forward", (100,)), SkillCall("turn_cw", (90,)), SkillCall("land")]
    assert [c.name for c in minispec_calls("2{3{tp;};};", T)] == ["take_picture"] * 6


def test_an_if_gives_its_condition_then_both_branches_and_variables_their_maximum():
    calls = minispec_calls("_1=s,cat;?_1==True{mf,_1;}:{tc,_1;};->_1;", T)
    assert calls == [SkillCall("scan", ("cat",)), SkillCall("move_forward", (500,)), SkillCall("turn_cw", (360,))]


def test_the_calls_cost_what_minispec_cost_counts_without_an_if():
    text = "_1=od,cat;3{mf,_1;tu,45;};tp;"
    total = Cost()
    for c in minispec_calls(text, T):
        total = total + call_cost(c)
    assert total == minispec_cost(text, T)  # 1 + 3 x 2 + 1 calls, 1500 cm, 135 degrees
    assert (total.calls, total.translation_cm, total.rotation_deg) == (8, 1500, 135)


def test_only_the_first_limit_calls():
    calls = minispec_calls("1000{g,bottle;tp;180{g,bottle;tc,180;}};", T)  # 362,000 calls
    assert len(calls) == 10_000
    assert [c.name for c in calls[:6]] == ["goto", "take_picture", "goto", "turn_cw", "goto", "turn_cw"]
    assert [c.name for c in calls[362:365]] == ["goto", "take_picture", "goto"]  # the second outer round
    assert minispec_calls("5{tp;};mf,100;", T, limit=3) == [SkillCall("take_picture")] * 3
    assert minispec_calls("2{tp;};mf,100;lnd;", T, limit=3) == [SkillCall("take_picture")] * 2 + [
        SkillCall("move_forward", (100,))]
