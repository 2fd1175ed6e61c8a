"""The service's ports over ROS (:class:`~llm_planner_node.service.ports.PlannerPorts`): what the
planner sends. Segments, stops and heartbeats go to the robots signed afresh at the planner's
term (nothing from a fenced planner: its robots are another planner's now), and the lease is
renewed for every robot running a goal; clients get their goal's feedback and result;
``planner/goals`` and ``planner/results`` get a record of every goal's start and end; the log
gets one line per goal end or refusal.

The publishers exist between configure and cleanup (:meth:`RosPorts.open`, :meth:`RosPorts.close`):
plain publishers, not lifecycle ones, so goals that end at deactivate or cleanup still publish
their results and robot stops. A goal refused while the node is unconfigured gets its result
without them.
"""

from __future__ import annotations

import time
from typing import Any

from timely_fleet.action import PlanTask
from timely_fleet.msg import GoalRecord, GoalResult, SkillSegment

from llm_planner_node.config.params import FleetParams
from llm_planner_node.core.task_model import EndKind, Request
from llm_planner_node.core.text import safe_text
from llm_planner_node.ros import operator as operator_ros
from llm_planner_node.ros.action_server import settle
from llm_planner_node.ros.hot_path_log import HotPathLog
from llm_planner_node.ros.messages import GOALS_TOPIC, RESULTS_TOPIC, build_result, rejected_result
from llm_planner_node.service.failover_role import FailoverRole
from timely_robot.link.ros import STATUS_QOS, heartbeat_message, segment_message, segment_publishers, stop_message
from timely_robot.link.signing import LinkSigner
from timely_robot.outcomes import STATUS_NAMES


