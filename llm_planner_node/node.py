"""The planning node: a ROS 2 action server for ``timely_fleet/action/PlanTask``.

It hosts an engine (vLLM, or the simulated engine) and the scheduling core
(:class:`~llm_planner_node.core.planner.Planner`), and wires them to ROS:

- goals arrive on the ``plan_task`` action; each is validated (robot, kind, skill set, TUF,
  instruction) and, if bad, ended at once with ``STATUS_REJECTED`` and the reason (a ROS 2
  goal rejection cannot carry a reason, so bad goals are accepted and aborted with one);
- every segment the core dispatches is published to ``/robots/<robot_id>/segments``
  (reliable QoS, sequence numbers; re-sent while the adapter has not acknowledged it) and as
  action feedback;
- ``/robot_status`` reports feed the core (execution start/end, measured skill durations for
  the execution-time model, failures); an adapter that stays silent past ``robot_timeout_s``
  while it owes a report ends its goal with ``STATUS_TIMEOUT``;
- cancel stops the generation, tells the adapter (``cancel`` segment) and ends the goal;
- engine failures end every affected goal with ``STATUS_ENGINE_FAILED``; a dead engine is
  restarted so the node keeps serving;
- ``/planner/diagnostics`` (PlannerStats) reports queue length, running batch, tokens/s and
  per-outcome counters once per second.

Threads: the core is single-threaded. ROS callbacks never touch it directly; they put commands
on a queue that the scheduler thread drains between engine steps.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from builtin_interfaces.msg import Time as TimeMsg
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.task import Future
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from timely_fleet.action import PlanTask
from timely_fleet.msg import (GoalRecord, GoalResult, PlannerStats, RobotStatus, SegmentReport, Skill,
                              SkillSegment)

from .core.clock import Clock, WallClock
from .core.engine_api import Engine
from .core.execution_time import ExecutionTimeModel
from .core.planner import Planner, PlannerConfig
from .core.policies import get_policy
from .core.skills import DEFAULT_SKILL_SETS, SkillCall
from .core.task_model import GenState, Goal, Request, Segment
from .core.tuf import TUFParams, tuf0
from .engines.factory import predictor_for, prompt_builder_for
from .params import FleetParams


SEGMENT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                         history=HistoryPolicy.KEEP_LAST, durability=DurabilityPolicy.VOLATILE)
STATUS_QOS = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
#: Action services: bursts of goals (one event triggers up to 16 tasks in WID2) must not overflow
#: the default service queue of 10 requests, which silently drops goals.
ACTION_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)


def action_qos_kwargs() -> dict[str, QoSProfile]:
    """QoS for both ends of the ``plan_task`` action (server and clients must agree)."""
    return {"goal_service_qos_profile": ACTION_QOS, "result_service_qos_profile": ACTION_QOS,
            "cancel_service_qos_profile": ACTION_QOS}

Result = PlanTask.Result


def segments_topic(robot_id: str) -> str:
    return f"/robots/{robot_id}/segments"


def skill_msgs(calls: tuple[SkillCall, ...], skill_set_id: str | None) -> list[Skill]:
    """SkillCall -> timely_fleet/Skill: argument names from the goal's skill set, canonical text."""
    skill_set = DEFAULT_SKILL_SETS[skill_set_id] if skill_set_id else None
    out = []
    for c in calls:
        spec_args = skill_set.spec(c.name).args if skill_set is not None else ()
        names = [a.name for a in spec_args][: len(c.args)]
        names += [f"arg{i}" for i in range(len(names), len(c.args))]
        out.append(Skill(name=c.name, arg_names=names, arg_values=[str(a) for a in c.args]))
    return out


def stamp(t_wall: float) -> TimeMsg:
    sec = int(t_wall)
    return TimeMsg(sec=sec, nanosec=int((t_wall - sec) * 1e9))


