"""The adapter core (no ROS): executes a robot's plan segments strictly in order and reports each
segment's status; :class:`~robot_adapters.adapter_node.AdapterNode` hosts cores on ROS.

* :class:`AdapterCore`: per robot, receives segments (``submit``), orders them by
  ``(goal, sequence)``, executes them one at a time through a
  :class:`~robot_adapters.executor.SkillExecutor`, and emits :class:`StatusEvent` objects.
  Cores have no thread of their own: one :class:`~robot_adapters.event_loop.EventLoop` per
  process drives every robot (skills, budgets and gap timeouts are callbacks and timers on it;
  real robots' blocking clients run on a small bounded pool).

Rules a core enforces
---------------------
* **Order**: segments of a goal run in ``sequence`` order 0, 1, 2, ...; a segment that arrives
  early is queued (status RECEIVED) until its predecessors ran. Goals run in order of arrival.
* **Duplicates** (a sequence already received or executed) are ignored and counted.
* **Gaps**: if the missing sequence has not arrived ``gap_timeout_s`` after a later one, the goal
  fails (FAILED "segment k never arrived") and its queued segments are dropped: a plan is never
  executed with a hole in it.
* **Safety**: every segment is validated *before any command is sent*: each skill must be in the
  robot's skill set with arguments inside the safe ranges (``SkillSet.validate``), and MiniSpec
  text must parse (the interpreter also checks variable arguments at run time, before the call).
  A refused segment yields FAILED with the reason; the rest of the goal is refused too.
* **Failures**: an executor error yields FAILED with its text and aborts the goal.
* **Timeouts**: each skill gets its skill set's limit (``SkillSpec.max_s``) or
  ``skill_timeout_factor x worst case`` (the execution-time model's profiled maximum, never its
  optimistic prediction), times ``time_scale``, plus ``skill_timeout_margin_s`` seconds
  (:meth:`AdapterCore.skill_budget_s`); when exceeded the executor is stopped and the segment
  FAILS with "timeout".
* **Cancellation**: a ``SkillSegment`` with ``cancel=True`` (or :meth:`AdapterCore.cancel`) stops
  the current skill (``executor.stop()``), drops the goal's queued segments and reports
  CANCELLED.
* **Planner terms** (fencing, ``robot/timely_robot/link/rules.py``): the core remembers the highest
  planner term it accepted (for as long as the process runs, across goals); a segment, stop or
  heartbeat with a lower term is dropped before it has any effect (no lease renewal, nothing
  started, queued or stopped) and counted (:data:`~timely_robot.link.rules.STALE_TERM`); a
  higher term is accepted and becomes the one remembered. Term 0 (no term: a planner from before
  terms) is accepted only while no term >= 1 was seen.
* **Lease grace** (``lease_grace_s`` > 0, for a standby planner; 0 = off): when the lease expires
  while the robot is busy, the robot is *held* instead of stopped for good: the running skill is
  interrupted (``executor.stop()``) and its segment reports DONE with ``error="interrupted:
  planner lost (...); robot held for up to G s waiting for a standby planner"`` and no skill
  durations (the planner, which reads ``core.link.INTERRUPTED``, ends that goal ROBOT_FAILED with
  it: the segment did not all happen; its execution-time model learns nothing from it); no
  segment of any goal starts while held (stops and halts still run). Only a message (heartbeat,
  segment or stop) of a planner term *above* the one obeyed when the hold began releases it:
  a goal that was waiting for (or had queued) its next segment goes on with it. A message of the held term is obeyed as
  usual (a segment is queued, a stop stops its goal) but neither releases nor extends the hold.
  If no higher term speaks within ``lease_grace_s``, every goal that was held or is busy is
  stopped as by the lease (``stopped: planner lost (...); no standby took over within G s``).

Status events carry the measured per-skill durations (``skill_names`` / ``skill_durations_s``),
progress, elapsed time and the adapter's own predicted remaining time. Subclassing for a new
robot means writing a :class:`SkillExecutor` (``execute(call, cancel)``, ``stop()``), then
``node.add_robot(AdapterCore(robot_id, executor, node.status_publisher(robot_id)))`` on an
``robot_adapters.adapter_node.AdapterNode`` with the signer and verifier ``security.mode: sign`` needs: see the README's
*Extend* section and ``robot_adapters.host.start_adapters``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from timely_robot.budgets import Budget, BudgetExceeded, BudgetMeter, budget_for, pose_after
from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.link.rules import INTERRUPTED, SegmentIn
from timely_robot.outcomes import STATE_NAMES, RobotState
from timely_robot.skills import KIND_LANGUAGE, REPLAN_SKILLS, SkillCall, SkillError, SkillSet

from robot_adapters.event_loop import EventLoop, Watchdog, default_loop
from robot_adapters.executor import Measured, SkillCancelled, SkillExecutionError, SkillExecutor, answer_text

log = logging.getLogger("timely_fleet.adapter")
_VAR = re.compile(r"^_\d+$")

STATE_IDLE, STATE_RECEIVED, STATE_EXECUTING, STATE_DONE, STATE_FAILED, STATE_CANCELLED = RobotState



@dataclass
class StatusEvent:
    robot_id: str
    goal_id: str
    sequence: int
    state: int
    current_skill: str = ""
    progress: float = 0.0
    elapsed_s: float = 0.0
    predicted_remaining_s: float = 0.0
    skill_names: list[str] = field(default_factory=list)
    skill_durations_s: list[float] = field(default_factory=list)
    error: str = ""
    stamp: float = field(default_factory=time.time)
    #: what the segment's calls answered so far: (skill call as text, value as text), in order
    answers: list[tuple[str, str]] = field(default_factory=list)
    #: the plan's return value (MiniSpec ``->``) as text, on the status of the segment that returned
    return_value: str | None = None
    #: the robot's measured state when the status was made (see SkillExecutor.measured)
    measured: Measured = field(default_factory=Measured)
    #: what the robot sees now (TypeFly's scene entries), on idle reports; None: not reported
    scene: list[str] | None = None
    #: the robot's pose in its own frame when the status was made (SkillExecutor.measured_pose:
    #: x, y, z m, yaw rad); None: it has none
    pose: tuple[float, float, float, float] | None = None

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.state, str(self.state))


@dataclass
class _Goal:
    goal_id: str
    expected: int = 0
    pending: dict[int, SegmentIn] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    finished: bool = False
    gap_since: float | None = None
    interpreter: Any = None  # one per goal: MiniSpec variables live across its segments
    run_call: Any = None  # the current segment's skill runner (the interpreter calls this)
    stopped: str | None = None  # after a stop: the idle state the robot was left in
    meter: BudgetMeter | None = None  # what the goal made the robot do so far (its budget)
    return_reported: bool = False  # the plan's return value went out on a status


#: seconds between a measuring robot's idle reports (battery, temperature) to the planner
VITALS_S = 2.0

WATCHDOG = Watchdog()  # skill time budgets: timers on the process's adapter event loop


@dataclass
class AdapterHooks:
    """What a tool observing an adapters' process (a benchmark counting executions) is told, by
    the thread that does it: each robot an :class:`AdapterNode` hosts (``robot_added(node,
    core)``) and each segment as it starts executing, before its checks (``segment_started(core,
    segment)``). An observer must be quick; what it raises is logged and ignored."""

    robot_added: list[Callable[[Any, Any], None]] = field(default_factory=list)
    segment_started: list[Callable[[Any, SegmentIn], None]] = field(default_factory=list)

    def notify(self, observers: list[Callable[..., None]], *args: Any) -> None:
        """Tell each of ``observers`` ``args`` (nothing to do when none listens)."""
        if not observers:
            return
        for fn in list(observers):
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - an observer must never disturb the robot
                log.exception("adapter hook %r failed", fn)


#: the process's adapter hooks: tools append observers to its lists, the adapters only notify them
HOOKS = AdapterHooks()


@dataclass
class _Run:
    """The segment a core is executing: its skill calls come from ``gen`` one at a time."""

    seg: SegmentIn
    goal: _Goal
    gen: Any
    planned: list[SkillCall]
    predicted: list[float]
    t_start: float
    names: list[str] = field(default_factory=list)
    durs: list[float] = field(default_factory=list)
    call: SkillCall | None = None
    t0: float = 0.0
    timer: int | None = None
    waiting: object | None = None  # token of the executor call we wait for (None: not waiting)
    answers: list[tuple[str, str]] = field(default_factory=list)  # (call, value) of calls that answered


def _plain(calls: list[SkillCall]) -> Any:
    for call in calls:
        yield call


class AdapterCore:
    """Ordering, safety, execution and status of one robot (thread-safe, ROS-free).

    Event-driven: no thread of its own. ``submit``/``cancel`` (any thread) update the queues and
    schedule :meth:`_pump` on the process's :class:`~robot_adapters.event_loop.EventLoop`, which
    starts the next segment's skills one at a time (``SkillExecutor.start``) and continues in the
    executor's completion callback; skill budgets and gap timeouts are timers on the same loop."""

    def __init__(
        self,
        robot_id: str,
        executor: SkillExecutor,
        publish: Callable[[StatusEvent], None] | None = None,
        *,
        skill_set: SkillSet | None = None,
        model: ExecutionTimeModel | None = None,
        use_minispec: bool | None = None,
        gap_timeout_s: float = 5.0,
        skill_timeout_factor: float = 2.0,
        skill_timeout_margin_s: float = 5.0,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        loop: EventLoop | None = None,
        budget: Budget | None = None,
        lease_s: float | None = None,
        lease_grace_s: float = 0.0,
    ) -> None:
        self.robot_id = robot_id
        self.executor = executor
        self.publish = publish or (lambda ev: None)
        self.skill_set = skill_set or executor.skill_set
        self.robot_kind = getattr(executor, "robot_kind", self.skill_set.robot_kind)
        self.model = model or ExecutionTimeModel()
        self.use_minispec = (KIND_LANGUAGE.get(self.skill_set.robot_kind) == "minispec") if use_minispec is None \
            else use_minispec
        #: what one goal may make this robot do (timely_robot/budgets.py), enforced call by call
        self.budget = budget if budget is not None else budget_for(self.robot_kind)
        #: drones: position and yaw relative to the take-off point (cm, degrees), from the moves
        #: executed (synchronised with the executor's own pose where it has one), for the fence
        self.pose: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
        self.budget_refusals = 0
        #: the planner's lease (robot/timely_robot/link/rules.py): while the robot executes or has
        #: segments queued and the planner has been silent this long, the robot is stopped
        self.lease_s = lease_s if lease_s else None
        self._lease_at = clock()
        self._lease_timer: int | None = None
        self.lease_stops = 0
        #: with a standby planner: how long a robot whose lease expired is held, its goals paused,
        #: waiting for a planner of a higher term before its goals end (0: they end at once)
        if not lease_grace_s >= 0:
            raise ValueError(f"lease_grace_s must be >= 0 seconds, got {lease_grace_s!r}")
        self.lease_grace_s = float(lease_grace_s)
        self.lease_holds = 0  # lease expiries that held the robot (lease_grace_s > 0)
        self.lease_resumes = 0  # holds a planner of a higher term released in time
        self._held_term: int | None = None  # while held: the term obeyed when the hold began
        self._held_goals: set[str] = set()  # goals busy when the hold began
        self._hold_why = ""  # "planner lost (no word for X s, lease Y s)" of the current hold
        self._hold_id = 0  # numbers the holds (a late timer of an ended hold does nothing)
        self._hold_timer: int | None = None
        self._interrupted: tuple[str, int] | None = None  # (goal, sequence) the hold interrupted
        #: planner terms (fencing): the highest term accepted, and messages dropped for a lower one
        self.term = 0
        self.stale_term_drops = 0
        self._stale_logged: set[int] = set()  # stale terms already logged (once each)
        self._stop_why: dict[str, str] = {}  # goal id -> why the adapter itself stopped it
        self.gap_timeout_s = gap_timeout_s
        self.skill_timeout_factor = skill_timeout_factor
        self.skill_timeout_margin_s = skill_timeout_margin_s
        self.time_scale = time_scale
        self.clock = clock
        self.loop = loop or default_loop()
        self.duplicates = 0
        self.events: deque[StatusEvent] = deque(maxlen=1000)  # recent events (debugging, tests)
        self._goals: dict[str, _Goal] = {}
        self._order: deque[str] = deque()  # goal ids in arrival order
        self._cv = threading.Condition()  # guards the state below (an RLock: re-entrant)
        self._cancel = threading.Event()
        self._current: tuple[str, int] | None = None
        self._run: _Run | None = None
        self._halts: deque[str] = deque()  # goals whose robot must be brought to idle (before the next segment)
        self._halting = False
        self._shutting_down = False
        self._last_status: dict[tuple[str, int], StatusEvent] = {}  # latest report per (goal, sequence)
        self._timed_out = False
        self._stop = False
        self._started = False
        self._kicked = False
        self._gap_timer: int | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "AdapterCore":
        with self._cv:
            if not self._started:
                self._started = True
                self._kick()
                if type(self.executor).measured is not SkillExecutor.measured:
                    self.loop.call_later(VITALS_S, self._report_vitals)
        return self

    def _report_vitals(self) -> None:
        """Loop, every VITALS_S: what the robot measures, on an idle status with no goal (the
        planner's battery check reads it between goals)."""
        if self._stop:
            return
        if self._current is None and type(self.executor).scene_view is not SkillExecutor.scene_view:
            from robot_adapters.event_loop import run_blocking  # a detection blocks: not on the loop

            run_blocking(self.loop, lambda: (self.executor.measured(), self.executor.scene_view()),
                         self._vitals_done)
            return
        self._vitals_done((self.executor.measured(), None), None)

    def _vitals_done(self, value: Any, err: BaseException | None) -> None:
        try:
            if err is not None:
                raise err
            m, scene = value
            pose = self._measured_pose()
            if scene is not None or m.any() or pose is not None:
                self.publish(StatusEvent(self.robot_id, "", 0, STATE_IDLE, measured=m, scene=scene, pose=pose))
        except Exception:  # noqa: BLE001 - a robot that cannot say its state this time
            log.debug("%s: idle report failed", self.robot_id, exc_info=True)
        if not self._stop:
            self.loop.call_later(VITALS_S, self._report_vitals)

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._shutting_down = True
            self._stop = True
            self._cancel.set()
            self.loop.cancel(self._gap_timer)
            self.loop.cancel(self._hold_timer)
            self._cv.notify_all()
        self.executor.stop()
        if self._started and not self.loop.in_loop():  # the running segment reports CANCELLED first
            with self._cv:
                self._cv.wait_for(lambda: self._current is None and not self._halting, timeout)

    def idle(self) -> bool:
        with self._cv:
            return self._current is None and not any(g.pending for g in self._goals.values())

    def _kick(self) -> None:
        """Look for work on the loop (coalesced: one pending look at a time)."""
        with self._cv:
            if self._kicked or not self._started:
                return
            self._kicked = True
        self.loop.call_soon(self._pump)

    # ------------------------------------------------------------------ input
    def admit_term(self, term: int) -> bool:
        """The term rule for one verified planner message: False (dropped, counted, logged once
        per stale term) when ``term`` is below the highest term accepted; else True, and a higher
        term becomes the one this robot obeys. Callers act on the message only when True."""
        term = int(term)
        with self._cv:
            if term < self.term:
                self.stale_term_drops += 1
                if term not in self._stale_logged and len(self._stale_logged) < 64:
                    self._stale_logged.add(term)
                    log.warning("%s: dropped a message from planner term %d because this robot obeys "
                                "planner term %d now", self.robot_id, term, self.term)
                return False
            if term > self.term:
                old, self.term = self.term, term
                # first contact is not news; a planner that took over is
                (log.info if old else log.debug)("%s: planner term %d -> %d", self.robot_id, old, term)
                if self._held_term is not None and term > self._held_term:
                    self._release_hold_locked(term)
            return True

    def heartbeat(self, term: int = 0) -> bool:
        """A planner heartbeat of ``term``: renews the lease unless the term is stale (False)."""
        with self._cv:
            if not self.admit_term(term):
                return False
            self.renew_lease()
            return True

    def renew_lease(self) -> None:
        """The planner spoke (a heartbeat, a segment or a stop): its lease runs lease_s from now."""
        with self._cv:
            self._lease_at = self.clock()
            self._arm_lease()

    def _arm_lease(self) -> None:
        if self.lease_s is not None and self._lease_timer is None and self._started:
            self._lease_timer = self.loop.call_later(self.lease_s / 4, self._check_lease)

    def _check_lease(self) -> None:
        """Loop: stop (or, with ``lease_grace_s``, hold) the robot if it works for a planner that
        has gone silent."""
        with self._cv:
            self._lease_timer = None
            if self._held_term is not None or self._stop:
                return  # held: the hold's own timer decides (re-armed by the next planner message)
            # executing, or segments queued: a robot that waits idle for a next segment is not moving
            # (and one whose plan ended without a final flag looks the same: stopping it would
            # report a stop for a goal that succeeded)
            busy = self._current is not None or any(g.pending for g in self._goals.values())
            if not busy or self.lease_s is None:
                return  # re-armed by the next planner message
            silent = self.clock() - self._lease_at
            if silent <= self.lease_s:
                self._arm_lease()
                return
            why = f"planner lost (no word for {silent:.1f} s, lease {self.lease_s:g} s)"
            if self.lease_grace_s > 0:
                self._hold_locked(why)
                return
            self.lease_stops += 1
            log.warning("%s: %s: stopping the robot", self.robot_id, why)
            for gid in list(self._order):
                g = self._goals[gid]
                if (self._current is not None and self._current[0] == gid) or g.pending:
                    self._stop_why[gid] = why
                    self._cancel_locked(gid, -1)

    def held(self) -> bool:
        """Is the robot held (its lease expired, waiting for a planner of a higher term)?"""
        with self._cv:
            return self._held_term is not None

    def _hold_locked(self, why: str) -> None:
        """The lease expired with ``lease_grace_s`` > 0: interrupt the running skill, start no
        segment, and wait up to ``lease_grace_s`` for a planner of a higher term."""
        self.lease_holds += 1
        self._hold_id += 1
        self._held_term = self.term
        self._hold_why = why
        self._held_goals = {gid for gid, g in self._goals.items()
                            if g.pending or (self._current is not None and self._current[0] == gid)}
        log.warning("%s: %s: robot held, its goals paused, for up to %g s waiting for a planner of a term "
                    "above %d", self.robot_id, why, self.lease_grace_s, self.term)
        hold = self._hold_id
        self._hold_timer = self.loop.call_later(self.lease_grace_s, lambda: self._end_hold(hold))
        if self._current is not None:  # the running segment reports DONE "interrupted: ..." when its skill ends
            self._interrupted = self._current
            self._cancel.set()
            self.executor.stop()

    def _release_hold_locked(self, term: int) -> None:
        """A planner of a higher term spoke during the hold: the goals go on."""
        self.lease_resumes += 1
        self.loop.cancel(self._hold_timer)
        self._hold_timer = None
        self._held_term = None
        self._held_goals = set()
        for g in self._goals.values():  # a hole in a queue: the new planner gets the full gap timeout
            g.gap_since = None
        log.info("%s: planner term %d took over within the lease grace: the robot's goals go on",
                 self.robot_id, term)
        self._kick()

    def _end_hold(self, hold: int) -> None:
        """Loop: no planner of a higher term spoke within ``lease_grace_s``: stop as the lease does."""
        with self._cv:
            if hold != self._hold_id or self._held_term is None or self._stop:
                return  # released (or shut down) meanwhile
            self._hold_timer = None
            self._held_term = None
            held, self._held_goals = self._held_goals, set()
            self.lease_stops += 1
            why = f"{self._hold_why}; no standby took over within {self.lease_grace_s:g} s"
            log.warning("%s: %s: stopping the robot", self.robot_id, why)
            for gid in list(self._order):
                g = self._goals[gid]
                if gid in self._halts or g.stopped is not None:
                    continue  # stopped during the hold already
                if gid in held or g.pending or (self._current is not None and self._current[0] == gid):
                    self._stop_why[gid] = why
                    self._cancel_locked(gid, -1)
            self._kick()

    def submit(self, seg: SegmentIn) -> bool:
        """Accept a segment or stop (non-blocking; called from the ROS callback). False: dropped
        unseen because its planner term is stale (:meth:`admit_term`)."""
        with self._cv:
            if not self.admit_term(seg.term):
                return False
            self.renew_lease()
            g = self._goals.get(seg.goal_id)
            if seg.cancel:
                self._cancel_locked(seg.goal_id, seg.sequence)
                return True
            if g is None:
                g = self._goals[seg.goal_id] = _Goal(seg.goal_id)
                self._order.append(seg.goal_id)
            if g.finished:
                if seg.sequence not in g.seen:
                    g.seen.add(seg.sequence)
                    self._emit(seg.goal_id, seg.sequence, STATE_FAILED,
                               error="goal already ended (aborted, failed or cancelled): segment refused")
                else:
                    self._repeat_status(seg)
                return True
            if seg.sequence in g.seen:
                self._repeat_status(seg)
                return True
            g.seen.add(seg.sequence)
            g.pending[seg.sequence] = seg
            self._emit(seg.goal_id, seg.sequence, STATE_RECEIVED)
            self._kick()
            return True

    def _repeat_status(self, seg: SegmentIn) -> None:
        """A segment we already have: the planner did not hear our report (or probes a robot that
        owes one). Not executed again; our latest status for it is published again."""
        self.duplicates += 1
        last = self._last_status.get((seg.goal_id, seg.sequence))
        if last is not None:
            ev = StatusEvent(**{**last.__dict__, "stamp": time.time()})
            self.events.append(ev)
            try:
                self.publish(ev)
            except Exception:  # noqa: BLE001
                log.exception("%s: status publish failed", self.robot_id)

    def cancel(self, goal_id: str) -> None:
        """Stop a goal: as a ``cancel`` segment from the planner (sent whenever a goal ends other
        than by success). The running skill is interrupted, queued segments are dropped, and
        the robot is then brought to a known idle state (``SkillExecutor.halt``) and
        reports IDLE with ``error="stopped: <state>"``. Repeated stops re-send that report."""
        with self._cv:
            self._cancel_locked(goal_id, -1)

    def _cancel_locked(self, goal_id: str, sequence: int) -> None:
        g = self._goals.get(goal_id)
        if g is None:
            g = self._goals[goal_id] = _Goal(goal_id)
            self._order.append(goal_id)
        if g.stopped is not None:  # a repeated stop: the planner has not seen our report yet
            self._emit(goal_id, g.expected, STATE_IDLE, error=f"stopped: {g.stopped}")
            return
        if goal_id not in self._halts:
            self._halts.append(goal_id)
        g.finished = True
        dropped = sorted(g.pending)
        g.pending.clear()
        if self._current is not None and self._current[0] == goal_id:
            self._cancel.set()
            self.executor.stop()
            # the running segment reports CANCELLED when its skill ends
        else:
            seq = sequence if sequence >= 0 else g.expected
            why = self._stop_why.get(goal_id)
            self._emit(goal_id, seq, STATE_CANCELLED, error=f"stopped: {why}" if why else "cancelled")
        for s in dropped:
            if self._current is None or self._current != (goal_id, s):
                self._emit(goal_id, s, STATE_CANCELLED, error="cancelled before execution")
        self._kick()

    # ------------------------------------------------------------------ scheduling (loop thread)
    def _next_locked(self) -> SegmentIn | None:
        now = self.clock()
        for gid in list(self._order):
            g = self._goals[gid]
            if g.finished and not g.pending:
                continue
            if g.expected in g.pending:
                g.gap_since = None
                return g.pending.pop(g.expected)
            if g.pending:
                if g.gap_since is None:
                    g.gap_since = now
                if now - g.gap_since >= self.gap_timeout_s:
                    missing = g.expected
                    g.finished = True
                    for s in sorted(g.pending):
                        self._emit(gid, s, STATE_FAILED,
                                   error=f"segment {missing} of goal {gid} never arrived (gap); "
                                         f"segment {s} not executed")
                    g.pending.clear()
                    continue
                return None  # strict goal order: wait for the missing segment
            if not g.finished:
                # The planner sends one plan per robot at a time: once a newer goal's segments
                # arrive, this plan is complete even if its last segment was not flagged final.
                if any(self._goals[later].pending for later in self._order if later != gid
                       and not self._goals[later].finished):
                    g.finished = True
                    continue
                return None  # the current goal may send more segments
        return None

    def _pump(self) -> None:
        """On the loop: start a pending halt or the next segment, if the robot is free."""
        with self._cv:
            self._kicked = False
            if self._stop or self._current is not None or self._halting:
                return
            halt = seg = None
            if self._halts:
                halt = self._halts.popleft()
                self._halting = True
            elif self._held_term is not None:
                # held (lease expired, lease_grace_s): no segment starts until a planner of a higher
                # term speaks or the hold ends (gap clocks stand still meanwhile)
                self.loop.cancel(self._gap_timer)
                self._gap_timer = None
                return
            else:
                seg = self._next_locked()
                if seg is None:
                    self._gc_locked()
                    wait = self._wait_s()
                    self.loop.cancel(self._gap_timer)
                    self._gap_timer = None if wait is None else self.loop.call_later(wait, self._kick)
                    return
                # claimed under the same lock hold that popped it
                self._current = (seg.goal_id, seg.sequence)
                self._cancel.clear()
                self._timed_out = False
                g = self._goals[seg.goal_id]
        if halt is not None:
            try:
                self.executor.start_halt(lambda value, err: self._halt_done(halt, value, err), self.loop)
            except Exception as e:  # noqa: BLE001
                self._halt_done(halt, None, e)
            return
        assert seg is not None
        try:
            self._begin(seg, g)
        except Exception as e:  # noqa: BLE001 - never leave the robot stuck
            self._unexpected(seg, g, e)

    def _halt_done(self, goal_id: str, value: Any, err: BaseException | None) -> None:
        """Loop: the robot was brought to idle after its goal was stopped; report it."""
        if err is not None:
            log.error("%s: halt failed: %s", self.robot_id, err)
            state = f"halt failed: {err}"
        else:
            state = value or "stopped"
        why = self._stop_why.pop(goal_id, None)
        if why is not None:  # the adapter stopped the robot on its own (lease, budget): say why first
            state = f"{why}; {state}"
        with self._cv:
            g = self._goals.get(goal_id)
            seq = g.expected if g is not None else 0
            if g is not None:
                g.stopped = state
        self._emit(goal_id, seq, STATE_IDLE, error=f"stopped: {state}")
        with self._cv:
            self._halting = False
            self._cv.notify_all()
        self._kick()

    def _wait_s(self) -> float | None:
        """How long the idle robot may wait: until the earliest gap timeout, else until woken
        (a queued segment waiting for a missing predecessor is the only timed event)."""
        gaps = [g.gap_since for g in self._goals.values() if g.gap_since is not None and g.pending]
        if gaps:
            return max(0.01, min(gaps) + self.gap_timeout_s - self.clock())
        if any(g.pending and g.gap_since is None for g in self._goals.values()):
            return 0.05  # a gap just appeared: look again soon to start its clock
        return None

    def _gc_locked(self) -> None:
        # forget finished goals (keep the last 100 ids to refuse late segments / duplicates)
        while len(self._order) > 100:
            gid = self._order[0]
            g = self._goals[gid]
            if not (g.finished and not g.pending):
                break
            self._order.popleft()
            del self._goals[gid]

    def validate(self, seg: SegmentIn) -> tuple[list[SkillCall], Any]:
        """Every check the robot runs on a segment before any command (skill set, safe ranges, MiniSpec
        parse), executing nothing: returns (calls, parsed MiniSpec program or None); raises on the
        first check that fails. The benches check plans with it as a robot would."""
        program = None
        if self.use_minispec and seg.text.strip():
            from timely_robot.minispec_interpreter import MiniSpecInterpreter

            program = MiniSpecInterpreter(self.skill_set, lambda c: None).parse(seg.text)
        calls = []
        for name, args in seg.skills:
            if program is not None and any(_VAR.match(str(a)) for a in args):
                self.skill_set.spec(name)  # variable arguments: checked by the interpreter at run time
                continue
            calls.append(self.skill_set.validate(name, args))
        if not calls and program is None:
            raise SkillError("segment has no skills")
        if program is not None:
            # the text is what runs: it must call exactly the skills the segment declares (and
            # that were checked above), in the same order, with the same number of arguments
            from timely_robot.minispec import iter_calls

            in_text = [(self.skill_set.spec(c.name).name, len(c.args)) for c in iter_calls(program)]
            declared = [(self.skill_set.spec(name).name, len(args)) for name, args in seg.skills]
            if in_text != declared:
                raise SkillError(f"segment text calls {[n for n, _ in in_text][:20]} but declares "
                                 f"{[n for n, _ in declared][:20]}")
        return calls, program

    # ------------------------------------------------------------------ execution (loop thread)
    def _begin(self, seg: SegmentIn, g: _Goal) -> None:
        HOOKS.notify(HOOKS.segment_started, self, seg)
        try:
            calls, program = self.validate(seg)
        except (SkillError, ValueError) as e:  # PlanError subclasses ValueError
            self._emit(seg.goal_id, seg.sequence, STATE_FAILED, error=f"refused: {e}")
            self._abort_rest(g, seg.sequence, "refused")
            self._end_segment(seg, g)
            return
        predicted = self.model.predict_calls(self.robot_id, self.robot_kind, calls) if calls else []
        if g.meter is None:
            g.meter = BudgetMeter(self.budget, fence=self.robot_kind in ("drone", "sim"), t0=self.clock(),
                                  skill_set=self.skill_set)
        g.meter.predicted_s += float(sum(predicted)) * self.time_scale
        if calls:  # the duration budget never cuts a plan shorter than its calls' worst cases
            g.meter.worst_s += self.worst_case_s(calls) * self.time_scale
        if program is not None:
            if g.interpreter is None:  # one per goal: variables live across its segments
                from timely_robot.minispec_interpreter import MiniSpecInterpreter

                g.interpreter = MiniSpecInterpreter(self.skill_set, lambda call: None)
            gen = g.interpreter.steps(program)
        else:
            gen = _plain(calls)
        run = self._run = _Run(seg, g, gen, calls, list(predicted), self.clock())
        self._advance(run, None)

    def _advance(self, run: _Run, value: Any) -> None:
        """Feed the last call's value to the segment's program and start its next call."""
        try:
            call = run.gen.send(value)
        except StopIteration:
            interp = run.goal.interpreter
            returned = None
            if interp is not None and interp.returned and not run.goal.return_reported:
                run.goal.return_reported = True  # the plan's answer: reported once, where it returned
                returned = answer_text(interp.return_value)
            self._emit(run.seg.goal_id, run.seg.sequence, STATE_DONE, progress=1.0,
                       elapsed_s=self.clock() - run.t_start, skill_names=run.names, skill_durations_s=run.durs,
                       answers=run.answers, return_value=returned)
            self._end_segment(run.seg, run.goal)
            return
        except BaseException as e:  # noqa: BLE001 - the program's own error (variables, limits)
            self._fail(run, e)
            return
        if self._cancel.is_set():
            self._fail(run, SkillCancelled("cancelled"))
            return
        try:  # the goal's budget and the fence, before the call is sent
            meter = run.goal.meter
            if meter is not None:
                why = meter.over_time(self.clock())
                if why is not None:
                    raise BudgetExceeded(why)
                meter.admit(call, self.pose)
        except BudgetExceeded as e:
            self._refuse_call(run, e)
            return
        i = len(run.names)
        remaining = float(sum(run.predicted[i:])) if i < len(run.predicted) else 0.0
        self._emit(run.seg.goal_id, run.seg.sequence, STATE_EXECUTING, current_skill=call.name,
                   progress=min(1.0, i / max(len(run.planned), 1)), elapsed_s=self.clock() - run.t_start,
                   predicted_remaining_s=remaining * self.time_scale, skill_names=list(run.names),
                   skill_durations_s=list(run.durs))
        run.call = call
        run.timer = self.loop.call_later(self.skill_budget_s(call), lambda: self._on_timeout(run))
        token = run.waiting = object()
        run.t0 = self.clock()
        self.executor.use_budget(run.goal.meter)
        self.executor.start(call, self._cancel, lambda v, e: self._call_done(run, token, v, e), self.loop)

    def _call_done(self, run: _Run, token: object, value: Any, err: BaseException | None) -> None:
        if run.waiting is not token:
            return  # a second completion of the same call (stop raced the end): ignored
        run.waiting = None
        self.loop.cancel(run.timer)
        if err is None and self._cancel.is_set():
            # the call returned after a cancel or its timeout stopped the robot: a stopped motion
            # may read as arrived, so the call is not reported done (the robot fell short)
            err = SkillCancelled(f"'{run.call.name}' stopped before it finished")  # type: ignore[union-attr]
        if err is not None:
            self._fail(run, err)
            return
        dt = self.clock() - run.t0
        assert run.call is not None
        self._track_pose(run.call)
        run.names.append(run.call.name)
        run.durs.append(dt)
        if value is not None:
            run.answers.append((str(run.call), answer_text(value)))
        elif run.call.name in REPLAN_SKILLS:  # the planner learns that this plan asked for a new one
            run.answers.append((str(run.call), "requested"))
        if self.time_scale > 0:
            self.model.observe(self.robot_id, self.robot_kind, run.call, dt / self.time_scale)
        try:
            self._advance(run, value)
        except Exception as e:  # noqa: BLE001
            self._unexpected(run.seg, run.goal, e)

    def _fail(self, run: _Run, e: BaseException) -> None:
        """End the running segment after an error (what ``execute`` or the program raised)."""
        seg, g = run.seg, run.goal
        try:
            run.gen.close()
        except Exception:  # noqa: BLE001
            pass
        kw = dict(skill_names=run.names, skill_durations_s=run.durs, elapsed_s=self.clock() - run.t_start,
                  answers=run.answers)
        if isinstance(e, SkillCancelled):
            with self._cv:
                interrupted = (self._interrupted == (seg.goal_id, seg.sequence) and not g.finished
                               and not self._timed_out and not self._shutting_down)
                if not interrupted:
                    g.finished = True
            if interrupted:
                # the lease expired and the robot is held (lease_grace_s): the segment is over,
                # the goal is not; no durations (the skills did not all run: nothing to learn)
                self._emit(seg.goal_id, seg.sequence, STATE_DONE, elapsed_s=kw["elapsed_s"],
                           progress=min(1.0, len(run.names) / max(len(run.planned), 1)), answers=run.answers,
                           error=f"{INTERRUPTED} {self._hold_why}; robot held for up to {self.lease_grace_s:g} s "
                                 "waiting for a standby planner")
            elif self._timed_out:
                self._emit(seg.goal_id, seg.sequence, STATE_FAILED,
                           error=f"timeout: skill exceeded its time budget ({e})", **kw)
            else:
                why = self._stop_why.get(seg.goal_id)
                self._emit(seg.goal_id, seg.sequence, STATE_CANCELLED,
                           error="adapter shutting down" if self._shutting_down
                           else (f"stopped: {why}" if why else "cancelled"), **kw)
        elif isinstance(e, (SkillExecutionError, SkillError, RuntimeError)):
            msg = str(e) if not self._timed_out else f"timeout: {e}"
            self._emit(seg.goal_id, seg.sequence, STATE_FAILED, error=msg or type(e).__name__, **kw)
            self._abort_rest(g, seg.sequence, "failed")
        else:
            self._unexpected(seg, g, e)
            return
        self._end_segment(seg, g)

    def _refuse_call(self, run: _Run, e: BudgetExceeded) -> None:
        """A call that would exceed the goal's budget or leave the fence: not sent; the segment
        fails with the reason, the rest of the goal is refused, and the robot is brought to idle
        at once (drone: hover; arm: stop), without waiting for the planner's stop."""
        self.budget_refusals += 1
        log.warning("%s: goal %s: %s", self.robot_id, run.seg.goal_id, e)
        with self._cv:
            if run.seg.goal_id not in self._halts:
                self._halts.append(run.seg.goal_id)
            self._stop_why[run.seg.goal_id] = str(e)
        self._fail(run, SkillExecutionError(f"refused: {e}"))

    def _track_pose(self, call: SkillCall) -> None:
        """The drone's pose after a call it executed: the executor's own (commanded x, y; measured
        height and yaw where the drone reports them) where it has one, else dead reckoning from the call (goto's displacement is unknown then:
        the pose is kept)."""
        pose = getattr(self.executor, "pose", None)
        if getattr(self.executor, "tracks_pose", False) and pose is not None and len(pose) == 4:
            self.pose = tuple(float(v) for v in pose)  # type: ignore[assignment]
            return
        after = pose_after(self.pose, call)
        if after is not None:
            self.pose = after

    def _unexpected(self, seg: SegmentIn, g: _Goal, e: BaseException) -> None:
        log.error("%s: unexpected adapter error", self.robot_id, exc_info=e)
        with self._cv:
            g.finished = True
        self._emit(seg.goal_id, seg.sequence, STATE_FAILED, error=f"adapter error: {e}")
        self._end_segment(seg, g)

    def _end_segment(self, seg: SegmentIn, g: _Goal) -> None:
        with self._cv:
            if self._current != (seg.goal_id, seg.sequence):
                return  # already ended
            self._current = None
            self._run = None
            if self._interrupted == (seg.goal_id, seg.sequence):
                self._interrupted = None
            if not g.finished:
                g.expected = seg.sequence + 1
                if seg.final:
                    g.finished = True
            self._cv.notify_all()
        self._kick()

    def worst_case_s(self, calls: list[SkillCall]) -> float:
        """The calls' worst-case execution time (robot seconds): each skill's own limit
        (``SkillSpec.max_s``) where the skill set declares one, else the profiled worst case."""
        out = 0.0
        modelled = []
        for call in calls:
            spec = self.skill_set.spec(call.name) if call.name in self.skill_set else None
            if spec is not None and spec.max_s is not None:
                out += spec.max_s
            else:
                modelled.append(call)
        if modelled:
            out += float(sum(self.model.worst_case_calls(self.robot_id, self.robot_kind, modelled)))
        return out

    def skill_budget_s(self, call: SkillCall) -> float:
        """Seconds a skill call may run before the adapter stops it: the skill set's own limit
        (``SkillSpec.max_s``) or ``skill_timeout_factor`` x the profiled *worst case* (never the
        scheduler's optimistic estimate, which for search skills is the minimum), scaled by
        ``time_scale``, plus ``skill_timeout_margin_s``."""
        spec = self.skill_set.spec(call.name) if call.name in self.skill_set else None
        if spec is not None and spec.max_s is not None:
            worst = spec.max_s
        else:
            worst = self.skill_timeout_factor * self.model.worst_case_calls(
                self.robot_id, self.robot_kind, [call])[0]
        return worst * self.time_scale + self.skill_timeout_margin_s

    def _abort_rest(self, g: _Goal, seq: int, why: str) -> None:
        """After a failure: end the goal and refuse its queued segments."""
        with self._cv:
            g.finished = True
            rest = sorted(g.pending)
            g.pending.clear()
        for s in rest:
            self._emit(g.goal_id, s, STATE_FAILED, error=f"goal aborted: segment {seq} {why}")

    def _on_timeout(self, run: _Run) -> None:
        if self._run is not run or run.waiting is None:
            return  # that call already ended
        self._timed_out = True
        self._cancel.set()
        self.executor.stop()

    def _measured_pose(self) -> tuple[float, float, float, float] | None:
        """The executor's pose now (None: it has none, or it is an executor without the method)."""
        pose = getattr(self.executor, "measured_pose", None)
        return pose() if pose is not None else None

    def _emit(self, goal_id: str, seq: int, state: int, **kw: Any) -> None:
        try:
            kw.setdefault("measured", self.executor.measured())
        except Exception:  # noqa: BLE001 - a robot that cannot say its state still reports progress
            log.debug("%s: measured state unavailable", self.robot_id, exc_info=True)
        try:
            kw.setdefault("pose", self._measured_pose())
        except Exception:  # noqa: BLE001 - nor one that cannot say where it is
            log.debug("%s: pose unavailable", self.robot_id, exc_info=True)
        ev = StatusEvent(self.robot_id, goal_id, int(seq), state, **kw)
        self.events.append(ev)
        self._last_status[(goal_id, int(seq))] = ev
        while len(self._last_status) > 2000:  # bounded: the oldest reports go first
            self._last_status.pop(next(iter(self._last_status)))
        try:
            self.publish(ev)
        except Exception:  # noqa: BLE001 - a broken publisher must not stop execution
            log.exception("%s: status publish failed", self.robot_id)
