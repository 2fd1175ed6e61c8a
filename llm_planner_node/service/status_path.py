"""Robot statuses: cheap checks on the receiving thread, their own bounded queue, flood control,
and applying them to the core and the delivery protocol on the scheduler thread."""

from __future__ import annotations

import math
import queue
import time
from collections import Counter, deque
from typing import Any, Callable

from llm_planner_node.config.params import FleetParams
from timely_robot.link.rules import INTERRUPTED
from timely_robot.outcomes import RobotState
from timely_robot.skills import skill_set_of
from llm_planner_node.core.text import safe_text
from llm_planner_node.service.memory import SightingRecorder
from llm_planner_node.service.ports import MAX_ID_CHARS, StatusIn
from llm_planner_node.service.shared import ServicePart, Shared

# RobotStatus.STATE_* (the adapters' states)
IDLE, RECEIVED, EXECUTING, DONE, FAILED, CANCELLED = RobotState

#: Longest plausible skill execution (s): a reported duration outside [0, this] is refused.
MAX_SKILL_S = 3600.0
#: Longest error text a status may carry.
MAX_ERROR_CHARS = 1000
#: Statuses waiting for the scheduler thread; beyond this, new ones are dropped and counted.
STATUS_QUEUE_MAX = 20_000
#: Refused statuses per second above which the status path counts as flooded: while it is (and
#: FLOOD_GRACE_S after), robots' silence clocks stand still, since real reports may be stuck
#: behind the flood in the reader. A flood can delay noticing a dead robot, never end a live one.
FLOOD_DROPS_PER_S = 300.0
FLOOD_GRACE_S = 3.0


