"""What each robot last measured of itself (battery, temperature, height), from the signed
status link: the statuses of its goals, and the idle reports an adapter sends between goals."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Vitals:
    battery_pct: float
    temperature_c: float
    height_cm: float
    received: float  # monotonic time


class RobotVitals:
    """Thread-safe: written by the status thread, read by the goal intake."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, Vitals] = {}

    def update(self, robot_id: str, measured: tuple[float, float, float]) -> None:
        if all(v < 0 for v in measured):
            return  # the robot measures nothing
        with self._lock:
            self._last[robot_id] = Vitals(*(float(v) for v in measured), self._clock())

    def battery(self, robot_id: str, max_age_s: float) -> float | None:
        """The robot's battery % if it reported one in the last ``max_age_s``."""
        with self._lock:
            v = self._last.get(robot_id)
        if v is None or v.battery_pct < 0 or self._clock() - v.received > max_age_s:
            return None
        return v.battery_pct

    def get(self, robot_id: str) -> Vitals | None:
        with self._lock:
            return self._last.get(robot_id)
