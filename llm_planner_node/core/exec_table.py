"""A fixed seconds-per-skill table implementing ``ExecutionTimeEstimator``.

It is the core's self-contained default (tests, benchmarks, quick simulations); the profiled,
online-learning model is ``timely_robot/execution_time.py`` and implements the same Protocol. This
table never learns: :meth:`TableExecutionTime.observe` ignores measurements by design.

Duration of one call = ``base_s + per_unit_s * units`` where units is the first argument if it
is numeric (cm, degrees, ms, mm, seconds) or its word count if it is text (chat reading at
300 words/min, TimelyLLM 5.5). Scene-dependent skills (search-like) predict their *minimum*
(TimelyLLM 4.3: "we estimate the minimum execution time") and sample uniformly up to
``scene_max_s``. The numbers are rough figures for a Tello drone (about 50 cm/s moves, 90 deg/s
turns), an Indy7-class arm and a human reader; they are assumptions, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from timely_robot.skills import SkillCall


@dataclass(frozen=True)
class SkillTime:
    """Execution time of one skill: nominal ``base_s + per_unit_s * units``."""

    base_s: float
    per_unit_s: float = 0.0
    spread: float = 0.1  # sampled duration = nominal * U(1 - spread, 1 + spread)
    scene_max_s: float | None = None  # scene-dependent: sample U(base_s, scene_max_s)


_MOVE = SkillTime(1.0, 0.02)  # ~50 cm/s plus 1 s to accelerate and settle
_TURN = SkillTime(0.5, 1 / 90)  # ~90 deg/s
_PERCEIVE = SkillTime(0.05, spread=0.0)

DEFAULT_TABLE: dict[str, dict[str, SkillTime]] = {
    "drone": {
        "takeoff": SkillTime(4.0), "land": SkillTime(3.0),
        "move_forward": _MOVE, "move_backward": _MOVE, "move_left": _MOVE,
        "move_right": _MOVE, "move_up": _MOVE, "move_down": _MOVE,
        "turn_cw": _TURN, "turn_ccw": _TURN,
        "delay": SkillTime(0.0, 0.001, spread=0.0),
        "scan": SkillTime(1.0, scene_max_s=6.0), "scan_abstract": SkillTime(1.5, scene_max_s=4.0),
        "orienting": SkillTime(1.0, scene_max_s=4.0), "goto": SkillTime(3.0, scene_max_s=8.0),
        "approach": SkillTime(2.0),
        "is_visible": _PERCEIVE, "object_x": _PERCEIVE, "object_y": _PERCEIVE,
        "object_width": _PERCEIVE, "object_height": _PERCEIVE, "object_dis": _PERCEIVE,
        "probe": SkillTime(1.0), "take_picture": SkillTime(0.5),
        "log": SkillTime(0.01, spread=0.0), "re_plan": SkillTime(0.01, spread=0.0),
    },
    "arm": {
        "home": SkillTime(2.5), "move_to": SkillTime(2.0), "pick": SkillTime(3.0),
        "place": SkillTime(3.0), "push": SkillTime(1.0, 0.01), "open_gripper": SkillTime(0.6),
        "close_gripper": SkillTime(0.6), "wipe": SkillTime(5.0), "look": SkillTime(0.3),
        "wait": SkillTime(0.0, 1.0, spread=0.0),
    },
    "base": {
        "go_to": SkillTime(6.0, scene_max_s=50.0), "go_to_pose": SkillTime(6.0, scene_max_s=50.0),
        "move_forward": SkillTime(0.5, 0.04), "move_backward": SkillTime(0.5, 0.04),
        "turn_cw": _TURN, "turn_ccw": _TURN, "stop": SkillTime(0.2),
        "scan": SkillTime(1.0, scene_max_s=8.0), "is_visible": _PERCEIVE,
        "delay": SkillTime(0.0, 0.001, spread=0.0),
        "log": SkillTime(0.01, spread=0.0), "re_plan": SkillTime(0.01, spread=0.0),
    },
    "chat": {"say": SkillTime(0.0, 0.2, spread=0.2)},  # 300 words/min = 0.2 s per word
}
DEFAULT_TABLE["sim"] = DEFAULT_TABLE["drone"]
UNKNOWN_SKILL = SkillTime(1.0)


def _units(call: SkillCall) -> float:
    if not call.args:
        return 0.0
    a = call.args[0]
    if isinstance(a, str):
        return float(len(a.split()))
    return abs(float(a))


class TableExecutionTime:
    """``ExecutionTimeEstimator`` from a fixed table keyed by robot kind and skill name."""

    def __init__(self, table: Mapping[str, Mapping[str, SkillTime]] | None = None) -> None:
        self._table = DEFAULT_TABLE if table is None else table

    def _time(self, robot_kind: str, call: SkillCall) -> SkillTime:
        return self._table.get(robot_kind, {}).get(call.name, UNKNOWN_SKILL)

    def predict(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall]) -> float:
        """Nominal duration (minimum for scene-dependent skills) of the calls in sequence."""
        total = 0.0
        for c in calls:
            st = self._time(robot_kind, c)
            total += st.base_s + st.per_unit_s * _units(c)
        return total

    def sample(
        self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], rng: np.random.Generator
    ) -> float:
        """A realistic duration for a simulated robot (never below 0)."""
        total = 0.0
        for c in calls:
            st = self._time(robot_kind, c)
            if st.scene_max_s is not None:
                total += rng.uniform(st.base_s, st.scene_max_s)
            else:
                nominal = st.base_s + st.per_unit_s * _units(c)
                total += nominal * (rng.uniform(1 - st.spread, 1 + st.spread) if st.spread else 1.0)
        return max(total, 0.0)

    def observe(self, robot_id: str, robot_kind: str, call: SkillCall, duration_s: float) -> None:
        """A fixed table does not learn (the profiled model in ``execution_time.py`` does)."""
