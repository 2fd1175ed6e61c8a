"""Online estimates of generation speed: G(s_k) for Eq. 4 and the recent token time for 4.4.

G starts from a profiled default (TimelyLLM 4.3: "the average generation time calculated from
profiling data"; the paper's robot-control figure is 90 ms per segment) and is updated with an
exponentially weighted moving average of measured segment generation times, separately per
robot kind and for first segments (which include the prefill) versus later ones.
"""

from __future__ import annotations


class SegmentTimeEstimator:
    """G(s_k): EWMA of measured segment generation times per (robot kind, first segment?)."""

    def __init__(self, default_s: float = 0.09, weight: float = 0.2) -> None:
        if default_s <= 0 or not 0 < weight <= 1:
            raise ValueError("default_s must be > 0 and weight in (0, 1]")
        self.default_s = default_s
        self.weight = weight
        self._g: dict[tuple[str, bool], float] = {}

    def estimate(self, robot_kind: str, k: int) -> float:
        return self._g.get((robot_kind, k == 0), self.default_s)

    def observe(self, robot_kind: str, k: int, seconds: float) -> None:
        if seconds <= 0:
            return
        key = (robot_kind, k == 0)
        old = self._g.get(key, self.default_s)
        self._g[key] = old + self.weight * (seconds - old)


class TokenTimeEstimator:
    """Engine-wide recent time per decoded token (EWMA), used when a generation has no history."""

    def __init__(self, default_s: float = 0.022, weight: float = 0.2) -> None:
        self.value = default_s
        self.weight = weight

    def observe(self, seconds_per_token: float) -> None:
        if seconds_per_token > 0:
            self.value += self.weight * (seconds_per_token - self.value)
