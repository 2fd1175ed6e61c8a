"""The robot link over ROS: everything both of its ends share (the planner node and the robot
adapters), so names, QoS and conversions cannot drift apart.

- **topics**: segments go out on ``robot_segments`` (every robot's, keyed by ``robot_id``) or, with
  ``security.per_robot_topics``, on ``robots/<id>/segments``; statuses come back on
  ``robot_status`` (``robots/<id>/status``); names are relative to the nodes' namespace;
- **QoS** of both ends: the planner's segment writers and the adapters' readers, the status
  writers and the planner's deep status reader;
- **messages**: the planner's segment, heartbeat and stop (:func:`segment_message`,
  :func:`heartbeat_message`, :func:`stop_message`), the adapters' conversions
  (:func:`segment_from_msg`, :func:`status_to_msg`), reading a serialized status's ids without
  deserializing it (:func:`status_goal_id`, :func:`status_robot_id`), and a subscription that
  drains a burst in one executor turn (:func:`draining_subscription`).

The link's rules without ROS (the lease and its heartbeat, planner terms, sequence numbers, an
interrupted segment) are in :mod:`timely_robot.link.rules`; signing and verification of every
message in :mod:`timely_robot.link.signing` (a library, used by both ends).
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Sequence

from rclpy.exceptions import InvalidHandle
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from timely_fleet.msg import Skill, SkillSegment

from timely_robot.link.rules import HEARTBEAT_SEQUENCE, SegmentIn
from timely_robot.skills import DEFAULT_SKILL_SETS, SkillCall, SkillSet

STATUS_TOPIC = "robot_status"


#: Segments: reliable, keep-last deep enough for any plan; re-sent until acknowledged.
SEGMENT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                         history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)


STATUS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


#: The planner's status reader: deep, so a burst (or a rogue's flood) waiting for the status
#: thread is not overwritten before it is read (about 2 MB at most).
STATUS_READER_QOS = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


#: A RobotStatus with this goal id reports only what an idle robot measures (battery, temperature).
VITALS_GOAL_ID = ""


def status_robot_id(raw: bytes) -> str | None:
    """The ``robot_id`` of a serialized RobotStatus without deserializing it (or None)."""
    try:
        fmt = "<I" if raw[1] == 1 else ">I"
        n = struct.unpack_from(fmt, raw, 4)[0]
        if not 1 <= n <= 65:
            return None
        return raw[8: 7 + n].decode("ascii")
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


def status_goal_id(raw: bytes) -> str | None:
    """The ``goal_id`` of a serialized RobotStatus without deserializing it (CDR: a 4-byte
    encapsulation header, then ``robot_id`` and ``goal_id`` as length-prefixed strings, 4-byte
    aligned), or None if it cannot be read or is longer than a goal id (32 hex digits)."""
    try:
        fmt = "<I" if raw[1] == 1 else ">I"
        off = 4 + (4 + struct.unpack_from(fmt, raw, 4)[0] + 3) // 4 * 4
        n = struct.unpack_from(fmt, raw, off)[0]
        if not 1 <= n <= 65:
            return None
        return raw[off + 4: off + 3 + n].decode("ascii")
    except (struct.error, IndexError, UnicodeDecodeError):
        return None


#: Messages a status subscription's callback takes in one go (see :func:`draining_subscription`).
STATUS_DRAIN = 256


def draining_subscription(node: Any, msg_type: Any, topic: str, handle: Callable[..., None], qos: Any,
                          budget: int = STATUS_DRAIN, *, raw: bool = False, with_info: bool = False) -> Any:
    """A subscription whose callback, after ``handle(msg)``, takes and handles up to ``budget``
    more messages already waiting in the reader, in the same executor turn (``raw``: messages
    stay serialized bytes; ``with_info``: ``handle(msg, info)`` with rclpy's message info).

    rclpy's executor takes one message per subscription per wait-set round (rebuilding the wait
    set each time): about 1,400 statuses/s here, below a rogue's 6,000/s flood, so real statuses
    queued behind the flood were applied seconds late. Draining in the callback took ~7,100/s on
    the same machine (one publisher sending 14,600/s). With one subscription per robot
    (``security.per_robot_topics``) each gets at most ``budget`` messages per round, so a flood
    on one robot's topic cannot starve another's."""
    holder: list[Any] = []

    def drain() -> None:
        sub = holder[0]
        try:
            with sub.handle:
                for _ in range(budget):
                    taken = sub.handle.take_message(msg_type, raw)
                    if taken is None:
                        return
                    handle(*taken) if with_info else handle(taken[0])
        except InvalidHandle:  # destroyed from another thread (the planner's cleanup), as rclpy's executor allows
            return

    # rclpy passes message info to a callback that takes two parameters (no defaults)
    def on_message_info(msg: Any, info: Any) -> None:
        handle(msg, info)
        drain()

    def on_message(msg: Any) -> None:
        handle(msg)
        drain()

    holder.append(node.create_subscription(msg_type, topic, on_message_info if with_info else on_message, qos,
                                           raw=raw))
    return holder[0]


def segments_topic(robot_id: str) -> str:
    """The topic a robot's adapter receives its segments on (relative to the namespace)."""
    return f"robots/{robot_id}/segments"


