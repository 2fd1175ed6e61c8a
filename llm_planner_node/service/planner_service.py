"""The planner service: everything the planning node does, without ROS.

:class:`PlannerService` composes its parts, each given what it needs: the scheduling core
(:class:`~llm_planner_node.core.planner.Planner`) and its engine (:mod:`.engine_keeper`), goal
intake (:mod:`.intake`), the goals in flight and busy robots (:mod:`.registry`), robot statuses
(:mod:`.status_path`), the core's sink (:mod:`.sink`), the segment delivery protocol
(:mod:`.delivery`), operator control (:mod:`.operator_control`), the scheduler thread
(:mod:`.scheduler_loop`), diagnostics (:mod:`.diagnostics`) and, when given one, the fleet
memory of what the robots saw (:mod:`.memory`); the collaborators most of them
share (the core, the goals, the delivery protocol, the ports, the clock and the counters) are
passed to each as one :class:`~.shared.Shared`. The ROS node
(:mod:`llm_planner_node.ros.node`) is a thin shell: it converts messages and calls this service;
the service talks back through :class:`PlannerPorts` (publish a segment, a stop, feedback, a goal
record; log).

Threads: the core is single-threaded. ``submit``, ``cancel``, ``on_status``, ``end_all`` and
``update_params`` may be called from any thread: they put commands on a queue that the
scheduler thread drains between engine steps. A goal's end is reported once, through the
``on_end`` callback given at submit, with the terminal :class:`~.core.task_model.Request`
(never mutated afterwards) or a rejection reason.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import replace
from typing import Callable

from llm_planner_node.config.params import FleetParams
from llm_planner_node.core.batching import make_admission
from llm_planner_node.core.clock import Clock, WallClock
from llm_planner_node.core.engine_api import Engine
from timely_robot.execution_time import ExecutionTimeModel, TimeScaledEstimator
from timely_robot.outcomes import RejectReason, Rejection
from llm_planner_node.core.planner import Planner, PlannerConfig
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.task_model import Request, Segment
from llm_planner_node.core.text import KNOWN_ROBOTS_LISTED, safe_text
from llm_planner_node.engines.factory import predictor_for, prompt_builder_for
from llm_planner_node.grounding.objects import ObjectCheck
from llm_planner_node.service.commands import CommandQueue, EndAll, ForgetRequest, TakeJournal, UpdateParams
from llm_planner_node.service.delivery import SegmentDelivery
from llm_planner_node.service.diagnostics import Diagnostics, Snapshot
from llm_planner_node.service.engine_keeper import EngineHealth, EngineKeeper
from llm_planner_node.service.intake import GoalIntake
from llm_planner_node.service.memory import FleetMemory, Position, Sighting, SightingRecorder
from llm_planner_node.service.memory import answer as memory_answer
from llm_planner_node.service.operator_control import OperatorControl, StopOutcome
from llm_planner_node.service.ports import GoalIn, PlannerPorts, StatusIn
from llm_planner_node.service.poses import RobotPoses
from llm_planner_node.service.registry import GoalRegistry
from llm_planner_node.service import takeover
from llm_planner_node.service.scheduler_loop import COMMAND_SLICE, SchedulerLoop
from llm_planner_node.service.shared import Shared
from llm_planner_node.service.takeover import JournalEntry, JournalTake
from llm_planner_node.service.sink import PortsSink
from llm_planner_node.service.status_path import CANCELLED, DONE, EXECUTING, FAILED, StatusPath
from llm_planner_node.service.vitals import RobotVitals

__all__ = ["CANCELLED", "COMMAND_SLICE", "DONE", "ENGINE_RETRY_S", "EXECUTING", "FAILED", "KNOWN_ROBOTS_LISTED",
           "PENDING_GOALS_MAX", "EngineHealth", "GoalIn", "PlannerPorts", "PlannerService", "Snapshot", "StatusIn",
           "safe_text"]

#: Seconds between attempts to rebuild an engine that failed and could not be restarted.
ENGINE_RETRY_S = 5.0
#: Goals accepted but not yet ended; beyond this, new goals are refused at once.
PENDING_GOALS_MAX = 2_000


class PlannerService:
    """Goal intake, scheduling and robot link of one planner (see the module docstring)."""

    def __init__(self, params: FleetParams, ports: PlannerPorts, *, engine: Engine | None = None,
                 engine_factory: Callable[[], Engine] | None = None,
                 prompt_builder: Callable[..., object] | None = None,
                 clock: Clock | None = None, ack_timeout_s: float = 1.0, max_resends: int = 3,
                 robot_time_scale: float = 1.0, poses: RobotPoses | None = None,
                 memory: FleetMemory | None = None,
                 position_of: Callable[[str], Position | None] | None = None) -> None:
        """``memory``: the fleet memory the robots' sightings go to (None: none kept; the caller
        owns it and closes it); ``position_of(robot_id)``: the robot's position in the fleet frame
        now, for its sightings (default: :meth:`RobotPoses.fleet_position` of ``poses``)."""
        self.params = params
        self.ports = ports
        self.clock = clock or WallClock()
        owns_engine = engine is None  # a lent engine (tests, embedding) is not closed here
        engine = engine or (engine_factory() if engine_factory else None)
        if engine is None:
            raise ValueError("PlannerService needs an engine or an engine_factory")
        pp = params.planner
        prompt_builder = prompt_builder or prompt_builder_for(pp.engine)
        policy = get_policy(pp.policy, max_batch=pp.max_batch if pp.batching_mode == "fixed" else None,
                            admission=make_admission(pp.admission, **({"hopeless": pp.hopeless}
                                                                       if pp.hopeless != "keep" else {})))
        self.exec_model = ExecutionTimeModel()  # real seconds; robot_time_scale: simulated robots' speed-up
        self.counters: Counter[str] = Counter()
        self.accepting = False
        self._wake = threading.Event()  # set when a command or a status arrives (idle wait)
        #: the scheduler thread's typed commands (:mod:`.commands`), each part handling its own
        self.commands = CommandQueue(self._wake_up)
        self.commands.on(ForgetRequest, self._apply_forget)
        self.commands.on(EndAll, self._apply_end_all)
        self.commands.on(UpdateParams, self._apply_params)
        self.commands.on(TakeJournal, self._apply_take_journal)
        self._journal_publish: Callable[[JournalTake], None] | None = None
        self.goals = GoalRegistry()
        self.delivery = SegmentDelivery(ack_timeout_s, max_resends, pp.robot_timeout_s)
        self.sink = PortsSink(self.goals, self.delivery, ports, self.clock, self.counters, self.commands)
        self.planner = Planner(engine, policy, self.clock,
                               self.exec_model if robot_time_scale == 1.0
                               else TimeScaledEstimator(self.exec_model, robot_time_scale), sink=self.sink,
                               config=PlannerConfig(network_latency_s=pp.network_latency_s),
                               predictor=predictor_for(policy, pp.engine), segment_check=self._segment_check)
        # what the parts below share (the sink's are the same, but the core it feeds needs it first)
        shared = Shared(self.planner, self.goals, self.delivery, ports, self.clock, self.counters)
        # the operator releases held segments through the sink's dispatch; the sink asks the
        # operator's hold before each dispatch (set once the operator exists)
        self.operator = OperatorControl(shared, self._current_params, self.commands, dispatch=self.sink.dispatch)
        self.sink.hold = self.operator.hold
        self.engine_keeper = EngineKeeper(shared, engine_factory, owns_engine, self._current_params, prompt_builder,
                                          retry_s=ENGINE_RETRY_S)
        self.vitals = RobotVitals()
        #: where each robot is (the fleet frame), from the poses its statuses report; the mission
        #: coordinator reads it to weigh a robot's travel
        self.poses = poses if poses is not None else RobotPoses(params)
        self.memory = memory
        self.sightings = (SightingRecorder(memory, position_of or self.poses.fleet_position, ports.log)
                          if memory is not None else None)
        self.objects = ObjectCheck()
        self._names_objects = any(r.kind in ("drone", "arm") for r in params.robots)
        if self._names_objects:  # their plans name objects: load it now, not at a first check
            self.objects.meaning.start()
        self.intake = GoalIntake(shared, self._current_params, prompt_builder, commands=self.commands,
                                 unavailable=self._unavailable, max_pending=PENDING_GOALS_MAX, vitals=self.vitals,
                                 objects=self.objects)
        self.planner.replanner = self.intake.replan  # a plan's re_plan: the intake writes the next goal
        self.statuses = StatusPath(shared, self._current_params, wake_up=self._wake_up, sightings=self.sightings)
        self.diagnostics = Diagnostics(shared, self.statuses)
        self.loop = SchedulerLoop(shared, self.engine_keeper, self.commands, self._wake, self._wake_up, self.statuses,
                                  self.operator, self.diagnostics)
        self.engine_keeper.warm_up(engine)

    def _segment_check(self, request: Request, segment: Segment) -> str | None:
        """Before a segment is dispatched: its objects are the instruction's and perceivable, and
        it fits the robot's budget; else why not (the goal ends INVALID_PLAN with it)."""
        return self.intake.object_problem(request, segment) or self.sink.budget_check(request, segment)

    def _current_params(self) -> FleetParams:
        return self.params

    def _wake_up(self) -> None:
        """A command or a status arrived: end the scheduler's idle wait, or its engine's wait (a
        robot status is applied at once, not after the engine's next event)."""
        self._wake.set()
        wake = getattr(self.planner.engine, "wake", None)  # optional in the engine contract
        if wake is not None:
            wake()

    def _apply_forget(self, cmd: ForgetRequest) -> None:
        """Scheduler thread: drop an ended request from the core."""
        self.diagnostics.forgotten(cmd.request)
        self.planner.forget(cmd.request.id)

    def _unavailable(self) -> Rejection | None:
        """Why the planner takes no goal now (its lifecycle state, its engine), or None."""
        if not self.accepting:
            return Rejection(RejectReason.NOT_ACTIVE,
                             "the planner is not active (lifecycle state is not 'active'): it accepts no goals now")
        health = self.engine_keeper.health
        if health.state == "down":
            return Rejection(RejectReason.ENGINE_DOWN, f"the inference engine is down ({health.reason}): "
                                                       "no goal can be planned until it restarts")
        return None

    # -- state (diagnostics, the node) ------------------------------------------------------------
    @property
    def health(self) -> EngineHealth:
        return self.engine_keeper.health

    @property
    def snapshot(self) -> Snapshot:
        return self.diagnostics.snapshot

    @property
    def status_drops(self) -> Counter[str]:
        return self.statuses.drops

    @property
    def status_delays(self) -> deque[float]:
        return self.statuses.delays

    @property
    def flood_seconds(self) -> float:
        return self.statuses.flood_seconds

    # -- lifecycle -------------------------------------------------------------------------------
    #: at most this long :meth:`start` waits for the meaning model of the object check
    MEANING_WAIT_S = 60.0

    def start(self) -> None:
        """Start the scheduler thread. With robots whose plans name objects, wait first for the
        object check's meaning model (loading since the service was made, ~10 s, beside the
        engine's own load; once per process): a first check must not hold the scheduler thread,
        and with it every other goal's dispatch and its robot's next segment, while it loads."""
        if self._names_objects:
            self.objects.meaning.wait(self.MEANING_WAIT_S)
        self.loop.start()

    def end_all(self, reason: str, wait_s: float = 2.0) -> None:
        """End every goal in flight (CANCELLED with ``reason``) and wait until each reported."""
        self.commands.post(EndAll(reason))
        deadline = time.monotonic() + wait_s
        while self.goals.by_request and time.monotonic() < deadline and self.loop.started:
            time.sleep(0.02)

    def close(self, reason: str = "planner node shutting down") -> None:
        """End every goal, stop the scheduler thread, free the engine."""
        if self.loop.stopped:
            return
        self.accepting = False
        self.end_all(reason)
        self.loop.stop()
        self.engine_keeper.close()

    def update_params(self, params: FleetParams) -> None:
        """Settings that may change while running (limits, timeouts, TUF presets)."""
        self.commands.post(UpdateParams(params))

    def _apply_end_all(self, cmd: EndAll) -> None:
        for rid in list(self.goals.by_request):
            self.planner.cancel(rid, cmd.reason)

    def _apply_params(self, cmd: UpdateParams) -> None:
        params = cmd.params
        self.params = params
        self.delivery.silence_timeout_s = params.planner.robot_timeout_s
        self.planner.config = PlannerConfig(network_latency_s=params.planner.network_latency_s)

    # -- goals (any thread) ----------------------------------------------------------------------
    def validate(self, g: GoalIn) -> str | None:
        return self.intake.validate(g)

    def precheck(self, g: GoalIn) -> Rejection | None:
        return self.intake.precheck(g)

    def submit(self, goal_id: str, g: GoalIn, on_end: Callable[[Request | str], None]) -> Rejection | None:
        return self.intake.submit(goal_id, g, on_end)

    def cancel(self, goal_id: str) -> None:
        self.intake.cancel(goal_id)

    # -- failover (any thread) ---------------------------------------------------------------------
    def journal(self, publish: Callable[[JournalTake], None], what: str = "delta") -> None:
        """Take the journal of the goals in flight (:func:`.takeover.take`): ``what`` is
        ``delta`` (the goals that changed since the last take), ``snapshot`` (every one) or
        ``heartbeat`` (none). ``publish(take)`` is called on the scheduler thread: it must only
        hand the take on (serializing and signing happen elsewhere)."""
        self._journal_publish = publish
        self.commands.post(TakeJournal(what))

    def _apply_take_journal(self, cmd: TakeJournal) -> None:
        if self._journal_publish is not None:
            take = takeover.take(self.goals, self.planner, self.clock.now(), cmd.what)
            if cmd.what != "heartbeat" and self.sightings is not None:  # what robots saw since the last take
                take = replace(take, sightings=self.sightings.take_new())
            self._journal_publish(take)

    def in_flight(self, goal_id: str) -> bool:
        """Has the goal reached the core and not ended (scheduler thread)?"""
        return goal_id in self.goals.by_goal_id

    def adopt(self, entries: list[JournalEntry], on_end_of: Callable[[str], Callable[[Request | str], None]]) -> None:
        """Take over the goals of a planner that fell silent (:meth:`GoalIntake.adopt`):
        ``on_end_of(goal_id)`` is the callback that reports that goal's end."""
        for entry in entries:
            self.intake.adopt(entry, on_end_of(entry.goal_id))

    def active_goals(self) -> dict[str, str]:
        """robot id -> the goal it runs now (a copy; any thread)."""
        return self.goals.active()

    # -- robot status (any thread) ---------------------------------------------------------------
    def check_status(self, st: StatusIn) -> str | None:
        return self.statuses.check_status(st)

    def expects_status(self, goal_id: str) -> bool:
        return self.statuses.expects_status(goal_id)

    def on_status(self, st: StatusIn) -> bool:
        ok = self.statuses.on_status(st)
        if ok:  # well formed, of a configured robot
            self.vitals.update(st.robot_id, st.measured)
            self.poses.update(st.robot_id, st.pose, st.received)
        return ok

    def on_vitals(self, robot_id: str, measured: tuple[float, float, float, float], scene: list[str] | None = None,
                  pose: tuple[float, float, float, float] | None = None, received: float | None = None) -> None:
        """An idle robot's report of what it measures (battery, temperature, height, link age, its
        pose in its own frame) and sees; ``received``: when it was taken off the wire (monotonic;
        None: now)."""
        if self._current_params().robot(robot_id) is not None:
            self.vitals.update(robot_id, measured, scene)
            self.poses.update(robot_id, pose, time.monotonic() if received is None else received)
            # what it sees, where it is now (this report's pose); a standby hears the same reports
            # and gets the active planner's sightings in its journal: it records none of its own
            if scene and self.sightings is not None and self.accepting:
                self.sightings.from_scene(robot_id, scene)

    # -- fleet memory (any thread) -----------------------------------------------------------------
    def query_memory(self, label: str, max_results: int) -> tuple[list[Sighting], str]:
        """``planner/memory``: the newest sightings of ``label`` and one sentence (:func:`.memory.answer`)."""
        return memory_answer(self.memory, label, max_results)

    def replicated_sightings(self, sightings: list[Sighting]) -> None:
        """Sightings the active planner journaled (this planner is its standby): into this one's memory."""
        if self.sightings is not None and sightings:
            self.sightings.replicated(sightings)

    # -- operator control (any thread) -------------------------------------------------------------
    def stop_robots(self, robot_ids: list[str], all_robots: bool, operator: str, wait_s: float) -> StopOutcome:
        """An operator's stop (:meth:`OperatorControl.stop`)."""
        return self.operator.stop(robot_ids, all_robots, operator, wait_s)

    def decide(self, goal_id: str, approve: bool, operator: str) -> tuple[bool, str]:
        """An operator's approval or denial of a held segment (:meth:`OperatorControl.decide`)."""
        return self.operator.decide(goal_id, approve, operator)

    def operator_refused(self, text: str) -> None:
        """Record an operator request the ROS side refused."""
        self.operator.refused(text)

    def operator_view(self) -> tuple[list[tuple[str, str, int, float]], dict[str, int], list[str]]:
        """Goals waiting for approval, operator counters and last events (``/diagnostics``)."""
        return self.operator.view()

    # -- operator control (scheduler thread) -----------------------------------------------------
    def dispatch(self, request: Request, segment: Segment) -> None:
        """Send a segment on (the operator's release of approved segments)."""
        self.sink.dispatch(request, segment)
