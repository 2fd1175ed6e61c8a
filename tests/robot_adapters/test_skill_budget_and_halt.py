"""Skill time budgets come from the worst case, never from the scheduler's optimistic estimate;
a stopped goal brings the robot to idle, without ROS."""

from __future__ import annotations

import dataclasses
import time

import pytest

from timely_robot.execution_time import (
    SCAN_STEP_DEG, TELLO_DETECT_S, TELLO_TURN_BASE_S, TELLO_YAW_DEG_S, ExecutionTimeModel)
from timely_robot.skills import TELLO_MINISPEC as T, SkillCall, SkillSet
from robot_adapters.adapter_core import (
    STATE_CANCELLED, STATE_DONE, STATE_EXECUTING, STATE_FAILED, STATE_IDLE, SegmentIn)
from robot_adapters.adapter_core import AdapterCore
from robot_adapters.executor import SimulatedExecutor

from testkit import wait_until

# TypeFly scan: up to 11 turns of 30 degrees, each followed by a detection pass (profile table)
SCAN_MAX_S = TELLO_DETECT_S + 11 * (TELLO_TURN_BASE_S + SCAN_STEP_DEG / TELLO_YAW_DEG_S + TELLO_DETECT_S)
SCAN_MIN_S = TELLO_DETECT_S


def test_worst_case_of_scan_is_the_profiled_maximum_not_the_minimum():
    m = ExecutionTimeModel()
    scan = SkillCall("scan", ("cat",))
    assert m.predict("d", "drone", [scan]) == pytest.approx(SCAN_MIN_S)       # the scheduler's view
    assert SCAN_MAX_S == pytest.approx(0.3 + 11 * (0.8 + 30 / 90 + 0.3))      # 16.07 s by hand
    assert m.worst_case_calls("d", "drone", [scan])[0] == pytest.approx(SCAN_MAX_S * (1 + 4 * 0.05))


def test_worst_case_follows_a_robot_that_is_slower_than_profiled():
    m = ExecutionTimeModel()
    mf = SkillCall("move_forward", (120,))
    before = m.worst_case_calls("d", "drone", [mf])[0]
    for _ in range(12):
        m.observe("d", "drone", mf, 2 * (1.2 + 120 / 60.0))  # twice the profiled 3.2 s
    assert m.worst_case_calls("d", "drone", [mf])[0] >= 1.8 * before


def test_budget_uses_the_skill_sets_own_limit_when_it_has_one():
    limited = SkillSet(T.id, T.robot_kind, tuple(dataclasses.replace(s, max_s=7.0) if s.name == "scan" else s
                                                 for s in T.skills))
    core = AdapterCore("d", SimulatedExecutor("d", "drone", limited), skill_set=limited, time_scale=0.5,
                       skill_timeout_margin_s=1.0)
    assert core.skill_budget_s(SkillCall("scan", ("cat",))) == pytest.approx(7.0 * 0.5 + 1.0)
    free = AdapterCore("d", SimulatedExecutor("d", "drone", T), time_scale=0.5, skill_timeout_margin_s=1.0)
    assert free.skill_budget_s(SkillCall("scan", ("cat",))) == pytest.approx(
        2.0 * SCAN_MAX_S * 1.2 * 0.5 + 1.0)


def test_a_scan_that_needs_every_turn_finishes_within_its_budget():
    """The first-user failure: a scan taking its longest profiled time was stopped as a timeout
    (budget 3 x minimum + 5 s). With no margin and time compressed 20x, the worst-case scan must
    still finish."""
    events = []
    ex = SimulatedExecutor("d", "drone", T, lambda c: SCAN_MAX_S, time_scale=0.05)
    core = AdapterCore("d", ex, events.append, time_scale=0.05, skill_timeout_margin_s=0.0).start()
    try:
        core.submit(SegmentIn("g", 0, skills=[("s", ["cat"])], final=True))
        assert wait_until(lambda: any(e.state in (STATE_DONE, STATE_FAILED) for e in events), 10)
        assert [e.state for e in events if e.state in (STATE_DONE, STATE_FAILED)] == [STATE_DONE], \
            [e.error for e in events]
    finally:
        core.shutdown()


