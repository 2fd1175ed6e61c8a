"""Will the battery last? The planner's check before it takes a goal for a robot that flies.

A drone reports its battery on the signed status link (``/robot_status``, also while idle). A
goal is refused when the battery, minus what the goal may use, would end below the reserve:

    battery_pct - drain_pct_per_s * goal_s < reserve_pct

``goal_s`` is the execution-time model's bound for the goal before its plan exists: the robot's
plan duration budget (``Budget.duration_floor_s``, the longest a plan may run when nothing else
is predicted, 60 s by default), so a goal is never started that the battery could not see
through. The drain rate defaults to a Tello's: about 13 minutes of flight on a full battery.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Tello: ~13 min of flight from 100% (DJI's specification), as % per second of flight
TELLO_DRAIN_PCT_PER_S = 100.0 / (13 * 60)


@dataclass(frozen=True)
class BatteryRule:
    reserve_pct: float = 15.0  # what must be left when the goal ends (a Tello lands by itself near 10%)
    drain_pct_per_s: float = TELLO_DRAIN_PCT_PER_S
    max_age_s: float = 15.0  # an older battery report is no measurement: the goal is not refused on it


def battery_refusal(robot_id: str, battery_pct: float, goal_s: float, rule: BatteryRule = BatteryRule()) -> str | None:
    """Why the battery cannot finish a goal of ``goal_s`` seconds (None: it can)."""
    need = rule.drain_pct_per_s * goal_s
    if battery_pct - need >= rule.reserve_pct:
        return None
    return (f"{robot_id}'s battery is at {battery_pct:.0f}%: a goal may fly {goal_s:.0f} s, about {need:.0f}% "
            f"of battery, and {rule.reserve_pct:.0f}% must remain: charge or swap the battery")