class StatusPath(ServicePart):
    """Statuses in from any thread (:meth:`on_status`), applied on the scheduler thread (:meth:`drain`)."""

    def __init__(self, shared: Shared, params: Callable[[], FleetParams], wake_up: Callable[[], None],
                 sightings: SightingRecorder | None = None) -> None:
        """``params``: the planner's current parameters; ``wake_up``: end the scheduler's wait (a
        status is applied at once); ``sightings``: where what the robots' perception calls found
        goes (the fleet memory; None: nowhere)."""
        super().__init__(shared)
        self._params = params
        self._wake_up = wake_up
        self._sightings = sightings
        self._queue: queue.Queue[StatusIn] = queue.Queue(maxsize=STATUS_QUEUE_MAX)
        self._rung = False  # a status woke the scheduler, which has not drained since
        self.drops: Counter[str] = Counter()  # statuses refused before touching state, by reason
        self.delays: deque[float] = deque(maxlen=1000)  # receive -> applied (s)
        self._drops_seen = (0.0, 0)  # (time, total drops) at the last check
        self._flooded_until = 0.0
        self.flood_seconds = 0.0

    # -- any thread --------------------------------------------------------------------------------
    def check_status(self, st: StatusIn) -> str | None:
        """Why a status is refused before it touches any state (None: well formed). Cheap: runs
        on the receiving thread for every status, garbage floods included."""
        if not (0 < len(st.robot_id) <= MAX_ID_CHARS) or self._params().robot(st.robot_id) is None:
            return "unknown robot"
        if len(st.goal_id) != 32:
            return "malformed goal id"
        if not 0 <= st.state <= CANCELLED or not 0 <= st.sequence < 100_000:
            return "malformed state or sequence"
        if len(st.skill_durations_s) > 1000 or len(st.error) > MAX_ERROR_CHARS:
            return "oversize report"
        if not all(math.isfinite(d) and 0.0 <= d <= MAX_SKILL_S for d in st.skill_durations_s):
            return "duration not finite or outside [0, 3600] s"
        if len(st.answers) > 1000 or any(len(n) > MAX_ERROR_CHARS or len(v) > MAX_ERROR_CHARS
                                         for n, v in st.answers) or len(st.return_value or "") > MAX_ERROR_CHARS:
            return "oversize report"
        return None

    def expects_status(self, goal_id: str) -> bool:
        """Could a status about ``goal_id`` matter (a goal in flight, or one whose stop awaits
        confirmation)? Asked by the status thread before it even deserialises a status, so a
        flood of garbage costs a dictionary lookup per message."""
        return goal_id in self._goals.by_goal_id or self._delivery.owes_stop(goal_id)

    def on_status(self, st: StatusIn) -> bool:
        """Queue a well-formed status for the scheduler thread (which applies statuses before any
        goal command); False if it was refused or the status queue is full (counted)."""
        reason = self.check_status(st)
        if reason is None:
            try:
                self._queue.put_nowait(st)
                if not self._rung:  # one wake-up per drain, not per status of a burst
                    self._rung = True
                    self._wake_up()
                return True
            except queue.Full:
                reason = "status queue full"
        self.drops[reason] += 1
        return False

    # -- scheduler thread --------------------------------------------------------------------------
    def empty(self) -> bool:
        return self._queue.empty()

    def drain(self, run: Callable[..., Any]) -> None:
        """Apply every queued status, each through ``run(handler, status)`` (its failure its own)."""
        self._rung = False  # before draining: a status queued after this rings again
        while True:
            try:
                st = self._queue.get_nowait()
            except queue.Empty:
                return
            run(self._handle, st)

    def _handle(self, st: StatusIn) -> None:
        if st.state == IDLE:
            if self._delivery.stop_confirmed(st.goal_id, st.robot_id):
                self._ports.log("info", f"robot {safe_text(st.robot_id)} {safe_text(st.error, 200)} "
                                        f"(goal {st.goal_id[:8]})")
            return
        rid = self._goals.by_goal_id.get(st.goal_id)
        req = self._planner.requests.get(rid) if rid is not None else None
        seq = st.sequence  # the robot's numbering runs on across a goal's re-plans
        k = seq - req.seq_base if req is not None else seq  # the segment of this generation
        if req is not None and req.goal.robot_id == st.robot_id and 0 <= seq < req.seq_base:
            return  # a late or repeated report on an earlier plan of the goal (already executed)
        # a report that does not match the goal (another robot, a segment never dispatched)
        # changes nothing: no last_heard, no acknowledgement, no recorded failure
        if req is None or req.goal.robot_id != st.robot_id or not 0 <= k < len(req.dispatched_at):
            if req is None and self._delivery.owes_stop(st.goal_id, st.robot_id):
                return  # a stopped goal's last reports (its segments cancelled), before the IDLE
            self.drops["does not match a goal in flight"] += 1
            return
        now = self._clock.now()
        self._delivery.heard(st.goal_id, seq, now, finished=st.state in (DONE, FAILED))
        if st.state in (EXECUTING, DONE, FAILED):  # an earlier segment's report was lost: ask now
            probe = self._delivery.probe_gap(st.goal_id, seq, now)
            if probe is not None:
                self._ports.publish(*probe)
        self.delays.append(time.monotonic() - st.received)
        if st.state in (DONE, FAILED) and k < len(req.exec_end) and req.exec_end[k] is None:
            # the segment ended: the next journal carries it (a standby sends again only the
            # segments not ended; a start it misses it hears from the robot's answer to the resend)
            self._goals.touch(st.goal_id)
        if st.state in (DONE, FAILED, CANCELLED) and st.answers:  # a repeated report overwrites: idempotent
            first = k not in req.answers
            req.answers[k] = tuple((safe_text(n, 200), safe_text(v, 200)) for n, v in st.answers)
            if first and self._sightings is not None:  # remembered once per segment, not per repeat
                g = req.goal
                self._sightings.from_answers(st.robot_id, st.goal_id, skill_set_of(g.skill_set_id, g.robot_kind),
                                             req.answers[k])
        if st.return_value is not None and st.state == DONE:
            req.return_value = safe_text(st.return_value, 200)
        if st.state == EXECUTING:
            if k < len(req.exec_start) and req.exec_start[k] is None:
                self._planner.on_robot_status(st.robot_id, rid, k, "started")
        elif st.state == DONE and st.error.startswith(INTERRUPTED):  # cut short by a lease hold: not done
            self._planner.on_robot_status(st.robot_id, rid, k, "failed", reason=(
                f"robot {st.robot_id} segment {seq} {safe_text(st.error, 300)}"))
        elif st.state == DONE:
            self._planner.on_robot_status(st.robot_id, rid, k, "finished", durations=list(st.skill_durations_s))
        elif st.state == FAILED:
            self._planner.on_robot_status(st.robot_id, rid, k, "failed", reason=(
                f"robot {st.robot_id} failed segment {seq}: {safe_text(st.error, 300) or 'no reason given'}"))
        elif st.state == CANCELLED:  # the robot stopped the plan without this planner asking
            self._planner.cancel(rid, f"robot {st.robot_id} cancelled segment {seq}: "
                                      f"{safe_text(st.error, 300) or 'no reason given'}")

    def flood_check(self, now: float) -> None:
        """Pause the silence clocks while the status path is flooded (see FLOOD_DROPS_PER_S)."""
        t0, n0 = self._drops_seen
        total = sum(self.drops.values())
        self._drops_seen = (now, total)
        dt = now - t0
        if dt <= 0 or t0 == 0.0:
            return
        if (total - n0) / dt > FLOOD_DROPS_PER_S:
            if now >= self._flooded_until:
                self._ports.log("warning", f"status flood: {(total - n0) / dt:.0f} refused statuses/s; robot "
                                           "timeouts paused until it stops")
            self._flooded_until = now + FLOOD_GRACE_S
        if now < self._flooded_until:
            self._delivery.pause(dt)
            self.flood_seconds += dt
