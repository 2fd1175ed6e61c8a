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


class QuietPorts:
    """The planner service's ports (``llm_planner_node.service.ports.PlannerPorts``) as a test
    without ROS needs them: a segment or stop is a token, nothing is published or logged. A
    test that records what is sent overrides what it records."""

    def segment(self, goal_id: str, req: Any, index: int, final: bool, feedback: bool = True) -> Any:
        return ("seg", goal_id, index)

    def stop(self, goal_id: str, robot_id: str, sequence: int) -> Any:
        return ("stop", goal_id)

    def publish(self, robot_id: str, msg: Any) -> None:
        pass

    def goal_started(self, goal_id: str, req: Any) -> None:
        pass

    def log(self, level: str, text: str) -> None:
        pass
