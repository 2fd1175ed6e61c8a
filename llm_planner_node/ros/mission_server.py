"""The ``plan_mission`` action server: a mission goal handed to the service's
:class:`~llm_planner_node.service.missions.MissionCoordinator`, its events as feedback and its end
as the result. Thin: the coordinator decides everything.

Every mission received is also published on ``planner/missions`` (``MissionRecord``) and its end
on ``planner/mission_results`` (``MissionResult``), as goals are on ``planner/goals`` and
``planner/results``: action goals travel on services a recorder cannot see, and ``timely-fleet
record`` / ``replay`` / ``report`` read these."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

from rclpy.action import CancelResponse, GoalResponse
from timely_fleet.action import PlanMission
from timely_fleet.msg import MissionRecord, MissionResult, MissionTask

from timely_robot.link.ros import STATUS_QOS
from timely_robot.outcomes import RejectReason, Rejection
from llm_planner_node.core.task_model import Request
from llm_planner_node.ros.action_server import FinishLaterActionServer, settle
from llm_planner_node.ros.messages import action_qos_kwargs, build_result, rejected_result
from llm_planner_node.service.missions import MissionCoordinator, MissionEnd, MissionEvent, MissionIn, MissionStatus, TaskRun

MISSION_ACTION = "plan_mission"
#: every mission as received and as it ended (relative, as planner/goals and planner/results)
MISSIONS_TOPIC = "planner/missions"
MISSION_RESULTS_TOPIC = "planner/mission_results"
Result = PlanMission.Result
#: the one map from a mission's end to its result status
MISSION_STATUS_OF: dict[MissionStatus, int] = {
    MissionStatus.SUCCEEDED: Result.STATUS_SUCCEEDED, MissionStatus.FAILED: Result.STATUS_FAILED,
    MissionStatus.IMPOSSIBLE: Result.STATUS_IMPOSSIBLE, MissionStatus.UNAVAILABLE: Result.STATUS_UNAVAILABLE,
    MissionStatus.REJECTED: Result.STATUS_REJECTED, MissionStatus.CANCELLED: Result.STATUS_CANCELLED,
}
#: MissionTask.status of a task that never reached a robot
NO_GOAL = 255


def task_msg(t: TaskRun) -> Any:
    """A task of a mission's end as a ``MissionTask`` (its goal's end as PlanTask's result gives it)."""
    msg = MissionTask(task=t.name, robot_id=t.robot_id or "", goal_id=t.goal_id, allocated_why=t.why,
                      tried_robots=[r for r, _ in t.tried], tried_why=[w for _, w in t.tried], status=NO_GOAL)
    if t.outcome is None:
        return msg
    res = build_result(t.outcome) if isinstance(t.outcome, Request) else rejected_result(str(t.outcome))
    msg.status, msg.message, msg.reason = res.status, res.message, res.reason
    msg.plans = list(res.plans)
    msg.answers, msg.unachieved = list(res.answers), list(res.unachieved)  # SkillAnswer messages both
    msg.has_return_value, msg.return_value = res.has_return_value, res.return_value
    return msg


def result_of(end: MissionEnd) -> Any:
    return Result(status=MISSION_STATUS_OF[end.status], message=end.message, reason=end.status.value,
                  tasks=[task_msg(t) for t in end.tasks])