class RosPorts:
    """PlannerPorts and the failover's link sends over the node ``node`` (module docstring);
    ``goal_handles``: goal id -> its action goal handle (the node's, shared)."""

    def __init__(self, node: Any, role: FailoverRole, goal_handles: dict[str, Any]) -> None:
        self._node = node
        self._role = role
        self.goal_handles = goal_handles
        self.log = HotPathLog(node.get_logger())
        self._signer: LinkSigner | None = None
        self._seg_pubs: dict[str, Any] = {}  # robot id -> its segment publisher
        self._goal_pub: Any = None
        self._result_pub: Any = None
        self._lease_timer: Any = None
        self._active_goals: Any = None  # the service's robot id -> goal id view, while open
        self._last_sent: dict[str, float] = {}  # robot id -> when the planner last sent it anything
        self._lease_period_s = 0.0

    def open(self, params: FleetParams, signer: LinkSigner | None, service: Any) -> None:
        """Create the publishers and the lease timer for ``params``' robots."""
        node, sec = self._node, params.security
        self._signer, self._active_goals = signer, service.active_goals
        # one publisher on the shared robot_segments topic for every robot (per robot with security.per_robot_topics)
        self._seg_pubs = segment_publishers(node, SkillSegment, [r.id for r in params.robots], sec.per_robot_topics)
        self._goal_pub = node.create_publisher(GoalRecord, GOALS_TOPIC, STATUS_QOS)
        self._result_pub = node.create_publisher(GoalResult, RESULTS_TOPIC, STATUS_QOS)
        # the planner's lease (timely_robot/link/rules.py): robots running a goal hear from it at
        # least every lease_s / 6 (a segment, a stop or a heartbeat), else their adapters stop them;
        # so often that a standby taking over after lease_s / 2 of silence still reaches them in
        # time (silence before a crash at most lease_s / 4, + lease_s / 2, well inside lease_s)
        if sec.lease_s > 0:
            self._lease_period_s = sec.lease_s / 6
            self._lease_timer = node.create_timer(sec.lease_s / 12, self.renew_leases)

    def close(self) -> None:
        node = self._node
        for pub in {*self._seg_pubs.values(), self._goal_pub, self._result_pub} - {None}:  # robots may share one
            node.destroy_publisher(pub)
        if self._lease_timer is not None:
            node.destroy_timer(self._lease_timer)
        self._seg_pubs, self._goal_pub, self._result_pub, self._lease_timer = {}, None, None, None
        self._active_goals = None

    def _stamp(self) -> Any:
        return self._node.get_clock().now().to_msg()

    # -- the robot link --------------------------------------------------------------------------
    def segment(self, goal_id: str, req: Request, index: int, final: bool, feedback: bool = True) -> Any:
        seg = req.segments[index]
        msg = segment_message(goal_id, req.goal.robot_id, req.seq_base + index, seg.text, seg.calls,
                              req.goal.skill_set_id, final, self._stamp(), self._role.term)
        self.publish(req.goal.robot_id, msg)
        handle = self.goal_handles.get(goal_id) if feedback else None
        if handle is not None:
            handle.publish_feedback(PlanTask.Feedback(
                index=req.seq_base + index, plan=len(req.earlier), text=msg.text, skills=msg.skills, final=final,
                queue_s=req.gen_start[index] - req.queued_at(index),
                generation_s=req.gen_end[index] - req.gen_start[index]))
        return msg

    def stop(self, goal_id: str, robot_id: str, sequence: int) -> Any:
        msg = stop_message(goal_id, robot_id, sequence, self._stamp(), self._role.term)
        self.publish(robot_id, msg)
        return msg

    def heartbeat(self, goal_id: str, robot_id: str) -> None:
        self.publish(robot_id, heartbeat_message(goal_id, robot_id, self._stamp(), self._role.term))

    def publish(self, robot_id: str, msg: Any) -> None:
        """Publish (or re-send) a segment, stop or heartbeat, signed afresh: every send has a new
        counter and the planner's term now (a re-send after a term change carries the new one).
        A fenced planner sends nothing: one that yielded at its own term would otherwise still be
        obeyed, and its goals' ends would stop the robots."""
        if self._role.fenced is not None:
            return
        msg.term = self._role.term
        if self._signer is not None:
            self._signer.sign_segment(msg, robot_id)
        self._seg_pubs[robot_id].publish(msg)
        self._last_sent[robot_id] = time.monotonic()

    def renew_leases(self) -> None:
        """Renew the lease of every robot running a goal that heard nothing for lease_s / 6."""
        active = self._active_goals
        if active is None:
            return
        now = time.monotonic()
        for robot_id, goal_id in active().items():
            if now - self._last_sent.get(robot_id, 0.0) >= self._lease_period_s:
                self.heartbeat(goal_id, robot_id)

    def raise_link_counter(self, counter: int) -> None:
        if self._signer is not None:
            self._signer.counter.raise_to(counter)

    # -- clients and records ---------------------------------------------------------------------
    def goal_started(self, goal_id: str, req: Request) -> None:
        g = req.goal
        self._goal_pub.publish(GoalRecord(
            goal_id=goal_id, stamp=self._stamp(), robot_id=g.robot_id, robot_kind=g.robot_kind,
            task_type=g.task_type, instruction=g.instruction, ert_s=g.tuf.ert, alpha=g.tuf.alpha,
            beta=g.tuf.beta, skill_set=g.skill_set_id or "", max_tokens=g.max_tokens, scene=list(g.scene or ()),
            prompt_token_ids=([int(t) for t in g.prompt] if isinstance(g.prompt, (list, tuple))
                              and all(isinstance(t, int) for t in g.prompt) else [])))

    def approval_notice(self, goal_id: str, req: Request, index: int, text: str) -> None:
        operator_ros.approval_notice(self.goal_handles.get(goal_id), req, index, text)

    def operator_cancelling(self, goal_id: str) -> None:
        operator_ros.operator_cancelling(self.goal_handles.get(goal_id))

    def result(self, handle: Any, goal_id: str, outcome: Request | str) -> Any:
        """The goal's end (a rejection reason or its terminal request, immutable now): the handle's
        state, the record on ``planner/results`` and the log line; returns the action result."""
        if isinstance(outcome, str):
            self.log("warning", f"goal {goal_id[:8]} robot {safe_text(handle.request.robot_id)} REJECTED: "
                                f"{safe_text(outcome, 300)}")
            handle.abort()
            return rejected_result(outcome)
        req, res = outcome, self.goal_ended(goal_id, outcome)
        settle(handle, req.end is EndKind.SUCCEEDED, req.end is EndKind.CANCELLED)
        return res

    def goal_ended(self, goal_id: str, req: Request) -> Any:
        """A terminal goal's record on ``planner/results`` and its log line, whoever sent it (an
        action client, or a mission whose task it ran); returns its PlanTask result."""
        res, g = build_result(req), req.goal
        if self._result_pub is not None:  # a mission's goal that ended after cleanup: its log line only
            self._result_pub.publish(GoalResult(
                goal_id=goal_id, stamp=self._stamp(), status=res.status, message=res.message,
                robot_id=g.robot_id, task_type=g.task_type, ert_s=g.tuf.ert, alpha=g.tuf.alpha, beta=g.tuf.beta,
                plan_text=res.plan_text, plans=res.plans, segments=res.segments, response_time_s=res.response_time_s,
                robot_waiting_s=res.robot_waiting_s, time_utility=res.time_utility,
                has_return_value=res.has_return_value, return_value=res.return_value, answers=res.answers,
                unachieved=res.unachieved, reason=res.reason))
        self._log_end(goal_id, g.robot_id, res)
        return res

    def _log_end(self, goal_id: str, robot_id: str, res: Any) -> None:
        """One line per goal end: goal id, robot, status, reason, response time."""
        name = STATUS_NAMES.get(res.status, str(res.status))
        resp = f"response {res.response_time_s:.3f} s" if res.response_time_s >= 0 else "no response"
        line = f"goal {goal_id[:8]} robot {safe_text(robot_id)} {name}: {safe_text(res.message, 300)} ({resp})"
        if res.status == PlanTask.Result.STATUS_SUCCEEDED:
            self.log("info", line)
        elif res.status == PlanTask.Result.STATUS_CANCELLED:
            self.log("warning", line)
        else:
            self.log("error", line)