def status_topic(robot_id: str) -> str:
    """A robot's own status topic (``security.per_robot_topics``: SROS2 access control)."""
    return f"robots/{robot_id}/status"


def skill_msgs(calls: tuple[SkillCall, ...], skill_set_id: str | None) -> list[Skill]:
    """SkillCall -> timely_fleet/Skill: argument names from the goal's skill set, canonical text."""
    skill_set = DEFAULT_SKILL_SETS[skill_set_id] if skill_set_id else None
    out = []
    for c in calls:
        spec_args = skill_set.spec(c.name).args if skill_set is not None else ()
        names = [a.name for a in spec_args][: len(c.args)]
        names += [f"arg{i}" for i in range(len(names), len(c.args))]
        out.append(Skill(name=c.name, arg_names=names, arg_values=[str(a) for a in c.args]))
    return out


def segment_message(goal_id: str, robot_id: str, sequence: int, text: str, calls: tuple[SkillCall, ...],
                    skill_set_id: str | None, final: bool, stamp: Any, term: int) -> Any:
    """Segment ``sequence`` of a goal, from a planner of ``term`` (timely_robot/link/rules.py)."""
    return SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=sequence, text=text,
                        skills=skill_msgs(calls, skill_set_id), final=final, stamp=stamp, term=term)


def heartbeat_message(goal_id: str, robot_id: str, stamp: Any, term: int) -> Any:
    """The planner's lease renewal for a robot running ``goal_id``, from a planner of ``term`` (timely_robot/link/rules.py)."""
    return SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=HEARTBEAT_SEQUENCE, stamp=stamp, term=term)


def stop_message(goal_id: str, robot_id: str, sequence: int, stamp: Any, term: int) -> Any:
    """A ``cancel`` segment from a planner of ``term``: stop the goal, drop its queued segments,
    bring the robot to idle."""
    return SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=sequence, cancel=True, stamp=stamp, term=term)


# -- segments at fleet scale ------------------------------------------------------------
#: Every robot's segments on one keyed topic (``SkillSegment.robot_id`` says whose): an adapter
#: process subscribes it once and dispatches by robot id, so its executor's wait set (rebuilt at
#: every wake-up) holds one subscription, not one per robot. Per-robot topics
#: (:func:`segments_topic`) remain for ``security.per_robot_topics`` (SROS2 access control).
SEGMENTS_TOPIC = "robot_segments"


#: The shared topic's QoS: every robot's segments share one writer history, so it is as deep as
#: the status reader's (a KEEP_LAST writer drops its oldest unacknowledged sample when full).
SHARED_SEGMENT_QOS = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE,
                                history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)


#: Where the planner publishes segments when ``security.per_robot_topics`` is off: ``"shared"``
#: (:data:`SEGMENTS_TOPIC`, the default) or ``"per_robot"``. Adapters follow it
#: (:func:`planner_segment_topics`), so they subscribe only the topics the planner publishes on.
PLANNER_SEGMENT_TOPICS = "shared"


def planner_segment_topics(per_robot_topics: bool) -> str:
    """``"per_robot"`` or ``"shared"``: the topics the planner publishes segments on, and so
    what adapters subscribe (per robot when ``security.per_robot_topics`` is on: SROS2 access
    control names each robot's topic; shared otherwise: one subscription for all of an adapter
    process's robots, so its wait set does not grow with the robots it hosts)."""
    return "per_robot" if per_robot_topics else PLANNER_SEGMENT_TOPICS


