"""Segmented task model (TimelyLLM 4.2): a goal's plan is generated as segments s_0..s_K.

One :class:`Request` per goal carries one generation that is admitted, suspended at segment
boundaries and resumed, plus the execution record of its dispatched segments. Its state moves
only along :data:`TRANSITIONS`; anything else raises :class:`IllegalTransition`.

States:

- ``QUEUED``: waiting for its first admission (needs a prefill).
- ``RUNNING``: decoding in the engine.
- ``SUSPENDED``: not decoding, context (token ids, KV if cached) kept, waiting in the queue to be
  resumed; normally because its previous segment was dispatched and is awaiting execution
  (also after a preemption by a policy).
- ``GENERATED``: the plan is complete; dispatched segments are still executing.
- ``FINISHED`` / ``CANCELLED`` / ``FAILED``: terminal.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from llm_planner_node.core.plan_limits import PlanLimits
from llm_planner_node.core.sampling import Sampling
from timely_robot.skills import REPLAN_SKILLS, SkillCall
from llm_planner_node.core.tuf import TUFParams


class GenState(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUSPENDED = "suspended"
    GENERATED = "generated"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (GenState.FINISHED, GenState.CANCELLED, GenState.FAILED)


class EndKind(enum.Enum):
    """How a request ended: set once, only by the core (:meth:`Planner._end`), like vLLM's
    ``RequestStatus`` carries its finish reason. The node maps it to the action status
    (``ros_messages.STATUS_OF``) and nothing else decides a goal's outcome."""

    SUCCEEDED = "succeeded"          # plan generated and every segment executed
    TRUNCATED = "truncated"          # plan cut by max_tokens; the segments it had were executed
    CANCELLED = "cancelled"          # by the client, or the node shutting down / deactivating
    INVALID_PLAN = "invalid_plan"    # the model wrote text that is not a valid, safe plan
    ENGINE_FAILED = "engine_failed"  # the inference engine failed
    ROBOT_FAILED = "robot_failed"    # the adapter reported a failure
    ROBOT_TIMEOUT = "robot_timeout"  # the adapter went silent while it owed a report
    SHED = "shed"                    # overload: dropped before its first segment, when even an
                                     # immediate start could no longer give it utility > 0
    REPLANNED = "replanned"          # the executed plan asked for a re-plan: the goal goes on in a
                                     # new generation (never a goal's end, only this generation's)
    REPLAN_REFUSED = "replan_refused"  # the executed plan asked for a re-plan the planner could not
                                       # give (planner.max_replans reached, or its prompt did not fit)
    NOT_ACHIEVED = "not_achieved"    # every segment executed, but an action skill answered that it
                                     # did not do its action (SkillSpec.achieves: goto(x) -> False)

    @property
    def state(self) -> GenState:
        """The terminal generation state this end puts a request in."""
        return {EndKind.SUCCEEDED: GenState.FINISHED, EndKind.TRUNCATED: GenState.FINISHED,
                EndKind.REPLANNED: GenState.FINISHED, EndKind.NOT_ACHIEVED: GenState.FINISHED,
                EndKind.CANCELLED: GenState.CANCELLED}.get(self, GenState.FAILED)


