"""Simulated inference engine: an iteration-level discrete-event model of continuous batching.

It implements :class:`~llm_planner_node.core.engine_api.Engine` with the live engine's
semantics (add, suspend at segment boundaries, resume from kept token ids, abort, adopt) and a
calibrated time model. Each iteration runs every running generation once and gives each one
token; its duration is

    iteration_time = a + b * prefill_tokens + c * decode_batch

where prefill_tokens are the uncached prompt/context tokens of generations added or resumed
since the last iteration and decode_batch is the number of the others.

KV memory: a running generation reserves ``prompt + max_tokens`` tokens (its worst case, shared
prefix included), so a running generation can never run out; a preserved context is pinned
(below). ``free_kv_tokens() = capacity - reservations - pinned contexts``: exactly what the core's
admission counts (``engine_api``), so what fits there fits here. :meth:`SimEngine.add` /
:meth:`SimEngine.resume` take nothing beyond the reservation and raise :class:`KVCapacityError`
only if the core admits something that does not fit in ``free_kv_tokens()`` (a scheduler bug).

Prefix cache (vLLM ``enable_prefix_caching``, full blocks only), kept in free KV memory and
evicted LRU by reservations and pins, as vLLM's free block queue evicts cached blocks no running
request references:

- a shared skill-set prefix (``SimPrompt.prefix_key``) is a cache entry. The server pre-stores
  skill sets (TimelyLLM 4.1; :meth:`SimEngine.prewarm`, ``warm_up``), so a new goal whose prefix
  is resident prefills only its task tokens plus the partial last block; a generation whose
  prefix was evicted (or never loaded) prefills it too, and it is resident again. While running
  generations use a prefix, its blocks are part of their reservations and it is not evicted;
  when the last of them stops, it is an evictable entry again (most recently used). So a fleet
  whose skill-set prefixes together exceed the free memory still runs: the prefixes not in use
  give way, and a generation that does not fit waits in the core's queue until room frees up.
- a suspended generation's context (prompt + generated tokens) stays cached until evicted;
  a resume that hits recomputes only the partial last block, a miss re-prefills the context
  beyond the shared prefix (all of it if the prefix is not resident either).

Retention of a suspended generation's context (``retain``; LAMPS / INFERCEPT), per token of
context C (M = 1 KV token):

- ``cache`` (default): the LRU prefix cache described above;
- ``preserve``: the context stays pinned in KV memory (counts against free memory, never
  evicted); resume needs no prefill;
- ``discard``: the context is freed at once; resume recomputes it (the resident shared prefix's
  full blocks excepted), i.e. ``b * C`` of prefill time in the resume iteration;
- ``swap``: the context is copied to host memory (``host_kv_tokens`` capacity; if full, it is
  discarded instead); swap-out and swap-in each add ``swap_s_per_token * C`` to the iteration
  in which they happen (the batch stalls, INFERCEPT's swap waste); resume needs no prefill.

Iteration rule (``iteration_policy``):

- ``mixed`` (default; vLLM with chunked prefill): prefills and decodes share an iteration;
- ``prefill-first`` (vLLM v0): an iteration is prefill-only if any prefill is pending;
- ``pd-marginal`` (hybrid offline-online scheduling, online iteration rule [R]): with prefills
  pending and decodes running, keep running decode-only rounds while the prefill round's cost
  ``C_p = a_p + b * prefill tokens`` exceeds ``C_d``, the decode time accumulated since the
  oldest pending prefill started waiting; then run one batched prefill round (rent-or-buy).
  Prefill-only rounds use ``IterationModel.prefill_a_s`` as intercept when set.

The simulation loop (``timely_tools/sim/simulation.py``) calls :meth:`start_iteration`
after each scheduling decision and advances the virtual clock to :meth:`in_flight_end`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

from llm_planner_node.core.clock import Clock
from timely_robot.outcomes import FinishReason
from llm_planner_node.core.engine_api import (RETENTION_MODES, EngineEvent, FinishedEvent, GenerationSpec,
                               SegmentEvent, StandbyItem, StartedEvent, TokensEvent)
from timely_robot.skills import SkillCall


@dataclass(frozen=True)
class SimSegment:
    """One segment of a simulated plan: its text, token count and skill calls."""

    text: str
    n_tokens: int
    calls: tuple[SkillCall, ...]

    def __post_init__(self) -> None:
        if self.n_tokens < 1:
            raise ValueError(f"segment {self.text!r} must have at least 1 token")


@dataclass(frozen=True)
class SimPrompt:
    """A simulated request: prompt length (shared skill-set prefix + task) and the plan to emit."""

    shared_prefix_tokens: int
    task_tokens: int
    segments: tuple[SimSegment, ...]
    prefix_key: str = "default"  # which shared prefix (skill set) the prompt starts with

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("a simulated plan needs at least one segment")

    @property
    def prompt_tokens(self) -> int:
        return self.shared_prefix_tokens + self.task_tokens


@dataclass(frozen=True)
class IterationModel:
    """``iteration_time = a + b * prefill_tokens + c * decode_batch`` (seconds); a prefill-only
    iteration uses ``prefill_a_s`` as intercept if given (hybrid paper: 25 ms vs 29 ms)."""

    a_s: float
    b_s_per_prefill_token: float
    c_s_per_decode_seq: float
    prefill_a_s: float | None = None

    def time(self, prefill_tokens: int, decode_batch: int) -> float:
        a = self.prefill_a_s if (self.prefill_a_s is not None and decode_batch == 0
                                 and prefill_tokens > 0) else self.a_s
        return a + self.b_s_per_prefill_token * prefill_tokens + self.c_s_per_decode_seq * decode_batch


# Llama3-8B fp16 on an RTX 4090. Source: TimelyLLM Table 1 (HF transformers, one request):
# prefill of 2,884 tokens = 328 ms, each decode ~22 ms at batch 1. Decode is memory-bound, so
# the per-sequence decode cost is small; c = 0.2 ms/sequence is an assumption taken from the
# hybrid-scheduling paper's 0.21 ms/request decode slope (LLaMA-65B, 8 NPUs).
#   a + c = 22 ms               -> a = 21.8 ms
#   a + b * 2884 = 328 ms       -> b = (328 - 21.8) / 2884 = 0.10617 ms/token
# Check: re-prefilling a ~1,300-token robot prompt = 21.8 + 0.106 * 1300 = 160 ms (the paper
# measured 133 ms in 4.1).
LLAMA3_8B_RTX4090 = IterationModel(0.0218, (0.328 - 0.0218) / 2884, 0.0002)
# KV capacity: 24 GiB x 0.9 (vLLM gpu_memory_utilization) = 23.2 GB - 16.1 GB fp16 weights
# - ~1 GB activations = ~6.1 GB; Llama3-8B KV = 2 x 32 layers x 8 KV heads x 128 x 2 bytes
# = 128 KiB/token -> ~46,000 tokens. (The paper's 170.35 MB context = 1,300 tokens at 128 KiB.)
LLAMA3_8B_RTX4090_KV_TOKENS = 45_000
# Host <- -> GPU KV copy: TimelyLLM 4.1 measured a host->GPU restore of the 170.35 MB (~1,300
# token) context in 9.5 ms -> 7.3 us per token (PCIe 4.0).
LLAMA3_8B_SWAP_S_PER_TOKEN = 0.0095 / 1300
# LLaMA-65B on 8 Ascend NPUs (hybrid offline-online paper): prefill 25 ms + 0.13 ms/token,
# decode round 29 ms + 0.21 ms/active client.
LLAMA65B_NPU = IterationModel(0.029, 0.00013, 0.00021, prefill_a_s=0.025)
ITERATION_POLICIES = ("mixed", "prefill-first", "pd-marginal")


@dataclass(frozen=True)
class SimEngineConfig:
    iteration: IterationModel = LLAMA3_8B_RTX4090
    kv_capacity_tokens: int = LLAMA3_8B_RTX4090_KV_TOKENS
    block_size: int = 16  # vLLM's default KV block size on GPUs
    swap_s_per_token: float = LLAMA3_8B_SWAP_S_PER_TOKEN
    host_kv_tokens: int = 1_000_000  # host memory for swapped contexts (~128 GB for Llama3-8B)
    iteration_policy: str = "mixed"

    def __post_init__(self) -> None:
        if self.iteration_policy not in ITERATION_POLICIES:
            raise ValueError(f"iteration_policy must be one of {ITERATION_POLICIES}, "
                             f"got {self.iteration_policy!r}")


class KVCapacityError(RuntimeError):
    """The core admitted a generation whose KV reservation does not fit (a scheduler bug)."""


@dataclass
class EngineStats:
    iterations: int = 0
    busy_s: float = 0.0
    tokens: int = 0
    prefill_tokens: int = 0
    resume_hits: int = 0
    resume_misses: int = 0
    peak_reserved_tokens: int = 0
    peak_batch: int = 0
    busy_slot_s: float = 0.0  # sum over iterations of duration x generations in the batch
    retained: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RETENTION_MODES, 0))
    swap_s: float = 0.0
    recompute_tokens: int = 0  # context tokens re-prefilled on resume (cache misses, discards)
    standby_starts: int = 0  # generations started from the core's standby list (live engine)


@dataclass
class _Gen:
    spec: GenerationSpec
    prompt: SimPrompt
    ends: list[int]  # cumulative token count at the end of each segment
    generated: int = 0
    segment: int = 0
    pending_prefill: int = 0
    cached_report: int | None = None
    reserved: int = 0

    @property
    def context(self) -> int:
        return self.prompt.prompt_tokens + self.generated


@dataclass
class _Iteration:
    end: float
    batch: list[_Gen] = field(default_factory=list)


class SimEngine:
    """Continuous-batching engine model driven by a virtual clock (see the module docstring)."""

    def __init__(self, clock: Clock, config: SimEngineConfig = SimEngineConfig()) -> None:
        self.clock = clock
        self.config = config
        self.stats = EngineStats()
        self._running: dict[int, _Gen] = {}
        self._suspended: dict[int, _Gen] = {}
        #: the evictable prefix cache, least recently used first: a suspended generation's id ->
        #: its context's tokens, ("prefix", key) -> the tokens of a shared prefix no running
        #: generation uses
        self._cache: OrderedDict[int | tuple[str, str], int] = OrderedDict()
        self._cache_tokens = 0
        self._prefix_users: dict[str, int] = {}  # prefix key -> running generations starting with it
        self._reserved = 0
        self._in_flight: _Iteration | None = None
        self._pinned: dict[int, int] = {}  # preserved gen id -> context tokens
        self._swapped: dict[int, int] = {}  # swapped-out gen id -> context tokens (host)
        self._pending_swap_s = 0.0  # swap time to add to the next iteration
        self._waited_decode_s = 0.0  # pd-marginal: decode time since prefills began waiting

    # ------------------------------------------------------------ Engine protocol
    def count_prompt_tokens(self, prompt: object) -> int:
        return _sim_prompt(prompt).prompt_tokens

    def kv_capacity_tokens(self) -> int:
        return self.config.kv_capacity_tokens

    def free_kv_tokens(self) -> int:
        """KV tokens not reserved by running generations nor pinned by preserved contexts (the
        evictable prefix cache lives in them: module docstring)."""
        return self.config.kv_capacity_tokens - self._reserved - sum(self._pinned.values())

    def resident_prefixes(self) -> frozenset[str]:
        """The keys of the shared prefixes now in KV memory (in use or cached)."""
        return frozenset({k[1] for k in self._cache if isinstance(k, tuple)} | set(self._prefix_users))

    def add(self, spec: GenerationSpec) -> None:
        p = _sim_prompt(spec.prompt)
        g = _Gen(spec, p, _cumulative(p.segments))
        hit = self._reserve(g)
        cached = self._full_blocks(p.shared_prefix_tokens) if hit else 0
        g.pending_prefill = p.prompt_tokens - cached
        g.cached_report = cached
        self._running[spec.gen_id] = g

    def warm_up(self, specs: Sequence[GenerationSpec], plans: Sequence[Sequence[str]] = ()) -> None:
        """Each spec's shared skill-set prefix in the prefix cache before any goal (what ``add``
        does for the first goal of a prefix), as far as they fit in the free KV memory, so that
        goal's prefill is served from the cache too (the simulator has no grammars: ``plans``
        changes nothing)."""
        for spec in specs:
            p = _sim_prompt(spec.prompt)
            self.prewarm(p.prefix_key, p.shared_prefix_tokens)

    def resume(self, gen_id: int, priority: int = 0) -> None:
        g = self._suspended.pop(gen_id, None)
        if g is None:
            return
        ctx = g.context
        preserved = self._pinned.pop(gen_id, None) is not None  # joins the reservation
        prefix_hit = self._reserve(g)
        if gen_id in self._swapped:
            self._pending_swap_s += self.config.swap_s_per_token * self._swapped.pop(gen_id)
            cached = ctx
        elif preserved:
            cached = ctx
        elif self._uncache(gen_id):
            self.stats.resume_hits += 1
            cached = min(self._full_blocks(ctx), ctx - 1)
        else:
            self.stats.resume_misses += 1
            cached = self._full_blocks(g.prompt.shared_prefix_tokens) if prefix_hit else 0
            self.stats.recompute_tokens += ctx - cached
        g.pending_prefill = ctx - cached
        g.cached_report = cached
        self._running[gen_id] = g

    def adopt(self, spec: GenerationSpec, generated_ids: Sequence[int], segments: int) -> None:
        """A generation of ``spec`` suspended at the boundary after segment ``segments - 1``, having
        generated ``generated_ids`` (the ids of segments 0..segments-1; no event is reported for
        them). Its context is in no cache here: ``resume`` re-prefills it (a resume miss)."""
        p = _sim_prompt(spec.prompt)
        g = _Gen(spec, p, _cumulative(p.segments))
        n = len(generated_ids)
        if not 0 <= segments < len(g.ends):
            raise ValueError(f"a generation of this {len(g.ends)}-segment plan can be adopted after 0 to "
                             f"{len(g.ends) - 1} segments, not {segments}")
        end = g.ends[segments - 1] if segments else 0
        if n != end:
            raise ValueError(f"the first {segments} segment(s) of this plan are {end} tokens, "
                             f"but {n} generated ids were given")
        if n >= spec.max_tokens:
            raise ValueError(f"{n} generated ids reach max_tokens ({spec.max_tokens}): the generation had ended")
        g.generated, g.segment = n, segments
        self._suspended[spec.gen_id] = g

    def suspend(self, gen_id: int) -> None:
        g = self._running.pop(gen_id, None)
        if g is not None:
            self._park(g)

    def abort(self, gen_id: int) -> None:
        g = self._running.pop(gen_id, None)
        if g is not None:
            self._release(g)
        self._suspended.pop(gen_id, None)
        self._uncache(gen_id)
        self._pinned.pop(gen_id, None)
        self._swapped.pop(gen_id, None)

    def retain(self, gen_id: int, mode: str) -> str:
        """Keep a suspended generation's context as ``mode`` (module docstring); returns the
        mode applied (``swap`` -> ``discard`` if host memory is full, ``preserve`` -> ``cache``
        if the context cannot be pinned)."""
        if mode not in RETENTION_MODES:
            raise ValueError(f"retention mode must be one of {RETENTION_MODES}, got {mode!r}")
        g = self._suspended.get(gen_id)
        if g is None or gen_id in self._pinned or gen_id in self._swapped:
            return "cache"  # unknown, or already decided for this suspension
        ctx = g.context
        if mode == "swap" and sum(self._swapped.values()) + ctx > self.config.host_kv_tokens:
            mode = "discard"
        if mode == "preserve" and ctx > self.free_kv_tokens() + self._cache.get(gen_id, 0):
            mode = "cache"  # cannot pin: keep it as evictable cache
        self.stats.retained[mode] += 1
        if mode == "cache":
            return mode
        self._uncache(gen_id)
        if mode == "preserve":
            self._pinned[gen_id] = ctx
            self._evict()
        elif mode == "swap":
            self._swapped[gen_id] = ctx
            self._pending_swap_s += self.config.swap_s_per_token * ctx
        return mode

    def step(self) -> list[EngineEvent]:
        """Complete the iteration in flight if it has ended by now; return its events."""
        it = self._in_flight
        if it is None or self.clock.now() < it.end:
            return []
        self._in_flight = None
        events: list[EngineEvent] = []
        for g in it.batch:
            gid = g.spec.gen_id
            if self._running.get(gid) is not g:
                continue  # suspended or aborted during the iteration: its token is lost
            g.generated += 1
            self.stats.tokens += 1
            events.append(TokensEvent(gid, it.end, 1, g.cached_report))
            g.cached_report = None
            at_boundary = g.generated == g.ends[g.segment]
            if at_boundary:
                k = g.segment
                g.segment += 1
                plan_done = g.segment == len(g.ends)
                seg = g.prompt.segments[k]
                stop = not plan_done and g.generated < g.spec.max_tokens and g.spec.suspend_wanted(seg.calls)
                start = g.ends[k - 1] if k else 0
                events.append(SegmentEvent(gid, it.end, k, seg.text, seg.calls,
                                           tuple(range(start, g.generated)), stop, final=plan_done))
                if plan_done:
                    self._finish(g, events, it.end, FinishReason.EOS)
                    continue
                if stop:
                    self._running.pop(gid)
                    self._park(g)
                    continue
            if g.generated >= g.spec.max_tokens:
                self._finish(g, events, it.end, FinishReason.MAX_TOKENS)
        return events

    def diagnostics(self) -> dict[str, str]:
        """The engine's work so far, for the planner's diagnostics: what a run's simulation can be
        compared with (iterations, busy time, tokens decoded and prefilled, context re-prefilled
        on resume, resumes that found their KV, the mean of generations running while busy)."""
        s = self.stats
        return {"sim iterations": str(s.iterations), "sim busy s": f"{s.busy_s:.3f}",
                "sim tokens": str(s.tokens), "sim prefill tokens": str(s.prefill_tokens),
                "sim recompute tokens": str(s.recompute_tokens), "sim resume hits": str(s.resume_hits),
                "sim resume misses": str(s.resume_misses), "sim peak batch": str(s.peak_batch),
                "sim standby starts": str(s.standby_starts),
                "sim mean running": f"{s.busy_slot_s / s.busy_s if s.busy_s else 0.0:.2f}"}

    # ------------------------------------------------------------ simulation loop hooks
    def prewarm(self, prefix_key: str, tokens: int) -> None:
        """Put a shared skill-set prefix in the prefix cache (the server pre-stores skill sets), the
        most recently used entry, if it is not resident yet and fits in the free KV memory (else
        nothing: the first generation that needs it prefills it). Never fails: a cached prefix
        is evictable (module docstring)."""
        key = ("prefix", prefix_key)
        if key in self._cache:
            self._cache.move_to_end(key)
        elif not self._prefix_users.get(prefix_key) and tokens <= self.free_kv_tokens():
            self._cache[key] = tokens
            self._cache_tokens += tokens
            self._evict()

    def in_flight_end(self) -> float | None:
        return None if self._in_flight is None else self._in_flight.end

    def start_iteration(self, at: float | None = None) -> None:
        """Start the next iteration with the current batch, now or at time ``at`` (no-op if busy
        or idle)."""
        if self._in_flight is not None or not self._running:
            return
        batch = self._select_batch(list(self._running.values()))
        prefill = sum(g.pending_prefill for g in batch)
        decode = sum(1 for g in batch if g.pending_prefill == 0)
        for g in batch:
            g.pending_prefill = 0
        dt = self.config.iteration.time(prefill, decode) + self._pending_swap_s
        s = self.stats
        s.swap_s += self._pending_swap_s
        self._pending_swap_s = 0.0
        s.iterations += 1
        s.busy_s += dt
        s.busy_slot_s += dt * len(self._running)
        s.prefill_tokens += prefill
        s.peak_batch = max(s.peak_batch, len(batch))
        self._in_flight = _Iteration((self.clock.now() if at is None else at) + dt, batch)

    def _select_batch(self, running: list[_Gen]) -> list[_Gen]:
        """Who runs this iteration under ``iteration_policy`` (module docstring)."""
        policy = self.config.iteration_policy
        prefills = [g for g in running if g.pending_prefill > 0]
        decodes = [g for g in running if g.pending_prefill == 0]
        if policy == "mixed" or not prefills or not decodes:
            self._waited_decode_s = 0.0
            return running
        if policy == "prefill-first":
            return prefills
        c_p = self.config.iteration.time(sum(g.pending_prefill for g in prefills), 0)
        if prefill_now(c_p, self._waited_decode_s):
            self._waited_decode_s = 0.0
            return prefills
        self._waited_decode_s += self.config.iteration.time(0, len(decodes))
        return decodes

    # ------------------------------------------------------------ memory
    def _full_blocks(self, tokens: int) -> int:
        return tokens // self.config.block_size * self.config.block_size

    def _reserve(self, g: _Gen) -> bool:
        """Reserve ``prompt + max_tokens`` for a generation that starts running, evicting cache
        entries as needed; returns whether its shared prefix was resident (:meth:`_use_prefix`)."""
        need = g.prompt.prompt_tokens + g.spec.max_tokens
        if need > self.free_kv_tokens():
            raise KVCapacityError(f"generation {g.spec.gen_id} needs {need} KV tokens, "
                                  f"{self.free_kv_tokens()} free")
        hit = self._use_prefix(g.prompt)
        g.reserved = need
        self._reserved += need
        self.stats.peak_reserved_tokens = max(self.stats.peak_reserved_tokens, self._reserved)
        self._evict()
        return hit

    def _use_prefix(self, p: SimPrompt) -> bool:
        """A generation starting with ``p``'s shared prefix reserves: the prefix's blocks
        become part of its reservation (a cached entry leaves the evictable cache first, so the
        reservation does not evict it). Returns whether the prefix was resident (a cache hit)."""
        users = self._prefix_users.get(p.prefix_key, 0)
        hit = users > 0
        tokens = self._cache.pop(("prefix", p.prefix_key), None)
        if tokens is not None:
            self._cache_tokens -= tokens
            hit = True
        self._prefix_users[p.prefix_key] = users + 1
        return hit

    def _release(self, g: _Gen) -> None:
        """A running generation stops (suspended, aborted, finished): its reservation is free; a
        shared prefix no running generation uses any more stays as an evictable cache entry."""
        if not g.reserved:
            return
        self._reserved -= g.reserved
        g.reserved = 0
        key = g.prompt.prefix_key
        self._prefix_users[key] -= 1
        if not self._prefix_users[key]:
            del self._prefix_users[key]
            self._cache[("prefix", key)] = g.prompt.shared_prefix_tokens
            self._cache_tokens += g.prompt.shared_prefix_tokens

    def _park(self, g: _Gen) -> None:
        """Suspend: release the reservation, keep the context in the prefix cache (LRU)."""
        self._release(g)
        self._suspended[g.spec.gen_id] = g
        self._cache[g.spec.gen_id] = g.context
        self._cache_tokens += g.context
        self._evict()

    def _uncache(self, gen_id: int) -> bool:
        tokens = self._cache.pop(gen_id, None)
        if tokens is None:
            return False
        self._cache_tokens -= tokens
        return True

    def _evict(self) -> None:
        room = self.free_kv_tokens()
        while self._cache and self._cache_tokens > room:
            self._cache_tokens -= self._cache.popitem(last=False)[1]

    def _finish(self, g: _Gen, events: list[EngineEvent], t: float, reason: FinishReason) -> None:
        self._running.pop(g.spec.gen_id)
        self._release(g)
        events.append(FinishedEvent(g.spec.gen_id, t, reason))


def prefill_now(prefill_cost_s: float, waited_decode_s: float) -> bool:
    """Hybrid scheduling's marginal-cost rule [R]: insert the pending prefill round once the
    decode time accumulated while prefills waited reaches its cost (``C_d >= C_p``)."""
    return waited_decode_s >= prefill_cost_s


def _sim_prompt(prompt: object) -> SimPrompt:
    if not isinstance(prompt, SimPrompt):
        raise TypeError(f"the simulated engine needs a SimPrompt, got {type(prompt).__name__}")
    return prompt


def _cumulative(segments: tuple[SimSegment, ...]) -> list[int]:
    ends, total = [], 0
    for s in segments:
        total += s.n_tokens
        ends.append(total)
    return ends


class RealtimeSimEngine(SimEngine):
    """The simulated engine driven by a wall clock, running beside the planner as a GPU does.

    Like vLLM's engine core, which steps on its own while the planner's Python works, the
    simulated GPU never waits for the planner: each iteration starts when the previous one ends,
    with the generations running at that moment, and the planner's admissions (add, resume) join
    the first iteration that starts after them. ``step`` waits (at most 50 ms, or until
    :meth:`wake`: a robot status or a goal arrived) for the iteration in flight and returns the
    events of every iteration that has ended by then. (Before, an
    iteration started only when the planner's loop came back to ``step``, so the loop's own time,
    about 9 ms per iteration at 1,000 robots, stalled the engine: it lost a fifth of its
    throughput and goals queued 8-11 s.)
    """

    def __init__(self, clock: Clock, config: SimEngineConfig = SimEngineConfig(),
                 idle_wait_s: float = 0.005) -> None:
        super().__init__(clock, config)
        self.idle_wait_s = idle_wait_s
        self._woken = threading.Event()
        self._standby: list[StandbyItem] = []
        self._standby_cap = 0

    def standby(self, items: Sequence[StandbyItem], max_running: int) -> None:
        """The core's next generations, started here at an iteration boundary as room frees
        (the engine contract's ``standby``: vLLM's waiting queue)."""
        self._standby = list(items)
        self._standby_cap = max_running

    def abort(self, gen_id: int) -> None:
        self._standby = [i for i in self._standby if i.gen_id != gen_id]
        super().abort(gen_id)

    def _start_standby(self, at: float) -> list[EngineEvent]:
        """Start standby generations, in their order, while fewer than the cap run and the next
        one's whole reservation fits; stop at the first that does not (order is never skipped)."""
        events: list[EngineEvent] = []
        while self._standby and len(self._running) < self._standby_cap:
            item = self._standby[0]
            if item.spec is None:
                g = self._suspended.get(item.gen_id)
                if g is None:  # resumed or ended meanwhile
                    self._standby.pop(0)
                    continue
                need = g.prompt.prompt_tokens + g.spec.max_tokens - self._pinned.get(item.gen_id, 0)
            else:
                if item.gen_id in self._running or item.gen_id in self._suspended:
                    self._standby.pop(0)
                    continue
                need = _sim_prompt(item.spec.prompt).prompt_tokens + item.spec.max_tokens
            if need > self.free_kv_tokens():
                break
            self._standby.pop(0)
            if item.spec is None:
                self.resume(item.gen_id, item.priority)
            else:
                self.add(item.spec)
            self.stats.standby_starts += 1
            events.append(StartedEvent(item.gen_id, at))
        return events

    def wake(self) -> None:
        """End the wait of a ``step`` in progress (or the next one) now."""
        self._woken.set()

    def _wait(self, seconds: float) -> None:
        if self._woken.wait(seconds):
            self._woken.clear()

    def step(self) -> list[EngineEvent]:
        end = self.in_flight_end()
        if end is None:  # idle until now: start at once with what the planner admitted
            self.start_iteration()
            end = self.in_flight_end()
            if end is None:
                self._wait(self.idle_wait_s)
                return []
        delay = end - self.clock.now()
        if delay > 0:
            self._wait(min(delay, 0.05))
        events: list[EngineEvent] = []
        while end is not None and end <= self.clock.now():
            events += super().step()
            events += self._start_standby(at=end)  # freed slots refilled from the core's standby list
            self.start_iteration(at=end)  # straight on with what is running
            end = self.in_flight_end()
        return events