def segment_topic_of(robot_id: str, per_robot_topics: bool) -> str:
    """The topic a segment or stop for ``robot_id`` goes out on (relative to the namespace)."""
    return segments_topic(robot_id) if planner_segment_topics(per_robot_topics) == "per_robot" else SEGMENTS_TOPIC


def segment_publishers(node: Any, msg_type: Any, robot_ids: list[str], per_robot_topics: bool) -> dict[str, Any]:
    """The planner's segment publishers, robot id -> publisher: one shared publisher on
    :data:`SEGMENTS_TOPIC` for every robot, or one per robot (``security.per_robot_topics``)."""
    if planner_segment_topics(per_robot_topics) == "per_robot":
        return {r: node.create_publisher(msg_type, segments_topic(r), SEGMENT_QOS) for r in robot_ids}
    shared = node.create_publisher(msg_type, SEGMENTS_TOPIC, SHARED_SEGMENT_QOS)
    return dict.fromkeys(robot_ids, shared)


# ---------------------------------------------------------------------------------- ROS binding
def segment_from_msg(msg: Any) -> SegmentIn:
    return SegmentIn(
        goal_id=msg.goal_id, sequence=int(msg.sequence), text=msg.text,
        skills=[(s.name, list(s.arg_values)) for s in msg.skills],
        final=bool(msg.final), cancel=bool(msg.cancel), robot_id=msg.robot_id, term=int(getattr(msg, "term", 0)),
    )


def status_to_msg(ev: StatusEvent, msg_type: Any) -> Any:
    m = msg_type()
    m.robot_id = ev.robot_id
    m.goal_id = ev.goal_id
    m.sequence = max(0, int(ev.sequence))
    m.state = int(ev.state)
    m.current_skill = ev.current_skill
    m.progress = float(ev.progress)
    m.elapsed_s = float(ev.elapsed_s)
    m.predicted_remaining_s = float(ev.predicted_remaining_s)
    m.skill_names = list(ev.skill_names)
    m.skill_durations_s = [float(d) for d in ev.skill_durations_s]
    m.error = ev.error
    answer_type = _answer_type()
    m.answers = [answer_type(segment=max(0, int(ev.sequence)), skill=n, value=v) for n, v in ev.answers]
    m.has_return_value = ev.return_value is not None
    m.return_value = ev.return_value or ""
    m.battery_pct = float(ev.measured.battery_pct)
    m.temperature_c = float(ev.measured.temperature_c)
    m.height_cm = float(ev.measured.height_cm)
    m.link_age_s = float(ev.measured.link_age_s)
    m.has_scene = ev.scene is not None
    m.scene = [str(e)[:120] for e in (ev.scene or ())[:32]]
    m.has_pose = ev.pose is not None
    if ev.pose is not None:
        m.x_m, m.y_m, m.z_m, m.yaw_rad = (float(v) for v in ev.pose)
    sec = int(ev.stamp)
    m.stamp.sec = sec
    m.stamp.nanosec = int((ev.stamp - sec) * 1e9)
    return m


def _answer_type() -> Any:
    from timely_fleet.msg import SkillAnswer

    return SkillAnswer


def segment_qos() -> Any:
    """The adapters' segment readers: reliable, keep-all (a reader holds every segment until the
    core takes it), volatile as the planner's writers (:data:`SEGMENT_QOS`, :data:`SHARED_SEGMENT_QOS`)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def status_qos() -> Any:
    """The adapters' status writers (:data:`STATUS_QOS`)."""
    return STATUS_QOS


def make_segment_msg(goal_id: str, robot_id: str, sequence: int, calls: Sequence[SkillCall] = (),
                     text: str = "", final: bool = False, cancel: bool = False,
                     skill_set: SkillSet | None = None, term: int = 0) -> Any:
    """Build a ``SkillSegment`` (tests, demos, mission scripts); ``term``: the sender's planner term."""
    from timely_fleet.msg import Skill, SkillSegment

    m = SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=sequence, text=text, final=final, cancel=cancel,
                     term=term)
    out = []
    for c in calls:
        arg_names = [a.name for a in skill_set.spec(c.name).args[: len(c.args)]] if skill_set else [""] * len(c.args)
        out.append(Skill(name=c.name, arg_names=arg_names, arg_values=[str(v) for v in c.args]))
    m.skills = out
    return m
