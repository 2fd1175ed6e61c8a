"""What the adapter core's tests share: a wait for a condition and a robot that never finishes."""

from __future__ import annotations

import threading

from timely_robot.skills import TELLO_MINISPEC
from robot_adapters.executor import SkillCancelled, SkillExecutor


class Hangs(SkillExecutor):
    """A drone whose skill runs until it is stopped: records the calls it started and its stops."""

    robot_kind = "drone"
    skill_set = TELLO_MINISPEC

    def __init__(self):
        self.stopped = threading.Event()
        self.stops = 0
        self.calls: list[str] = []

    def execute(self, call, cancel):
        self.calls.append(call.name)
        cancel.wait(30)  # never answers until stopped
        raise SkillCancelled("stopped")

    def stop(self):
        self.stops += 1
        self.stopped.set()
