"""The robot link's protocol constants, shared by the planner and the adapters (ROS-free).

The planner's lease: while a robot runs one of its goals, the planner sends the robot's adapter a
*heartbeat* at least every sixth of ``security.lease_s`` (any segment or stop it sends counts as
one): a ``SkillSegment`` with ``sequence`` :data:`HEARTBEAT_SEQUENCE`, no skills, signed with the
robot's key like every planner message. An adapter whose robot is executing and that has heard
nothing from its planner for ``lease_s`` stops the robot and reports ``stopped: planner lost``.

Planner terms (fencing): every planner message (segment, heartbeat, stop) carries the sending
planner's ``term``, a number that only goes up (``planner.term``, raised with
:meth:`PlannerTerm.raise_to` when a planner takes over). An adapter obeys only the highest term it
has accepted: a message with a lower term is dropped before it has any effect
(:data:`STALE_TERM`), so a planner that was replaced cannot command the robot any more. Term 0 is
a message without a term (a planner from before terms): accepted only while no term >= 1 was seen.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

#: ``SkillSegment.sequence`` of a planner heartbeat (no plan has 2**32 - 1 segments).
HEARTBEAT_SEQUENCE = 2**32 - 1
#: Default planner lease (seconds); 0 turns the lease off.
DEFAULT_LEASE_S = 3.0

#: An adapter's drop reason for a verified message whose planner term is below the highest it accepted.
STALE_TERM = "stale planner term"
#: The start of the error of a segment an adapter reports DONE although it was cut short (the lease
#: expired and the robot is held, security.lease_grace_s): the planner ends its goal ROBOT_FAILED
#: with that error, since what the segment was to do did not all happen.
INTERRUPTED = "interrupted:"
#: The largest term (``SkillSegment.term`` is a uint64).
MAX_TERM = 2**64 - 1
#: The role of a planner that commands its robots, and of one that follows it, ready to take over.
ACTIVE = "active"
STANDBY = "standby"


class PlannerTerm:
    """A planner's term and role (thread-safe): the term every message it sends carries.

    The term only goes up, and only through :meth:`raise_to`, so the planner that takes over
    from another fences it off by taking a higher term."""

    def __init__(self, term: int = 1, role: str = ACTIVE) -> None:
        if not 1 <= int(term) <= MAX_TERM:
            raise ValueError(f"a planner's term must be an integer from 1 to 2**64 - 1, not {term}")
        self._term = int(term)
        self.role = role
        self._lock = threading.Lock()

    @property
    def value(self) -> int:
        return self._term

    def raise_to(self, term: int) -> int:
        """Make ``term`` the planner's term (it must be above the current one); returns the old one."""
        with self._lock:
            old = self._term
            if int(term) > MAX_TERM:
                raise ValueError(f"a planner's term must be at most 2**64 - 1, not {term}")
            if int(term) <= old:
                raise ValueError(f"the planner's term can only go up: {term} is not above the current term {old}")
            self._term = int(term)
            return old


@dataclass
class SegmentIn:
    """A planner message as an adapter receives it (ROS-free mirror of ``SkillSegment``: a
    segment, a stop with ``cancel``, or a heartbeat with sequence :data:`HEARTBEAT_SEQUENCE`)."""

    goal_id: str
    sequence: int
    text: str = ""
    skills: list[tuple[str, list[str]]] = field(default_factory=list)  # (name, arg values)
    final: bool = False
    cancel: bool = False
    robot_id: str = ""
    term: int = 0  # the sending planner's term (0: none given)

