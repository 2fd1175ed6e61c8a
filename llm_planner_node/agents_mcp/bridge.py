"""The ROS side of ``timely-fleet mcp``: a client of a running planner, on its own rclpy context.

One :class:`FleetBridge` per MCP server process: a dedicated rclpy ``Context``, one node (a
:class:`~llm_planner_node.ros.goal_client.GoalClient`'s, in the planner's namespace) spun by one executor
thread, and what the server needs to answer agents:

- the goals this server sent (:class:`AgentGoal`): the GoalClient handle with the goal's cancel
  secret (only this process holds it), who sent it, its segment feedback as it arrives (including
  the planner's "waiting for approval of segment k: ..." notices) and its result;
- the missions this server sent (:class:`AgentMission`, the ``plan_mission`` action on the same
  node): who sent it, the selector it went with, its events (allocated, refused, moved, ended) and
  its result;
- every goal the planner admitted and ended, from ``planner/goals`` and ``planner/results``
  (which robot is busy with which goal, whoever sent it);
- the latest ``planner/stats``, the planner's ``/diagnostics`` statuses and each robot's latest
  ``robot_status``;
- a client of the planner's fleet memory (``planner/memory``, ``timely_fleet/srv/QueryMemory``).

Every method is thread-safe and none blocks for long: the MCP tools (asyncio) wait on goals by
registering a waker (:meth:`AgentGoal.watch`) and polling with bounded timeouts.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from llm_planner_node.ros.goal_client import STATUS_NAMES, GoalClient, GoalHandle

APPROVAL_PREFIX = "waiting for approval of segment"
ROBOT_STATES = {0: "idle", 1: "received", 2: "executing", 3: "done", 4: "failed", 5: "cancelled"}
DIAG_LEVELS = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}
KEEP_FINISHED = 2000          # ended goals remembered (own and others'), oldest dropped first
PLAN_RAN_THROUGH = (0, 10)    # SUCCEEDED, NOT_ACHIEVED: the goal's last segment ended its plan
SERVICE_WAIT_S = 3.0          # a planner service not yet discovered: wait this long before refusing


def skill_text(s: Any) -> str:
    """``move_forward(distance=100)`` from a timely_fleet/Skill."""
    args = ", ".join(f"{n}={v}" for n, v in zip(s.arg_names, s.arg_values))
    return f"{s.name}({args})"


def feedback_dict(fb: Any) -> dict[str, Any]:
    return {"index": int(fb.index), "text": fb.text, "skills": [skill_text(s) for s in fb.skills],
            "queue_s": round(float(fb.queue_s), 4), "generation_s": round(float(fb.generation_s), 4),
            "final": bool(fb.final), "plan": int(getattr(fb, "plan", 0))}


def is_approval_notice(fb: Any) -> bool:
    return not fb.skills and fb.text.startswith(APPROVAL_PREFIX)


def late_segments(res: Any, reported: set[int]) -> list[Any]:
    """The dispatched segments of a result whose feedback has not been reported, as feedback-like
    records in index order. The planner's feedback and result travel on different topics, so the
    result may arrive first; the segment reports of the result say the same (text, skills, timing)."""
    out = []
    last = max((int(s.index) for s in res.segments), default=-1)
    for s in sorted(res.segments, key=lambda s: int(s.index)):
        if int(s.index) in reported or s.dispatch_s < 0:
            continue
        out.append(SimpleNamespace(index=int(s.index), text=s.text, skills=list(s.skills),
                                   queue_s=max(0.0, s.generation_start_s - s.queued_s),
                                   generation_s=max(0.0, s.generation_end_s - s.generation_start_s),
                                   final=int(s.index) == last and int(res.status) in PLAN_RAN_THROUGH))
    return out


def result_dict(res: Any, beta: float | None = None) -> dict[str, Any]:
    """A PlanTask result (or GoalResult record) as the tools return it."""
    out: dict[str, Any] = {
        "status": STATUS_NAMES.get(int(res.status), str(res.status)), "message": res.message,
        # why it ended, machine-readable (PlanTask.Result.reason: "not_achieved", "unperceivable", ...)
        "reason": res.reason,
        "plan_text": res.plan_text,
        "plans": list(res.plans),  # every plan of the goal: the first, then one per re-plan
        "segments": [{"index": int(s.index), "text": s.text, "skills": [skill_text(k) for k in s.skills],
                      "queued_s": round(s.queued_s, 4), "generation_start_s": round(s.generation_start_s, 4),
                      "generation_end_s": round(s.generation_end_s, 4), "dispatch_s": round(s.dispatch_s, 4),
                      "execution_start_s": round(s.execution_start_s, 4),
                      "execution_end_s": round(s.execution_end_s, 4)} for s in res.segments],
        "response_time_s": round(float(res.response_time_s), 4),
        "robot_waiting_s": round(float(res.robot_waiting_s), 4),
        "time_utility": round(float(res.time_utility), 4),
        # what the robot found: the plan's return value (None: it returned nothing) and every answer
        "return_value": res.return_value if res.has_return_value else None,
        "answers": [{"segment": int(a.segment), "skill": a.skill, "value": a.value} for a in res.answers],
        # NOT_ACHIEVED: the action skill calls that answered they did not do their action
        "unachieved": [{"segment": int(a.segment), "skill": a.skill, "value": a.value} for a in res.unachieved]}
    if beta is not None:
        out["max_utility"] = beta
    return out


def mission_dict(res: Any) -> dict[str, Any]:
    """A PlanMission result as send_mission returns it: the mission's status and, per task, the
    robot the allocator chose and why, the robots it left and why, and its goal's end."""
    from llm_planner_node.ros.mission_server import NO_GOAL
    from llm_planner_node.service.missions import MISSION_STATUS_NAMES

    return {"status": MISSION_STATUS_NAMES.get(int(res.status), str(res.status)), "reason": res.reason,
            "message": res.message,
            "tasks": [{"task": t.task, "robot_id": t.robot_id or None, "goal_id": t.goal_id or None,
                       "status": "NOT_STARTED" if int(t.status) == NO_GOAL else STATUS_NAMES.get(int(t.status),
                                                                                             str(t.status)),
                       "message": t.message, "reason": t.reason, "allocated_why": t.allocated_why,
                       "left": [{"robot_id": r, "why": w} for r, w in zip(t.tried_robots, t.tried_why)],
                       "plans": list(t.plans),
                       "return_value": t.return_value if t.has_return_value else None,
                       "answers": [{"segment": int(a.segment), "skill": a.skill, "value": a.value} for a in t.answers],
                       "unachieved": [{"segment": int(a.segment), "skill": a.skill, "value": a.value}
                                      for a in t.unachieved]}
                      for t in res.tasks]}


