"""The planning node: a thin ROS 2 lifecycle node over :class:`~.planner_service.PlannerService`.

Like the rclpy ``minimal_action_server`` example, this file holds only the ROS side: publishers,
subscriptions, services, timers and the lifecycle transitions. The service holds the logic
(scheduling core, goal registry, robot link protocol); message conversion lives in
:mod:`.messages` and the ``plan_task`` action server in :mod:`.action_server`.

Lifecycle (``lifecycle_msgs``; ``timely-fleet up`` drives the transitions itself):

- **configure**: build the service and load the engine (vLLM loads here, ~30 s on CPU); create
  the robot link (segments, statuses, lease heartbeats) and ``planner/goals|results|stats``;
- **activate**: accept goals;
- **deactivate**: stop accepting; goals in flight end CANCELLED ("planner deactivated") and
  their robots are stopped;
- **cleanup** and **shutdown**: end every goal, free the engine, destroy what configure created.

The action, ``planner/cancel_goal``, ``planner/stop_robots|approve`` and ``/diagnostics`` exist in
every state: goals and requests sent while the node is not active are refused with the reason
(a goal is accepted and aborted with ``STATUS_REJECTED``: a ROS 2 goal rejection cannot carry a
reason). Topics are relative to the node's namespace (:mod:`.messages`); ``/diagnostics`` carries
standard ``diagnostic_msgs/DiagnosticArray`` with OK / WARN / ERROR; every stamp comes from the
node's clock (``use_sim_time`` follows ``/clock``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any, Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.logging import LoggingSeverity
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.serialization import deserialize_message
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from timely_fleet.action import PlanTask
from timely_fleet.msg import GoalRecord, GoalResult, PlannerStats, RobotStatus, SkillSegment
from timely_fleet.srv import CancelPlan

from llm_planner_node.ros import operator as operator_ros
from timely_robot.outcomes import STATUS_NAMES, RejectReason, Rejection
from llm_planner_node.core.clock import Clock
from timely_robot.link.rules import ACTIVE, STANDBY, PlannerTerm
from llm_planner_node.core.engine_api import Engine
from llm_planner_node.core.task_model import EndKind, Request
from llm_planner_node.config.params import FleetParams
from llm_planner_node.service.cancel_rights import CancelRights
from llm_planner_node.service.planner_service import GoalIn, PlannerService, StatusIn, safe_text
from llm_planner_node.ros.action_server import FinishLaterActionServer, mark_cancelling, rcutils_log_emitter
from llm_planner_node.ros.failover import (JOURNAL_MIN_S, JOURNAL_PERIOD_S, ROLE_PERIOD_S, TAKEOVER_STAGGER_S,
                                          FailoverLink, JournalOut, SilenceWatch)
from llm_planner_node.service.takeover import JournalEntry, JournalTake
from llm_planner_node.ros.params import add_validation_callback, declare_parameters
from timely_robot.link.signing import Keystore, LinkSigner, LinkVerifier, journal_key, measured_of
from llm_planner_node.ros.messages import ACTION_NAME, DIAGNOSTICS_TOPIC, GOALS_TOPIC, RESULTS_TOPIC, STATS_TOPIC, action_qos_kwargs, build_result, rejected_result
from timely_robot.link.ros import (
    STATUS_QOS, STATUS_READER_QOS, STATUS_TOPIC, draining_subscription, segment_message, segment_publishers,
    status_goal_id, status_topic, stop_message, heartbeat_message, status_robot_id, VITALS_GOAL_ID)


class HotPathLog:
    """The node's per-goal log lines (one per goal end or refusal, ``ports.log``) without rclpy's
    per-call cost: ``RcutilsLogger.log`` finds its caller with ``inspect`` (file system calls)
    on every call, 12% of the goal thread's CPU in a 200-goal burst. Lines go to the same rcutils
    logger (same name, severity filter and output) with this class as their location."""

    _SEVERITY = {"debug": LoggingSeverity.DEBUG, "info": LoggingSeverity.INFO,
                 "warning": LoggingSeverity.WARN, "error": LoggingSeverity.ERROR}

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self._emit = rcutils_log_emitter()  # None on another rclpy: its own (slower) path

    def __call__(self, level: str, text: str) -> None:
        severity = self._SEVERITY.get(level, LoggingSeverity.INFO)
        if self._emit is None:
            self.logger.log(text, severity)
        elif self.logger.is_enabled_for(severity):
            self._emit(severity, self.logger.name, text, "log", __file__, 0)


#: Queue length above which diagnostics warn (goals waiting for the engine).
QUEUE_WARN = 200
VITALS_MIN_S = 0.5  # an idle robot's reports read at most this often
#: Free KV share below which diagnostics warn.
KV_WARN = 0.05


def status_in(msg: Any) -> StatusIn:
    """A ``RobotStatus`` message as the service sees it."""
    return StatusIn(msg.robot_id, msg.goal_id, int(msg.sequence), int(msg.state), tuple(msg.skill_durations_s),
                    msg.error, answers=tuple((a.skill, a.value) for a in msg.answers),
                    return_value=msg.return_value if msg.has_return_value else None,
                    measured=measured_of(msg))


class PlannerNode(LifecycleNode):
    """The ``llm_planner`` node (see the module docstring)."""

    def __init__(self, params: FleetParams | None = None, *, engine: Engine | None = None,
                 engine_factory: Callable[[], Engine] | None = None,
                 prompt_builder: Callable[[str, str, str], object] | None = None,
                 clock: Clock | None = None, context: Any = None, name: str = "llm_planner",
                 namespace: str | None = None, cli_args: list[str] | None = None,
                 ack_timeout_s: float = 1.0, max_resends: int = 3, robot_time_scale: float = 1.0,
                 standby: bool | None = None, on_fenced: Callable[[str], None] | None = None) -> None:
        """``standby`` (default ``planner.standby``): follow the active planner's journal and take
        over when it falls silent, serving nothing before (docs/guides/failover.md);
        ``on_fenced(reason)``: called once if another planner took over from this one (the
        process should stop; ``timely-fleet up`` exits)."""
        super().__init__(name, context=context, namespace=namespace, cli_args=cli_args)
        # every setting is a declared parameter: ``params`` (or the ``params_file`` YAML) gives the
        # defaults, ``-p`` / ``--params-file`` / launch ``parameters=`` override them (ros_params)
        self.params = declare_parameters(self, params)
        add_validation_callback(self, lambda: self.params, self._apply_params)
        # the planner's term (timely_robot/link/rules.py): outlives configure and cleanup, only ever goes up
        self._standby = bool(self.params.planner.standby if standby is None else standby)
        self._term = PlannerTerm(self.params.planner.term, STANDBY if self._standby else ACTIVE)
        self._on_fenced = on_fenced
        self.fenced: str | None = None  # why this planner stopped serving (another took over)
        self._failover: FailoverLink | None = None
        self._failover_timer: Timer | None = None
        self._journal_posted = False  # a journal take is queued on the scheduler thread
        self._journal_last_take = 0.0
        # while a standby follows: goals that ended since the last journal, and goals the action
        # server accepted that have not reached the core yet (goal id -> when; journaled as new goals)
        self._journal_following = False
        self._journal_lock = threading.Lock()
        self._journal_ended: list[str] = []
        self._unjournaled: dict[str, float] = {}
        self._lifecycle_active = False
        self._last_tick = time.monotonic()  # the failover tick's last run (a pause shows as a gap)
        self._silence = SilenceWatch()  # a standby's judge of the active planner's silence
        self.takeovers: list[dict[str, Any]] = []  # each takeover: term, from, adopted goal ids, seconds
        self._service_args = dict(engine=engine, engine_factory=engine_factory, prompt_builder=prompt_builder,
                                  clock=clock, ack_timeout_s=ack_timeout_s, max_resends=max_resends,
                                  robot_time_scale=robot_time_scale)
        self.service: PlannerService | None = None
        self._lock = threading.Lock()
        self.goal_handles: dict[str, Any] = {}  # goal id -> action goal handle (feedback, operator cancels)
        self.cancel_rights = CancelRights(lambda: self.params.security.cancel_operator_keys_sha256)
        self.goals_callback_group = ReentrantCallbackGroup()
        self._log = HotPathLog(self.get_logger())
        # created at configure, destroyed at cleanup and shutdown (_create_entities, _destroy_entities)
        self._seg_pubs: dict[str, Publisher] = {}  # robot id -> its segment publisher
        self._stats_pub: Publisher | None = None
        self._goal_pub: Publisher | None = None
        self._result_pub: Publisher | None = None
        self._status_subs: list[Subscription] = []
        self._heartbeat_timer: Timer | None = None
        # the robot link's protection (README "Security"): built at configure from security.*
        self._signer: LinkSigner | None = None
        self._verifier: LinkVerifier | None = None
        self._link_dropped_reported = 0
        self._last_sent: dict[str, float] = {}  # robot id -> when the planner last sent it anything
        self._vitals_seen: dict[str, float] = {}  # robot id -> when its last idle report was read
        # Robot statuses arrive on a hidden helper node that its own executor thread spins
        # (up.py), so a burst or a rogue's flood of statuses never delays goal intake or results,
        # and goals never delay statuses. Hidden (leading "_") and outside the global ROS
        # arguments, so `ros2 launch`'s `-r __node:=...` cannot give it the planner's name. It
        # lives as long as the planner (up.py gives it an executor once); its subscriptions are
        # made at configure.
        self.status_node = Node(f"_{self.get_name()}_status", context=context, namespace=self.get_namespace(),
                                use_global_arguments=False, start_parameter_services=False)
        # Made here, not at configure: in every lifecycle state a goal or request is answered
        # (refused with the reason while the node is not active) and /diagnostics reports the
        # node (WARN "not configured"), rather than clients waiting for a server that is not there.
        self._diag_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        # A standby serves nothing (two servers of one action or service would both answer)
        # until it takes over (:meth:`take_over`).
        self._server: FinishLaterActionServer | None = None
        self._served: list[Any] = []
        if not self._standby:
            self._serve()
        self.create_timer(1.0, self._publish_diagnostics)
        self.create_timer(FinishLaterActionServer.STATUS_PERIOD_S, self._flush_status,
                          callback_group=self.goals_callback_group)

    def _serve(self) -> None:
        """The action server and the planner's services (an active planner's)."""
        self._server = FinishLaterActionServer(self, PlanTask, ACTION_NAME, execute_callback=self._start_goal,
                                               goal_callback=lambda _g: GoalResponse.ACCEPT,
                                               cancel_callback=self._on_cancel_request,
                                               callback_group=self.goals_callback_group,
                                               result_timeout=FinishLaterActionServer.RESULT_TIMEOUT_S,
                                               **action_qos_kwargs("server"))
        self._server.allow_cancel_all = self.params.security.allow_cancel_all
        self._server.rejects_at_once = lambda g: self.service is not None and self.service.precheck(g) is not None
        self._server.answers_held = self._resumed
        before = set(self.services)
        self.create_service(CancelPlan, "planner/cancel_goal", self._on_cancel_goal, callback_group=self.goals_callback_group)
        operator_ros.attach(self)  # planner/stop_robots, planner/approve (operator_ros.py)
        self._served = [srv for srv in self.services if srv not in before]

    def _unserve(self) -> None:
        """Stop serving (a fenced planner): no more goals or requests reach it."""
        server, self._server = self._server, None
        if server is not None:
            server.destroy()
        for srv in self._served:
            self.destroy_service(srv)
        self._served = []

    def _flush_status(self) -> None:
        server = self._server
        if server is not None:
            server.flush_status()

    @property
    def term(self) -> int:
        """The term every segment, heartbeat and stop this planner sends carries."""
        return self._term.value

    @property
    def role(self) -> str:
        return self._term.role

    def set_term(self, term: int) -> None:
        """Raise the planner's term (any thread; it must be above the current one, else ValueError):
        every message sent from now on, re-sends included, carries it, and adapters that see it
        drop the messages of lower terms. A planner that takes over calls this."""
        old = self._term.raise_to(term)
        self.get_logger().info(f"planner term {old} -> {self.term} (role {self.role})")

    def _apply_params(self, params: FleetParams) -> None:
        """A run-time parameter change that passed validation (limits, timeouts, TUF presets)."""
        self.params = params
        if self.service is not None:
            self.service.update_params(params)

    # -- lifecycle -------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        args = dict(self._service_args)
        if args["engine_factory"] is None:  # restarts (and the first engine) from the effective engine.*
            from llm_planner_node.core.clock import WallClock
            from llm_planner_node.engines.factory import engine_factory

            args["clock"] = args["clock"] or WallClock()
            args["engine_factory"] = engine_factory(self.params.planner, args["clock"])
        try:
            sec = self.params.security
            keystore = Keystore(sec.keystore or None) if sec.mode == "sign" else None
            if keystore is not None:
                for r in self.params.robots:
                    keystore.key(r.id)  # a missing key stops here, with the sentence naming `timely-fleet keys`
            signer, verifier = LinkSigner(keystore, sec.mode), LinkVerifier(keystore, sec.mode)
            service = PlannerService(self.params, self, **args)
        except Exception as e:  # noqa: BLE001 - the transition fails with the reason logged
            self.get_logger().error(f"configure failed: {safe_text(str(e) or repr(e), 500)}")
            return TransitionCallbackReturn.FAILURE
        self._signer, self._verifier, self._link_dropped_reported = signer, verifier, 0
        self._create_entities()
        self._failover = FailoverLink(self, self.params.security.lease_s,
                                      journal_key(keystore, [r.id for r in self.params.robots]) if keystore else None,
                                      signer.counter, self._on_higher_term)
        self._failover_timer = self.create_timer(0.05, self._failover_tick)
        self.service = service
        service.start()
        pp = self.params.planner
        self.get_logger().info(f"planner configured: policy={pp.policy}, engine={pp.engine.kind}, "
                               f"robots={', '.join(r.id for r in self.params.robots)}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self.service is not None
        self._lifecycle_active = True
        if self._failover is not None:
            self._failover.publish_role(self.role, self.term)
        if self.role == STANDBY:
            self.get_logger().info("planner standby: following the active planner's journal, serving nothing until it "
                                   f"falls silent for {self._takeover_s():g} s")
            return super().on_activate(state)
        self.service.accepting = True
        self.get_logger().info("planner active: accepting goals")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._lifecycle_active = False
        if self.service is not None:
            self.service.accepting = False
            self.service.end_all("planner deactivated")
        self.get_logger().info("planner inactive: goals are refused")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release("planner cleaned up")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release("planner node shutting down")
        return TransitionCallbackReturn.SUCCESS

    def close(self) -> None:
        """Node shutdown outside a lifecycle transition: what ``on_shutdown`` does."""
        self._release("planner node shutting down")

    def _release(self, reason: str) -> None:
        """End every goal with ``reason`` and free the engine, then destroy what configure created
        (goals ending here still publish their results and robot stops)."""
        with self._lock:
            service, self.service = self.service, None
        if service is not None:
            service.close(reason)
        self._destroy_entities()

    def _create_entities(self) -> None:
        """The configured node's topics and lease timer. Plain publishers, not lifecycle ones:
        goals that end at deactivate or cleanup still publish their results and robot stops."""
        params = self.params
        robot_ids = [r.id for r in params.robots]
        # one publisher on the shared robot_segments topic for every robot (per robot with security.per_robot_topics)
        self._seg_pubs = segment_publishers(self, SkillSegment, robot_ids, params.security.per_robot_topics)
        self._stats_pub = self.create_publisher(PlannerStats, STATS_TOPIC, 10)
        self._goal_pub = self.create_publisher(GoalRecord, GOALS_TOPIC, STATUS_QOS)
        self._result_pub = self.create_publisher(GoalResult, RESULTS_TOPIC, STATUS_QOS)
        if params.security.per_robot_topics:  # one topic per robot: access control can tell them apart
            self._status_subs = [
                draining_subscription(self.status_node, RobotStatus, status_topic(rid),
                                      lambda m, rid=rid: self._on_status_raw(m, rid), STATUS_READER_QOS, raw=True)
                for rid in robot_ids]
        else:
            self._status_subs = [draining_subscription(self.status_node, RobotStatus, STATUS_TOPIC,
                                                       self._on_status_raw, STATUS_READER_QOS, raw=True)]
        # the planner's lease (timely_robot/link/rules.py): robots running a goal hear from it at least every
        # lease_s / 6 (a segment, a stop or a heartbeat), else their adapters stop them; so often
        # that a standby taking over after lease_s / 2 of silence still reaches them in time
        # (silence before a crash at most lease_s / 4, + lease_s / 2, well inside lease_s)
        if params.security.lease_s > 0:
            self._heartbeat_timer = self.create_timer(params.security.lease_s / 12, self._heartbeat)

    def _destroy_entities(self) -> None:
        """Destroy what :meth:`_create_entities` created (nothing while the node is unconfigured)."""
        # a set: every robot may share one segment publisher
        for pub in {*self._seg_pubs.values(), self._stats_pub, self._goal_pub, self._result_pub} - {None}:
            self.destroy_publisher(pub)
        for sub in self._status_subs:
            self.status_node.destroy_subscription(sub)
        if self._heartbeat_timer is not None:
            self.destroy_timer(self._heartbeat_timer)
        if self._failover_timer is not None:
            self.destroy_timer(self._failover_timer)
            self._failover_timer = None
        if self._failover is not None:
            self._failover.destroy()
            self._failover = None
        self._seg_pubs, self._status_subs = {}, []
        self._stats_pub = self._goal_pub = self._result_pub = self._heartbeat_timer = None

    def destroy_node(self) -> None:
        """Destroy the node with its action server: rclpy's ``destroy_node`` leaves action servers
        (waitables) alive, and one still referenced (by a traceback, say) keeps ``plan_task``
        discoverable, so clients would take a dead planner for a live one."""
        if getattr(self, "_served", None) is not None:  # absent if the constructor failed early
            self._unserve()
        status_node = getattr(self, "status_node", None)  # absent if the constructor failed early
        if status_node is not None:
            status_node.destroy_node()
        super().destroy_node()

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.service.snapshot.counters) | dict(self.service.counters) if self.service else {}

    # -- goals ---------------------------------------------------------------------------------
    def _start_goal(self, handle: Any) -> None:
        """Executor thread: hand the goal to the service and return; the service ends it later
        (:meth:`_end_goal`, scheduler thread). Rejections end it here, at once."""
        g = handle.request
        goal_id = bytes(handle.goal_id.uuid).hex()
        goal = GoalIn.of(g)
        service = self.service
        if service is None:
            self._end_goal(handle, goal_id, Rejection(RejectReason.NOT_ACTIVE, "the planner is not configured "
                                            "(lifecycle state 'unconfigured'): it accepts no goals now"))
            return
        self.goal_handles[goal_id] = handle
        if self._journal_following:
            with self._journal_lock:
                self._unjournaled[goal_id] = time.monotonic()
        self.cancel_rights.protect(goal_id, g.cancel_key_sha256)
        reason = service.submit(goal_id, goal, lambda outcome: self._end_goal(handle, goal_id, outcome))
        if reason is not None:
            self._end_goal(handle, goal_id, reason)

    def _end_goal(self, handle: Any, goal_id: str, outcome: Request | str) -> None:
        """The goal's end (a rejection reason or its terminal request): result to the client."""
        self.goal_handles.pop(goal_id, None)
        self.cancel_rights.forget(goal_id)
        if self._journal_following:
            with self._journal_lock:
                self._unjournaled.pop(goal_id, None)
                self._journal_ended.append(goal_id)
        if self.fenced is not None:  # another planner took this goal over: its result is that one's to give
            return
        if isinstance(outcome, str):
            result = self._reject(handle, goal_id, handle.request.robot_id, outcome)
        else:
            result = self._finish(handle, goal_id, outcome)
        server = self._server
        if server is not None:
            server.finish_goal(handle, result)

    def _on_cancel_request(self, handle: Any) -> CancelResponse:
        """The standard action cancel: it carries no proof of who sends it (any node on the
        domain can name any goal id, which goal status topics publish), so a goal whose client
        set a cancel key is cancelled only through ``planner/cancel_goal``."""
        goal_id = bytes(handle.goal_id.uuid).hex()
        if not self.cancel_rights.standard_cancel(goal_id):
            return CancelResponse.REJECT
        if self.service is not None:
            self.service.cancel(goal_id)
        return CancelResponse.ACCEPT

    def _on_cancel_goal(self, request: Any, response: Any) -> Any:
        """``planner/cancel_goal``: cancel a goal for its own client (the secret of the goal's
        cancel key) or an operator (``security.cancel_operator_keys_sha256``)."""
        handle = self.goal_handles.get(request.goal_id)
        response.accepted, response.message = self.cancel_rights.cancel_by_secret(
            request.goal_id, request.secret, handle is not None)
        if response.accepted:
            mark_cancelling(handle)  # ends CANCELED, as with a standard cancel
            if self.service is not None:
                self.service.cancel(request.goal_id)
        return response

    def _reject(self, handle: Any, goal_id: str, robot_id: str, reason: str) -> Any:
        self.log("warning", f"goal {goal_id[:8]} robot {safe_text(robot_id)} REJECTED: {safe_text(reason, 300)}")
        handle.abort()
        return rejected_result(reason)

    def _finish(self, handle: Any, goal_id: str, req: Request) -> Any:
        """The goal's terminal request (immutable now) -> result, record, log line, handle state."""
        res = build_result(req)
        g = req.goal
        self._result_pub.publish(GoalResult(
            goal_id=goal_id, stamp=self.get_clock().now().to_msg(), status=res.status, message=res.message,
            robot_id=g.robot_id, task_type=g.task_type, ert_s=g.tuf.ert, alpha=g.tuf.alpha, beta=g.tuf.beta,
            plan_text=res.plan_text, plans=res.plans, segments=res.segments, response_time_s=res.response_time_s,
            robot_waiting_s=res.robot_waiting_s, time_utility=res.time_utility,
            has_return_value=res.has_return_value, return_value=res.return_value, answers=res.answers,
            unachieved=res.unachieved, reason=res.reason))
        self._log_end(goal_id, g.robot_id, res)
        if req.end is EndKind.SUCCEEDED:
            handle.succeed()
        elif req.end is EndKind.CANCELLED and handle.is_cancel_requested:
            handle.canceled()
        else:
            handle.abort()
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

    # -- PlannerPorts (scheduler thread) ---------------------------------------------------------
    def segment(self, goal_id: str, req: Request, index: int, final: bool, feedback: bool = True) -> Any:
        seg = req.segments[index]
        msg = segment_message(goal_id, req.goal.robot_id, req.seq_base + index, seg.text, seg.calls,
                              req.goal.skill_set_id, final, self.get_clock().now().to_msg(), self.term)
        self.publish(req.goal.robot_id, msg)
        handle = self.goal_handles.get(goal_id) if feedback else None
        if handle is not None:
            handle.publish_feedback(PlanTask.Feedback(
                index=req.seq_base + index, plan=len(req.earlier), text=msg.text, skills=msg.skills, final=final,
                queue_s=req.gen_start[index] - req.queued_at(index),
                generation_s=req.gen_end[index] - req.gen_start[index]))
        return msg

    def stop(self, goal_id: str, robot_id: str, sequence: int) -> Any:
        msg = stop_message(goal_id, robot_id, sequence, self.get_clock().now().to_msg(), self.term)
        self.publish(robot_id, msg)
        return msg

    def publish(self, robot_id: str, msg: Any) -> None:
        """Publish (or re-send) a segment, stop or heartbeat, signed afresh: every send has a new
        counter and the planner's term now (a re-send after :meth:`set_term` carries the new one).
        A fenced planner sends nothing: its robots are another planner's now (one that yielded at
        its own term would otherwise still be obeyed, and its goals' ends would stop them)."""
        if self.fenced is not None:
            return
        msg.term = self.term
        if self._signer is not None:
            self._signer.sign_segment(msg, robot_id)
        self._seg_pubs[robot_id].publish(msg)
        self._last_sent[robot_id] = time.monotonic()

    def _heartbeat(self) -> None:
        """Renew the lease of every robot running a goal that heard nothing for lease_s / 6."""
        service = self.service
        if service is None:
            return
        period = self.params.security.lease_s / 6
        now = time.monotonic()
        for robot_id, goal_id in service.active_goals().items():
            if now - self._last_sent.get(robot_id, 0.0) >= period:
                self.publish(robot_id, heartbeat_message(goal_id, robot_id, self.get_clock().now().to_msg(),
                                                         self.term))

    def goal_started(self, goal_id: str, req: Request) -> None:
        g = req.goal
        self._goal_pub.publish(GoalRecord(
            goal_id=goal_id, stamp=self.get_clock().now().to_msg(), robot_id=g.robot_id, robot_kind=g.robot_kind,
            task_type=g.task_type, instruction=g.instruction, ert_s=g.tuf.ert, alpha=g.tuf.alpha,
            beta=g.tuf.beta, skill_set=g.skill_set_id or "", max_tokens=g.max_tokens, scene=list(g.scene or ()),
            prompt_token_ids=([int(t) for t in g.prompt] if isinstance(g.prompt, (list, tuple))
                              and all(isinstance(t, int) for t in g.prompt) else [])))

    def log(self, level: str, text: str) -> None:
        self._log(level, text)

    def approval_notice(self, goal_id: str, req: Request, index: int, text: str) -> None:
        operator_ros.approval_notice(self, goal_id, req, index, text)

    def operator_cancelling(self, goal_id: str) -> None:
        operator_ros.operator_cancelling(self, goal_id)

    # -- robot status ----------------------------------------------------------------------------
    def _on_status_raw(self, raw: bytes, topic_robot: str | None = None) -> None:
        """A serialized status: read its goal id first; one about no goal the planner knows is
        dropped without deserializing (a rogue's flood costs a lookup, not a message)."""
        service = self.service
        if service is None:
            return
        goal_id = status_goal_id(raw)
        if goal_id == VITALS_GOAL_ID:
            self._on_vitals(raw, topic_robot)
            return
        if goal_id is None or not service.expects_status(goal_id):
            service.status_drops["does not match a goal in flight"] += 1
            return
        self._on_status(deserialize_message(raw, RobotStatus), topic_robot)

    def _on_vitals(self, raw: bytes, topic_robot: str | None) -> None:
        """An idle robot's measured state: at most one per robot per VITALS_MIN_S is even read
        (a flood costs a lookup), and only a verified one is kept."""
        service, robot_id = self.service, status_robot_id(raw)
        now = time.monotonic()
        if service is None or robot_id is None or service.params.robot(robot_id) is None:
            return
        if now - self._vitals_seen.get(robot_id, 0.0) < VITALS_MIN_S:
            service.status_drops["idle reports too frequent"] += 1
            return
        self._vitals_seen[robot_id] = now
        msg = deserialize_message(raw, RobotStatus)
        if topic_robot is not None and msg.robot_id != topic_robot:
            return
        if self._verifier is not None and self._verifier.check_status(msg) is not None:
            service.status_drops["link: idle report not verified"] += 1
            return
        service.on_vitals(msg.robot_id, measured_of(msg),
                          scene=[str(e)[:120] for e in msg.scene[:32]] if msg.has_scene else None)

    def _on_status(self, msg: RobotStatus, topic_robot: str | None = None) -> None:
        """Robot statuses: their own callback group (never queued behind goals); authenticated
        (``security.mode: sign``) and validated by the service before any state is touched."""
        service, verifier = self.service, self._verifier
        if service is None:
            return
        if topic_robot is not None and msg.robot_id != topic_robot:
            service.status_drops["robot id does not match its topic"] += 1
            return
        if verifier is not None:
            reason = verifier.check_status(msg)
            if reason is not None:
                service.status_drops[f"link: {reason}"] += 1
                return
        service.on_status(status_in(msg))

    # -- diagnostics -----------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        service = self.service
        now = self.get_clock().now().to_msg()
        if service is None:
            self._diag_pub.publish(DiagnosticArray(header=self._header(now), status=[DiagnosticStatus(
                level=DiagnosticStatus.WARN, name=f"{self.get_name()}: engine", hardware_id=self.get_name(),
                message="not configured: no engine loaded"), self._role_status()]))
            return
        snap, health, pp = service.snapshot, service.health, service.params.planner
        self._stats_pub.publish(PlannerStats(
            policy=pp.policy, queued=snap.queued, running=snap.running, suspended=snap.suspended,
            active_goals=snap.active_goals, goals_succeeded=snap.counters.get(EndKind.SUCCEEDED.value, 0),
            goals_failed=sum(snap.counters.get(k.value, 0) for k in EndKind
                             if k not in (EndKind.SUCCEEDED, EndKind.CANCELLED)),
            goals_cancelled=snap.counters.get(EndKind.CANCELLED.value, 0),
            goals_rejected=snap.counters.get("rejected", 0),
            tokens_per_s=snap.tokens_per_s, kv_free_fraction=snap.kv_free_fraction, stamp=now))
        # engine: ERROR while down or restarting, and once for every failure since the last report
        if health.state != "up" or health.failures > health.failures_reported:
            level = DiagnosticStatus.ERROR
            text = (f"engine {health.state}" if health.state != "up" else "engine failed and was restarted") + \
                f": {health.last_error}"
            health.failures_reported = health.failures
        else:
            level, text = DiagnosticStatus.OK, f"engine up ({pp.engine.kind}, {snap.tokens_per_s:.0f} tokens/s)"
        if level == DiagnosticStatus.OK and snap.kv_free_fraction < KV_WARN:
            level, text = DiagnosticStatus.WARN, f"KV cache nearly exhausted ({snap.kv_free_fraction:.0%} free)"
        engine_status = DiagnosticStatus(level=level, name=f"{self.get_name()}: engine", hardware_id=self.get_name(),
                                         message=text, values=[KeyValue(key="kv_free_fraction",
                                                                        value=f"{snap.kv_free_fraction:.3f}"),
                                                               KeyValue(key="failures", value=str(health.failures))])
        engine_status.values.append(KeyValue(key="status_delay_p99_s", value=f"{snap.status_delay_p99_s:.3f}"))
        engine_status.values.extend(KeyValue(key=str(k), value=str(v)) for k, v in snap.engine.items())
        q_level = DiagnosticStatus.WARN if snap.queued > QUEUE_WARN else DiagnosticStatus.OK
        goals_status = DiagnosticStatus(
            level=q_level, name=f"{self.get_name()}: goals", hardware_id=self.get_name(),
            message=(f"queue of {snap.queued} past {QUEUE_WARN}" if q_level else
                     f"{snap.active_goals} goal(s) in flight, {'accepting' if service.accepting else 'not accepting'}"),
            values=[KeyValue(key=k, value=str(v)) for k, v in sorted(snap.counters.items())]
            + [KeyValue(key=f"cancel refused: {k}", value=str(v)) for k, v in sorted(self.cancel_rights.refusals.items())]
            + [KeyValue(key="cancel refused: cancel all",
                        value=str(self._server.refused_cancel_all if self._server else 0))])
        r_level = DiagnosticStatus.WARN if snap.silent_robots else DiagnosticStatus.OK
        message = (f"silent: {', '.join(snap.silent_robots)}" if snap.silent_robots
                   else f"{len(self.params.robots)} robot(s) reporting")
        link = self._verifier.counts() if self._verifier is not None else {}
        dropped = sum(v for k, v in link.items() if k != "accepted")
        if dropped > self._link_dropped_reported:  # forged, unsigned or replayed statuses since the last report
            r_level = DiagnosticStatus.WARN
            message = (f"{dropped - self._link_dropped_reported} status(es) failed authentication and were "
                       f"dropped; {message}")
            self._link_dropped_reported = dropped
        robots_status = DiagnosticStatus(
            level=r_level, name=f"{self.get_name()}: robots", hardware_id=self.get_name(), message=message,
            values=[KeyValue(key=f"link {k}", value=str(v)) for k, v in link.items()]
            + [KeyValue(key="security.mode", value=self.params.security.mode)])
        self._diag_pub.publish(DiagnosticArray(header=self._header(now),
                                               status=[engine_status, goals_status, robots_status,
                                                       *operator_ros.diagnostics(self), self._role_status()]))

    def _role_status(self) -> DiagnosticStatus:
        """``<node>: role``: the planner's role and term (timely_robot/link/rules.py), the active planner it
        follows (a standby) and its takeovers."""
        role, term = self.role, self.term
        values = [KeyValue(key="role", value=role), KeyValue(key="term", value=str(term)),
                  KeyValue(key="takeovers", value=str(len(self.takeovers)))]
        link = self._failover
        level, message = DiagnosticStatus.OK, f"{role}, term {term}"
        if self.fenced is not None:
            level, message = DiagnosticStatus.ERROR, f"fenced: {self.fenced}"
        elif link is not None and role == STANDBY:
            silent = link.silent_for()
            heard = link.heard
            if heard is None:
                level, message = DiagnosticStatus.WARN, f"{role}, term {term}: no active planner heard yet"
            else:
                rank = link.rank()
                replica = link.replica
                sync = "in sync" if replica.needs_snapshot is None else f"out of sync ({replica.needs_snapshot})"
                message = (f"{role}, term {term}: following {heard.msg.node} (term {heard.msg.term}, "
                           f"{len(replica)} goal(s) in flight, heard {silent:.1f} s ago, {sync})"
                           + (f"; {rank} standby(s) take over before this one" if rank else ""))
                if replica.needs_snapshot is not None:
                    level = DiagnosticStatus.WARN
                values.append(KeyValue(key="following", value=heard.msg.node))
                values.append(KeyValue(key="standbys before this one", value=str(rank)))
                values.extend(KeyValue(key=f"replica {k}", value=str(v)) for k, v in (
                    ("goals", len(replica)), ("sequence", replica.sequence), ("journals applied", replica.applied),
                    ("snapshots applied", replica.snapshots), ("sequence gaps", replica.gaps)))
        elif link is not None and role == ACTIVE:
            st = link.stats
            values.extend(KeyValue(key=f"journal {k}", value=str(v)) for k, v in (
                ("standbys following", link.followers()), ("journals", st.journals), ("snapshots", st.snapshots),
                ("entries", st.entries), ("ended", st.ended), ("snapshot requests", st.snapshot_requests),
                ("cpu s", f"{st.cpu_s:.3f}"),
                ("acknowledged", ", ".join(f"{n}: {q}" for n, q in sorted(link.acked.items())) or "-")))
        if self.takeovers:
            last = self.takeovers[-1]
            values.append(KeyValue(key="last takeover", value=f"term {last['term']} from {last['from']}: "
                                                              f"{len(last['adopted'])} goal(s) adopted"))
        if link is not None:
            values.extend(KeyValue(key=f"journal dropped: {k}", value=str(v)) for k, v in sorted(link.drops.items()))
        return DiagnosticStatus(level=level, name=f"{self.get_name()}: role", hardware_id=self.get_name(),
                                message=message, values=values)

    # -- failover (docs/guides/failover.md) -----------------------------------------------------
    def _takeover_s(self) -> float:
        """The active planner's silence after which a standby takes over (planner.takeover_s;
        0: half the robots' lease)."""
        t = self.params.planner.takeover_s
        return t if t > 0 else max(self.params.security.lease_s / 2, 0.5)

    def _failover_tick(self) -> None:
        """Every 50 ms: the active planner's journal (:meth:`_journal_tick`), or a standby's watch
        on the active one."""
        service, link = self.service, self._failover
        gap, self._last_tick = time.monotonic() - self._last_tick, time.monotonic()
        if service is None or link is None or self.fenced is not None:
            return
        if self.role == ACTIVE and link.standby_seen and gap >= self._takeover_s():
            # paused (SIGSTOP, a frozen host) past a standby's takeover time: it has taken over, or
            # would have; a planner that cannot know which must not command robots or answer clients
            self._fence(f"this planner was paused for {gap:.1f} s while a standby followed it "
                        f"(it takes over after {self._takeover_s():g} s)")
            return
        if self.role == ACTIVE:
            self._journal_tick(service, link)
            return
        if time.monotonic() - link.last_role_published >= ROLE_PERIOD_S:
            link.publish_role(STANDBY, self.term)  # standbys see each other (their order of takeover)
        rank = link.rank()
        takeover_s = self._takeover_s() + rank * TAKEOVER_STAGGER_S
        silent = self._silence.observe(link.heard_at(), time.monotonic(), takeover_s)
        if silent is not None and self._lifecycle_active:
            self.take_over(f"no journal for {silent:.2f} s" + (f" ({rank} standby(s) before this one were silent too)"
                                                                if rank else ""))

    def _journal_tick(self, service: PlannerService, link: FailoverLink) -> None:
        """The active planner's journal (docs/guides/failover.md): while a standby follows, a
        delta of the goals that changed every JOURNAL_PERIOD_S (empty, it is the heartbeat), within
        JOURNAL_MIN_S when goals were accepted (a takeover then keeps them), and a snapshot when
        one is due; with none following, only the heartbeat, every JOURNAL_PERIOD_S. Each goes
        through the scheduler thread (a planner whose scheduler is stuck falls silent and is taken
        over), which only takes the entries."""
        if self._journal_posted:
            return  # the last take is still queued behind the scheduler's work
        now = time.monotonic()
        following = link.followers() > 0
        snapshot = link.snapshot_due() is not None
        if snapshot and not following:
            following = True  # a standby asked before its role was heard
        if following != self._journal_following:
            with self._journal_lock:
                self._journal_following = following
                self._journal_ended.clear()
                self._unjournaled.clear()
            snapshot = snapshot or following  # a standby (again): it starts from a snapshot
        since = now - self._journal_last_take
        fresh = following and bool(self._unjournaled)  # goals accepted since the last take
        if not (snapshot or since >= JOURNAL_PERIOD_S or (fresh and since >= JOURNAL_MIN_S)):
            return
        self._journal_posted, self._journal_last_take = True, now
        term = self.term
        what = "snapshot" if snapshot else "delta" if following else "heartbeat"
        service.journal(lambda take: self._journal_taken(link, term, take), what)

    def _journal_taken(self, link: FailoverLink, term: int, take: JournalTake) -> None:
        """Scheduler thread: hand the take, the goals that ended since the last one and the goals
        accepted but not yet in the core to the journal's writer thread."""
        self._journal_posted = False
        service = self.service
        with self._journal_lock:
            ended, self._journal_ended = tuple(self._journal_ended), []
            fresh = []
            now = time.monotonic()
            for goal_id, at in list(self._unjournaled.items()):
                handle = self.goal_handles.get(goal_id)
                if handle is None or (service is not None and service.in_flight(goal_id)):
                    del self._unjournaled[goal_id]  # ended, or in the core: its start is in a take
                else:
                    fresh.append(JournalEntry(goal_id=goal_id, goal=GoalIn.of(handle.request), age_s=max(0.0, now - at)))
        # a whole entry carries its client's cancel key (the service does not know it)
        entries = tuple(replace(e, cancel_key_sha256=key) if not e.progress_only
                        and (key := self.cancel_rights.key_of(e.goal_id)) else e for e in take.entries + tuple(fresh))
        link.write(JournalOut(term, take.snapshot, entries, () if take.snapshot else ended, take.cpu_s))

    def take_over(self, why: str) -> list[str]:
        """Become the active planner (executor thread): a term above the last active one's, the
        robots told at once (a heartbeat at the new term renews their lease and fences the old
        planner off), the action server and services up, and every goal of the last journal
        adopted under its own goal id (the generation continues from its token ids, unfinished
        segments are sent again). Returns the adopted goal ids."""
        link, service = self._failover, self.service
        assert link is not None and service is not None
        t0 = time.monotonic()
        heard = link.heard
        journal = heard.msg if heard is not None else None
        old_term = max(self.term, int(journal.term) if journal is not None else 0)
        self._term.role = ACTIVE
        self.set_term(old_term + 1)
        if journal is not None and self._signer is not None:
            self._signer.counter.raise_to(int(journal.link_counter))
        entries = link.adoptable()
        stamp = self.get_clock().now().to_msg()
        for e in entries:  # the robots hear the new term first: their lease is renewed, the old planner fenced off
            if service.params.robot(e.goal.robot_id) is not None:
                self.publish(e.goal.robot_id, heartbeat_message(e.goal_id, e.goal.robot_id, stamp, self.term))
        # then the new term's journal, a snapshot with the goals being adopted: another standby
        # follows this planner from it instead of taking over too (its turn comes TAKEOVER_STAGGER_S later)
        link.publish_now(JournalOut(self.term, True, tuple(entries)))
        self._serve()
        adopted: list[str] = []
        handles: dict[str, Any] = {}
        for e in entries:
            g = e.goal
            request = PlanTask.Goal(robot_id=g.robot_id, instruction=g.instruction, robot_kind=g.robot_kind,
                                    task_type=g.task_type, ert_s=g.ert_s, alpha=g.alpha, beta=g.beta,
                                    skill_set=g.skill_set, max_tokens=g.max_tokens,
                                    cancel_key_sha256=e.cancel_key_sha256)
            handle = self._server.adopt_goal(bytes.fromhex(e.goal_id), request, stamp) if self._server else None
            if handle is None:
                continue
            handles[e.goal_id] = handle
            self.goal_handles[e.goal_id] = handle
            self.cancel_rights.protect(e.goal_id, e.cancel_key_sha256)
            adopted.append(e.goal_id)
        service.accepting = True
        service.adopt([e for e in entries if e.goal_id in handles],
                      lambda gid: (lambda outcome, h=handles[gid], gid=gid: self._end_goal(h, gid, outcome)))
        link.publish_role(ACTIVE, self.term, adopted)
        took = time.monotonic() - t0
        source = journal.node if journal is not None else "(none heard)"
        self.takeovers.append({"term": self.term, "from": source, "adopted": adopted, "s": took, "why": why})
        self.log("warning", f"took over from planner {safe_text(source)} (term {old_term}) at term {self.term}: {why}; "
                            f"adopted {len(adopted)} goal(s){': ' if adopted else ''}"
                            f"{', '.join(a[:8] for a in adopted[:20])}{' ...' if len(adopted) > 20 else ''}")
        return adopted

    def _on_higher_term(self, term: int, node: str) -> None:
        """A trusted journal of another planner at ``term`` above this one's (or at its own, from
        a planner whose name sorts first): an active planner has been replaced (it was paused or
        cut off, or another standby took over at the same moment) and stops serving; a standby
        follows."""
        if self.role != ACTIVE or self.fenced is not None:
            return
        if term == self.term:
            self._fence(f"planner {node} is active at this planner's term {term} (both took over at once; "
                        "the planner whose name sorts first stays)")
            return
        self._fence(f"planner {node} took over at term {term} (this planner's term is {self.term})")

    def _resumed(self) -> bool:
        """True while the failover tick has not run for a standby's takeover time (this planner
        was paused, and its first look at the journal is still to come)."""
        return (self.role == ACTIVE and self._failover is not None and self._failover.standby_seen
                and time.monotonic() - self._last_tick >= self._takeover_s())

    def _fence(self, why: str) -> None:
        """Stop serving: another planner took over (or may have) from this one."""
        if self.fenced is not None:
            return
        self.fenced = why
        self.log("error", f"{self.fenced}: this planner stops serving; its goals are that planner's now")
        self._unserve()
        service = self.service
        if service is not None:
            service.accepting = False
        if self._on_fenced is not None:
            self._on_fenced(self.fenced)

    @staticmethod
    def _header(stamp: Any) -> Any:
        from std_msgs.msg import Header

        return Header(stamp=stamp)
