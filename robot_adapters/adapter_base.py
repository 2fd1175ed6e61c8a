"""Robot adapter: executes plan segments strictly in order and reports on ``/robot_status``.

Two layers:

* :class:`AdapterCore` (no ROS): per robot, receives segments (``submit``), orders them by
  ``(goal, sequence)``, executes them one at a time on its own worker thread through a
  :class:`~robot_adapters.executor.SkillExecutor`, and emits :class:`StatusEvent` objects.
* :class:`AdapterNode` (rclpy): hosts one or many cores (a drone, an arm, or hundreds of
  simulated robots in one process), subscribes ``/robots/<robot_id>/segments``
  (``SkillSegment``, reliable + keep-all) for each and publishes ``RobotStatus`` on
  ``/robot_status`` (reliable).

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
* **Timeouts**: each skill gets ``skill_timeout_factor x predicted x time_scale +
  skill_timeout_margin_s`` seconds (execution-time model prediction); when exceeded the executor is stopped and the
  segment FAILS with "timeout".
* **Cancellation**: a ``SkillSegment`` with ``cancel=True`` (or :meth:`AdapterCore.cancel`) stops
  the current skill (``executor.stop()``), drops the goal's queued segments and reports
  CANCELLED.

Status events carry the measured per-skill durations (``skill_names`` / ``skill_durations_s``),
progress, elapsed time and the adapter's own predicted remaining time. Subclassing for a new
robot means writing a :class:`SkillExecutor` (``execute(call, cancel)``, ``stop()``), then
``AdapterNode(...).add_robot(AdapterCore(robot_id, executor))``; see ``drone_adapter.py``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from llm_planner_node.core.execution_time import ExecutionTimeModel
from llm_planner_node.core.skills import SkillCall, SkillError, SkillSet

from .executor import SkillCancelled, SkillExecutionError, SkillExecutor

log = logging.getLogger("timely_fleet.adapter")
_VAR = re.compile(r"^_\d+$")

STATE_IDLE, STATE_RECEIVED, STATE_EXECUTING, STATE_DONE, STATE_FAILED, STATE_CANCELLED = range(6)
STATE_NAMES = {0: "idle", 1: "received", 2: "executing", 3: "done", 4: "failed", 5: "cancelled"}


@dataclass
class SegmentIn:
    """A segment as received (ROS-free mirror of ``SkillSegment``)."""

    goal_id: str
    sequence: int
    text: str = ""
    skills: list[tuple[str, list[str]]] = field(default_factory=list)  # (name, arg values)
    final: bool = False
    cancel: bool = False
    robot_id: str = ""


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


class AdapterCore:
    """Ordering, safety, execution and status of one robot (thread-safe, ROS-free)."""

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
        skill_timeout_factor: float = 3.0,
        skill_timeout_margin_s: float = 5.0,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.robot_id = robot_id
        self.executor = executor
        self.publish = publish or (lambda ev: None)
        self.skill_set = skill_set or executor.skill_set
        self.robot_kind = getattr(executor, "robot_kind", self.skill_set.robot_kind)
        self.model = model or ExecutionTimeModel()
        self.use_minispec = (self.skill_set.id == "tello_minispec") if use_minispec is None else use_minispec
        self.gap_timeout_s = gap_timeout_s
        self.skill_timeout_factor = skill_timeout_factor
        self.skill_timeout_margin_s = skill_timeout_margin_s
        self.time_scale = time_scale
        self.clock = clock
        self.duplicates = 0
        self.events: deque[StatusEvent] = deque(maxlen=1000)  # recent events (debugging, tests)
        self._goals: dict[str, _Goal] = {}
        self._order: deque[str] = deque()  # goal ids in arrival order
        self._cv = threading.Condition()
        self._cancel = threading.Event()
        self._current: tuple[str, int] | None = None
        self._timed_out = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=f"adapter-{robot_id}", daemon=True)
        self._started = False

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "AdapterCore":
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._stop = True
            self._cancel.set()
            self._cv.notify_all()
        self.executor.stop()
        if self._started:
            self._thread.join(timeout)

    def idle(self) -> bool:
        with self._cv:
            return self._current is None and not any(g.pending for g in self._goals.values())

    # ------------------------------------------------------------------ input
    def submit(self, seg: SegmentIn) -> None:
        """Accept a segment (non-blocking; called from the ROS callback)."""
        with self._cv:
            g = self._goals.get(seg.goal_id)
            if seg.cancel:
                self._cancel_locked(seg.goal_id, seg.sequence)
                return
            if g is None:
                g = self._goals[seg.goal_id] = _Goal(seg.goal_id)
                self._order.append(seg.goal_id)
            if g.finished:
                if seg.sequence not in g.seen:
                    g.seen.add(seg.sequence)
                    self._emit(seg.goal_id, seg.sequence, STATE_FAILED,
                               error="goal already ended (aborted, failed or cancelled): segment refused")
                else:
                    self.duplicates += 1
                return
            if seg.sequence in g.seen:
                self.duplicates += 1
                log.warning("%s: duplicate segment %s/%d ignored", self.robot_id, seg.goal_id, seg.sequence)
                return
            g.seen.add(seg.sequence)
            g.pending[seg.sequence] = seg
            self._emit(seg.goal_id, seg.sequence, STATE_RECEIVED)
            self._cv.notify_all()

    def cancel(self, goal_id: str) -> None:
        with self._cv:
            self._cancel_locked(goal_id, -1)

    def _cancel_locked(self, goal_id: str, sequence: int) -> None:
        g = self._goals.get(goal_id)
        if g is None:
            g = self._goals[goal_id] = _Goal(goal_id)
        g.finished = True
        dropped = sorted(g.pending)
        g.pending.clear()
        if self._current is not None and self._current[0] == goal_id:
            self._cancel.set()
            self.executor.stop()
            # the worker reports CANCELLED for the running segment
        else:
            seq = sequence if sequence >= 0 else g.expected
            self._emit(goal_id, seq, STATE_CANCELLED, error="cancelled")
        for s in dropped:
            if self._current is None or self._current != (goal_id, s):
                self._emit(goal_id, s, STATE_CANCELLED, error="cancelled before execution")
        self._cv.notify_all()

    # ------------------------------------------------------------------ worker
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

    def _run(self) -> None:
        while True:
            with self._cv:
                seg = None
                while not self._stop:
                    seg = self._next_locked()
                    if seg is not None:
                        break
                    self._cv.wait(timeout=0.05)
                    self._gc_locked()
                if self._stop:
                    return
                self._current = (seg.goal_id, seg.sequence)
                self._cancel.clear()
                self._timed_out = False
                g = self._goals[seg.goal_id]
            try:
                self._execute(seg, g)
            except Exception as e:  # noqa: BLE001 - never kill the worker
                log.exception("%s: unexpected adapter error", self.robot_id)
                with self._cv:
                    g.finished = True
                self._emit(seg.goal_id, seg.sequence, STATE_FAILED, error=f"adapter error: {e}")
            finally:
                with self._cv:
                    self._current = None
                    if not g.finished:
                        g.expected = seg.sequence + 1
                        if seg.final:
                            g.finished = True
                    self._cv.notify_all()

    def _gc_locked(self) -> None:
        # forget finished goals (keep the last 100 ids to refuse late segments / duplicates)
        while len(self._order) > 100:
            gid = self._order[0]
            g = self._goals[gid]
            if not (g.finished and not g.pending):
                break
            self._order.popleft()
            del self._goals[gid]

    def _validate(self, seg: SegmentIn) -> tuple[list[SkillCall], Any]:
        """All checks before any command: returns (calls, parsed MiniSpec program or None)."""
        program = None
        if self.use_minispec and seg.text.strip():
            from .minispec_interpreter import MiniSpecInterpreter

            program = MiniSpecInterpreter(self.skill_set, lambda c: None).parse(seg.text)
        calls = []
        for name, args in seg.skills:
            if program is not None and any(_VAR.match(str(a)) for a in args):
                self.skill_set.spec(name)  # variable arguments: checked by the interpreter at run time
                continue
            calls.append(self.skill_set.validate(name, args))
        if not calls and program is None:
            raise SkillError("segment has no skills")
        return calls, program

    def _execute(self, seg: SegmentIn, g: _Goal) -> None:
        try:
            calls, program = self._validate(seg)
        except (SkillError, ValueError) as e:  # PlanError subclasses ValueError
            self._emit(seg.goal_id, seg.sequence, STATE_FAILED, error=f"refused: {e}")
            self._abort_rest(g, seg.sequence, "refused")
            return
        names: list[str] = []
        durs: list[float] = []
        t_start = self.clock()
        planned = calls
        predicted = self.model.predict_calls(self.robot_id, self.robot_kind, planned) if planned else []

        def run_call(call: SkillCall) -> Any:
            if self._cancel.is_set():
                raise SkillCancelled("cancelled")
            i = len(names)
            remaining = float(sum(predicted[i:])) if i < len(predicted) else 0.0
            self._emit(seg.goal_id, seg.sequence, STATE_EXECUTING, current_skill=call.name,
                       progress=min(1.0, i / max(len(planned), 1)), elapsed_s=self.clock() - t_start,
                       predicted_remaining_s=remaining * self.time_scale, skill_names=list(names),
                       skill_durations_s=list(durs))
            budget = (self.skill_timeout_factor * self.model.predict(self.robot_id, self.robot_kind, [call])
                      * self.time_scale + self.skill_timeout_margin_s)
            timer = threading.Timer(budget, self._on_timeout)
            timer.daemon = True
            t0 = self.clock()
            timer.start()
            try:
                value = self.executor.execute(call, self._cancel)
            finally:
                timer.cancel()
            dt = self.clock() - t0
            names.append(call.name)
            durs.append(dt)
            if self.time_scale > 0:
                self.model.observe(self.robot_id, self.robot_kind, call, dt / self.time_scale)
            return value

        try:
            if program is not None:
                g.run_call = run_call
                if g.interpreter is None:
                    from .minispec_interpreter import MiniSpecInterpreter

                    g.interpreter = MiniSpecInterpreter(self.skill_set, lambda call: g.run_call(call))
                g.interpreter.run(program)
            else:
                for call in calls:
                    run_call(call)
        except SkillCancelled as e:
            with self._cv:
                g.finished = True
            if self._timed_out:
                self._emit(seg.goal_id, seg.sequence, STATE_FAILED, skill_names=names, skill_durations_s=durs,
                           elapsed_s=self.clock() - t_start,
                           error=f"timeout: skill exceeded its time budget ({e})")
            else:
                self._emit(seg.goal_id, seg.sequence, STATE_CANCELLED, skill_names=names,
                           skill_durations_s=durs, elapsed_s=self.clock() - t_start, error="cancelled")
            return
        except (SkillExecutionError, SkillError, RuntimeError) as e:
            msg = str(e) if not self._timed_out else f"timeout: {e}"
            self._emit(seg.goal_id, seg.sequence, STATE_FAILED, skill_names=names, skill_durations_s=durs,
                       elapsed_s=self.clock() - t_start, error=msg or type(e).__name__)
            self._abort_rest(g, seg.sequence, "failed")
            return
        self._emit(seg.goal_id, seg.sequence, STATE_DONE, progress=1.0, elapsed_s=self.clock() - t_start,
                   skill_names=names, skill_durations_s=durs)

    def _abort_rest(self, g: _Goal, seq: int, why: str) -> None:
        """After a failure: end the goal and refuse its queued segments."""
        with self._cv:
            g.finished = True
            rest = sorted(g.pending)
            g.pending.clear()
        for s in rest:
            self._emit(g.goal_id, s, STATE_FAILED, error=f"goal aborted: segment {seq} {why}")

    def _on_timeout(self) -> None:
        self._timed_out = True
        self._cancel.set()
        self.executor.stop()

    def _emit(self, goal_id: str, seq: int, state: int, **kw: Any) -> None:
        ev = StatusEvent(self.robot_id, goal_id, int(seq), state, **kw)
        self.events.append(ev)
        try:
            self.publish(ev)
        except Exception:  # noqa: BLE001 - a broken publisher must not stop execution
            log.exception("%s: status publish failed", self.robot_id)


# ---------------------------------------------------------------------------------- ROS binding
def segment_from_msg(msg: Any) -> SegmentIn:
    return SegmentIn(
        goal_id=msg.goal_id, sequence=int(msg.sequence), text=msg.text,
        skills=[(s.name, list(s.arg_values)) for s in msg.skills],
        final=bool(msg.final), cancel=bool(msg.cancel), robot_id=msg.robot_id,
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
    sec = int(ev.stamp)
    m.stamp.sec = sec
    m.stamp.nanosec = int((ev.stamp - sec) * 1e9)
    return m


def segment_qos() -> Any:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def status_qos() -> Any:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000, reliability=ReliabilityPolicy.RELIABLE)


def _node_base():
    try:
        from rclpy.node import Node
    except ImportError:  # ROS-free use of AdapterCore (simulations, unit tests)
        class Node:  # type: ignore[no-redef]
            def __init__(self, *a: Any, **kw: Any) -> None:
                raise RuntimeError("rclpy is not available: run inside the project environment "
                                   "(scripts/run ...) to use AdapterNode")
    return Node


class AdapterNode(_node_base()):  # type: ignore[misc]
    """rclpy node hosting adapter cores; one ``/robot_status`` publisher for all of them."""

    def __init__(self, name: str = "robot_adapter", *, context: Any = None, namespace: str = "") -> None:
        super().__init__(name, context=context, namespace=namespace)
        from timely_fleet.msg import RobotStatus, SkillSegment

        self._status_type = RobotStatus
        self._segment_type = SkillSegment
        self.status_pub = self.create_publisher(RobotStatus, "/robot_status", status_qos())
        self.cores: dict[str, AdapterCore] = {}
        self._subs: list[Any] = []

    def add_robot(self, core: AdapterCore) -> AdapterCore:
        if core.robot_id in self.cores:
            raise ValueError(f"robot '{core.robot_id}' already hosted")
        core.publish = lambda ev: self.status_pub.publish(status_to_msg(ev, self._status_type))
        topic = f"/robots/{core.robot_id}/segments"

        def on_segment(msg: Any, core: AdapterCore = core) -> None:
            if msg.robot_id and msg.robot_id != core.robot_id:
                self.get_logger().warning(f"segment for '{msg.robot_id}' on {topic}: ignored")
                return
            core.submit(segment_from_msg(msg))

        self._subs.append(self.create_subscription(self._segment_type, topic, on_segment, segment_qos()))
        self.cores[core.robot_id] = core.start()
        return core

    def shutdown_robots(self) -> None:
        for core in self.cores.values():
            core.shutdown()
        for core in self.cores.values():
            try:
                core.executor.close()
            except Exception:  # noqa: BLE001
                pass


def spin_node(node: Any, context: Any = None, *, seconds: float | None = None) -> None:
    """Spin ``node`` until shutdown (or ``seconds``), then stop its robots."""
    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    ex = MultiThreadedExecutor(num_threads=2, context=context)
    ex.add_node(node)
    end = None if seconds is None else time.monotonic() + seconds
    try:
        while rclpy.ok(context=context) and (end is None or time.monotonic() < end):
            ex.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        node.shutdown_robots()
        ex.shutdown()
        node.destroy_node()


def make_segment_msg(goal_id: str, robot_id: str, sequence: int, calls: Sequence[SkillCall] = (),
                     text: str = "", final: bool = False, cancel: bool = False,
                     skill_set: SkillSet | None = None) -> Any:
    """Build a ``SkillSegment`` (tests, demos, mission scripts)."""
    from timely_fleet.msg import Skill, SkillSegment

    m = SkillSegment(goal_id=goal_id, robot_id=robot_id, sequence=sequence, text=text, final=final, cancel=cancel)
    out = []
    for c in calls:
        arg_names = [a.name for a in skill_set.spec(c.name).args[: len(c.args)]] if skill_set else [""] * len(c.args)
        out.append(Skill(name=c.name, arg_names=arg_names, arg_values=[str(v) for v in c.args]))
    m.skills = out
    return m
