"""Robot statuses as the planner reads them over ROS: serialized, on the status node's own
executor thread (a burst or a rogue's flood of statuses never delays goal intake or results).

A status names its goal first: one about no goal the planner knows is dropped without being
deserialized (a flood costs a lookup, not a message); an idle robot's report of its measured
state (``VITALS_GOAL_ID``) is read at most every :data:`VITALS_MIN_S` per robot; with
``security.mode: sign`` every status is verified before the service sees it, and one whose robot
id does not match its per-robot topic is dropped.
"""

from __future__ import annotations

import time
from typing import Any

from rclpy.serialization import deserialize_message
from timely_fleet.msg import RobotStatus

from llm_planner_node.service.planner_service import PlannerService, StatusIn
from timely_robot.link.ros import VITALS_GOAL_ID, status_goal_id, status_robot_id
from timely_robot.link.signing import LinkVerifier, measured_of, pose_of

#: An idle robot's reports are read at most this often (s).
VITALS_MIN_S = 0.5


def status_in(msg: Any) -> StatusIn:
    """A ``RobotStatus`` message as the service sees it."""
    return StatusIn(msg.robot_id, msg.goal_id, int(msg.sequence), int(msg.state), tuple(msg.skill_durations_s),
                    msg.error, answers=tuple((a.skill, a.value) for a in msg.answers),
                    return_value=msg.return_value if msg.has_return_value else None,
                    measured=measured_of(msg), pose=pose_of(msg))


class StatusReader:
    """Reads the robots' statuses for ``service`` (module docstring); ``verifier``: the signed
    link's, None with ``security.mode: off``. After :meth:`close` it reads nothing."""

    def __init__(self, service: PlannerService, verifier: LinkVerifier | None) -> None:
        self._service: PlannerService | None = service
        self.verifier = verifier
        self._vitals_seen: dict[str, float] = {}  # robot id -> when its last idle report was read

    def close(self) -> None:
        self._service = None

    def link_counts(self) -> dict[str, int]:
        """The verifier's counts (accepted, unsigned, replayed, ...); empty without signing."""
        return self.verifier.counts() if self.verifier is not None else {}

    def on_raw(self, raw: bytes, topic_robot: str | None = None) -> None:
        """A serialized status (``topic_robot``: the robot of its per-robot topic, if any)."""
        service = self._service
        if service is None:
            return
        goal_id = status_goal_id(raw)
        if goal_id == VITALS_GOAL_ID:
            self._on_vitals(service, raw, topic_robot)
            return
        if goal_id is None or not service.expects_status(goal_id):
            service.status_drops["does not match a goal in flight"] += 1
            return
        msg = deserialize_message(raw, RobotStatus)
        if topic_robot is not None and msg.robot_id != topic_robot:
            service.status_drops["robot id does not match its topic"] += 1
            return
        if self.verifier is not None:
            reason = self.verifier.check_status(msg)
            if reason is not None:
                service.status_drops[f"link: {reason}"] += 1
                return
        service.on_status(status_in(msg))

    def _on_vitals(self, service: PlannerService, raw: bytes, topic_robot: str | None) -> None:
        """An idle robot's measured state: at most one per robot per VITALS_MIN_S is even read,
        and only a verified one is kept."""
        robot_id = status_robot_id(raw)
        now = time.monotonic()
        if robot_id is None or service.params.robot(robot_id) is None:
            return
        if now - self._vitals_seen.get(robot_id, 0.0) < VITALS_MIN_S:
            service.status_drops["idle reports too frequent"] += 1
            return
        self._vitals_seen[robot_id] = now
        msg = deserialize_message(raw, RobotStatus)
        if topic_robot is not None and msg.robot_id != topic_robot:
            return
        if self.verifier is not None and self.verifier.check_status(msg) is not None:
            service.status_drops["link: idle report not verified"] += 1
            return
        service.on_vitals(msg.robot_id, measured_of(msg),
                          scene=[str(e)[:120] for e in msg.scene[:32]] if msg.has_scene else None,
                          pose=pose_of(msg), received=now)
