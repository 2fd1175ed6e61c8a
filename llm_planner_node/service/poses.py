"""Where each robot of the fleet is, in one fleet frame.

Robots report their measured pose in their own frame (a drone: its take-off point, x forward at
take-off, z up; a base: Nav2's ``map``; an arm: its base). The fleet YAML's ``origin:`` of each
robot says where that frame sits in the fleet frame; :class:`RobotPoses` keeps the latest pose
of each robot and places it there, so the allocator can compare distances between robots that
never shared a frame. No ROS: the service feeds it from the statuses it takes.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

from timely_robot.config import Origin

from llm_planner_node.config.params import FleetParams

#: (x, y, z, yaw): metres and radians, in the robot's own frame
Pose = tuple[float, float, float, float]

#: Robot kinds that do not move: one that never reported a pose is where its declared origin is.
FIXED_KINDS = ("arm",)


def to_fleet(origin: Origin, x: float, y: float, z: float) -> tuple[float, float, float]:
    """The fleet-frame point of ``(x, y, z)`` given in a frame placed at ``origin``: rotated
    about z by the origin's yaw, then translated by its position."""
    yaw = math.radians(origin.yaw_deg)
    c, s = math.cos(yaw), math.sin(yaw)
    return (origin.x + c * x - s * y, origin.y + s * x + c * y, origin.z + z)


class RobotPoses:
    """The latest measured pose of each robot, and its position in the fleet frame.

    ``update`` may be called from the thread that takes statuses while others read: each robot's
    entry is replaced whole, under a lock."""

    def __init__(self, fleet: FleetParams, clock: Callable[[], float] = time.monotonic) -> None:
        self._fleet = fleet
        self._clock = clock
        self._latest: dict[str, tuple[Pose, float]] = {}
        self._lock = threading.Lock()

    def update(self, robot_id: str, pose: Pose | None, at: float) -> None:
        """Record ``pose`` (x, y, z, yaw in the robot's frame), measured at ``at`` (the clock's
        time). None, a pose of other than four numbers or a non-finite one is ignored: a status
        without a pose does not erase the last one measured (:meth:`age_s` says how old it is),
        and a robot's report is not trusted to be well formed. An older pose than the one held
        is ignored too (statuses may arrive out of order)."""
        if pose is None or len(pose) != 4:
            return
        try:
            values = tuple(float(v) for v in pose)
        except (TypeError, ValueError):
            return
        if not all(math.isfinite(v) for v in values):
            return
        with self._lock:
            held = self._latest.get(robot_id)
            if held is None or at >= held[1]:
                self._latest[robot_id] = (values, at)  # type: ignore[assignment]

    def pose(self, robot_id: str) -> Pose | None:
        """The latest pose ``robot_id`` reported, in its own frame, or None."""
        held = self._latest.get(robot_id)
        return held[0] if held is not None else None

    def fleet_position(self, robot_id: str) -> tuple[float, float, float] | None:
        """``robot_id``'s position (x, y, z metres) in the fleet frame: its latest pose placed
        by its origin (default: the fleet frame itself). A robot that never reported a pose is
        at its origin if it declares one and cannot move (an arm); otherwise, and for a robot
        the fleet does not declare, None (unknown)."""
        robot = self._fleet.robot(robot_id)
        if robot is None:
            return None
        origin = robot.origin if robot.origin is not None else Origin()
        held = self._latest.get(robot_id)
        if held is not None:
            x, y, z, _ = held[0]
            return to_fleet(origin, x, y, z)
        if robot.kind in FIXED_KINDS and robot.origin is not None:
            return (origin.x, origin.y, origin.z)
        return None

    def age_s(self, robot_id: str) -> float | None:
        """Seconds since ``robot_id``'s latest pose was measured, or None if it reported none."""
        held = self._latest.get(robot_id)
        return max(0.0, self._clock() - held[1]) if held is not None else None
