"""ROS messages of the planner and the adapters: topic names, QoS, and conversions.

One module for both ends of the robot link (the planner node and ``robot_adapters``), so the
names and QoS cannot drift apart:

- topic names are **relative** (``robots/<id>/segments``, ``robot_status``, ``planner/...``):
  a node started in namespace ``fleet_a`` uses ``/fleet_a/robots/...``, so two planners with
  their own fleets share one ROS domain; ``/diagnostics`` stays absolute (the ROS convention
  that diagnostic aggregators listen to);
- :data:`STATUS_OF` is the one map from the core's :class:`~.core.task_model.EndKind` to the
  ``PlanTask`` result status;
- :func:`build_result` turns a terminal request into a ``PlanTask.Result`` with the timings of
  :func:`~.core.metrics.measured_times`.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from rclpy.exceptions import InvalidHandle
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from timely_fleet.action import PlanTask
from timely_fleet.msg import SegmentReport, Skill, SkillAnswer, SkillSegment

from llm_planner_node.core.link import HEARTBEAT_SEQUENCE
from llm_planner_node.core.metrics import measured_times
from llm_planner_node.core.skills import DEFAULT_SKILL_SETS, SkillCall
from llm_planner_node.core.task_model import EndKind, Request

STATUS_TOPIC = "robot_status"
GOALS_TOPIC = "planner/goals"
RESULTS_TOPIC = "planner/results"
STATS_TOPIC = "planner/stats"
DIAGNOSTICS_TOPIC = "/diagnostics"
ACTION_NAME = "plan_task"
#: A planner's role and term (timely_fleet/PlannerRole), and the active planner's journal of its goals
#: in flight (timely_fleet/PlannerJournal), which a standby follows (docs/guides/failover.md).
ROLE_TOPIC = "planner/active"
JOURNAL_TOPIC = "planner/journal"

#: Segments: reliable, keep-last deep enough for any plan; re-sent until acknowledged.
SEGMENT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                         history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
STATUS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
#: The planner's status reader: deep, so a burst (or a rogue's flood) waiting for the status
#: thread is not overwritten before it is read (about 2 MB at most).
STATUS_READER_QOS = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
#: Action services: bursts of goals (one event triggers up to 16 tasks in WID2) must not overflow
#: the default service queue of 10 requests, which silently drops goals.
ACTION_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)

#: planner/active and planner/journal: the latest sample reaches a late subscriber (a client or a
#: standby that starts after the planner).
LATCHED_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)

Result = PlanTask.Result

#: The one map from how a request ended to the action result status.
STATUS_OF: dict[EndKind, int] = {
    EndKind.SUCCEEDED: Result.STATUS_SUCCEEDED,
    EndKind.CANCELLED: Result.STATUS_CANCELLED,
    EndKind.INVALID_PLAN: Result.STATUS_INVALID_PLAN,
    EndKind.ENGINE_FAILED: Result.STATUS_ENGINE_FAILED,
    EndKind.ROBOT_FAILED: Result.STATUS_ROBOT_FAILED,
    EndKind.ROBOT_TIMEOUT: Result.STATUS_TIMEOUT,
    EndKind.TRUNCATED: Result.STATUS_TRUNCATED,
    EndKind.SHED: Result.STATUS_SHED,
    EndKind.REPLAN_REFUSED: Result.STATUS_REPLAN_REFUSED,
}
# EndKind.REPLANNED ends a generation, never a goal (the goal goes on in the next one): no status


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


#: Action feedback: one message per dispatched segment; a burst of 64 goals x ~5 segments
#: overflowed rclpy's default depth of 10 (57-326 of 341 feedbacks arrived).
FEEDBACK_QOS = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


def action_qos_kwargs(side: str = "client") -> dict[str, QoSProfile]:
    """QoS for one end of the ``plan_task`` action (``side``: ``server`` or ``client``; both
    must agree). Outside clients: use the same depths (README "ROS interfaces")."""
    kw = {"goal_service_qos_profile": ACTION_QOS, "result_service_qos_profile": ACTION_QOS,
          "cancel_service_qos_profile": ACTION_QOS}
    kw["feedback_pub_qos_profile" if side == "server" else "feedback_sub_qos_profile"] = FEEDBACK_QOS
    return kw


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


def result_message(req: Request) -> str:
    """The result's one-line message for a terminal request (a success says what the plan
    returned: "look for the cat" ends "... returned True" or "... returned False")."""
    plans = f" over {len(req.chain)} plans" if len(req.chain) > 1 else ""
    if req.end is EndKind.SUCCEEDED:
        said = f", returned {req.return_value}" if req.return_value is not None else ""
        return f"plan of {sum(len(r.segments) for r in req.chain)} segment(s){plans} executed{said}"
    if req.end is EndKind.TRUNCATED:
        return f"plan truncated: {req.end_reason}"
    return req.end_reason or (req.end.value if req.end else "ended")


def build_result(req: Request) -> Any:
    """The PlanTask result of a terminal request: every plan of its goal (re-plans), segments
    numbered as the robot ran them, times relative to the goal's arrival."""
    assert req.state.terminal and req.end is not None, "build_result needs a terminal request"
    a = req.arrival

    def rel(seq: list, k: int) -> float:
        t = seq[k] if k < len(seq) else None
        return -1.0 if t is None else float(t - a)

    reports = [SegmentReport(
        index=r.seq_base + k, text=seg.text, skills=skill_msgs(seg.calls, r.goal.skill_set_id),
        dispatch_s=rel(r.dispatched_at, k), execution_start_s=rel(r.exec_start, k),
        execution_end_s=rel(r.exec_end, k), queued_s=float(r.queued_at(k) - a),
        generation_start_s=rel(r.gen_start, k), generation_end_s=rel(r.gen_end, k))
        for r in req.chain for k, seg in enumerate(r.segments)]
    plans = ["".join(s.text for s in r.segments) for r in req.chain]
    response, waiting, utility = measured_times(req)
    return Result(status=STATUS_OF[req.end], message=result_message(req),
                  plan_text="".join(plans), plans=plans, segments=reports,
                  response_time_s=response, robot_waiting_s=waiting, time_utility=utility,
                  has_return_value=req.return_value is not None, return_value=req.return_value or "",
                  answers=answer_msgs(req))