class MissionServer:
    """The action server of one serving planner node; ``coordinator()``: the node's coordinator
    (None while it is not configured: missions are then refused with the reason)."""

    def __init__(self, node: Any, coordinator: Callable[[], MissionCoordinator | None], callback_group: Any) -> None:
        self._coordinator = coordinator
        self._ids: dict[bytes, str] = {}  # action goal id -> mission id
        self._server = FinishLaterActionServer(node, PlanMission, MISSION_ACTION, execute_callback=self._start,
                                               goal_callback=lambda _g: GoalResponse.ACCEPT,
                                               cancel_callback=self._on_cancel, callback_group=callback_group,
                                               result_timeout=FinishLaterActionServer.RESULT_TIMEOUT_S,
                                               **action_qos_kwargs("server"))
        self._timer = node.create_timer(FinishLaterActionServer.STATUS_PERIOD_S, self._server.flush_status,
                                        callback_group=callback_group)
        self._record_pub = node.create_publisher(MissionRecord, MISSIONS_TOPIC, STATUS_QOS)
        self._result_pub = node.create_publisher(MissionResult, MISSION_RESULTS_TOPIC, STATUS_QOS)
        self._instructions: dict[bytes, str] = {}  # action goal id -> its instruction, for its result record
        self._pub_lock = threading.Lock()  # a mission may end on the scheduler thread while the server is destroyed
        self._node = node

    def destroy(self) -> None:
        self._node.destroy_timer(self._timer)
        self._server.destroy()
        with self._pub_lock:
            pubs, self._record_pub, self._result_pub = (self._record_pub, self._result_pub), None, None
        for pub in pubs:
            self._node.destroy_publisher(pub)

    def _publish(self, which: str, msg: Any) -> None:
        with self._pub_lock:
            pub = getattr(self, which)
            if pub is not None:
                pub.publish(msg)

    def _start(self, handle: Any) -> None:
        g = handle.request
        mission_id = uuid.UUID(bytes=bytes(handle.goal_id.uuid)).hex
        self._instructions[bytes(handle.goal_id.uuid)] = g.instruction
        self._publish("_record_pub", MissionRecord(
            mission_id=mission_id, stamp=self._node.get_clock().now().to_msg(), instruction=g.instruction,
            robot_ids=list(g.robot_ids), robot_kinds=list(g.robot_kinds), ert_s=g.ert_s, alpha=g.alpha, beta=g.beta))
        coordinator = self._coordinator()
        if coordinator is None:
            self._refuse(handle, Rejection(RejectReason.NOT_ACTIVE, "the planner is not configured: it accepts no missions now"))
            return
        if g.cancel_key_sha256:
            self._refuse(handle, Rejection(RejectReason.FIELD, "a mission cannot carry a cancel key yet: send it "
                                                               "without one (its robots stop on an operator's stop)"))
            return
        self._ids[bytes(handle.goal_id.uuid)] = mission_id
        m = MissionIn(g.instruction, tuple(g.robot_ids), tuple(g.robot_kinds), g.ert_s, g.alpha, g.beta)
        coordinator.start(mission_id, m, lambda e: self._feedback(handle, e), lambda end: self._end(handle, end))

    def _refuse(self, handle: Any, why: Rejection) -> None:
        self._end(handle, MissionEnd(MissionStatus.REJECTED, str(why), []))

    def _feedback(self, handle: Any, e: MissionEvent) -> None:
        if handle.is_active:
            handle.publish_feedback(PlanMission.Feedback(event=e.kind, task=e.task, robot_id=e.robot_id,
                                                         goal_id=e.goal_id, text=e.text))

    def _end(self, handle: Any, end: MissionEnd) -> None:
        key = bytes(handle.goal_id.uuid)
        self._ids.pop(key, None)
        if handle.is_active:
            settle(handle, end.status is MissionStatus.SUCCEEDED, end.status is MissionStatus.CANCELLED)
        res = result_of(end)
        self._publish("_result_pub", MissionResult(
            mission_id=uuid.UUID(bytes=key).hex, stamp=self._node.get_clock().now().to_msg(),
            instruction=self._instructions.pop(key, ""), status=res.status, message=res.message, reason=res.reason,
            tasks=res.tasks))
        self._server.finish_goal(handle, res)

    def _on_cancel(self, handle: Any) -> CancelResponse:
        mission_id = self._ids.get(bytes(handle.goal_id.uuid))
        coordinator = self._coordinator()
        if mission_id is None or coordinator is None or not coordinator.cancel(mission_id):
            return CancelResponse.REJECT
        return CancelResponse.ACCEPT