def sighting_dict(m: Any, now: float) -> dict[str, Any]:
    """A ``timely_fleet/Sighting`` as the memory tool returns it (as ``timely-fleet memory --json``
    prints it: times as UNIX seconds and ISO 8601 UTC, the position in the fleet frame in metres)."""
    from datetime import datetime, timezone

    t = m.stamp.sec + m.stamp.nanosec * 1e-9
    return {"robot_id": m.robot_id, "label": m.label, "time": t,
            "time_utc": datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds"),
            "age_s": round(max(0.0, now - t), 3), "position": [m.x, m.y, m.z] if m.has_position else None,
            "confidence": m.confidence if m.has_confidence else None, "goal_id": m.goal_id}


def event_dict(fb: Any) -> dict[str, Any]:
    """A PlanMission feedback message: what happened to a task, on which robot and goal, and why."""
    return {"event": fb.event, "task": fb.task, "robot_id": fb.robot_id, "goal_id": fb.goal_id, "text": fb.text}


class _Wakeable:
    """Wakers: the asyncio side registers one per waiting tool call (``_wakers``, ``_lock``: the
    dataclass's fields)."""

    _wakers: list[Callable[[], None]]
    _lock: threading.Lock

    def watch(self, waker: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._wakers.append(waker)

        def unwatch() -> None:
            with self._lock:
                if waker in self._wakers:
                    self._wakers.remove(waker)
        return unwatch

    def wake(self) -> None:
        with self._lock:
            wakers = list(self._wakers)
        for w in wakers:
            try:
                w()
            except RuntimeError:  # the waiting loop is closed
                pass


@dataclass
class AgentMission(_Wakeable):
    """A mission this MCP server sent for an agent: its events as they come, then its result."""

    mission_id: str
    instruction: str
    robot_ids: tuple[str, ...]      # the selector sent (a token's robots already applied)
    robot_kinds: tuple[str, ...]
    urgency: str
    tuf: tuple[float, float, float]
    owner: str
    sent_mono: float = field(default_factory=time.monotonic)
    feedback: list[Any] = field(default_factory=list)     # PlanMission.Feedback in arrival order
    accepted: threading.Event = field(default_factory=threading.Event)
    _done: threading.Event = field(default_factory=threading.Event)
    _result: Any = None
    _wakers: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self) -> Any:
        return self._result if self._done.is_set() else None

    def finish(self, result: Any) -> None:
        """The mission's end (the first one counts)."""
        with self._lock:
            if self._done.is_set():
                return
            self._result = result
            self._done.set()
        self.wake()

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [event_dict(fb) for fb in self.feedback]


