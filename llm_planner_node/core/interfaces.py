"""Small interfaces between the scheduling core and its edges (engines, robots, predictors)."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from llm_planner_node.core.skills import SkillCall


class ExecutionTimeEstimator(Protocol):
    """Predicts how long a robot takes to execute a segment (TimelyLLM 4.3, execution-time model).

    ``predict`` is what the scheduler uses for W(s_k; t), k > 0: for scene-dependent skills it
    returns the *minimum* plausible time, so a resumed generation is never late. ``sample``
    draws a realistic duration for simulated robots. ``observe`` feeds measured durations
    reported on ``/robot_status`` back into the model (online update).
    """

    def predict(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall]) -> float: ...

    def sample(
        self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], rng: np.random.Generator
    ) -> float: ...

    def observe(self, robot_id: str, robot_kind: str, call: SkillCall, duration_s: float) -> None: ...