_END = {GenState.CANCELLED, GenState.FAILED}
TRANSITIONS: dict[GenState, frozenset[GenState]] = {
    GenState.QUEUED: frozenset({GenState.RUNNING} | _END),
    GenState.RUNNING: frozenset({GenState.SUSPENDED, GenState.GENERATED} | _END),
    # SUSPENDED -> GENERATED: a preempted generation whose end crossed the suspend in a live engine
    GenState.SUSPENDED: frozenset({GenState.RUNNING, GenState.GENERATED} | _END),
    GenState.GENERATED: frozenset({GenState.FINISHED} | _END),
    GenState.FINISHED: frozenset(),
    GenState.CANCELLED: frozenset(),
    GenState.FAILED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A state change the task model does not allow (a scheduler bug, never user input)."""


@dataclass(frozen=True)
class Goal:
    """What a client asks for (the ROS ``PlanTask`` goal, engine-neutral).

    ``prompt`` is whatever the engine takes: text or token ids for the live engine, a
    :class:`~timely_tools.sim.workload.SimPrompt` for the simulated one.
    """

    robot_id: str
    robot_kind: str
    task_type: str
    prompt: object
    tuf: TUFParams
    max_tokens: int = 256
    skill_set_id: str | None = None
    instruction: str = ""
    #: objects the robot knows (its plan grammar's only object arguments when given)
    objects: tuple[str, ...] = ()
    #: the plan language's bounds and decoding (None: the language's defaults)
    plan_limits: PlanLimits | None = None
    sampling: Sampling | None = None
    #: the scene the prompt carries (TypeFly entries; None: no scene line)
    scene: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {self.max_tokens}")
        if not self.robot_id:
            raise ValueError("robot_id must not be empty")


@dataclass(frozen=True)
class Segment:
    """One executable piece of a plan: its text, validated skill calls and token ids.
    ``final``: known to be the plan's last segment when it was generated."""

    index: int
    text: str
    calls: tuple[SkillCall, ...]
    token_ids: tuple[int, ...]
    final: bool = False


@dataclass(frozen=True)
class Progress:
    """How far a goal's generation got on the planner it is taken over from (a standby's
    takeover, :meth:`~llm_planner_node.core.planner.Planner.adopt`): every segment generated so
    far and, per segment, when it was generated, dispatched and executed (None: not yet), what the
    robot's skills answered, whether the plan is complete, and the goal's earlier plans
    (re-plans: their texts; the robot's sequence numbers of this one start at ``seq_base``)."""

    segments: tuple[Segment, ...] = ()
    gen_start: tuple[float, ...] = ()
    gen_end: tuple[float, ...] = ()
    dispatched_at: tuple[float | None, ...] = ()
    exec_start: tuple[float | None, ...] = ()
    exec_end: tuple[float | None, ...] = ()
    generated: bool = False
    truncated: bool = False
    answers: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    return_value: str | None = None
    seq_base: int = 0
    earlier_plans: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.segments)
        lists = (self.gen_start, self.gen_end, self.dispatched_at, self.exec_start, self.exec_end)
        if any(len(x) != n for x in lists):
            raise ValueError(f"a generation's progress needs one time per segment in every list ({n} segments)")
        for k, seg in enumerate(self.segments):
            if seg.index != k:
                raise ValueError(f"segment {k} of a generation's progress has index {seg.index}")
        dispatched = [t is not None for t in self.dispatched_at]
        if dispatched != sorted(dispatched, reverse=True):
            raise ValueError("a generation's segments are dispatched in order: a later one was dispatched before "
                             "an earlier one")

    @property
    def token_ids(self) -> tuple[int, ...]:
        """The generation's tokens so far (every segment's, in order)."""
        return tuple(t for seg in self.segments for t in seg.token_ids)


@dataclass
class Request:
    """A goal's generation and the execution record of its segments (all times in seconds)."""

    id: int
    goal: Goal
    arrival: float
    prompt_tokens: int
    state: GenState = GenState.QUEUED
    # generation progress
    generated_tokens: int = 0
    cached_prompt_tokens: int = 0  # context tokens served by the prefix cache, summed over admissions
    segment_tokens: int = 0  # tokens generated so far in the segment being generated
    residency_start: float = 0.0  # last admission/resume time
    segment_start: float = 0.0  # when generation of the current segment (re)started
    recent_tokens: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4))
    # segments and their execution (index k in every list)
    segments: list[Segment] = field(default_factory=list)
    gen_start: list[float] = field(default_factory=list)  # generation of segment k (re)started
    gen_end: list[float] = field(default_factory=list)  # segment k complete in the engine
    dispatched_at: list[float] = field(default_factory=list)
    predicted_exec: list[float] = field(default_factory=list)
    exec_start: list[float | None] = field(default_factory=list)
    exec_end: list[float | None] = field(default_factory=list)
    ended_at: float | None = None
    end_reason: str = ""
    end: EndKind | None = None  # set by the core when the request ends (with end_reason)
    truncated: bool = False  # generation stopped at max_tokens, not at the plan's end
    # what the robot found: each segment's answers (skill call, value) and the plan's return value
    answers: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    return_value: str | None = None
    # the calls that answered they did not do their action (robot sequence number, call, value);
    # set by the core when it ends the request NOT_ACHIEVED
    unachieved: tuple[tuple[int, str, str], ...] = ()
    # re-planning: the goal's earlier generations (oldest first), the robot's sequence number of
    # this generation's segment 0, and the generation that continued this one
    earlier: tuple["Request", ...] = ()
    seq_base: int = 0
    replanned_as: int | None = None
    requeued_at: float | None = None  # a re-plan's: when it was queued (``arrival`` stays the goal's)

    @property
    def chain(self) -> tuple["Request", ...]:
        """Every generation of the goal so far, oldest first (this one last)."""
        return (*self.earlier, self)

    def asked_replan(self) -> bool:
        """The robot ran this plan's ``re_plan`` (it answers each call it ran; a ``re_plan``
        inside a condition that was false never ran)."""
        return any(call.split("(", 1)[0].strip() in REPLAN_SKILLS
                   for answers in self.answers.values() for call, _v in answers)

    @property
    def next_segment(self) -> int:
        """Index k of the segment being (or about to be) generated."""
        return len(self.segments)

    def transition(self, new: GenState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"request {self.id}: {self.state.value} -> {new.value} is not allowed")
        self.state = new

    def queued_at(self, k: int) -> float:
        """When segment k entered the generation queue: arrival (k = 0; a re-plan's when it was
        queued) or the end of s_{k-1}."""
        if k == 0:
            return self.arrival if self.requeued_at is None else self.requeued_at
        return self.gen_end[k - 1]

    def all_executed(self) -> bool:
        return len(self.exec_end) == len(self.segments) and all(e is not None for e in self.exec_end)