@dataclass
class AgentGoal(_Wakeable):
    """A goal this MCP server sent for an agent."""

    goal_id: str
    robot_id: str
    instruction: str
    urgency: str
    tuf: tuple[float, float, float]
    owner: str                      # the principal's name (token name, or the local user over stdio)
    handle: GoalHandle
    sent_wall: float = field(default_factory=time.time)
    sent_mono: float = field(default_factory=time.monotonic)
    feedback: list[Any] = field(default_factory=list)     # PlanTask.Feedback in arrival order
    admitted: bool = False          # the planner published it on planner/goals
    _wakers: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- state ----------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.handle.done

    def result(self) -> Any:
        return self.handle.result(0) if self.handle.done else None

    def segments(self) -> list[dict[str, Any]]:
        """The dispatched segments so far (approval notices left out), in index order."""
        with self._lock:
            fbs = list(self.feedback)
        seen: dict[int, dict[str, Any]] = {}
        for fb in fbs:
            if not is_approval_notice(fb):
                seen.setdefault(int(fb.index), feedback_dict(fb))
        return [seen[k] for k in sorted(seen)]

    def waiting_for_approval(self) -> str:
        """The planner's "waiting for approval of segment k: ..." while segment k is held, else ""."""
        with self._lock:
            fbs = list(self.feedback)
        dispatched = {int(fb.index) for fb in fbs if not is_approval_notice(fb)}
        held = [fb for fb in fbs if is_approval_notice(fb) and int(fb.index) not in dispatched]
        return held[-1].text if held and not self.done else ""

    def state(self) -> str:
        if self.done:
            return STATUS_NAMES.get(int(self.result().status), "ENDED")
        waiting = self.waiting_for_approval()
        if waiting:
            return waiting
        n = len(self.segments())
        if n:
            return f"running: {n} segment(s) dispatched"
        if self.admitted:
            return "queued: admitted by the planner, waiting for its first segment"
        if self.handle.accepted.is_set():
            return "accepted by the planner's action server"
        return "sent: waiting for the planner's answer"


@dataclass
class GoalSeen:
    """A goal the planner admitted (``planner/goals``), whoever sent it, and its end (``planner/results``)."""

    goal_id: str
    robot_id: str
    instruction: str
    task_type: str
    tuf: tuple[float, float, float]
    started_wall: float
    result: dict[str, Any] | None = None
    ended_wall: float | None = None


