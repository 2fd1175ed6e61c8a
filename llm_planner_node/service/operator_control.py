"""Operator control of a running planner: stop robots now, approve or deny held segments (no ROS).

One :class:`OperatorControl` per :class:`~.planner_service.PlannerService` (``service.operator``).
The ROS side (``planner/stop_robots``, ``planner/approve``, the operator secret, ``/diagnostics``)
is :mod:`.operator_ros`; the command line is :mod:`.operator_cmd`.

**Stop** (:meth:`OperatorControl.stop`, any thread): on the scheduler thread, every named robot's
goal in flight ends CANCELLED with "stopped by operator <name>" and the robot is sent the signed
stop the delivery layer re-sends until the adapter confirms it (IDLE ``stopped: ...``): the
goal's own stop when segments reached the robot (what :meth:`.sink.PortsSink.done` sends for any
end other than success), else a stop under the goal's id; a robot with no goal gets a stop under
a fresh id, so its adapter halts it anyway (drone: hover, arm: stop). Idempotent: a second stop
ends nothing and halts the robots again. The caller waits (at most ``wait_s``) for the scheduler
thread to have done it, so the answer says what was stopped.

**Approval** (:class:`~.core.approval.Approval` per robot in the YAML): the service's
``dispatch`` asks :meth:`OperatorControl.hold` first. A segment that calls a marked skill is not
sent: it waits for an operator, and every later segment of its goal waits behind it (order is
kept), while the scheduler goes on with other goals (the core has recorded the segment as
dispatched and keeps generating; its robot owes no report for a held segment, so its silence
clock stands still). The goal's action feedback says so (a feedback message whose ``text`` starts
with :data:`NOTICE_PREFIX`: "waiting for approval of segment k: <text> ..."). :meth:`decide`
(any thread) approves, and the held segments go out in order (a later marked segment waits for
its own approval), or denies: the goal ends CANCELLED "denied by operator <name>: ..." and the
robot is stopped. No answer within the robot's ``timeout_s`` ends it the same way ("approval
timed out after 30 s: ..."). Every stop, request, approval, denial and time-out is logged, kept
in :attr:`OperatorControl.events` and counted (``/diagnostics``); the goal's result message says
why it ended.

Threads: ``hold``, ``check`` and everything that touches the core run on the scheduler thread;
``stop`` and ``decide`` post commands there. A decision is taken once, under a lock: an approval
and a time-out (or two operators) cannot both win.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

from llm_planner_node.config.params import FleetParams
from timely_robot.approval import Approval
from llm_planner_node.core.task_model import Request, Segment
from llm_planner_node.core.text import KNOWN_ROBOTS_LISTED, safe_text
from llm_planner_node.service.commands import ApplyDecision, CommandQueue, StopLate, StopReply, StopRobots
from llm_planner_node.service.shared import ServicePart, Shared


#: Start of the text of an action feedback message that says a segment waits for an operator.
NOTICE_PREFIX = "waiting for approval of segment"
#: Operator names are for the record: bounded, printable.
OPERATOR_MAX_CHARS = 64
#: Events kept for /diagnostics.
EVENTS_KEPT = 20
#: Robots named in one log line of a stop (a fleet of 1,000 would make it 20 KB).
ROBOTS_LOGGED = 20
#: Decisions remembered per goal, so a repeated request (a lost answer, re-sent) gets the same answer.
DECISIONS_KEPT = 1000
#: Goal ids an operator may abbreviate (the planner's log shows 8 hex digits).
MIN_GOAL_PREFIX = 8
_TIMED_OUT = ""  # the "operator" of a decision taken by the time-out


def operator_name(name: str) -> str:
    """An operator's name for the record: stripped, bounded, control characters escaped; 'unnamed'
    when empty."""
    return safe_text(name.strip(), OPERATOR_MAX_CHARS) if name.strip() else "unnamed"


@dataclass
class _Hold:
    """A goal whose segments wait for an operator: ``queue[0]`` is the one asked about."""

    goal_id: str
    robot_id: str
    rule: Approval
    queue: list[Segment] = field(default_factory=list)
    waiting: Segment | None = None
    marked: str = ""
    since: float = 0.0           # the service's clock
    deadline: float = 0.0
    decision: tuple[bool, str] | None = None  # (approve, operator); operator _TIMED_OUT: the time-out
    approved: set[int] = field(default_factory=set)


@dataclass
class StopOutcome:
    accepted: bool
    message: str
    stopped: list[str] = field(default_factory=list)   # robots whose goal this stop ended
    goals: list[str] = field(default_factory=list)     # those goals' ids (same order)
    halted: list[str] = field(default_factory=list)    # robots without a goal that were halted


class OperatorControl(ServicePart):
    """Stops and approvals of one planner service (see the module docstring)."""

    def __init__(self, shared: Shared, params: Callable[[], FleetParams],
                 commands: CommandQueue, dispatch: Callable[[Request, Segment], None]) -> None:
        """``params``: the planner's current parameters; ``commands``: the scheduler thread's
        queue (this part handles the stops and the decisions it posts); ``dispatch``: send a released segment on to its robot (the sink's dispatch)."""
        super().__init__(shared)
        self._params = params
        self._commands = commands
        commands.on(StopRobots, self._apply_stop)
        commands.on(StopLate, self._apply_stop_late)
        commands.on(ApplyDecision, self._apply_decision)
        self._dispatch = dispatch
        self._rules: dict[str, Approval] = {r.id: r.approval for r in params().robots
                                            if getattr(r, "approval", None) is not None}
        self._holds: dict[str, _Hold] = {}
        self._lock = threading.Lock()
        self._releasing: str | None = None
        self._decided: dict[str, tuple[bool, str, int]] = {}  # goal id -> (approve, operator, segment)
        self.counters: Counter[str] = Counter()
        self.events: deque[str] = deque(maxlen=EVENTS_KEPT)

    def _port(self, name: str, *args: Any) -> None:
        """An operator port of the ROS side (:class:`~.ports.PlannerPorts`):
        ``approval_notice(goal_id, req, index, text)`` (action feedback) and
        ``operator_cancelling(goal_id)`` (the action goal goes to CANCELING before its end, so
        it ends CANCELED like a ROS cancel, not ABORTED); a failure is logged, never raised."""
        try:
            getattr(self._ports, name)(*args)
        except Exception as e:  # noqa: BLE001 - feedback and action states must not stop a stop
            self._ports.log("warning", f"operator port {name} failed: {e!r}")

    def refused(self, text: str) -> None:
        """An operator request the ROS side refused (no right, not configured): counted and kept."""
        self.counters["refused"] += 1
        self.events.append(text)

    def view(self) -> tuple[list[tuple[str, str, int, float]], dict[str, int], list[str]]:
        """What ``/diagnostics`` shows: the goals waiting for approval, the counters, the last events."""
        return self.waiting(), dict(self.counters), list(self.events)

    # -- shared ------------------------------------------------------------------------------------
    def _record(self, level: str, counter: str, text: str) -> None:
        """One operator event: counted, kept for diagnostics, logged."""
        self.counters[counter] += 1
        self.events.append(f"{time.strftime('%H:%M:%S')} {text}")
        self._ports.log(level, text)

    def _end_goal(self, goal_id: str, reason: str) -> bool:
        """Scheduler thread: end a goal CANCELLED with ``reason`` (its robot is stopped by the
        sink's ``done`` when segments reached it); False if it is not in flight."""
        rid = self._goals.by_goal_id.get(goal_id)
        req = self._planner.requests.get(rid) if rid is not None else None
        if req is None or req.state.terminal:
            return False
        with self._lock:
            self._holds.pop(goal_id, None)
        self._port("operator_cancelling", goal_id)
        had_segments = bool(req.segments)
        self._planner.cancel(rid, reason)
        if not had_segments:  # nothing reached the robot, so done() sent no stop: halt it anyway
            self._halt(req.goal.robot_id, goal_id)
        return True

    def _halt(self, robot_id: str, goal_id: str | None = None) -> None:
        """Scheduler thread: send the robot a stop (re-sent until its adapter confirms it)."""
        gid = goal_id or uuid.uuid4().hex
        msg = self._ports.stop(gid, robot_id, 0)
        self._delivery.stop(gid, robot_id, msg, self._clock.now())

    # -- stop (any thread) -------------------------------------------------------------------------
    def stop(self, robot_ids: list[str], everyone: bool, operator: str, wait_s: float = 2.0) -> StopOutcome:
        """Stop these robots (or every robot of the fleet) now; see the module docstring."""

        who = operator_name(operator)
        fleet = [r.id for r in self._params().robots]
        if everyone:
            targets = fleet
        else:
            known = set(fleet)
            unknown = [r for r in robot_ids if r not in known]
            if unknown:
                listed = ", ".join(fleet[:KNOWN_ROBOTS_LISTED]) + (f", ... ({len(fleet)} in all)"
                                                                   if len(fleet) > KNOWN_ROBOTS_LISTED else "")
                return StopOutcome(False, f"unknown robot '{safe_text(unknown[0])}' (configured robots: {listed}); "
                                          "nothing was stopped")
            targets = list(dict.fromkeys(robot_ids))
        if not targets:
            return StopOutcome(False, "no robot named: give robot ids or all")
        reply = StopReply()
        self._commands.post(StopRobots(tuple(targets), who, reply))
        if not reply.done.wait(wait_s) or reply.outcome is None:
            return StopOutcome(True, f"stopping {len(targets)} robot(s): the planner did not confirm within "
                                     f"{wait_s:g} s")
        return reply.outcome

    def _apply_stop(self, cmd: StopRobots) -> None:
        try:
            cmd.reply.outcome = self._stop_now(list(cmd.robots), cmd.who)
        finally:
            cmd.reply.done.set()

    def _stop_now(self, targets: list[str], who: str) -> StopOutcome:
        reason = f"stopped by operator {who}"
        active = self._goals.active()
        busy = {r: active.get(r) for r in targets}
        out = StopOutcome(True, "")
        for robot in targets:
            gid = busy[robot]
            if gid is not None and self._end_goal(gid, reason):
                out.stopped.append(robot)
                out.goals.append(gid)
                continue
            if gid is not None and gid not in self._goals.by_goal_id:
                # accepted a moment ago, its submit not applied yet: it is queued behind this command
                self._commands.post(StopLate(robot, gid, reason))
            self._halt(robot)
            out.halted.append(robot)
        self.counters["robots_stopped"] += len(out.stopped)
        if out.stopped:
            out.message = (f"{reason}: {len(out.stopped)} robot(s) stopped, their goals cancelled"
                           + (f"; {len(out.halted)} idle robot(s) halted" if out.halted else ""))
        else:
            out.message = (f"nothing to stop: no goal in flight on the {len(targets)} robot(s); "
                           "each was sent a halt")
        names = ", ".join(f"{r} (goal {g[:8]})" for r, g in zip(out.stopped[:ROBOTS_LOGGED], out.goals))
        more = f", ... ({len(out.stopped)} in all)" if len(out.stopped) > ROBOTS_LOGGED else ""
        self._record("warning", "stops", f"operator {who} stopped {len(targets)} robot(s): "
                                         f"{len(out.stopped)} goal(s) cancelled{': ' + names + more if names else ''}")
        return out

    def _apply_stop_late(self, cmd: StopLate) -> None:
        robot, goal_id, reason = cmd.robot_id, cmd.goal_id, cmd.reason
        if self._end_goal(goal_id, reason):
            self.counters["robots_stopped"] += 1
            self._ports.log("warning", f"robot {robot}: goal {goal_id[:8]} {reason} as it arrived")

    # -- approval: the hold (scheduler thread) ----------------------------------------------------
    def hold(self, goal_id: str, req: Request, seg: Segment) -> bool:
        """Called by the service's dispatch before it sends a segment: True if the segment is held
        (it waits for an operator, or behind a segment that does)."""
        if not self._rules or goal_id == self._releasing:
            return False
        h = self._holds.get(goal_id)
        if h is not None:  # an earlier segment waits: this one waits behind it
            h.queue.append(seg)
            return True
        rule = self._rules.get(req.goal.robot_id)
        if rule is None:
            return False
        why = rule.marked(seg.calls)
        if not why:
            return False
        h = _Hold(goal_id, req.goal.robot_id, rule, [seg])
        with self._lock:
            self._holds[goal_id] = h
        self._wait(h, req, seg, why)
        return True

    def _wait(self, h: _Hold, req: Request, seg: Segment, why: str) -> None:

        now = self._clock.now()
        with self._lock:
            h.waiting, h.marked, h.since, h.deadline, h.decision = seg, why, now, now + h.rule.timeout_s, None
        text = safe_text(seg.text.strip(), 200)
        notice = (f"{NOTICE_PREFIX} {seg.index}: {text} ({why}; `timely-fleet approve {h.goal_id}` or "
                  f"`timely-fleet deny {h.goal_id}`, time-out {h.rule.timeout_s:g} s)")
        self._record("warning", "approval_requests",
                     f"goal {h.goal_id[:8]} robot {h.robot_id}: segment {seg.index} waits for approval ({why}): {text}")
        self._port("approval_notice", h.goal_id, req, seg.index, notice)

    def check(self, now: float) -> None:
        """Scheduler thread, with the robot check: forget holds of goals that ended, keep the
        silence clocks of held goals still, time out unanswered ones, apply decisions."""
        if not self._holds:
            return
        for gid, h in list(self._holds.items()):
            if gid not in self._goals.by_goal_id:  # ended (cancel, stop, failure)
                with self._lock:
                    self._holds.pop(gid, None)
                continue
            self._delivery.held(gid, now)
            with self._lock:
                if h.waiting is not None and h.decision is None and now >= h.deadline:
                    h.decision = (False, _TIMED_OUT)
            if h.decision is not None:
                self._apply(gid)

    # -- approval: the decision (any thread) ------------------------------------------------------
    def decide(self, goal_ref: str, approve: bool, operator: str) -> tuple[bool, str]:
        """An operator approves or denies the segment a goal waits with (``goal_ref``: its id or
        an unambiguous prefix of at least 8 hex digits). ``(accepted, one sentence)``."""

        who = operator_name(operator)
        ref = goal_ref.strip().lower()
        verb = "approved" if approve else "denied"
        with self._lock:
            matches = [h for g, h in self._holds.items() if g == ref
                       or (len(ref) >= MIN_GOAL_PREFIX and g.startswith(ref))]
            if len(matches) > 1:
                return False, f"goal '{safe_text(ref)}' is ambiguous: {len(matches)} waiting goals start with it"
            h = matches[0] if matches else None
            if h is None or h.waiting is None or h.decision is not None:
                past = next(((g, d) for g, d in self._decided.items() if g == ref
                             or (len(ref) >= MIN_GOAL_PREFIX and g.startswith(ref))), None)
                if past is not None and past[1][0] == approve and past[1][1] == who:
                    return True, f"segment {past[1][2]} of goal {past[0][:8]} was already {verb} by {who}"
                return False, f"no goal waiting for approval is '{safe_text(ref)}'"
            h.decision = (approve, who)
            k = h.waiting.index
            self._decided[h.goal_id] = (approve, who, k)
            while len(self._decided) > DECISIONS_KEPT:
                self._decided.pop(next(iter(self._decided)))
            goal_id = h.goal_id
        self._commands.post(ApplyDecision(goal_id))
        return True, f"segment {k} of goal {goal_id[:8]} (robot {h.robot_id}) {verb} by {who}"

    def _apply_decision(self, cmd: ApplyDecision) -> None:
        self._apply(cmd.goal_id)

    def _apply(self, goal_id: str) -> None:
        """Scheduler thread: carry out the decision taken for a held goal (once)."""

        with self._lock:
            h = self._holds.get(goal_id)
            if h is None or h.decision is None or h.waiting is None:
                return
            (approve, who), seg = h.decision, h.waiting
            h.decision = h.waiting = None
        text = safe_text(seg.text.strip(), 120)
        rid = self._goals.by_goal_id.get(goal_id)
        req = self._planner.requests.get(rid) if rid is not None else None
        if req is None or req.state.terminal:
            with self._lock:
                self._holds.pop(goal_id, None)
            return
        if approve:
            self._record("info", "approvals", f"goal {goal_id[:8]} robot {h.robot_id}: segment {seg.index} "
                                              f"approved by operator {who}")
            h.approved.add(seg.index)
            self._release(h, req)
            return
        if who == _TIMED_OUT:
            reason = f"approval timed out after {h.rule.timeout_s:g} s: segment {seg.index} ({text})"
            self._record("warning", "approval_timeouts", f"goal {goal_id[:8]} robot {h.robot_id}: {reason}")
        else:
            reason = f"denied by operator {who}: segment {seg.index} ({text})"
            self._record("warning", "denials", f"goal {goal_id[:8]} robot {h.robot_id}: {reason}")
        self._end_goal(goal_id, reason)

    def _release(self, h: _Hold, req: Request) -> None:
        """Send the held segments in order, up to the next one that needs its own approval."""
        self._releasing = h.goal_id
        try:
            while h.queue:
                seg = h.queue[0]
                if seg.index not in h.approved:
                    why = h.rule.marked(seg.calls)
                    if why:
                        self._wait(h, req, seg, why)
                        return
                h.queue.pop(0)
                self._dispatch(req, seg)
        finally:
            self._releasing = None
        with self._lock:
            self._holds.pop(h.goal_id, None)

    # -- diagnostics (any thread) -----------------------------------------------------------------
    def waiting(self) -> list[tuple[str, str, int, float]]:
        """(goal id, robot, segment, seconds waited) of every goal waiting for an operator."""
        now = self._clock.now()
        with self._lock:
            return [(h.goal_id, h.robot_id, h.waiting.index, now - h.since)
                    for h in self._holds.values() if h.waiting is not None]

    def snapshot(self) -> dict[str, Any]:
        return {"counters": dict(self.counters), "events": list(self.events), "waiting": self.waiting()}
