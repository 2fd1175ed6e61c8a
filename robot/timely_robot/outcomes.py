"""The outcome vocabulary, one home for every layer: how a generation ended (what engines report),
why a goal was refused before it reached the core, the states a robot's adapter reports, and the
action result statuses by name.

The core's own end of a request is :class:`~.task_model.EndKind`; ``ros_messages.STATUS_OF`` maps
it to :class:`ActionStatus` (the ``PlanTask`` result constants) in one place.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class FinishReason(str, Enum):
    """Why an engine's generation ended (``FinishedEvent.reason``): the model ended its plan
    (end of sequence) or it reached ``max_tokens``. vLLM's ``finish_reason`` "length" is
    MAX_TOKENS, "stop" is EOS."""

    EOS = "eos"
    MAX_TOKENS = "max_tokens"


class RejectReason(str, Enum):
    """Why the planner refused a goal at intake (the ``PlanTask`` result is REJECTED; its message
    gives the details), or a plan before dispatch (INVALID_PLAN: UNPERCEIVABLE, SUBSTITUTED,
    UNKNOWN_PLACE). The
    value is the result's ``reason``."""

    FIELD = "field"                  # a field empty, too long or over a limit (instruction, ids, max_tokens)
    UNKNOWN_ROBOT = "unknown_robot"  # no such robot in the fleet
    WRONG_ROBOT = "wrong_robot"      # the robot is of another kind or runs another skill set
    TUF = "tuf"                      # the time-utility function is invalid
    NOT_ACTIVE = "not_active"        # the planner's lifecycle state takes no goals
    ENGINE_DOWN = "engine_down"      # the inference engine is down
    OVERLOADED = "overloaded"        # too many goals in flight
    ROBOT_BUSY = "robot_busy"        # the robot still runs another goal
    BATTERY = "battery"              # the robot's measured battery cannot see the goal through
    LINK = "link"                    # the robot's telemetry went silent (off, or out of radio range)
    UNPERCEIVABLE = "unperceivable"  # the instruction is about a thing the robot cannot perceive
    SUBSTITUTED = "substituted"      # a plan names a thing other than what the instruction asks for
    UNKNOWN_PLACE = "unknown_place"  # a base's plan goes to a place it has not declared
    PROMPT = "prompt"                # the prompt builder refused the instruction
    CORE = "core"                    # the core refused the goal (it can never run)


class Rejection(str):
    """A refusal: the message the result carries (a ``str``, as everything downstream reads it)
    with its :class:`RejectReason`."""

    reason: RejectReason

    def __new__(cls, reason: RejectReason, message: str) -> "Rejection":
        obj = super().__new__(cls, message)
        obj.reason = reason
        return obj


class RobotState(IntEnum):
    """``RobotStatus.state``: what an adapter reports about a segment (or, IDLE, its robot)."""

    IDLE = 0
    RECEIVED = 1
    EXECUTING = 2
    DONE = 3
    FAILED = 4
    CANCELLED = 5


class ActionStatus(IntEnum):
    """``PlanTask.Result.status`` (action/PlanTask.action's constants)."""

    SUCCEEDED = 0
    REJECTED = 1
    CANCELLED = 2
    INVALID_PLAN = 3
    ROBOT_FAILED = 4
    ENGINE_FAILED = 5
    TIMEOUT = 6
    TRUNCATED = 7
    SHED = 8
    REPLAN_REFUSED = 9
    NOT_ACHIEVED = 10


#: status value -> name, as `timely-fleet goal` prints it
STATUS_NAMES: dict[int, str] = {s.value: s.name for s in ActionStatus}
#: robot state value -> lower-case name, as logs print it
STATE_NAMES: dict[int, str] = {s.value: s.name.lower() for s in RobotState}