class PlannerNotRunning(RuntimeError):
    """No planner answers in this namespace (one sentence)."""


class FleetBridge:
    """See the module docstring. ``start()`` before use, ``close()`` at the end."""

    def __init__(self, params: Any, namespace: str = "", operator_secret: str = "") -> None:
        self.params = params
        self.namespace = namespace.strip("/")
        self.operator_secret = operator_secret
        self._lock = threading.Lock()
        self.goals: "OrderedDict[str, AgentGoal]" = OrderedDict()     # this server's goals
        self.missions: "OrderedDict[str, AgentMission]" = OrderedDict()  # this server's missions
        self.seen: "OrderedDict[str, GoalSeen]" = OrderedDict()       # every admitted goal
        self.robot_status: dict[str, dict[str, Any]] = {}
        self.stats: dict[str, Any] | None = None
        self.stats_at = 0.0
        self.diagnostics: dict[str, dict[str, Any]] = {}
        self.diagnostics_at = 0.0
        self.handshake_done = threading.Event()
        self.mission_handshake_done = threading.Event()  # the plan_mission server answered us
        self.mission_client: Any = None
        self.memory_service: Any = None  # None: interfaces built without timely_fleet/srv/QueryMemory
        self._stop = threading.Event()
        self._rclpy_lock = threading.Lock()  # no mission call into rclpy while close() destroys the client
        self._ctx: Any = None
        self.client: GoalClient | None = None
        self._spin_thread: threading.Thread | None = None

    # -- life cycle -------------------------------------------------------------------------------
    def start(self) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor

        self._ctx = Context()
        rclpy.init(context=self._ctx)
        self.client = GoalClient(self._ctx, name=f"mcp_front_{uuid.uuid4().hex[:8]}",
                                 namespace=f"/{self.namespace}" if self.namespace else None)
        self._subscribe(self.client.node)
        from timely_fleet.action import PlanMission

        from llm_planner_node.ros.goal_client import plan_task_client
        from llm_planner_node.ros.mission_server import MISSION_ACTION

        self.PlanMission = PlanMission
        self.mission_client = plan_task_client(self.client.node, MISSION_ACTION, PlanMission)
        try:
            from timely_fleet.srv import QueryMemory

            from llm_planner_node.ros.memory_server import MEMORY_SERVICE
        except ImportError:  # an older build of the interfaces: the memory tool says so
            QueryMemory = None
        if QueryMemory is not None:
            self.QueryMemory = QueryMemory
            self.memory_service = self.client.node.create_client(QueryMemory, MEMORY_SERVICE)
        self._executor = SingleThreadedExecutor(context=self._ctx)
        self._executor.add_node(self.client.node)
        self._spin_thread = threading.Thread(target=self._spin, name="mcp-ros-spin", daemon=True)
        self._spin_thread.start()
        threading.Thread(target=self._handshake, name="mcp-handshake", daemon=True).start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            try:
                self._executor.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: BLE001 - the context is shutting down
                if self._stop.is_set():
                    return
                time.sleep(0.05)

    def _handshake(self) -> None:
        """Wait for the planner's action server and its first answer (GoalClient.wait_for_server),
        retried until it comes: goals sent before it are recovered by GoalClient's watchdog anyway."""
        from llm_planner_node.ros.goal_client import Handshake

        while not self._stop.is_set() and self.client is not None:
            if self.client.wait_for_server(2.0):
                self.handshake_done.set()
                break
        hs = Handshake(self.mission_client)  # the same for the plan_mission server (its own readers)
        while not self._stop.is_set() and not hs.answered.is_set():
            if self.mission_server_seen():
                self._rclpy_call(hs.step)
                time.sleep(0.02)
            else:  # a planner without missions, or not yet discovered: look again now and then
                time.sleep(0.1)
        if hs.answered.is_set():
            self.mission_handshake_done.set()

    def mission_server_seen(self) -> bool:
        """The planner's ``plan_mission`` action server is discovered (answering or not)."""
        return bool(self._rclpy_call(self.mission_client.server_is_ready))

    def _rclpy_call(self, call: Callable[[], Any]) -> Any:
        """An rclpy call from a thread of this bridge, unless it is closing (None then)."""
        with self._rclpy_lock:
            if self._stop.is_set():
                return None
            return call()

    def close(self) -> None:
        import rclpy

        with self._rclpy_lock:
            self._stop.set()
        if self._spin_thread is not None:
            self._spin_thread.join(timeout=2)
        if self.mission_client is not None:
            self.mission_client.destroy()
        if self.client is not None:
            self.client.destroy()
        if self._ctx is not None:
            rclpy.try_shutdown(context=self._ctx)

    def in_flight(self) -> list[AgentGoal]:
        with self._lock:
            return [g for g in self.goals.values() if not g.done]

    # -- what the planner publishes ---------------------------------------------------------------
    def _subscribe(self, node: Any) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from timely_fleet.msg import GoalRecord, GoalResult, PlannerStats, RobotStatus

        from llm_planner_node.ros.messages import DIAGNOSTICS_TOPIC, GOALS_TOPIC, RESULTS_TOPIC, STATS_TOPIC
        from timely_robot.link.ros import STATUS_QOS, STATUS_TOPIC, status_topic

        node.create_subscription(GoalRecord, GOALS_TOPIC, self._on_goal_record, STATUS_QOS)
        node.create_subscription(GoalResult, RESULTS_TOPIC, self._on_goal_result, STATUS_QOS)
        node.create_subscription(PlannerStats, STATS_TOPIC, self._on_stats, 10)
        node.create_subscription(DiagnosticArray, DIAGNOSTICS_TOPIC, self._on_diagnostics, 10)
        if self.params.security.per_robot_topics:
            for r in self.params.robots:
                node.create_subscription(RobotStatus, status_topic(r.id), self._on_robot_status, STATUS_QOS)
        else:
            node.create_subscription(RobotStatus, STATUS_TOPIC, self._on_robot_status, STATUS_QOS)

    def _on_goal_record(self, m: Any) -> None:
        g = GoalSeen(m.goal_id, m.robot_id, m.instruction, m.task_type, (m.ert_s, m.alpha, m.beta), time.time())
        with self._lock:
            self.seen.setdefault(m.goal_id, g)
            self._prune(self.seen)
            own = self.goals.get(m.goal_id)
        if own is not None:
            own.admitted = True
            own.wake()

    def _on_goal_result(self, m: Any) -> None:
        with self._lock:
            g = self.seen.get(m.goal_id)
            if g is None:  # admitted before this server started (or its record was lost)
                g = GoalSeen(m.goal_id, m.robot_id, "", m.task_type, (m.ert_s, m.alpha, m.beta), 0.0)
                self.seen[m.goal_id] = g
            g.result, g.ended_wall = result_dict(m, m.beta), time.time()
            self._prune(self.seen)

    def _on_stats(self, m: Any) -> None:
        self.stats = {"policy": m.policy, "queued": m.queued, "running": m.running, "suspended": m.suspended,
                      "active_goals": m.active_goals, "goals_succeeded": m.goals_succeeded,
                      "goals_failed": m.goals_failed, "goals_cancelled": m.goals_cancelled,
                      "goals_rejected": m.goals_rejected, "tokens_per_s": round(m.tokens_per_s, 1),
                      "kv_free_fraction": round(m.kv_free_fraction, 3)}
        self.stats_at = time.monotonic()

    def _on_diagnostics(self, m: Any) -> None:
        # the planner's statuses are named "<node>: engine|goals|robots|operator" (node.py); /diagnostics
        # is shared by every node of the domain, so keep only the planner's
        for s in m.status:
            if not s.name.startswith("llm_planner"):
                continue
            self.diagnostics[s.name] = {"level": DIAG_LEVELS.get(int.from_bytes(s.level, "little")
                                                                 if isinstance(s.level, bytes) else int(s.level), "?"),
                                        "message": s.message, "values": {kv.key: kv.value for kv in s.values}}
            self.diagnostics_at = time.monotonic()

    def _on_robot_status(self, m: Any) -> None:
        self.robot_status[m.robot_id] = {
            "state": ROBOT_STATES.get(int(m.state), str(m.state)), "goal_id": m.goal_id, "segment": int(m.sequence),
            "current_skill": m.current_skill, "progress": round(float(m.progress), 3), "error": m.error,
            "at": time.monotonic()}

    @staticmethod
    def _prune(d: "OrderedDict[str, Any]") -> None:
        while len(d) > KEEP_FINISHED * 2:
            d.popitem(last=False)

    # -- the planner ------------------------------------------------------------------------------
    def planner_running(self) -> bool:
        return self.client is not None and self.client.client.server_is_ready()

    def planner_gone_after_s(self, base_s: float) -> float:
        """How long the planner's action server may be unseen before it counts as gone: longer
        while a standby planner that may take over is known (GoalClient.planner_gone_after_s)."""
        return base_s if self.client is None else self.client.planner_gone_after_s(base_s)

    def where(self) -> str:
        return f"namespace '/{self.namespace}'" if self.namespace else "the root namespace"

    def not_running_sentence(self) -> str:
        return (f"the planner is not running: no 'plan_task' action server in {self.where()} on ROS domain "
                f"{_domain()} (start it with `timely-fleet up`, with the same ROS_DOMAIN_ID and --namespace)")

    # -- goals ------------------------------------------------------------------------------------
    def send(self, owner: str, robot_id: str, instruction: str, urgency: str,
             tuf: tuple[float, float, float]) -> AgentGoal:
        assert self.client is not None
        holder: dict[str, Any] = {"goal": None, "early": []}
        holder_lock = threading.Lock()

        def on_feedback(fb: Any) -> None:   # the spin thread
            with holder_lock:
                ag = holder["goal"]
                if ag is None:   # feedback before send() returned (a very fast planner): keep it
                    holder["early"].append(fb)
                    return
            with ag._lock:
                ag.feedback.append(fb)
            ag.wake()

        h = self.client.send(robot_id, instruction, tuf=tuf, on_feedback=on_feedback)
        ag = AgentGoal(h.goal_id, robot_id, instruction, urgency, tuf, owner, h)
        with self._lock:
            self.goals[h.goal_id] = ag
            self._prune_own()
            if h.goal_id in self.seen:
                ag.admitted = True
        with holder_lock:
            ag.feedback.extend(holder["early"])
            holder["goal"] = ag
        return ag

    def _prune_own(self) -> None:
        for own in (self.goals, self.missions):
            done = [k for k, g in own.items() if g.done]
            for k in done[: max(0, len(done) - KEEP_FINISHED)]:
                del own[k]

    # -- the fleet memory -------------------------------------------------------------------------
    def memory_answers(self) -> bool:
        """The planner's ``planner/memory`` service is discovered."""
        return self.memory_service is not None and bool(self._rclpy_call(self.memory_service.service_is_ready))

    def query_memory(self, label: str, max_results: int) -> Any:
        """Ask ``planner/memory`` for ``label``'s sightings: the future of its answer (None: closing)."""
        request = self.QueryMemory.Request(label=label, max_results=max_results)
        return self._rclpy_call(lambda: self.memory_service.call_async(request))

    # -- missions ---------------------------------------------------------------------------------
    def mission_server_answers(self) -> bool:
        """The planner's ``plan_mission`` action server is there and has answered this bridge."""
        return self.mission_handshake_done.is_set() and self.mission_server_seen()

    def send_mission(self, owner: str, instruction: str, robot_ids: tuple[str, ...], robot_kinds: tuple[str, ...],
                     urgency: str, tuf: tuple[float, float, float]) -> AgentMission:
        """Send a ``plan_mission`` goal. Its answer lost on the way (DDS discovery settling, a
        loaded planner) is recovered as GoalClient recovers a goal's: after GOAL_ANSWER_S the
        planner is asked for the mission's result by id, and one it never received is sent again
        under the same id (so it can never run twice), at most GOAL_TRIES times."""
        from unique_identifier_msgs.msg import UUID

        from llm_planner_node.ros.goal_client import GOAL_ANSWER_S, GOAL_TRIES, request_result

        ert, alpha, beta = tuf
        goal = self.PlanMission.Goal(instruction=instruction, robot_ids=list(robot_ids), robot_kinds=list(robot_kinds),
                                     ert_s=ert, alpha=alpha, beta=beta)
        goal_uuid = uuid.uuid4().bytes
        am = AgentMission(goal_uuid.hex(), instruction, robot_ids, robot_kinds, urgency, tuf, owner)
        with self._lock:
            self.missions[am.mission_id] = am
            self._prune_own()
        answered = threading.Event()
        tries = [0]

        def feedback(msg: Any) -> None:   # the spin thread
            with am._lock:
                am.feedback.append(msg.feedback)
            am.wake()

        def got_result(fut: Any) -> None:
            response = fut.result()
            if response.status == 0:  # GoalStatus.STATUS_UNKNOWN: the planner never got it
                if tries[0] < GOAL_TRIES:
                    send_once()
                else:
                    am.finish(self.PlanMission.Result(status=self.PlanMission.Result.STATUS_REJECTED,
                                                      reason="rejected",
                                                      message=f"the planner did not receive the mission after "
                                                              f"{GOAL_TRIES} tries"))
                return
            am.accepted.set()
            am.finish(response.result)

        def responded(fut: Any) -> None:
            if answered.is_set():
                return
            answered.set()
            gh = fut.result()
            if gh is None or not gh.accepted:
                am.finish(self.PlanMission.Result(status=self.PlanMission.Result.STATUS_REJECTED, reason="rejected",
                                                  message="the planner's action server did not accept the mission"))
                return
            am.accepted.set()
            am.wake()
            gh.get_result_async().add_done_callback(got_result)

        def unanswered() -> None:  # a timer thread
            if answered.is_set() or am.done:
                return
            answered.set()  # from here on the result query decides (a late goal answer is ignored)
            got = self._rclpy_call(lambda: request_result(self.mission_client, goal_uuid))
            if got is not None:
                got[1].add_done_callback(got_result)

        def send_once() -> None:
            tries[0] += 1
            answered.clear()
            fut = self._rclpy_call(lambda: self.mission_client.send_goal_async(
                goal, feedback_callback=feedback, goal_uuid=UUID(uuid=list(goal_uuid))))
            if fut is None:
                am.finish(self.PlanMission.Result(status=self.PlanMission.Result.STATUS_REJECTED, reason="rejected",
                                                  message="the MCP server is shutting down"))
                return
            fut.add_done_callback(responded)
            timer = threading.Timer(GOAL_ANSWER_S, unanswered)
            timer.daemon = True
            timer.start()

        send_once()
        return am

    def resolve(self, goal_id: str) -> tuple[str, AgentGoal | None, GoalSeen | None]:
        """(full goal id, this server's goal or None, the planner's record or None) for a goal id
        or an unambiguous prefix of at least 8 hex digits; ValueError with one sentence otherwise."""
        gid = goal_id.strip().lower()
        if len(gid) < 8 or any(c not in "0123456789abcdef" for c in gid):
            raise ValueError(f"goal_id must be the goal's id (32 hex digits, or at least its first 8), got {goal_id!r}")
        with self._lock:
            ids = {k for k in self.goals if k.startswith(gid)} | {k for k in self.seen if k.startswith(gid)}
            if len(ids) > 1:
                raise ValueError(f"goal_id '{goal_id}' matches {len(ids)} goals: give more of its digits")
            if not ids:
                raise ValueError(f"goal_id: no goal '{goal_id}' is known to this MCP server (it remembers the "
                                 "goals it sent and those the planner admitted since it started)")
            full = ids.pop()
            return full, self.goals.get(full), self.seen.get(full)

    def knows(self, goal_id: str) -> bool:
        with self._lock:
            return goal_id in self.goals or goal_id in self.seen

    def busy_with(self, robot_id: str) -> GoalSeen | AgentGoal | None:
        """The goal ``robot_id`` runs now as far as this server knows (its own, or one the planner admitted)."""
        with self._lock:
            for g in reversed(self.goals.values()):
                if g.robot_id == robot_id and not g.done and g.handle.accepted.is_set():
                    return g
            for s in reversed(self.seen.values()):
                own = self.goals.get(s.goal_id)
                if s.robot_id == robot_id and s.result is None and (own is None or not own.done):
                    return own if own is not None else s
        return None

    def describe_goal(self, goal_id: str) -> str:
        """'3f2a1b0c ("look for the cat", sent by this server for 'local' 4.2 s ago)', as far as known."""
        with self._lock:
            own, seen = self.goals.get(goal_id), self.seen.get(goal_id)
        if own is not None:
            return (f"{goal_id[:8]} (\"{own.instruction}\", sent through this MCP server by '{own.owner}' "
                    f"{time.monotonic() - own.sent_mono:.1f} s ago)")
        if seen is not None:
            ago = f" {time.time() - seen.started_wall:.1f} s ago" if seen.started_wall else ""
            return f"{goal_id[:8]} (\"{seen.instruction}\", sent by another client{ago})"
        return goal_id[:8]

    # -- cancelling -------------------------------------------------------------------------------
    def _cancel_service_ready(self) -> bool:
        assert self.client is not None
        deadline = time.monotonic() + SERVICE_WAIT_S
        while not self.client.cancel_service.service_is_ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def cancel_own(self, ag: AgentGoal) -> Any:
        """Cancel a goal this server sent with its own secret: the future of planner/cancel_goal's answer."""
        assert self.client is not None
        if not self._cancel_service_ready():
            raise PlannerNotRunning(f"the planner's planner/cancel_goal service is not answering in {self.where()}")
        return self.client.cancel(ag.handle, timeout_s=5.0)

    def cancel_as_operator(self, goal_id: str) -> Any:
        assert self.client is not None
        if not self._cancel_service_ready():
            raise PlannerNotRunning(f"the planner's planner/cancel_goal service is not answering in {self.where()}")
        req = self.client.CancelPlan.Request(goal_id=goal_id, secret=self.operator_secret)
        return self.client.cancel_service.call_async(req)

    # -- robots -----------------------------------------------------------------------------------
    def robot_state(self, robot_id: str) -> dict[str, Any]:
        busy = self.busy_with(robot_id)
        st = self.robot_status.get(robot_id)
        out: dict[str, Any] = {"state": "busy" if busy is not None else "idle"}
        if busy is not None:
            own = isinstance(busy, AgentGoal)
            out["current_goal"] = {"goal_id": busy.goal_id, "instruction": busy.instruction,
                                   "sent_by": f"this MCP server ({busy.owner})" if own else "another client",
                                   "state": busy.state() if own else "running"}
        if st is not None:
            out["robot_status"] = {k: v for k, v in st.items() if k != "at" and v not in ("", None)}
            out["robot_status"]["age_s"] = round(time.monotonic() - st["at"], 1)
            if busy is None and st["state"] in ("received", "executing"):  # a goal admitted before we started
                out["state"] = "busy"
                out["current_goal"] = {"goal_id": st["goal_id"], "instruction": "", "sent_by": "another client",
                                       "state": f"{st['state']} segment {st['segment']}"}
        return out


def _domain() -> str:
    import os

    return os.environ.get("ROS_DOMAIN_ID", "0")
