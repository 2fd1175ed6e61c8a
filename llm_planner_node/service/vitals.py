"""What each robot last measured of itself (battery, temperature, height, the age of its
telemetry), from the signed status link: the statuses of its goals, and the idle reports an
adapter sends between goals."""

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
    link_age_s: float  # age of the robot's newest telemetry when it reported (-1: not measured)
    received: float  # monotonic time


@dataclass(frozen=True)
class Seen:
    scene: tuple[str, ...]  # TypeFly's scene entries of the robot's last idle report
    received: float


class RobotVitals:
    """Thread-safe: written by the status thread, read by the goal intake."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, Vitals] = {}
        self._seen: dict[str, Seen] = {}

    def update(self, robot_id: str, measured: tuple[float, float, float, float],
               scene: list[str] | None = None) -> None:
        """``measured``: battery %, temperature, height and link age (-1: not measured)."""
        now = self._clock()
        with self._lock:
            if scene is not None:
                self._seen[robot_id] = Seen(tuple(scene), now)
            if any(v >= 0 for v in measured):  # else the robot measures nothing
                self._last[robot_id] = Vitals(*(float(v) for v in measured), now)

    def scene(self, robot_id: str, max_age_s: float) -> tuple[str, ...] | None:
        """What the robot last reported seeing, if in the last ``max_age_s`` (None: nothing recent)."""
        with self._lock:
            s = self._seen.get(robot_id)
        if s is None or self._clock() - s.received > max_age_s:
            return None
        return s.scene

    def battery(self, robot_id: str, max_age_s: float) -> float | None:
        """The robot's battery % if it reported one in the last ``max_age_s``."""
        with self._lock:
            v = self._last.get(robot_id)
        if v is None or v.battery_pct < 0 or self._clock() - v.received > max_age_s:
            return None
        return v.battery_pct

    def link_silent_s(self, robot_id: str, max_age_s: float) -> float | None:
        """How long the robot's telemetry had been silent when it last reported, if that report is
        from the last ``max_age_s`` and said so (None: no recent report, or it measures no link)."""
        with self._lock:
            v = self._last.get(robot_id)
        if v is None or v.link_age_s < 0 or self._clock() - v.received > max_age_s:
            return None
        return v.link_age_s

    def get(self, robot_id: str) -> Vitals | None:
        with self._lock:
            return self._last.get(robot_id)
