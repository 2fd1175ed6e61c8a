"""The planning node: a thin ROS 2 lifecycle node over :class:`~.planner_service.PlannerService`.

Like the rclpy ``minimal_action_server`` example, this file holds only the ROS side: the
lifecycle transitions, the action server and services, the subscriptions and timers. The logic
lives in classes without ROS: the service (scheduling core, goal registry, robot link protocol),
the failover role (:mod:`llm_planner_node.service.failover_role`), the cancel rights
(:mod:`llm_planner_node.service.cancel_rights`) and the diagnostics
(:mod:`llm_planner_node.service.health_report`). What the planner sends goes through
:class:`.planner_ports.RosPorts`, robot statuses come in through :class:`.status_reader.StatusReader`,
the journal through :class:`.failover.FailoverLink`; message conversion lives in :mod:`.messages`
and the ``plan_task`` action server in :mod:`.action_server`.

Lifecycle (``lifecycle_msgs``; ``timely-fleet up`` drives the transitions itself):

- **configure**: build the service and load the engine (vLLM loads here, ~30 s on CPU); create
  the robot link (segments, statuses, lease heartbeats) and ``planner/goals|results|stats``;
- **activate**: accept goals;
- **deactivate**: stop accepting; goals in flight end CANCELLED ("planner deactivated") and
  their robots are stopped;
- **cleanup** and **shutdown**: end every goal, free the engine, destroy what configure created.

The action, ``planner/cancel_goal``, ``planner/stop_robots|approve``, ``planner/memory`` (the fleet
memory's sightings, :mod:`.memory_server`) and ``/diagnostics`` exist in
every state: goals and requests sent while the node is not active are refused with the reason
(a goal is accepted and aborted with ``STATUS_REJECTED``: a ROS 2 goal rejection cannot carry a
reason). Topics are relative to the node's namespace (:mod:`.messages`); ``/diagnostics`` carries
standard ``diagnostic_msgs/DiagnosticArray`` with OK / WARN / ERROR; every stamp comes from the
node's clock (``use_sim_time`` follows ``/clock``).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any, Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from std_msgs.msg import Header
from timely_fleet.action import PlanTask
from timely_fleet.msg import PlannerStats, RobotStatus
from timely_fleet.srv import CancelPlan

from llm_planner_node.config.params import FleetParams, memory_file
from llm_planner_node.core.clock import Clock
from llm_planner_node.core.engine_api import Engine
from llm_planner_node.core.task_model import EndKind, Request
from llm_planner_node.ros import memory_server as memory_ros
from llm_planner_node.ros import operator as operator_ros
from llm_planner_node.ros.action_server import FinishLaterActionServer, mark_cancelling
from llm_planner_node.ros.failover import FailoverLink
from llm_planner_node.ros.mission_server import MissionServer
from llm_planner_node.ros.messages import ACTION_NAME, DIAGNOSTICS_TOPIC, STATS_TOPIC, action_qos_kwargs
from llm_planner_node.ros.params import add_validation_callback, declare_parameters
from llm_planner_node.ros.planner_ports import RosPorts
from llm_planner_node.ros.status_reader import StatusReader
from llm_planner_node.service.cancel_rights import CancelRights
from llm_planner_node.service.failover_role import FailoverRole
from llm_planner_node.service.health_report import HealthReport, StatusReport
from llm_planner_node.service.memory import FleetMemory
from llm_planner_node.service.missions import MissionCoordinator
from llm_planner_node.service.planner_service import GoalIn, PlannerService, safe_text
from llm_planner_node.service.takeover import JournalEntry
from timely_robot.link.ros import STATUS_READER_QOS, STATUS_TOPIC, draining_subscription, status_topic
from timely_robot.link.rules import STANDBY
from timely_robot.link.signing import Keystore, LinkSigner, LinkVerifier, journal_key
from timely_robot.outcomes import RejectReason, Rejection


def diagnostic_status(report: StatusReport, hardware_id: str) -> DiagnosticStatus:
    """A :class:`~llm_planner_node.service.health_report.StatusReport` as the standard message."""
    return DiagnosticStatus(level=bytes([report.level]), name=report.name, hardware_id=hardware_id,
                            message=report.message, values=[KeyValue(key=k, value=v) for k, v in report.values])


#: a robot's battery and link reports older than this do not count for a mission's allocation (s)
MISSION_VITALS_S = 30.0

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
        self.goal_handles: dict[str, Any] = {}  # goal id -> action goal handle (feedback, operator cancels)
        self.cancel_rights = CancelRights(lambda: self.params.security.cancel_operator_keys_sha256)
        # the planner's term and role (timely_robot/link/rules.py): outlive configure and cleanup
        self.failover = FailoverRole(self, self.cancel_rights, term=self.params.planner.term,
                                     standby=bool(self.params.planner.standby if standby is None else standby),
                                     on_fenced=on_fenced)
        self.failover.set_timing(self.params.planner.takeover_s, self.params.security.lease_s)
        self.ports = RosPorts(self, self.failover, self.goal_handles)
        self._service_args = dict(engine=engine, engine_factory=engine_factory, prompt_builder=prompt_builder,
                                  clock=clock, ack_timeout_s=ack_timeout_s, max_resends=max_resends,
                                  robot_time_scale=robot_time_scale)
        self.service: PlannerService | None = None
        self.memory: FleetMemory | None = None  # the fleet memory, open between configure and cleanup
        self._lock = threading.Lock()
        self.goals_callback_group = ReentrantCallbackGroup()
        # created at configure, destroyed at cleanup and shutdown (_release)
        self.status_reader: StatusReader | None = None
        self._status_subs: list[Subscription] = []
        self._link: FailoverLink | None = None
        self._link_timer: Timer | None = None
        self._stats_pub = None
        self._health = HealthReport(self.get_name())
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
        # until it takes over (FailoverRole.take_over).
        self._server: FinishLaterActionServer | None = None
        self._missions: MissionServer | None = None
        self.coordinator: MissionCoordinator | None = None  # made at configure
        self._served: list[Any] = []
        if self.failover.role != STANDBY:
            self.serve()
        self.create_timer(1.0, self._publish_diagnostics)
        self.create_timer(FinishLaterActionServer.STATUS_PERIOD_S, lambda: self._server and self._server.flush_status(),
                          callback_group=self.goals_callback_group)

    # -- serving (FailoverRole's ports) ----------------------------------------------------------
    def serve(self) -> None:
        """The action server and the planner's services (an active planner's)."""
        self._server = FinishLaterActionServer(self, PlanTask, ACTION_NAME, execute_callback=self._start_goal,
                                               goal_callback=lambda _g: GoalResponse.ACCEPT,
                                               cancel_callback=self._on_cancel_request,
                                               callback_group=self.goals_callback_group,
                                               result_timeout=FinishLaterActionServer.RESULT_TIMEOUT_S,
                                               **action_qos_kwargs("server"))
        self._server.allow_cancel_all = self.params.security.allow_cancel_all
        self._server.rejects_at_once = lambda g: self.service is not None and self.service.precheck(g) is not None
        self._server.answers_held = self.failover.resumed
        self._missions = MissionServer(self, lambda: self.coordinator, self.goals_callback_group)
        before = set(self.services)
        self.create_service(CancelPlan, "planner/cancel_goal", self._on_cancel_goal, callback_group=self.goals_callback_group)
        operator_ros.attach(self)  # planner/stop_robots, planner/approve (operator_ros.py)
        memory_ros.attach(self)  # planner/memory (memory_server.py)
        self._served = [srv for srv in self.services if srv not in before]

    def unserve(self) -> None:
        """Stop serving (a fenced planner): no more goals or requests reach it."""
        server, self._server = self._server, None
        if server is not None:
            server.destroy()
        missions, self._missions = self._missions, None
        if missions is not None:
            missions.destroy()
        for srv in self._served:
            self.destroy_service(srv)
        self._served = []

    def adopt_goal(self, entry: JournalEntry) -> Callable[[Request | str], None] | None:
        """A goal of the journal, adopted in the action server under its own goal id: the callback
        that reports its end (None when the server cannot adopt it)."""
        g = entry.goal
        request = PlanTask.Goal(robot_id=g.robot_id, instruction=g.instruction, robot_kind=g.robot_kind,
                                task_type=g.task_type, ert_s=g.ert_s, alpha=g.alpha, beta=g.beta,
                                skill_set=g.skill_set, max_tokens=g.max_tokens,
                                cancel_key_sha256=entry.cancel_key_sha256)
        stamp = self.get_clock().now().to_msg()
        handle = self._server.adopt_goal(bytes.fromhex(entry.goal_id), request, stamp) if self._server else None
        if handle is None:
            return None
        self.goal_handles[entry.goal_id] = handle
        return lambda outcome: self._end_goal(handle, entry.goal_id, outcome)

    def log(self, level: str, text: str) -> None:
        self.ports.log(level, text)

    def _apply_params(self, params: FleetParams) -> None:
        """A run-time parameter change that passed validation (limits, timeouts, TUF presets)."""
        self.params = params
        if self.service is not None:
            self.service.update_params(params)

    # -- lifecycle -------------------------------------------------------------------------------
    def _open_memory(self) -> FleetMemory | None:
        """The fleet memory of ``planner.memory`` (None: off), its file one per node name."""
        mp = self.params.planner.memory
        path = memory_file(mp, self.get_name())
        if path is None:
            return None
        try:
            memory = FleetMemory(path, mp.max_age_s)
        except (sqlite3.Error, OSError, ValueError) as e:
            raise RuntimeError(f"the fleet memory cannot be opened at {path} (planner.memory.path): {e}") from None
        return memory

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        args = dict(self._service_args)
        memory: FleetMemory | None = None
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
            memory = self._open_memory()
            service = PlannerService(self.params, self.ports, memory=memory, **args)
        except Exception as e:  # noqa: BLE001 - the transition fails with the reason logged
            self.get_logger().error(f"configure failed: {safe_text(str(e) or repr(e), 500)}")
            if memory is not None:
                memory.close()
            return TransitionCallbackReturn.FAILURE
        self.memory = memory
        params = self.params
        self.ports.open(params, signer, service)
        self._stats_pub = self.create_publisher(PlannerStats, STATS_TOPIC, 10)
        self.status_reader = reader = StatusReader(service, verifier)
        self._health = HealthReport(self.get_name())
        if params.security.per_robot_topics:  # one topic per robot: access control can tell them apart
            self._status_subs = [
                draining_subscription(self.status_node, RobotStatus, status_topic(r.id),
                                      lambda m, rid=r.id: reader.on_raw(m, rid), STATUS_READER_QOS, raw=True)
                for r in params.robots]
        else:
            self._status_subs = [draining_subscription(self.status_node, RobotStatus, STATUS_TOPIC,
                                                       reader.on_raw, STATUS_READER_QOS, raw=True)]
        self._link = FailoverLink(self, params.security.lease_s,
                                  journal_key(keystore, [r.id for r in params.robots]) if keystore else None,
                                  signer.counter, self.failover, on_sightings=service.replicated_sightings)
        self.failover.attach(service, self._link, self.ports)
        self._link_timer = self.create_timer(0.05, self.failover.tick)
        self.service = service
        self.coordinator = MissionCoordinator(service, lambda: self.params,
                                              battery_pct=lambda rid: service.vitals.battery(rid, MISSION_VITALS_S),
                                              link_age_s=lambda rid: service.vitals.link_silent_s(rid, MISSION_VITALS_S),
                                              position=service.poses.fleet_position, goal_ended=self.ports.goal_ended,
                                              last_seen=(service.memory.last_position if service.memory is not None
                                                         else lambda _t: None))
        service.start()
        pp = params.planner
        where = memory_file(pp.memory, self.get_name()) if self.memory is not None else None
        self.get_logger().info(f"planner configured: policy={pp.policy}, engine={pp.engine.kind}, "
                               f"robots={', '.join(r.id for r in params.robots)}, fleet memory="
                               + (f"{where} (sightings kept {pp.memory.max_age_s:g} s)" if where else "off"))
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self.service is not None
        self.failover.lifecycle_active = True
        if self._link is not None:
            self._link.publish_role(self.failover.role, self.failover.term)
        if self.failover.role == STANDBY:
            self.get_logger().info("planner standby: following the active planner's journal, serving nothing until it "
                                   f"falls silent for {self.failover.takeover_s():g} s")
            return super().on_activate(state)
        self.service.accepting = True
        self.get_logger().info("planner active: accepting goals")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.failover.lifecycle_active = False
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
            self.coordinator = None
        if service is not None:
            service.close(reason)
        memory, self.memory = self.memory, None
        if memory is not None:
            memory.close()
        if self.status_reader is not None:
            self.status_reader.close()
        for sub in self._status_subs:
            self.status_node.destroy_subscription(sub)
        self._status_subs = []
        if self._link_timer is not None:
            self.destroy_timer(self._link_timer)
            self._link_timer = None
        self.failover.detach()
        if self._link is not None:
            self._link.destroy()
            self._link = None
        if self._stats_pub is not None:
            self.destroy_publisher(self._stats_pub)
            self._stats_pub = None
        self.ports.close()

    def destroy_node(self) -> None:
        """Destroy the node with its action server: rclpy's ``destroy_node`` leaves action servers
        (waitables) alive, and one still referenced (by a traceback, say) keeps ``plan_task``
        discoverable, so clients would take a dead planner for a live one."""
        if getattr(self, "_served", None) is not None:  # absent if the constructor failed early
            self.unserve()
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
        self.failover.goal_accepted(goal_id, goal)
        self.cancel_rights.protect(goal_id, g.cancel_key_sha256)
        reason = service.submit(goal_id, goal, lambda outcome: self._end_goal(handle, goal_id, outcome))
        if reason is not None:
            self._end_goal(handle, goal_id, reason)

    def _end_goal(self, handle: Any, goal_id: str, outcome: Request | str) -> None:
        """The goal's end (a rejection reason or its terminal request): result to the client."""
        self.goal_handles.pop(goal_id, None)
        self.cancel_rights.forget(goal_id)
        self.failover.goal_ended(goal_id)
        if self.failover.fenced is not None:  # another planner took this goal over: its result is that one's to give
            return
        result = self.ports.result(handle, goal_id, outcome)
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

    # -- diagnostics -----------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        """Once a second: ``planner/stats`` and ``/diagnostics`` (engine, goals, robots, operator, role)."""
        service, name = self.service, self.get_name()
        now = self.get_clock().now().to_msg()
        role = self.failover.report(name)
        if service is None:
            reports = [self._health.not_configured(), role]
        else:
            snap, counts = service.snapshot, service.snapshot.counters
            self._stats_pub.publish(PlannerStats(
                policy=service.params.planner.policy, queued=snap.queued, running=snap.running,
                suspended=snap.suspended, active_goals=snap.active_goals,
                goals_succeeded=counts.get(EndKind.SUCCEEDED.value, 0),
                goals_failed=sum(counts.get(k.value, 0) for k in EndKind if k not in (EndKind.SUCCEEDED, EndKind.CANCELLED)),
                goals_cancelled=counts.get(EndKind.CANCELLED.value, 0), goals_rejected=counts.get("rejected", 0),
                tokens_per_s=snap.tokens_per_s, kv_free_fraction=snap.kv_free_fraction, stamp=now))
            reports = self._health.reports(
                service, link_counts=self.status_reader.link_counts() if self.status_reader else {},
                cancel_refusals=self.cancel_rights.refusals,
                cancel_all_refused=self._server.refused_cancel_all if self._server else 0) + [role]
        self._diag_pub.publish(DiagnosticArray(header=Header(stamp=now),
                                               status=[diagnostic_status(r, name) for r in reports]))
