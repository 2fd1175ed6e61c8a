"""The planner service: everything the planning node does, without ROS.

It owns the scheduling core (:class:`~.core.planner.Planner`) and its engine, the scheduler
thread, the goal registry (action goal id <-> request id), the busy robots, early cancels and
the segment delivery protocol (:mod:`.delivery`). The ROS node (:mod:`.node`) is a thin shell:
it converts messages and calls this service; the service talks back through
:class:`PlannerPorts` (publish a segment, a stop, feedback, a goal record; log).

Threads: the core is single-threaded. ``submit``, ``cancel``, ``on_status``, ``end_all`` and
``update_params`` may be called from any thread: they put commands on a queue that the
scheduler thread drains between engine steps. A goal's end is reported once, through the
``on_end`` callback given at submit, with the terminal :class:`~.core.task_model.Request`
(never mutated afterwards) or a rejection reason.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from llm_planner_node.core.clock import Clock, WallClock
from llm_planner_node.core.outcomes import RobotState
from llm_planner_node.core.text import KNOWN_ROBOTS_LISTED, safe_text  # noqa: F401 (re-exported for the node)
from llm_planner_node.core.engine_api import Engine, GenerationSpec
from llm_planner_node.core.execution_time import ExecutionTimeModel, TimeScaledEstimator
from llm_planner_node.core.planner import Planner, PlannerConfig
from llm_planner_node.core.batching import make_admission
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.skills import DEFAULT_SKILL_SETS
from llm_planner_node.core.task_model import EndKind, GenState, Goal, Request, Segment
from llm_planner_node.core.tuf import TUFParams, tuf_problem
from llm_planner_node.service.delivery import SegmentDelivery
from llm_planner_node.engines.factory import predictor_for, prompt_builder_for
from llm_planner_node.core.budgets import StaticBudget
from llm_planner_node.prompts.grammar import derivatives_for, language_for, longest_plan_chars
from llm_planner_node.segmenters.plan_cost import segment_cost
from llm_planner_node.config.params import SIM_ENGINES, FleetParams
from llm_planner_node.service.operator_control import OperatorControl

# RobotStatus.STATE_* (the adapters' states)
IDLE, RECEIVED, EXECUTING, DONE, FAILED, CANCELLED = RobotState

#: Longest plausible skill execution (s): a reported duration outside [0, this] is refused.
MAX_SKILL_S = 3600.0
#: Bounds on untrusted identifiers (robot id, goal id, skill-set id, skill names).
MAX_ID_CHARS = 64
MAX_ERROR_CHARS = 1000
#: Statuses waiting for the scheduler thread; beyond this, new ones are dropped and counted.
STATUS_QUEUE_MAX = 20_000
#: Refused statuses per second above which the status path counts as flooded: while it is (and
#: FLOOD_GRACE_S after), robots' silence clocks stand still, since real reports may be stuck
#: behind the flood in the reader. A flood can delay noticing a dead robot, never end a live one.
FLOOD_DROPS_PER_S = 300.0
FLOOD_GRACE_S = 3.0
#: Goal commands run between two drains of the status queue and two engine steps (a burst of
#: submits must not hold the engine: with 64, the engine stepped ~20 times/s during intake).
COMMAND_SLICE = 8
#: Seconds between attempts to rebuild an engine that failed and could not be restarted.
ENGINE_RETRY_S = 5.0
#: Goals accepted but not yet ended; beyond this, new goals are refused at once.
PENDING_GOALS_MAX = 2_000


@dataclass(frozen=True)
class GoalIn:
    """A PlanTask goal as the service sees it (the node converts the message)."""

    robot_id: str
    instruction: str
    robot_kind: str = ""
    task_type: str = ""
    ert_s: float = 1.0
    alpha: float = -2.0
    beta: float = 1.0
    skill_set: str = ""
    max_tokens: int = 0


@dataclass(frozen=True)
class StatusIn:
    """A ``/robot_status`` report as the service sees it."""

    robot_id: str
    goal_id: str
    sequence: int
    state: int
    skill_durations_s: tuple[float, ...] = ()
    error: str = ""
    received: float = field(default_factory=time.monotonic)  # when the node took it off the wire


class PlannerPorts(Protocol):
    """How the service reaches ROS (implemented by the node)."""

    def segment(self, goal_id: str, req: Request, index: int, final: bool) -> Any:
        """Publish segment ``index`` to the robot and as feedback; return the message (re-sends)."""

    def stop(self, goal_id: str, robot_id: str, sequence: int) -> Any:
        """Publish a stop for the goal to its robot; return the message (re-sends)."""

    def publish(self, robot_id: str, msg: Any) -> None:
        """Re-send a message returned by ``segment`` or ``stop``."""

    def goal_started(self, goal_id: str, req: Request) -> None:
        """A goal reached the core (GoalRecord for recording and replay)."""

    def log(self, level: str, text: str) -> None:
        """``level``: debug, info, warning, error."""


@dataclass
class _Goal:
    goal_id: str
    request_id: int
    on_end: Callable[[Request | str], None]
    budget: StaticBudget | None = None  # what the goal's dispatched segments may do at worst


@dataclass
class EngineHealth:
    """What diagnostics say about the engine."""

    state: str = "up"                 # up | restarting | down
    failures: int = 0
    last_error: str = ""              # repr of the last failure (diagnostics)
    reason: str = ""                  # its text, as goals that end ENGINE_FAILED are told
    failures_reported: int = 0        # failures already shown by diagnostics


@dataclass
class Snapshot:
    """Counters and gauges for diagnostics (refreshed by the scheduler thread once a second)."""

    queued: int = 0
    running: int = 0
    suspended: int = 0
    active_goals: int = 0
    tokens_per_s: float = 0.0
    kv_free_fraction: float = 1.0
    silent_robots: tuple[str, ...] = ()
    status_delay_p99_s: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's own diagnostics, if it has any


class PlannerService:
    """Goal intake, scheduling and robot link of one planner (see the module docstring)."""

    def __init__(self, params: FleetParams, ports: PlannerPorts, *, engine: Engine | None = None,
                 engine_factory: Callable[[], Engine] | None = None,
                 prompt_builder: Callable[[str, str, str], object] | None = None,
                 clock: Clock | None = None, ack_timeout_s: float = 1.0, max_resends: int = 3,
                 robot_time_scale: float = 1.0) -> None:
        self.params = params
        self.ports = ports
        self.clock = clock or WallClock()
        self._engine_factory = engine_factory
        self._owns_engine = engine is None  # a lent engine (tests, embedding) is not closed here
        engine = engine or (engine_factory() if engine_factory else None)
        if engine is None:
            raise ValueError("PlannerService needs an engine or an engine_factory")
        pp = params.planner
        self._prompt_builder = prompt_builder or prompt_builder_for(pp.engine)
        self._max_tokens_of: dict[str, int] = {}
        policy = get_policy(pp.policy, max_batch=pp.max_batch if pp.batching_mode == "fixed" else None,
                            admission=make_admission(pp.admission, **({"hopeless": pp.hopeless}
                                                                       if pp.hopeless != "keep" else {})))
        self.exec_model = ExecutionTimeModel()  # real seconds; robot_time_scale: simulated robots' speed-up
        self.planner = Planner(engine, policy, self.clock,
                               self.exec_model if robot_time_scale == 1.0
                               else TimeScaledEstimator(self.exec_model, robot_time_scale), sink=self,
                               config=PlannerConfig(network_latency_s=pp.network_latency_s),
                               predictor=predictor_for(policy, pp.engine))
        self.planner.segment_check = self._budget_check
        self.operator = OperatorControl(self)  # operator stops and approvals (operator_control.py)
        self.delivery = SegmentDelivery(ack_timeout_s, max_resends, pp.robot_timeout_s)
        self.health = EngineHealth()
        self.counters: Counter[str] = Counter()
        self.snapshot = Snapshot()
        self.accepting = False
        self._cmds: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake = threading.Event()  # set when a command or a status arrives (idle wait)
        # robot statuses: their own bounded queue, drained before any goal command
        self._statuses: queue.Queue[StatusIn] = queue.Queue(maxsize=STATUS_QUEUE_MAX)
        self._status_rung = False  # a status woke the scheduler, which has not drained since
        self._pending_goals = 0  # submitted, not yet ended (back-pressure bound)
        self._pending_lock = threading.Lock()
        self.status_drops: Counter[str] = Counter()  # statuses refused before touching state, by reason
        self.status_delays: deque[float] = deque(maxlen=1000)  # receive -> applied (s)
        self._drops_seen = (0.0, 0)       # (time, total drops) at the last check
        self._flooded_until = 0.0
        self.flood_seconds = 0.0
        self._goals: dict[int, _Goal] = {}            # request id -> goal
        self._by_goal_id: dict[str, int] = {}
        self._early_cancels: set[str] = set()
        self._busy: dict[str, str] = {}               # robot id -> goal id
        self._busy_lock = threading.Lock()
        self._rate_mark = (self.clock.now(), 0)
        self._forgotten_tokens = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._retry_at = 0.0  # while the engine is down: next attempt of the factory
        self._failure = ""  # the text of the engine's last failure
        self.warm_up(engine)

    def warm_up(self, engine: Engine) -> None:
        """Warm a freshly started engine (the engine contract's optional ``warm_up``) with one spec
        per robot kind and skill set of the fleet, the prompt of the shipped planner's first
        canonical goal of that kind, and the canonical plans of that kind: the first goals then
        find their prompt in the prefix cache and the base and resume grammars compiled, and
        start as fast as later ones. A failure is logged; the first goals then start cold."""
        warm = getattr(engine, "warm_up", None)
        if warm is None:
            return
        from llm_planner_node.planner_model.corpus import canonical_chat_examples, canonical_examples
        from llm_planner_node.planner_model.known import PLAN_KIND

        examples = canonical_examples() + canonical_chat_examples()
        specs: list[GenerationSpec] = []
        plans: list[list[str]] = []
        for kind, skill_set in sorted({(r.kind, r.skill_set) for r in self.params.robots}):
            mine = [ex for ex in examples if ex.robot_kind == PLAN_KIND.get(kind, kind)]
            try:
                prompt = self._prompt_builder(mine[0].instruction if mine else "warm up", kind, skill_set)
            except ValueError:
                continue
            specs.append(GenerationSpec(-1 - len(specs), prompt, 1, kind, skill_set, False))
            plans.append([ex.plan for ex in mine])
        t0 = time.monotonic()
        try:
            warm(specs, plans)
        except Exception as e:  # noqa: BLE001 - a cold first goal is slower, not wrong
            self.ports.log("warning", f"engine warm-up failed ({safe_text(repr(e), 300)}); the first goals start cold")
            return
        self.ports.log("debug", f"engine warmed for {len(specs)} robot kind(s) in {time.monotonic() - t0:.2f} s")

    def _post(self, command: Callable[[], None]) -> None:
        """Run ``command`` on the scheduler thread (its next slice of goal commands)."""
        self._cmds.put(command)
        self._wake_up()

    def _wake_up(self) -> None:
        """A command or a status arrived: end the scheduler's idle wait, or its engine's wait (a
        robot status is applied at once, not after the engine's next event)."""
        self._wake.set()
        wake = getattr(self.planner.engine, "wake", None)  # optional in the engine contract
        if wake is not None:
            wake()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._scheduler_loop, name="planner-core", daemon=True)
            self._thread.start()

    def end_all(self, reason: str, wait_s: float = 2.0) -> None:
        """End every goal in flight (CANCELLED with ``reason``) and wait until each reported."""
        def end() -> None:
            for rid in list(self._goals):
                self.planner.cancel(rid, reason)
        self._post(end)
        deadline = time.monotonic() + wait_s
        while self._goals and time.monotonic() < deadline and self._thread is not None:
            time.sleep(0.02)

    def close(self, reason: str = "planner node shutting down") -> None:
        """End every goal, stop the scheduler thread, free the engine."""
        if self._stop.is_set():
            return
        self.accepting = False
        self.end_all(reason)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        close = getattr(self.planner.engine, "close", None)
        if close and self._owns_engine:
            close()

    def update_params(self, params: FleetParams) -> None:
        """Settings that may change while running (limits, timeouts, TUF presets)."""
        def apply() -> None:
            self.params = params
            self.delivery.silence_timeout_s = params.planner.robot_timeout_s
            self.planner.config = PlannerConfig(network_latency_s=params.planner.network_latency_s)
        self._post(apply)

    # -- goals (any thread) ----------------------------------------------------------------------
    def _default_max_tokens(self, robot: Any, prompt: object) -> int:
        """A goal's max_tokens when it sets none: ``planner.max_tokens``, raised under the plan
        grammar to the longest plan the robot's grammar admits (+ the end of sequence), so every
        plan a model can write under it ends before max_tokens (plans are ASCII: bytes bound
        tokens), as far as the model's context (``engine.max_model_len``) leaves room after the
        prompt."""
        n = self._grammar_max_tokens(robot)
        pp = self.params.planner
        if n > pp.max_tokens:
            room = pp.engine.max_model_len - self.planner.engine.count_prompt_tokens(prompt)
            n = max(pp.max_tokens, min(n, room))
        return n

    def _grammar_max_tokens(self, robot: Any) -> int:
        """``planner.max_tokens`` or, under the grammar, the robot's longest plan + 1 if longer
        (computed once per robot)."""
        pp = self.params.planner
        n = self._max_tokens_of.get(robot.id)
        if n is None:
            n = pp.max_tokens
            if pp.constrained_decoding == "grammar" and pp.engine.kind not in SIM_ENGINES:
                ss = DEFAULT_SKILL_SETS[robot.skill_set]
                lang = language_for(robot.kind, ss)
                # the grammar the engine decodes this robot's goals under (shared, built once)
                g = derivatives_for(ss, robot.kind, limits=pp.plan_limits.get(lang), objects=robot.objects).grammar
                n = max(n, longest_plan_chars(g) + 1)
            self._max_tokens_of[robot.id] = n
        return n

    def validate(self, g: GoalIn) -> str | None:
        """Why a goal cannot be served, or None if it is fine."""
        pp = self.params.planner
        robot = self.params.robot(g.robot_id)
        if robot is None:
            ids = [r.id for r in self.params.robots]
            known = ", ".join(ids[:KNOWN_ROBOTS_LISTED]) + (f", ... ({len(ids)} in all)"
                                                            if len(ids) > KNOWN_ROBOTS_LISTED else "")
            return f"unknown robot '{safe_text(g.robot_id)}' (configured robots: {known})"
        if g.robot_kind and g.robot_kind != robot.kind:
            return f"robot '{g.robot_id}' is a {robot.kind}, not a {safe_text(g.robot_kind)}"
        if g.skill_set and g.skill_set not in DEFAULT_SKILL_SETS:
            return f"unknown skill set '{safe_text(g.skill_set)}' (registered: {', '.join(DEFAULT_SKILL_SETS)})"
        if g.skill_set and g.skill_set != robot.skill_set:
            return f"robot '{g.robot_id}' runs skill set '{robot.skill_set}', not '{g.skill_set}'"
        why = tuf_problem(g.ert_s, g.alpha, g.beta)
        if why is not None:
            return why
        text = g.instruction.strip()
        if not text:
            return "instruction is empty"
        if len(text) > pp.max_instruction_chars:
            return f"instruction has {len(text)} characters, the limit is {pp.max_instruction_chars}"
        if g.max_tokens > 4 * pp.max_tokens:
            return f"max_tokens {g.max_tokens} exceeds the node's limit {4 * pp.max_tokens}"
        return None

    def submit(self, goal_id: str, g: GoalIn, on_end: Callable[[Request | str], None]) -> str | None:
        """Take a goal; the rejection reason at once, or None and later ``on_end(request)``
        (or ``on_end(reason)`` if the core refuses it)."""
        reason = self._admit(goal_id, g, on_end)
        if reason is not None:
            self.counters["rejected"] += 1
        return reason

    def precheck(self, g: GoalIn) -> str | None:
        """The goal's field checks (lengths, then :meth:`validate`): why it is refused whatever
        the planner's state, or None. Reads only the fields, so a PlanTask.Goal will do."""
        if len(g.robot_id) > MAX_ID_CHARS:
            return f"robot_id has {len(g.robot_id)} characters, the limit is {MAX_ID_CHARS}"
        if len(g.skill_set) > MAX_ID_CHARS or len(g.robot_kind) > MAX_ID_CHARS or len(g.task_type) > MAX_ID_CHARS:
            return f"robot_kind, task_type and skill_set are limited to {MAX_ID_CHARS} characters"
        return self.validate(g)

    def _admit(self, goal_id: str, g: GoalIn, on_end: Callable[[Request | str], None]) -> str | None:
        reason = self.precheck(g)
        if reason is not None:
            return reason
        if not self.accepting:
            return "the planner is not active (lifecycle state is not 'active'): it accepts no goals now"
        if self.health.state == "down":
            return f"the inference engine is down ({self.health.reason}): no goal can be planned until it restarts"
        robot = self.params.robot(g.robot_id)
        assert robot is not None
        try:
            prompt = self._prompt_builder(g.instruction.strip(), robot.kind, robot.skill_set, objects=robot.objects)
        except ValueError as e:
            return str(e)
        pp = self.params.planner
        lang = language_for(robot.kind, DEFAULT_SKILL_SETS[robot.skill_set])
        goal = Goal(robot_id=g.robot_id, robot_kind=robot.kind, task_type=g.task_type or robot.kind,
                    prompt=prompt, tuf=TUFParams(ert=g.ert_s, alpha=g.alpha, beta=g.beta),
                    max_tokens=int(g.max_tokens or self._default_max_tokens(robot, prompt)), skill_set_id=robot.skill_set,
                    instruction=g.instruction.strip(), objects=robot.objects,
                    plan_limits=pp.plan_limits.get(lang), sampling=pp.sampling.get(lang))
        with self._pending_lock:
            if self._pending_goals >= PENDING_GOALS_MAX:
                return (f"planner overloaded: {self._pending_goals} goals in flight (limit {PENDING_GOALS_MAX}); "
                        "try again later")
            busy = self._claim(g.robot_id, goal_id)
            if busy is not None:
                return busy
            self._pending_goals += 1

        def ended(outcome: Request | str) -> None:
            with self._pending_lock:
                self._pending_goals -= 1
            on_end(outcome)

        def submit() -> None:
            try:
                rid = self.planner.submit(goal)
            except Exception as e:  # noqa: BLE001 - ValueError: why it can never run; else a fault
                self._release(g.robot_id, goal_id)
                self.counters["rejected"] += 1
                ended(str(e) if isinstance(e, ValueError)
                      else f"the planner could not take the goal: {safe_text(repr(e), 300)}")
                return
            self._goals[rid] = _Goal(goal_id, rid, ended, StaticBudget(robot.effective_budget))
            self._by_goal_id[goal_id] = rid
            self.delivery.open(goal_id, g.robot_id, self.clock.now())
            self.ports.goal_started(goal_id, self.planner.requests[rid])
            if goal_id in self._early_cancels:  # cancel arrived before the goal reached the core
                self._early_cancels.discard(goal_id)
                self.planner.cancel(rid)

        self._post(submit)
        return None

    def cancel(self, goal_id: str) -> None:
        def cancel() -> None:
            rid = self._by_goal_id.get(goal_id)
            if rid is None:
                self._early_cancels.add(goal_id)
            else:
                self.planner.cancel(rid)
        self._post(cancel)

    def _claim(self, robot_id: str, goal_id: str) -> str | None:
        """Atomically mark ``robot_id`` busy with ``goal_id``; the busy reason if it already was."""
        with self._busy_lock:
            busy = self._busy.get(robot_id)
            if busy is not None:
                return f"robot '{robot_id}' is still executing goal {busy}; send one plan at a time per robot"
            self._busy[robot_id] = goal_id
            return None

    def active_goals(self) -> dict[str, str]:
        """robot id -> the goal it runs now (a copy; any thread)."""
        with self._busy_lock:
            return dict(self._busy)

    def _release(self, robot_id: str, goal_id: str) -> None:
        with self._busy_lock:
            if self._busy.get(robot_id) == goal_id:
                del self._busy[robot_id]

    # -- robot status (any thread) ---------------------------------------------------------------
    def check_status(self, st: StatusIn) -> str | None:
        """Why a status is refused before it touches any state (None: well formed). Cheap: runs
        on the receiving thread for every status, garbage floods included."""
        if not (0 < len(st.robot_id) <= MAX_ID_CHARS) or self.params.robot(st.robot_id) is None:
            return "unknown robot"
        if len(st.goal_id) != 32:
            return "malformed goal id"
        if not 0 <= st.state <= CANCELLED or not 0 <= st.sequence < 100_000:
            return "malformed state or sequence"
        if len(st.skill_durations_s) > 1000 or len(st.error) > MAX_ERROR_CHARS:
            return "oversize report"
        if not all(math.isfinite(d) and 0.0 <= d <= MAX_SKILL_S for d in st.skill_durations_s):
            return "duration not finite or outside [0, 3600] s"
        return None

    def expects_status(self, goal_id: str) -> bool:
        """Could a status about ``goal_id`` matter (a goal in flight, or one whose stop awaits
        confirmation)? Asked by the status thread before it even deserialises a status, so a
        flood of garbage costs a dictionary lookup per message."""
        return goal_id in self._by_goal_id or self.delivery.owes_stop(goal_id)

    def on_status(self, st: StatusIn) -> bool:
        """Queue a well-formed status for the scheduler thread (which applies statuses before any
        goal command); False if it was refused or the status queue is full (counted)."""
        reason = self.check_status(st)
        if reason is None:
            try:
                self._statuses.put_nowait(st)
                if not self._status_rung:  # one wake-up per drain, not per status of a burst
                    self._status_rung = True
                    self._wake_up()
                return True
            except queue.Full:
                reason = "status queue full"
        self.status_drops[reason] += 1
        return False

    def _drain_statuses(self) -> None:
        self._status_rung = False  # before draining: a status queued after this rings again
        while True:
            try:
                st = self._statuses.get_nowait()
            except queue.Empty:
                return
            self._contained(self._handle_status, st)

    def _handle_status(self, st: StatusIn) -> None:
        if st.state == IDLE:
            if self.delivery.stop_confirmed(st.goal_id, st.robot_id):
                self.ports.log("info", f"robot {safe_text(st.robot_id)} {safe_text(st.error, 200)} "
                                       f"(goal {st.goal_id[:8]})")
            return
        rid = self._by_goal_id.get(st.goal_id)
        req = self.planner.requests.get(rid) if rid is not None else None
        k = st.sequence
        # a report that does not match the goal (another robot, a segment never dispatched)
        # changes nothing: no last_heard, no acknowledgement, no recorded failure
        if req is None or req.goal.robot_id != st.robot_id or not 0 <= k < len(req.dispatched_at):
            if req is None and self.delivery.owes_stop(st.goal_id, st.robot_id):
                return  # a stopped goal's last reports (its segments cancelled), before the IDLE
            self.status_drops["does not match a goal in flight"] += 1
            return
        now = self.clock.now()
        self.delivery.heard(st.goal_id, k, now, finished=st.state in (DONE, FAILED))
        if st.state in (EXECUTING, DONE, FAILED):  # an earlier segment's report was lost: ask now
            probe = self.delivery.probe_gap(st.goal_id, k, now)
            if probe is not None:
                self.ports.publish(*probe)
        self.status_delays.append(time.monotonic() - st.received)
        if st.state == EXECUTING:
            if k < len(req.exec_start) and req.exec_start[k] is None:
                self.planner.on_robot_status(st.robot_id, rid, k, "started")
        elif st.state == DONE:
            self.planner.on_robot_status(st.robot_id, rid, k, "finished", durations=list(st.skill_durations_s))
        elif st.state == FAILED:
            self.planner.on_robot_status(st.robot_id, rid, k, "failed", reason=(
                f"robot {st.robot_id} failed segment {k}: {safe_text(st.error, 300) or 'no reason given'}"))
        elif st.state == CANCELLED:  # the robot stopped the plan without this planner asking
            self.planner.cancel(rid, f"robot {st.robot_id} cancelled segment {k}: "
                                     f"{safe_text(st.error, 300) or 'no reason given'}")

    # -- PlannerSink (scheduler thread) ----------------------------------------------------------
    def _budget_check(self, request: Request, segment: Segment) -> str | None:
        """Before a segment is dispatched: its worst case (loops multiplied out) added to the
        goal's earlier segments must fit the robot's budget (core/budgets.py), else the reason."""
        g = self._goals.get(request.id)
        if g is None or g.budget is None or request.goal.skill_set_id is None:
            return None
        ss = DEFAULT_SKILL_SETS[request.goal.skill_set_id]
        try:
            cost = segment_cost(segment.text, segment.calls, ss, language_for(request.goal.robot_kind, ss))
        except ValueError as e:  # the segmenter passed it, so this is unexpected: refuse, do not guess
            return f"segment {segment.index} cannot be costed: {e}"
        why = g.budget.add(cost)
        if why is not None:
            self.counters["budget_refusals"] += 1
            return f"exceeds budget: {why} (segment {segment.index}: {safe_text(segment.text, 60)})"
        return None

    def dispatch(self, request: Request, segment: Segment) -> None:
        g = self._goals[request.id]
        if self.operator.hold(g.goal_id, request, segment):  # waits for an operator's approval
            return
        final = segment.final or (request.state is GenState.GENERATED
                                  and segment.index == len(request.segments) - 1)
        msg = self.ports.segment(g.goal_id, request, segment.index, final)
        self.delivery.sent(g.goal_id, segment.index, msg, self.clock.now())

    def done(self, request: Request) -> None:
        g = self._goals.pop(request.id, None)
        if g is None:
            return
        self._by_goal_id.pop(g.goal_id, None)
        self._release(request.goal.robot_id, g.goal_id)
        self.counters[request.end.value if request.end else "ended"] += 1
        if request.end is not EndKind.SUCCEEDED and request.segments:
            # ended early after segments reached the robot: stop it (re-sent until confirmed)
            msg = self.ports.stop(g.goal_id, request.goal.robot_id, len(request.segments))
            self.delivery.stop(g.goal_id, request.goal.robot_id, msg, self.clock.now())
        else:
            self.delivery.close(g.goal_id)
        g.on_end(request)
        self._post(lambda: self._forget(request))

    def _forget(self, req: Request) -> None:
        self._forgotten_tokens += req.generated_tokens
        self.planner.forget(req.id)

    # -- scheduler thread ------------------------------------------------------------------------
    def _apply_arrivals(self) -> None:
        """Statuses and goal commands that arrived, applied between the engine's events and the
        tick's scheduling decision (their arrival woke the engine: one tick serves them).
        Statuses first, never starved by goal commands; a bounded slice of commands. Commands
        left after the slice ring the engine again: the next tick takes them at once, not after
        the engine's next event (with nothing generating, its whole idle wait)."""
        self._drain_statuses()
        try:
            for _ in range(COMMAND_SLICE):  # a bounded slice of goal commands, then statuses again
                self._contained(self._cmds.get_nowait())
                self._drain_statuses()
        except queue.Empty:
            return
        if not self._cmds.empty():
            self._wake_up()

    def _contained(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run one command or status on the scheduler thread; its failure is its own (counted
        and logged): it never stops the others, nor passes for an engine failure."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            self.counters["internal_errors"] += 1
            self.ports.log("error", f"planner command failed: {safe_text(repr(e), 300)}")

    def _scheduler_loop(self) -> None:
        next_check = next_stats = 0.0
        while not self._stop.is_set():
            down = self.health.state == "down"
            if down or (self._cmds.empty() and self._statuses.empty() and not self._goals):
                # nothing in flight, or no engine: sleep until a goal or status comes (at most
                # until the next robot check), instead of stepping an idle engine every few ms
                wake_at = min(next_check, next_stats, self._retry_at if down and self._engine_factory else math.inf)
                self._wake.wait(max(0.0, wake_at - self.clock.now()))
                self._wake.clear()
            if down:
                self._apply_arrivals()  # statuses and cancels still count; goals end at once:
                self.planner.engine_lost(self.health.reason)  # those that reached the core
                if self._engine_factory is not None and self.clock.now() >= self._retry_at:
                    self._restart_engine()
            else:
                try:
                    self.planner.tick(between=self._apply_arrivals)
                except Exception as e:  # noqa: BLE001 - an engine that died: fail its goals, restart it
                    try:
                        self._engine_failed(e)
                    except Exception as e2:  # noqa: BLE001 - the scheduler thread must survive
                        self._go_down(f"engine restart failed: {safe_text(repr(e2), 300)}")
                    self._apply_arrivals()  # the engine may have failed before the hook: goals still end
            now = self.clock.now()
            if now >= next_check:
                self._check_robots(now)
                next_check = now + 0.1
            if now >= next_stats:
                self._refresh_snapshot(now)
                next_stats = now + 1.0

    def _engine_failed(self, error: Exception) -> None:
        self.health.failures += 1
        self.health.last_error = safe_text(repr(error), 300)
        self.health.reason = self._failure = safe_text(str(error) or repr(error), 300)
        self.counters["engine_failures"] += 1
        self.ports.log("error", f"inference engine failed: {self.health.last_error}")
        if self._engine_factory is None:
            self._go_down()
            return
        close = getattr(self.planner.engine, "close", None)
        if close and self._owns_engine:
            try:
                close()
            except Exception:  # noqa: BLE001 - the engine is dead already
                pass
        self._restart_engine()

    def _go_down(self, why: str = "") -> None:
        """No engine: end every goal it would still have to generate; new goals are refused (and
        the scheduler retries the engine factory every ENGINE_RETRY_S, if it has one)."""
        self.health.state = "down"
        self._retry_at = self.clock.now() + ENGINE_RETRY_S
        if why:
            self.ports.log("error", why)
        self.planner.engine_lost(self.health.reason)

    def _restart_engine(self) -> None:
        self.health.state = "restarting"
        try:
            engine = self._engine_factory()
        except Exception as e:  # noqa: BLE001
            self.health.reason = f"{self._failure}; rebuilding it failed: {safe_text(str(e) or repr(e), 300)}"
            self._go_down(f"inference engine could not be restarted (next try in {ENGINE_RETRY_S:g} s): "
                          f"{safe_text(repr(e), 300)}")
            return
        self.warm_up(engine)
        self.planner.restart_engine(engine, self.health.reason)
        self._owns_engine = True
        self.health.state = "up"
        self.ports.log("info", "inference engine restarted")

    def _flood_check(self, now: float) -> None:
        """Pause the silence clocks while the status path is flooded (see FLOOD_DROPS_PER_S)."""
        t0, n0 = self._drops_seen
        total = sum(self.status_drops.values())
        self._drops_seen = (now, total)
        dt = now - t0
        if dt <= 0 or t0 == 0.0:
            return
        if (total - n0) / dt > FLOOD_DROPS_PER_S:
            if now >= self._flooded_until:
                self.ports.log("warning", f"status flood: {(total - n0) / dt:.0f} refused statuses/s; robot "
                                          "timeouts paused until it stops")
            self._flooded_until = now + FLOOD_GRACE_S
        if now < self._flooded_until:
            self.delivery.pause(dt)
            self.flood_seconds += dt

    def _check_robots(self, now: float) -> None:
        """Re-send unacknowledged segments and owed stops; time out adapters that went silent."""
        self._flood_check(now)
        self.operator.check(now)  # approvals: time-outs, decisions, held goals' silence clocks
        owes = {}
        for rid, g in self._goals.items():
            req = self.planner.requests[rid]
            # a report is owed for a dispatched segment only: a plan generated but held until it
            # is complete (policy vllm, trail, ...) has sent the robot nothing to report on
            owes[g.goal_id] = not req.state.terminal and any(e is None for e in req.exec_end[:len(req.dispatched_at)])
        resend, given_up = self.delivery.due(now, owes)
        for robot_id, msg in resend:
            self.ports.publish(robot_id, msg)
        for goal_id, robot_id, n in given_up:
            self.ports.log("error", f"robot {safe_text(robot_id)} did not confirm the stop of goal "
                                    f"{goal_id[:8]} after {n} sends")
        for goal_id, silent_s in self.delivery.silent(now, owes):
            rid = self._by_goal_id[goal_id]
            robot = self.planner.requests[rid].goal.robot_id
            self.planner.cancel(rid, f"robot {robot} sent no status for {silent_s:.1f} s "
                                     f"(robot_timeout_s={self.delivery.silence_timeout_s})", EndKind.ROBOT_TIMEOUT)

    def _refresh_snapshot(self, now: float) -> None:
        reqs = list(self.planner.requests.values())
        states = Counter(r.state for r in reqs)
        total = self._forgotten_tokens + sum(r.generated_tokens for r in reqs)
        t0, n0 = self._rate_mark
        self._rate_mark = (now, total)
        engine = self.planner.engine
        try:
            free = engine.free_kv_tokens() / max(1, engine.kv_capacity_tokens())
        except Exception:  # noqa: BLE001 - a dead engine reports nothing
            free = 0.0
        try:  # e.g. the remote engine: servers up, failovers, per-server load
            engine_info = dict(engine.diagnostics()) if hasattr(engine, "diagnostics") else {}
        except Exception:  # noqa: BLE001
            engine_info = {}
        silent = tuple(sorted({self.planner.requests[rid].goal.robot_id for rid, g in self._goals.items()
                               if self.delivery.silent_for(g.goal_id, now) > 0.5 * self.delivery.silence_timeout_s}))
        self.snapshot = Snapshot(
            queued=states[GenState.QUEUED], running=states[GenState.RUNNING],
            suspended=states[GenState.SUSPENDED], active_goals=sum(1 for r in reqs if not r.state.terminal),
            tokens_per_s=(total - n0) / max(now - t0, 1e-6), kv_free_fraction=free, silent_robots=silent,
            status_delay_p99_s=float(np.quantile(np.fromiter(self.status_delays, float), 0.99))
            if self.status_delays else 0.0,
            counters=dict(self.counters) | {"resends": self.delivery.resends, "probes": self.delivery.probes,
                                            "status_flood_s": int(self.flood_seconds),
                                            "robot_stops": self.delivery.stops_sent,
                                            "robot_stops_unconfirmed": self.delivery.stops_unconfirmed}
            | {f"status_dropped: {k}": v for k, v in self.status_drops.items()}, engine=engine_info)
