"""Injected clocks: the core never reads the time itself.

The simulator drives a :class:`VirtualClock`; the live node uses :class:`WallClock`. All times are
seconds as floats.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Source of the current time in seconds."""

    def now(self) -> float: ...


class WallClock:
    """Monotonic wall time (``time.monotonic``), for the live node."""

    def now(self) -> float:
        return time.monotonic()


class VirtualClock:
    """Simulated time that only moves when the simulation loop advances it (never backwards)."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)

    def now(self) -> float:
        return self._t

    def advance_to(self, t: float) -> None:
        if t < self._t:
            raise ValueError(f"virtual clock cannot go back from {self._t} to {t}")
        self._t = float(t)