@dataclass
class _GoalRecord:
    """What the node tracks for one accepted goal (beside the core's Request)."""

    request_id: int
    goal_id: str
    handle: Any
    ended: Any                           # rclpy Future the execute coroutine awaits
    status: int | None = None            # node-decided outcome (robot failure, timeout, cancel)
    message: str = ""
    acked: set[int] = field(default_factory=set)            # segments the adapter acknowledged
    sent: dict[int, tuple[float, int]] = field(default_factory=dict)  # seq -> (last send, count)
    msgs: dict[int, SkillSegment] = field(default_factory=dict)
    last_heard: float = 0.0


class PlannerNode(Node):
    """The ``llm_planner`` node (see the module docstring)."""

    def __init__(self, params: FleetParams, *, engine: Engine | None = None,
                 engine_factory: Callable[[], Engine] | None = None,
                 prompt_builder: Callable[[str, str, str], object] | None = None,
                 clock: Clock | None = None, context: Any = None, name: str = "llm_planner",
                 ack_timeout_s: float = 1.0, max_resends: int = 3) -> None:
        super().__init__(name, context=context)
        self.params = params
        self.pp = params.planner
        self.clock = clock or WallClock()
        self._engine_factory = engine_factory
        self._owns_engine = engine is None  # a lent engine (tests, embedding) is not closed here
        engine = engine or (engine_factory() if engine_factory else None)
        if engine is None:
            raise ValueError("PlannerNode needs an engine or an engine_factory")
        self._prompt_builder = prompt_builder or prompt_builder_for(params.planner.engine)
        self.ack_timeout_s = ack_timeout_s
        self.max_resends = max_resends
        policy = get_policy(self.pp.policy, max_batch=self.pp.max_batch if self.pp.batching_mode == "fixed" else None)
        self.exec_model = ExecutionTimeModel()
        self.planner = Planner(engine, policy, self.clock, self.exec_model, sink=self,
                               config=PlannerConfig(network_latency_s=self.pp.network_latency_s),
                               predictor=predictor_for(policy, self.pp.engine))
        self._cmds: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._records: dict[int, _GoalRecord] = {}
        self._by_goal_id: dict[str, int] = {}
        self._busy_robots: dict[str, str] = {}
        self._early_cancels: set[str] = set()
        self.counters: Counter[str] = Counter()
        self._rate_mark = (self.clock.now(), 0)   # (time, tokens generated) at the last stats
        self._forgotten_tokens = 0                # tokens of requests already dropped from the core

        self._cb = ReentrantCallbackGroup()
        self._seg_pubs = {r.id: self.create_publisher(SkillSegment, segments_topic(r.id), SEGMENT_QOS)
                          for r in params.robots}
        self._stats_pub = self.create_publisher(PlannerStats, "/planner/diagnostics", 10)
        self._goal_pub = self.create_publisher(GoalRecord, "/planner/goals", STATUS_QOS)
        self._result_pub = self.create_publisher(GoalResult, "/planner/results", STATUS_QOS)
        self.create_subscription(RobotStatus, "/robot_status", self._on_status, STATUS_QOS,
                                 callback_group=self._cb)
        self._server = ActionServer(self, PlanTask, "plan_task", execute_callback=self._execute,
                                    goal_callback=lambda _g: GoalResponse.ACCEPT,
                                    cancel_callback=self._on_cancel_request,
                                    callback_group=self._cb, **action_qos_kwargs())
        self.create_timer(1.0, lambda: self._cmds.put(self._publish_stats), callback_group=self._cb)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scheduler_loop, name="planner-core", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"planner ready: policy={self.pp.policy}, engine={self.pp.engine.kind}, "
            f"robots={', '.join(r.id for r in params.robots)}")

    # -- validation ------------------------------------------------------------------------------
    def validate(self, g: Any) -> str | None:
        """Why a PlanTask goal cannot be served, or None if it is fine."""
        robot = self.params.robot(g.robot_id)
        if robot is None:
            known = ", ".join(r.id for r in self.params.robots)
            return f"unknown robot '{g.robot_id}' (configured robots: {known})"
        if g.robot_kind and g.robot_kind != robot.kind:
            return f"robot '{g.robot_id}' is a {robot.kind}, not a {g.robot_kind}"
        if g.skill_set and g.skill_set not in DEFAULT_SKILL_SETS:
            return f"unknown skill set '{g.skill_set}' (registered: {', '.join(DEFAULT_SKILL_SETS)})"
        if g.skill_set and g.skill_set != robot.skill_set:
            return f"robot '{g.robot_id}' runs skill set '{robot.skill_set}', not '{g.skill_set}'"
        if not (math.isfinite(g.ert_s) and g.ert_s > 0):
            return f"ert_s must be > 0 seconds, got {g.ert_s}"
        if not (math.isfinite(g.alpha) and g.alpha <= 0):
            return f"alpha must be <= 0 (utility cannot grow with lateness), got {g.alpha}"
        if not (math.isfinite(g.beta) and g.beta > 0):
            return f"beta must be > 0, got {g.beta}"
        text = g.instruction.strip()
        if not text:
            return "instruction is empty"
        if len(text) > self.pp.max_instruction_chars:
            return f"instruction has {len(text)} characters, the limit is {self.pp.max_instruction_chars}"
        if g.max_tokens > 4 * self.pp.max_tokens:
            return f"max_tokens {g.max_tokens} exceeds the node's limit {4 * self.pp.max_tokens}"
        busy = self._busy_robots.get(g.robot_id)
        if busy is not None:
            return f"robot '{g.robot_id}' is still executing goal {busy}; send one plan at a time per robot"
        return None

    # -- action execution (executor threads) --------------------------------------------------------
    async def _execute(self, handle: Any) -> Any:
        g = handle.request
        goal_id = bytes(handle.goal_id.uuid).hex()
        reason = self.validate(g)
        if reason is not None:
            return self._reject(handle, reason)
        robot = self.params.robot(g.robot_id)
        assert robot is not None
        try:
            prompt = self._prompt_builder(g.instruction.strip(), robot.kind, robot.skill_set)
        except ValueError as e:
            return self._reject(handle, str(e))
        goal = Goal(robot_id=g.robot_id, robot_kind=robot.kind, task_type=g.task_type or robot.kind,
                    prompt=prompt, tuf=TUFParams(ert=g.ert_s, alpha=g.alpha, beta=g.beta),
                    max_tokens=int(g.max_tokens or self.pp.max_tokens), skill_set_id=robot.skill_set,
                    instruction=g.instruction.strip())
        self._busy_robots[g.robot_id] = goal_id
        # Completed on the scheduler thread: a rejection reason (str) or the ended goal's record.
        # Awaiting it holds no executor thread, however many goals are in flight.
        ended: Future = Future()

        def submit() -> None:
            try:
                rid = self.planner.submit(goal)
            except ValueError as e:
                ended.set_result(str(e))
                return
            rec = _GoalRecord(rid, goal_id, handle, ended, last_heard=self.clock.now())
            self._records[rid] = rec
            self._by_goal_id[goal_id] = rid
            self._goal_pub.publish(GoalRecord(
                goal_id=goal_id, stamp=stamp(time.time()), robot_id=g.robot_id, robot_kind=robot.kind,
                task_type=goal.task_type, instruction=goal.instruction, ert_s=g.ert_s, alpha=g.alpha,
                beta=g.beta, skill_set=robot.skill_set, max_tokens=goal.max_tokens))
            if goal_id in self._early_cancels:  # cancel arrived before the goal reached the core
                self._early_cancels.discard(goal_id)
                self._cancel(rid)

        self._cmds.put(submit)
        outcome = await ended
        if isinstance(outcome, str):
            self._busy_robots.pop(g.robot_id, None)
            return self._reject(handle, outcome)
        return self._finish(handle, outcome)

    def _on_cancel_request(self, handle: Any) -> CancelResponse:
        goal_id = bytes(handle.goal_id.uuid).hex()

        def cancel() -> None:
            rid = self._by_goal_id.get(goal_id)
            if rid is None:
                self._early_cancels.add(goal_id)
            else:
                self._cancel(rid)

        self._cmds.put(cancel)
        return CancelResponse.ACCEPT

    def _reject(self, handle: Any, reason: str) -> Any:
        self.counters["rejected"] += 1
        self.get_logger().warning(f"goal rejected: {reason}")
        handle.abort()
        return Result(status=Result.STATUS_REJECTED, message=reason, response_time_s=-1.0,
                      robot_waiting_s=-1.0)

    def _finish(self, handle: Any, rec: _GoalRecord) -> Any:
        req = self.planner.requests[rec.request_id]
        self._busy_robots.pop(req.goal.robot_id, None)
        res = build_result(req, rec)
        g = req.goal
        self._result_pub.publish(GoalResult(
            goal_id=rec.goal_id, stamp=stamp(time.time()), status=res.status, message=res.message,
            robot_id=g.robot_id, task_type=g.task_type, ert_s=g.tuf.ert, alpha=g.tuf.alpha, beta=g.tuf.beta,
            plan_text=res.plan_text, segments=res.segments, response_time_s=res.response_time_s,
            robot_waiting_s=res.robot_waiting_s, time_utility=res.time_utility))
        self._cmds.put(lambda: self._forget(rec))
        if res.status == Result.STATUS_SUCCEEDED:
            handle.succeed()
            self.counters["succeeded"] += 1
        elif res.status == Result.STATUS_CANCELLED and handle.is_cancel_requested:
            handle.canceled()
            self.counters["cancelled"] += 1
        else:
            handle.abort()
            self.counters["failed"] += 1
        return res

    # -- core commands (scheduler thread) ------------------------------------------------------------
    def _scheduler_loop(self) -> None:
        next_check = 0.0
        while not self._stop.is_set():
            try:
                while True:
                    self._cmds.get_nowait()()
            except queue.Empty:
                pass
            try:
                self.planner.tick()
            except Exception as e:  # an engine that died: fail its goals, restart it
                self._engine_failed(e)
            now = self.clock.now()
            if now >= next_check:
                self._check_robots(now)
                next_check = now + 0.1

    def _engine_failed(self, error: Exception) -> None:
        self.get_logger().error(f"inference engine failed: {error!r}")
        for rid, rec in list(self._records.items()):
            req = self.planner.requests[rid]
            if not req.state.terminal:
                rec.status = Result.STATUS_ENGINE_FAILED
                rec.message = f"inference engine failed: {error}"
                self.planner.cancel(rid)
        if self._engine_factory is not None:
            old = self.planner.engine
            close = getattr(old, "close", None)
            if close:
                close()
            self.planner.engine = self._engine_factory()
            self._owns_engine = True
            self.get_logger().info("inference engine restarted")

    def _forget(self, rec: _GoalRecord) -> None:
        self._records.pop(rec.request_id, None)
        self._by_goal_id.pop(rec.goal_id, None)
        self._forgotten_tokens += self.planner.requests[rec.request_id].generated_tokens
        self.planner.forget(rec.request_id)

    def _cancel(self, rid: int) -> None:
        rec = self._records.get(rid)
        if rec is None:
            return
        req = self.planner.requests[rid]
        if rec.status is None:
            rec.status, rec.message = Result.STATUS_CANCELLED, "cancelled by client"
        if self.planner.cancel(rid) and req.segments:
            self._publish(req.goal.robot_id, SkillSegment(
                goal_id=rec.goal_id, robot_id=req.goal.robot_id, sequence=len(req.segments),
                cancel=True, stamp=stamp(time.time())))

    # PlannerSink
    def dispatch(self, request: Request, segment: Segment) -> None:
        rec = self._records[request.id]
        final = segment.final or (request.state is GenState.GENERATED
                                  and segment.index == len(request.segments) - 1)
        msg = SkillSegment(goal_id=rec.goal_id, robot_id=request.goal.robot_id, sequence=segment.index,
                           text=segment.text, skills=skill_msgs(segment.calls, request.goal.skill_set_id), final=final,
                           stamp=stamp(time.time()))
        rec.msgs[segment.index] = msg
        rec.sent[segment.index] = (self.clock.now(), 1)
        self._publish(request.goal.robot_id, msg)
        k = segment.index
        fb = PlanTask.Feedback(index=k, text=segment.text, skills=msg.skills, final=final,
                               queue_s=request.gen_start[k] - request.queued_at(k),
                               generation_s=request.gen_end[k] - request.gen_start[k])
        rec.handle.publish_feedback(fb)

    def done(self, request: Request) -> None:
        rec = self._records.get(request.id)
        if rec is None:
            return
        if request.state is GenState.CANCELLED and rec.status is None:
            rec.status, rec.message = Result.STATUS_CANCELLED, request.end_reason
        rec.ended.set_result(rec)

    def _publish(self, robot_id: str, msg: SkillSegment) -> None:
        self._seg_pubs[robot_id].publish(msg)

    # -- robot status ------------------------------------------------------------------------------
    def _on_status(self, msg: RobotStatus) -> None:
        self._cmds.put(lambda: self._handle_status(msg))

    def _handle_status(self, msg: RobotStatus) -> None:
        rid = self._by_goal_id.get(msg.goal_id)
        rec = self._records.get(rid) if rid is not None else None
        if rec is None:
            return
        req = self.planner.requests[rid]
        rec.last_heard = self.clock.now()
        k = msg.sequence
        rec.acked.add(k)
        S = RobotStatus
        if msg.state == S.STATE_EXECUTING:
            if k < len(req.exec_start) and req.exec_start[k] is None:
                self.planner.on_robot_status(msg.robot_id, rid, k, "started")
        elif msg.state == S.STATE_DONE:
            self.planner.on_robot_status(msg.robot_id, rid, k, "finished",
                                         durations=list(msg.skill_durations_s))
        elif msg.state == S.STATE_FAILED:
            if rec.status is None:
                rec.status = Result.STATUS_ROBOT_FAILED
                rec.message = f"robot {msg.robot_id} failed segment {k}: {msg.error or 'no reason given'}"
            self.planner.on_robot_status(msg.robot_id, rid, k, "failed", reason=rec.message)

    def _check_robots(self, now: float) -> None:
        """Re-send unacknowledged segments; time out adapters that went silent."""
        for rid, rec in list(self._records.items()):
            req = self.planner.requests[rid]
            if req.state.terminal:
                continue
            for k, (t_sent, n) in list(rec.sent.items()):
                if k in rec.acked:
                    continue
                if now - t_sent >= self.ack_timeout_s and n <= self.max_resends:
                    rec.sent[k] = (now, n + 1)
                    self._publish(req.goal.robot_id, rec.msgs[k])
            owes = any(e is None for e in req.exec_end)
            if owes and now - rec.last_heard > self.pp.robot_timeout_s:
                rec.status = Result.STATUS_TIMEOUT
                rec.message = (f"robot {req.goal.robot_id} sent no status for "
                               f"{now - rec.last_heard:.1f} s (robot_timeout_s={self.pp.robot_timeout_s})")
                self.planner.on_robot_status(req.goal.robot_id, rid, len(req.exec_end) - 1, "failed",
                                             reason=rec.message)

    # -- diagnostics -------------------------------------------------------------------------------
    def _publish_stats(self) -> None:
        """Diagnostics (runs on the scheduler thread, like every access to the core)."""
        reqs = list(self.planner.requests.values())
        states = Counter(r.state for r in reqs)
        now = self.clock.now()
        total = self._forgotten_tokens + sum(r.generated_tokens for r in reqs)
        t0, n0 = self._rate_mark
        self._rate_mark = (now, total)
        engine = self.planner.engine
        cap = max(1, engine.kv_capacity_tokens())
        self._stats_pub.publish(PlannerStats(
            policy=self.pp.policy, queued=states[GenState.QUEUED], running=states[GenState.RUNNING],
            suspended=states[GenState.SUSPENDED],
            active_goals=sum(1 for r in reqs if not r.state.terminal),
            goals_succeeded=self.counters["succeeded"], goals_failed=self.counters["failed"],
            goals_cancelled=self.counters["cancelled"], goals_rejected=self.counters["rejected"],
            tokens_per_s=(total - n0) / max(now - t0, 1e-6),
            kv_free_fraction=engine.free_kv_tokens() / cap, stamp=stamp(time.time())))

    def close(self) -> None:
        """Stop the scheduler thread and the engine; end every open goal."""
        if self._stop.is_set():
            return
        def end_all() -> None:
            for rid, rec in self._records.items():
                if not self.planner.requests[rid].state.terminal:
                    rec.status, rec.message = Result.STATUS_CANCELLED, "planner node shutting down"
                    self.planner.cancel(rid)
        self._cmds.put(end_all)
        deadline = time.monotonic() + 2.0
        while any(not r.ended.done() for r in list(self._records.values())) and time.monotonic() < deadline:
            time.sleep(0.02)
        self._stop.set()
        self._thread.join(timeout=5)
        close = getattr(self.planner.engine, "close", None)
        if close and self._owns_engine:
            close()


