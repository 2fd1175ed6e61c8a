"""The battery check before a flying robot's goal (core/battery.py), by hand."""

from __future__ import annotations

import pytest

from llm_planner_node.core.battery import TELLO_DRAIN_PCT_PER_S, BatteryRule, battery_refusal
from llm_planner_node.service.vitals import RobotVitals


def test_refuses_when_the_goal_would_end_below_the_reserve():
    # 60 s at 100/780 %/s = 7.69 %; reserve 15 %: 22.69 % is the least that is accepted
    assert TELLO_DRAIN_PCT_PER_S == pytest.approx(0.128205, rel=1e-4)
    assert battery_refusal("tello_1", 23.0, 60.0) is None
    why = battery_refusal("tello_1", 22.0, 60.0)
    assert why is not None and "tello_1's battery is at 22%" in why and "about 8%" in why and "15%" in why
    assert battery_refusal("t", 50.0, 60.0, BatteryRule(reserve_pct=45.0)) is not None  # 50 - 7.7 < 45


def test_vitals_keep_only_fresh_measurements():
    now = {"t": 10.0}
    v = RobotVitals(clock=lambda: now["t"])
    v.update("tello_1", (-1.0, -1.0, -1.0, -1.0))  # measures nothing: not kept
    assert v.get("tello_1") is None
    v.update("tello_1", (42.0, 55.0, 80.0, 0.1))
    assert v.battery("tello_1", 15.0) == 42.0
    now["t"] = 26.0
    assert v.battery("tello_1", 15.0) is None  # 16 s old: no longer a measurement
