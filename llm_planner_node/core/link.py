"""The robot link's protocol constants, shared by the planner and the adapters (ROS-free).

The planner's lease: while a robot runs one of its goals, the planner sends the robot's adapter a
*heartbeat* at least every third of ``security.lease_s`` (any segment or stop it sends counts as
one): a ``SkillSegment`` with ``sequence`` :data:`HEARTBEAT_SEQUENCE`, no skills, signed with the
robot's key like every planner message. An adapter whose robot is executing and that has heard
nothing from its planner for ``lease_s`` stops the robot and reports ``stopped: planner lost``.
"""

from __future__ import annotations

#: ``SkillSegment.sequence`` of a planner heartbeat (no plan has 2**32 - 1 segments).
HEARTBEAT_SEQUENCE = 2**32 - 1
#: Default planner lease (seconds); 0 turns the lease off.
DEFAULT_LEASE_S = 3.0
