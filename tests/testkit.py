"""Helpers the tests of every folder share (importable as ``testkit``: pytest puts ``tests/`` on the
path for its conftest)."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``pred`` every ``interval`` s until it holds or ``timeout`` s pass; its last value
    (truthy when it held), so ``assert wait_until(...)`` fails with the condition unmet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()