def test_a_base_plan_of_three_longest_drives_runs_within_its_duration_budget():
    """A drive's prediction is its shortest profiled route (5.5 s); three of the longest (24 m,
    49.5 s each) run 148.5 s. The budget's 3 x prediction (49.5 s; its floor here 1 s) would refuse
    the third drive, which starts at 99 s (the budget is checked before each call): the calls'
    worst cases must keep the plan running. Time compressed 50x."""
    from timely_robot.budgets import Budget
    from timely_robot.skills import NAV2_BASE

    longest = 0.5 + 1.0 + 24 / 0.5
    assert ExecutionTimeModel().predict("b", "base", [SkillCall("go_to", ("lab",))]) == pytest.approx(0.5 + 1.0 + 2 / 0.5)
    events = []
    ex = SimulatedExecutor("b", "base", NAV2_BASE, lambda c: longest, time_scale=0.02)
    core = AdapterCore("b", ex, events.append, skill_set=NAV2_BASE, time_scale=0.02, skill_timeout_margin_s=0.0,
                       budget=dataclasses.replace(Budget(), duration_floor_s=1.0)).start()
    try:
        core.submit(SegmentIn("g", 0, skills=[("go_to", ["lab"]), ("go_to", ["dock"]), ("go_to", ["office"])], final=True))
        assert wait_until(lambda: any(e.state in (STATE_DONE, STATE_FAILED) for e in events), 10)
        assert [e.state for e in events if e.state in (STATE_DONE, STATE_FAILED)] == [STATE_DONE], \
            [e.error for e in events]
    finally:
        core.shutdown()


class Recorder(SimulatedExecutor):
    def __init__(self):
        super().__init__("d", "drone", T, lambda c: 0.5)
        self.halts = 0

    def halt(self):
        self.halts += 1
        return "stopped, hovering"


def test_stop_interrupts_drops_queued_segments_halts_once_and_reports_idle():
    events = []
    ex = Recorder()
    core = AdapterCore("d", ex, events.append).start()
    try:
        for k in range(3):
            core.submit(SegmentIn("g", k, skills=[("mf", ["50"])]))
        assert wait_until(lambda: any(e.state == STATE_EXECUTING for e in events))
        core.submit(SegmentIn("g", 3, cancel=True))
        assert wait_until(lambda: any(e.state == STATE_IDLE for e in events))
        core.submit(SegmentIn("g", 3, cancel=True))  # the planner re-sends until it sees IDLE
        assert wait_until(lambda: sum(e.state == STATE_IDLE for e in events) == 2)
        time.sleep(0.8)
        assert ex.halts == 1
        idle = [e for e in events if e.state == STATE_IDLE]
        assert all(e.error == "stopped: stopped, hovering" and e.goal_id == "g" for e in idle)
        assert not any(e.state in (STATE_EXECUTING, STATE_DONE) and e.sequence > 0 for e in events)
        assert {e.sequence for e in events if e.state == STATE_CANCELLED} == {0, 1, 2}
        assert [c.name for c in ex.executed] == []  # the first move was interrupted
        # the robot takes the next goal
        core.submit(SegmentIn("g2", 0, skills=[("mf", ["50"])], final=True))
        assert wait_until(lambda: any(e.goal_id == "g2" and e.state == STATE_DONE for e in events))
    finally:
        core.shutdown()


def test_a_drone_segment_whose_text_differs_from_its_declared_skills_is_refused():
    """The MiniSpec text is what runs: declaring a harmless turn while the text moves the drone
    forward is refused before any command."""
    events = []
    ex = SimulatedExecutor("d", "drone", T, lambda c: 0.01)
    core = AdapterCore("d", ex, events.append).start()
    try:
        core.submit(SegmentIn("g", 0, text="mf(300);", skills=[("tc", ["30"])], final=True))
        assert wait_until(lambda: any(e.state == STATE_FAILED for e in events))
        failed = next(e for e in events if e.state == STATE_FAILED)
        assert failed.error == "refused: segment text calls ['move_forward'] but declares ['turn_cw']"
        assert ex.executed == []
        core.submit(SegmentIn("g2", 0, text="tc(30);", skills=[("tc", ["30"])], final=True))  # consistent
        assert wait_until(lambda: any(e.goal_id == "g2" and e.state == STATE_DONE for e in events))
        assert [c.name for c in ex.executed] == ["turn_cw"]
    finally:
        core.shutdown()