def answer_msgs(req: Request) -> list[Any]:
    """Every answer the robot's skills gave, segment by segment, in order."""
    return [SkillAnswer(segment=r.seq_base + k, skill=n, value=v)
            for r in req.chain for k in sorted(r.answers) for n, v in r.answers[k]]



def rejected_result(reason: str) -> Any:
    return Result(status=Result.STATUS_REJECTED, message=reason, response_time_s=-1.0, robot_waiting_s=-1.0)


def segment_message(goal_id: str, req: Request, index: int, final: bool, stamp: Any, term: int) -> Any:
    """Segment ``index`` of a request, from a planner of ``term`` (core/link.py)."""
    seg = req.segments[index]
    return SkillSegment(goal_id=goal_id, robot_id=req.goal.robot_id, sequence=req.seq_base + index, text=seg.text,
                        skills=skill_msgs(seg.calls, req.goal.skill_set_id), final=final, stamp=stamp, term=term)


def heartbeat_message(goal_id: str, robot_id: str, stamp: Any, term: int) -> Any:
    """The planner's lease renewal for a robot running ``goal_id``, from a planner of ``term`` (core/link.py)."""
    return SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=HEARTBEAT_SEQUENCE, stamp=stamp, term=term)


def stop_message(goal_id: str, robot_id: str, sequence: int, stamp: Any, term: int) -> Any:
    """A ``cancel`` segment from a planner of ``term``: stop the goal, drop its queued segments,
    bring the robot to idle."""
    return SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=sequence, cancel=True, stamp=stamp, term=term)


__all__ = ["ACTION_NAME", "ACTION_QOS", "DIAGNOSTICS_TOPIC", "GOALS_TOPIC", "JOURNAL_TOPIC", "LATCHED_QOS",
           "RESULTS_TOPIC", "ROLE_TOPIC",
           "SEGMENT_QOS", "STATS_TOPIC", "STATUS_OF", "STATUS_QOS", "STATUS_TOPIC", "action_qos_kwargs",
           "build_result", "rejected_result", "result_message", "segment_message", "segments_topic",
           "skill_msgs", "stop_message", "heartbeat_message"]


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
