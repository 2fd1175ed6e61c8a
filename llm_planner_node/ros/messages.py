"""The planner's ROS interfaces to its clients: the ``plan_task`` action, its results and
records, stats, diagnostics, and the planners' role and journal topics (the robot link, both of
its ends, is :mod:`.robot_link`).

- topic names are **relative** (``planner/...``): a node started in namespace ``fleet_a`` uses
  ``/fleet_a/planner/...``, so two planners with their own fleets share one ROS domain;
  ``/diagnostics`` stays absolute (the ROS convention that diagnostic aggregators listen to);
- :data:`STATUS_OF` is the one map from the core's :class:`~.core.task_model.EndKind` to the
  ``PlanTask`` result status;
- :func:`build_result` turns a terminal request into a ``PlanTask.Result`` with the timings of
  :func:`~.core.metrics.measured_times`; :func:`result_reason` is the one rule for its
  machine-readable ``reason`` (a refusal's too).
"""

from __future__ import annotations

from typing import Any

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from timely_fleet.action import PlanTask
from timely_fleet.msg import SegmentReport, SkillAnswer

from llm_planner_node.core.metrics import measured_times
from llm_planner_node.core.task_model import EndKind, Request
from timely_robot.link.ros import skill_msgs

GOALS_TOPIC = "planner/goals"
RESULTS_TOPIC = "planner/results"
STATS_TOPIC = "planner/stats"
DIAGNOSTICS_TOPIC = "/diagnostics"
ACTION_NAME = "plan_task"
#: A planner's role and term (timely_fleet/PlannerRole), the active planner's journal of its goals
#: in flight (timely_fleet/PlannerJournal), which a standby follows, and the standby's answers
#: (timely_fleet/JournalAck: acknowledgements, snapshot requests; docs/guides/failover.md).
ROLE_TOPIC = "planner/active"
JOURNAL_TOPIC = "planner/journal"
JOURNAL_ACK_TOPIC = "planner/journal_ack"

#: Action services: bursts of goals (one event triggers up to 16 tasks in WID2) must not overflow
#: the default service queue of 10 requests, which silently drops goals.
ACTION_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)

#: planner/active: the latest sample reaches a late subscriber (a client or a standby that starts
#: after the planner).
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
    EndKind.NOT_ACHIEVED: Result.STATUS_NOT_ACHIEVED,
}
# EndKind.REPLANNED ends a generation, never a goal (the goal goes on in the next one): no status


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


def result_reason(why: str, end: EndKind | None = None) -> str:
    """The result's machine-readable ``reason``: a :class:`~.core.outcomes.Rejection`'s
    RejectReason value (a refusal at intake, or a plan the core refused with one, as
    INVALID_PLAN "unperceivable"), else the core's end (``EndKind`` value: "not_achieved",
    "succeeded", "cancelled", ...), else "rejected" (a refusal given as plain text)."""
    reason = getattr(why, "reason", None)
    if reason is not None:
        return str(getattr(reason, "value", reason))
    return end.value if end is not None else "rejected"


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
                  answers=answer_msgs(req), reason=result_reason(req.end_reason, req.end),
                  unachieved=[SkillAnswer(segment=seq, skill=n, value=v) for seq, n, v in req.unachieved])


def answer_msgs(req: Request) -> list[Any]:
    """Every answer the robot's skills gave, segment by segment, in order."""
    return [SkillAnswer(segment=r.seq_base + k, skill=n, value=v)
            for r in req.chain for k in sorted(r.answers) for n, v in r.answers[k]]


def rejected_result(reason: str) -> Any:
    """The result of a goal refused before it reached the core (``reason``: its Rejection)."""
    return Result(status=Result.STATUS_REJECTED, message=reason, reason=result_reason(reason),
                  response_time_s=-1.0, robot_waiting_s=-1.0)


__all__ = ["ACTION_NAME", "ACTION_QOS", "DIAGNOSTICS_TOPIC", "FEEDBACK_QOS", "GOALS_TOPIC", "JOURNAL_ACK_TOPIC", "JOURNAL_TOPIC",
           "LATCHED_QOS", "RESULTS_TOPIC", "ROLE_TOPIC", "STATS_TOPIC", "STATUS_OF", "action_qos_kwargs",
           "answer_msgs", "build_result", "rejected_result", "result_message", "result_reason"]