def build_result(req: Request, rec: _GoalRecord) -> Any:
    """The PlanTask result of a terminal request (times relative to goal arrival)."""
    a = req.arrival
    reports = []
    for k, seg in enumerate(req.segments):
        def rel(t: float | None) -> float:
            return -1.0 if t is None else t - a
        reports.append(SegmentReport(
            index=k, text=seg.text, skills=skill_msgs(seg.calls, req.goal.skill_set_id),
            dispatch_s=rel(req.dispatched_at[k]) if k < len(req.dispatched_at) else -1.0,
            execution_start_s=rel(req.exec_start[k]) if k < len(req.exec_start) else -1.0,
            execution_end_s=rel(req.exec_end[k]) if k < len(req.exec_end) else -1.0,
            queued_s=rel(req.queued_at(k)), generation_start_s=rel(req.gen_start[k]),
            generation_end_s=rel(req.gen_end[k])))
    plan = "".join(s.text for s in req.segments)
    response = (req.exec_start[0] - a) if req.exec_start and req.exec_start[0] is not None else -1.0
    utility = tuf0(response, req.goal.tuf) if response >= 0 else 0.0
    waiting = -1.0
    if req.state is GenState.FINISHED and req.exec_end and req.exec_end[-1] is not None:
        exec_total = sum(e - s for s, e in zip(req.exec_start, req.exec_end) if s is not None and e is not None)
        waiting = req.exec_end[-1] - a - exec_total
    if req.state is GenState.FINISHED:
        status, message = Result.STATUS_SUCCEEDED, f"plan of {len(req.segments)} segment(s) executed"
    elif rec.status is not None:
        status, message = rec.status, rec.message
    elif req.failure == "invalid_plan":
        status, message = Result.STATUS_INVALID_PLAN, req.end_reason
    elif req.failure == "engine":
        status, message = Result.STATUS_ENGINE_FAILED, req.end_reason
    else:
        status, message = Result.STATUS_ROBOT_FAILED, req.end_reason or "failed"
    return Result(status=status, message=message, plan_text=plan, segments=reports,
                  response_time_s=float(response), robot_waiting_s=float(waiting), time_utility=float(utility))

