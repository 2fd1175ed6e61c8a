"""The planner's operator services over ROS: ``planner/stop_robots`` and ``planner/approve``.

:func:`attach` gives a :class:`~.node.PlannerNode` the two services (``timely_fleet/srv/StopRobots``,
``timely_fleet/srv/ApproveSegment``); :func:`approval_notice` and :func:`operator_cancelling` are
the two operator ports of :class:`~llm_planner_node.service.ports.PlannerPorts` that
:class:`~.planner_ports.RosPorts` implements with them (the "waiting for approval" action feedback, and a goal that an operator
ends goes to CANCELING first so that its action ends CANCELED, as with ``planner/cancel_goal``). The
node's ``<node>: operator`` status on ``/diagnostics`` (goals waiting for approval, the operator
counters and the last events) is :meth:`llm_planner_node.service.health_report.HealthReport.operator`.

The right to stop or decide is the one ``planner/cancel_goal`` checks for operators: a secret
whose SHA-256 (hex) is listed in ``security.cancel_operator_keys_sha256``. With
``security.mode: off`` (the ROS domain is trusted) no secret is needed. Secrets are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from llm_planner_node.core.text import safe_text

#: Longest the stop service waits for the scheduler thread to have stopped the robots (s).
STOP_WAIT_S = 2.0
STOP_SERVICE = "planner/stop_robots"
APPROVE_SERVICE = "planner/approve"


def refusal(node: Any, secret: str) -> str | None:
    """Why an operator request is refused (one sentence), or None: the secret is an operator's."""
    sec = node.params.security
    if sec.mode == "off":
        return None
    operators = [h.strip().lower() for h in sec.cancel_operator_keys_sha256.split(",") if h.strip()]
    if not operators:
        return ("refused: no operator secret is configured (list its SHA-256 in "
                "security.cancel_operator_keys_sha256)")
    digest = hashlib.sha256(secret.encode()).hexdigest() if secret else ""
    if not digest or not any(hmac.compare_digest(digest, h) for h in operators):
        return "refused: the secret is not an operator's (security.cancel_operator_keys_sha256)"
    return None


def _refused(node: Any, what: str, operator: str, why: str) -> None:
    from llm_planner_node.service.operator_control import operator_name

    service = node.service
    text = f"{what} by '{operator_name(operator)}' refused: {why.removeprefix('refused: ')}"
    if service is not None:
        service.operator_refused(text)
    node.log("warning", text)


def approval_notice(handle: Any, req: Any, index: int, text: str) -> None:
    """The operator port that tells a goal's client (its action goal ``handle``, if any) that its
    segment ``index`` waits for approval (an action feedback message whose text is the notice)."""
    from timely_fleet.action import PlanTask

    if handle is not None:
        handle.publish_feedback(PlanTask.Feedback(
            index=req.seq_base + index, plan=len(req.earlier), text=text, skills=[], final=False,
            queue_s=req.gen_start[index] - req.queued_at(index) if index < len(req.gen_start) else 0.0,
            generation_s=req.gen_end[index] - req.gen_start[index] if index < len(req.gen_end) else 0.0))


def operator_cancelling(handle: Any) -> None:
    """The operator port that moves a goal an operator ends (its action goal ``handle``, if any)
    to CANCELING (it ends CANCELED)."""
    from llm_planner_node.ros.action_server import mark_cancelling

    if handle is not None:
        mark_cancelling(handle)


def attach(node: Any) -> None:
    """Create the operator services on ``node``."""
    from timely_fleet.srv import ApproveSegment, StopRobots

    def on_stop(request: Any, response: Any) -> Any:
        why = refusal(node, request.secret)
        service = node.service
        if why is None and service is None:
            why = "the planner is not configured (lifecycle state 'unconfigured'): nothing was stopped"
        if why is not None:
            _refused(node, "stop", request.operator_name, why)
            response.accepted, response.message = False, why
            return response
        out = service.stop_robots(list(request.robot_ids), bool(request.all), request.operator_name, STOP_WAIT_S)
        response.accepted, response.message, response.stopped = out.accepted, out.message, out.stopped
        return response

    def on_approve(request: Any, response: Any) -> Any:
        why = refusal(node, request.secret)
        service = node.service
        what = "approval" if request.approve else "denial"
        if why is None and service is None:
            why = "the planner is not configured (lifecycle state 'unconfigured'): no goal waits"
        if why is not None:
            _refused(node, what, request.operator_name, why)
            response.accepted, response.message = False, why
            return response
        response.accepted, response.message = service.decide(request.goal_id, bool(request.approve),
                                                                      request.operator_name)
        if not response.accepted:
            node.log("warning", f"{what} of goal '{safe_text(request.goal_id)}' refused: {response.message}")
        return response

    node.create_service(StopRobots, STOP_SERVICE, on_stop, callback_group=node.goals_callback_group)
    node.create_service(ApproveSegment, APPROVE_SERVICE, on_approve, callback_group=node.goals_callback_group)
