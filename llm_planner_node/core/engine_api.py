"""The engine interface: what the scheduling core needs from an inference engine.

One scheduling core (:class:`~llm_planner_node.core.planner.Planner`) drives every engine. The
engine runs its own continuous batching over the generations the core has admitted; the core
decides, at each engine step boundary, which generations to add, resume, suspend or abort.

Contract (both the live vLLM backend and ``engines/sim_engine.py`` implement it):

- ``add(spec)``: start a new generation from ``spec.prompt`` (prefill; the engine may serve the
  shared skill-set prefix from its prefix cache).
- ``resume(gen_id)``: continue a suspended generation from the token ids it kept (prompt ids +
  generated ids; no re-tokenisation). Live vLLM: ``TokensPrompt(prompt_ids + generated_ids)``
  with prefix caching, reporting ``num_cached_tokens``.
- ``suspend(gen_id)``: stop decoding and keep the token ids (live vLLM: ``abort`` and keep
  ``output.token_ids``). Used for preemption; segment-boundary suspensions happen inside the
  engine (see below) so no token past the boundary is generated.
- ``abort(gen_id)``: drop the generation and everything it kept (cancel/failure).
- ``step()``: return the events produced since the previous call, in time order. The simulated
  engine completes one iteration per call; the live engine (AsyncLLM in its own event-loop
  thread) drains what its stream produced.
- ``free_kv_tokens()``: KV-cache tokens available for new reservations (live: free blocks x
  block size); ``kv_capacity_tokens()``: the total, so a goal that can never fit is rejected.
  The core admits a generation only if its worst case ``prompt tokens + max_tokens`` fits in
  ``free_kv_tokens()`` (summed over the generations admitted in one decision); one that does not
  fit stays queued until generations that stop (finish, suspend, end) free room, as vLLM's
  scheduler keeps a request waiting until its blocks can be allocated. That decision is the
  core's alone, so an engine takes for an admitted generation nothing beyond that worst case: the
  blocks of a shared skill-set prefix it starts with are part of it (loaded again if they were
  evicted), and prefix-cache blocks no running generation uses count as free (evicted as
  reservations need them, least recently used first), never pinned beside the reservations.
  ``count_prompt_tokens(prompt)``: prompt length in tokens.
- ``retain(gen_id, mode)``: how a suspended generation's KV context is kept until ``resume``
  (LAMPS / INFERCEPT): ``cache`` (default: left in free KV memory as prefix cache, LRU-evictable),
  ``preserve`` (pinned in KV memory), ``discard`` (freed; recomputed on resume), ``swap``
  (moved to host memory; swapped back on resume). Returns the mode applied: engines map modes
  they cannot do (or that do not fit now) to the nearest one they can (documented per engine).
- ``wake()`` (optional; any thread): an engine whose ``step`` waits for its next event returns
  from that wait now (with what it has, perhaps nothing). The service calls it when a robot
  status or a goal command arrives, so neither waits out the engine's wait.
- ``warm_up(specs, plans)`` (optional): before any goal, make each spec's prompt and grammar
  ready as a first goal of its kind would need them, and the resume grammars segmented
  generation of ``plans[i]`` (example plans of that kind) would need (live vLLM: one token
  generated and dropped per spec and per distinct resume grammar, which puts the prompts'
  blocks in the prefix cache and compiles the grammars); blocks until done, reports no event.
  The service calls it with one spec per robot kind and skill set of the fleet, and the shipped
  planner's canonical plans of that kind, whenever it starts an engine.
- ``adopt(spec, generated_ids, segments)``: register a suspended generation of ``spec`` (a new
  gen_id) whose plan so far is ``generated_ids`` (the concatenated ``SegmentEvent.token_ids``
  of segments ``0..segments-1``, ending at the boundary after segment ``segments - 1``), as if
  it had been added, generated those tokens and been suspended at that boundary (no event is
  reported for them); ``resume`` continues it, greedy decoding token for token as an
  uninterrupted generation. A standby planner takes over the goals of one that died this way.
  Ids that do not end at that boundary (or that the plan had already ended or could not have
  written) raise ValueError at once. (The concatenated token ids of segments ``0..k-1`` are
  exactly what the engine kept at that boundary; when one token completes several segments,
  the boundary is the one after the last of them.)
- ``standby(items, max_running)`` (optional): the generations the core would admit next, in its
  order (:class:`StandbyItem`: a new generation's spec, or a suspended one's resume), replacing
  the list of the previous decision. At an iteration boundary the engine may start them itself,
  in that order, while fewer than ``max_running`` generations run (the batch the core's last
  decision left: the engine refills freed slots, it never grows the batch) and the next one's
  whole reservation fits in ``free_kv_tokens()`` (the core's own admission rule), stopping at the
  first that does not fit; each is reported as a :class:`StartedEvent` before its first token.
  This is vLLM's own waiting queue: its scheduler starts a waiting request at the next step,
  whereas a slot freed at a boundary otherwise stays empty for a whole iteration while the core
  hears of it and decides. ``abort`` of a standby generation takes it off the list.
- ``abort``, ``suspend``, ``resume`` and ``retain`` of an id the engine no longer runs are no-ops (events
  and commands cross in the live engine).

Segments: the engine detects segment boundaries (a segmenter at the edge for the live engine,
the trace's segment token counts in the simulator) and reports each as a :class:`SegmentEvent`
carrying the segment's text, validated skill calls and token ids. If the generation was added
with ``suspend_at_segments=True`` and the plan is not finished, the engine suspends it at the
boundary by itself and says so (``suspended=True``); it is resumed only by ``resume``. A spec
may carry ``suspend_when(gen_id, calls)``, a function the core owns: the engine then suspends at
a boundary only if it returns True for the segment just completed (its skill calls), called
when the boundary is reached, from the engine's own thread (a live engine also suspends while
it holds more generations than its batch can run and one of them waits for its first token).
When a plan ends (end of sequence, plan terminator, max tokens) the engine reports its last
segment (if any text remains) and then :class:`FinishedEvent`. What a boundary means for
dispatch is the core's business (policy flags), not the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, Union

from timely_robot.outcomes import FinishReason
from llm_planner_node.core.plan_limits import PlanLimits
from llm_planner_node.core.sampling import Sampling
from timely_robot.skills import SkillCall


@dataclass(frozen=True)
class GenerationSpec:
    """Everything an engine needs to start one generation.

    ``priority``: the core's rank of this admission within its scheduling decision (0 = most
    urgent; vLLM's convention, lower first). Engines with their own queue (vLLM with
    ``scheduling_policy="priority"``) order waiting work by it; the simulator admits everything
    the core admits in one iteration and ignores it.

    ``suspend_when``: with ``suspend_at_segments``, suspend at a boundary only if this returns
    True for ``(gen_id, the completed segment's calls)`` (None: always; module docstring).
    """

    gen_id: int
    prompt: object
    max_tokens: int
    robot_kind: str
    skill_set_id: str | None
    suspend_at_segments: bool
    priority: int = 0
    suspend_when: Callable[[int, Sequence[SkillCall]], bool] | None = None
    #: the goal's known objects, plan bounds and decoding (Goal's fields of the same names)
    objects: tuple[str, ...] = ()
    plan_limits: PlanLimits | None = None
    sampling: Sampling | None = None

    def suspend_wanted(self, calls: Sequence[SkillCall]) -> bool:
        """Whether the boundary after a segment of ``calls``, reached now, suspends this
        generation (before the engine's own plan-finished and capacity checks)."""
        return self.suspend_at_segments and (self.suspend_when is None or self.suspend_when(self.gen_id, calls))


@dataclass(frozen=True)
class TokensEvent:
    """``count`` new tokens of ``gen_id``; ``t`` is the time of the last one.

    ``cached_prompt_tokens`` is set on the first tokens after an add/resume: how many context
    tokens the prefix cache served (vLLM ``num_cached_tokens``), else None.
    """

    gen_id: int
    t: float
    count: int
    cached_prompt_tokens: int | None = None
    token_ids: tuple[int, ...] = ()  # the new tokens' ids when the engine has them (live engine)


@dataclass(frozen=True)
class SegmentEvent:
    """Segment ``index`` of ``gen_id`` is complete; ``suspended`` if the engine suspended it.

    ``final`` is True when the engine already knows this is the plan's last segment (the plan
    ended with it); a FinishedEvent still follows. A plan can also end right after a segment
    that was reported with ``final=False`` (end of sequence on the next token).
    """

    gen_id: int
    t: float
    index: int
    text: str
    calls: tuple[SkillCall, ...]
    token_ids: tuple[int, ...]
    suspended: bool
    final: bool = False


@dataclass(frozen=True)
class FinishedEvent:
    """Generation ended: the plan is complete (:attr:`FinishReason.EOS`) or cut at max_tokens."""

    gen_id: int
    t: float
    reason: FinishReason


@dataclass(frozen=True)
class FailedEvent:
    """Generation failed inside the engine (error text for the goal's result).
    ``invalid_plan``: the model wrote text that is not a valid, safe plan (else an engine fault)."""

    gen_id: int
    t: float
    error: str
    invalid_plan: bool = False


@dataclass(frozen=True)
class StartedEvent:
    """A generation the core had on standby (``Engine.standby``) started at an iteration boundary."""

    gen_id: int
    t: float


@dataclass(frozen=True)
class StandbyItem:
    """One generation the engine may start by itself (``Engine.standby``): a new one (its
    ``spec``) or a suspended one's resume (``spec`` None), at ``priority`` (its rank)."""

    gen_id: int
    spec: GenerationSpec | None = None
    priority: int = 0


EngineEvent = Union[TokensEvent, SegmentEvent, FinishedEvent, FailedEvent, StartedEvent]
RETENTION_MODES = ("cache", "preserve", "discard", "swap")


class Engine(Protocol):
    """An inference engine driven by the scheduling core (see the module docstring)."""

    def count_prompt_tokens(self, prompt: object) -> int: ...

    def free_kv_tokens(self) -> int: ...

    def kv_capacity_tokens(self) -> int: ...

    def add(self, spec: GenerationSpec) -> None: ...

    def resume(self, gen_id: int, priority: int = 0) -> None: ...

    def adopt(self, spec: GenerationSpec, generated_ids: Sequence[int], segments: int) -> None:
        """Register a suspended generation of ``spec`` whose plan so far is ``generated_ids``: the ids
        of segments 0..segments-1, ending at the boundary after segment ``segments - 1``, as if it had
        been added, generated those tokens and been suspended at that boundary (no event is reported
        for them). ``resume(spec.gen_id)`` then continues it: its next SegmentEvent has index
        ``segments``; greedy decoding so resumed is token-identical to an uninterrupted generation."""
        ...

    def suspend(self, gen_id: int) -> None: ...

    def abort(self, gen_id: int) -> None: ...

    def retain(self, gen_id: int, mode: str) -> str: ...

    def step(self) -> Sequence[EngineEvent]: ...
