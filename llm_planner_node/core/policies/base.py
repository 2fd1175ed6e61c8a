"""The policy interface and registry.

A policy sees the queued generations (:class:`~..queue.QueueView`, numpy columns) and the
running ones (:class:`~..batching.RunningView`) at an engine step boundary and returns a
:class:`Decision`: which queued generations to admit (new ones start, suspended ones resume)
and which running ones to preempt. Two class flags say what a segment boundary means:
``suspends_at_segments`` (the engine suspends the generation there and it re-enters the queue)
and ``dispatches_early`` (each segment goes to the robot as soon as it is generated; otherwise
the whole plan is dispatched when generation ends).

A new policy is one module in this package: subclass :class:`Policy`, set ``name`` and the
flags, implement :meth:`Policy.order` (and optionally :meth:`Policy.sort_keys`,
:meth:`Policy.make_admission` or :meth:`Policy.preempt`), decorate with :func:`register`. The
package imports every module.

Admission (:mod:`..batching`) is separate from the order: policies with ``shared_admission``
(the segmented ones: ``vllm-stream``, ``seg-fcfs``, ``seg-edf``, ``timelyllm`` and its
combinations) all use the admission named by ``admission=`` (``literal`` or ``improved``, the
default); the other baselines keep their paper's rule (fixed batch up to KV memory). A given
``max_batch`` always means a fixed batch (the batch-size sweep). A policy that defines
:meth:`Policy.sort_keys` is ordered only as deep as the admission can admit
(:func:`~..batching.top_rows`: a partial selection, not a sort of the whole queue), and the
admission's overload rule (``hopeless``) is applied here: rows that can no longer gain utility
are ranked after the others or shed.

Optional hooks for length- and memory-aware policies (Trail, LTR, LAMPS, hybrid):
:meth:`Policy.make_predictor` (the simulator-fed length predictor used when the planner is given
none), :meth:`Policy.retention` (how a suspended generation's KV context is kept during its
robot action: ``preserve`` / ``discard`` / ``swap``, or None for the engine's default prefix
cache) and ``engine_iteration`` (the simulated engine's iteration rule the policy assumes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import numpy as np

from llm_planner_node.core.batching import (DEFAULT_ADMISSION, Admission, FixedBatch, LatencyGuided, RunningView,
                        best_utility, hopeless_keys, make_admission, top_rows)
from llm_planner_node.core.predictors import LengthPredictor
from llm_planner_node.core.queue import QueueView

#: vLLM's default ``max_num_seqs``: baselines batch as much as KV memory allows.
DEFAULT_MAX_BATCH = 256
_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Pause:
    """A generation just suspended for its robot action (LAMPS: an API call), in KV tokens.

    ctx: its context; until_needed_s: predicted time until that action ends; g_s: estimated
    generation time of its next segment; other_ctx: context of the generations still running.
    """

    ctx: int
    until_needed_s: float
    g_s: float
    other_ctx: int


@dataclass(frozen=True)
class Decision:
    """Request ids to admit (in priority order), running request ids to preempt, and queued
    request ids to shed (goals not started whose best possible utility is <= 0; the planner
    ends them with ``EndKind.SHED``)."""

    admit: np.ndarray
    preempt: np.ndarray = field(default_factory=lambda: _NONE)
    shed: np.ndarray = field(default_factory=lambda: _NONE)


class Policy(ABC):
    """Orders the queue and chooses admissions at each engine step boundary."""

    name: ClassVar[str]
    suspends_at_segments: ClassVar[bool]
    dispatches_early: ClassVar[bool]
    #: simulated engine iteration rule this policy assumes (None: the engine's configured one)
    engine_iteration: ClassVar[str | None] = None
    #: uses the admission shared by segmented policies (``admission=``), not a fixed batch
    shared_admission: ClassVar[bool] = False
    #: ``decide`` must run at every step even with nothing queued (it keeps per-step state:
    #: LTR's starvation counts, LAMPS's running context, hybrid's client slots). Otherwise the
    #: planner skips the decision on an empty queue: the base ``decide`` then returns only
    #: preemptions, and the preemptions here (Trail, LTR) need a queued job to take the freed
    #: slot (a policy that preempts with nothing queued sets this too).
    decides_on_empty_queue: ClassVar[bool] = False

    def __init__(self, max_batch: int | None = None,
                 admission: str | LatencyGuided | None = None) -> None:
        self.admission: Admission = self.make_admission(max_batch, admission)

    def make_admission(self, max_batch: int | None,
                       admission: str | LatencyGuided | None = None) -> Admission:
        """Batch admission: a fixed batch if ``max_batch`` is given; else the shared admission
        (``admission``, default ``improved``) for ``shared_admission`` policies, and a fixed
        batch as large as KV memory allows for the other baselines."""
        if max_batch is not None:
            return FixedBatch(max_batch)
        if self.shared_admission:
            return make_admission(admission or DEFAULT_ADMISSION)
        return FixedBatch(DEFAULT_MAX_BATCH)

    @abstractmethod
    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        """Queue row indices, best first (all rows)."""

    def sort_keys(self, q: QueueView, now: float, net_latency: float) -> tuple[np.ndarray, ...] | None:
        """The order as ``np.lexsort`` keys (last primary; ``order`` must equal
        ``np.lexsort(keys)``), or None if the policy only has :meth:`order`. With keys, a
        decision orders only the top of the queue (:meth:`ranked`)."""
        return None

    def ranked(self, q: QueueView, now: float, net_latency: float, k: int,
               rows: np.ndarray | None = None) -> np.ndarray:
        """The best ``k`` rows (of ``rows``, default all) in this policy's order: equal to the
        first ``k`` of :meth:`order` restricted to ``rows``."""
        keys = self.sort_keys(q, now, net_latency)
        if keys is not None:
            return top_rows(keys, k, rows)
        order = self.order(q, now, net_latency)
        if rows is not None:
            order = order[np.isin(order, rows)]
        return order[:k]

    def preempt(self, q: QueueView, running: RunningView, now: float) -> np.ndarray:
        """Running request ids to suspend now (none for the paper's policies)."""
        return _NONE

    def make_predictor(self, seed: int = 0) -> LengthPredictor | None:
        """Length predictor fed from the simulated trace (None: the policy needs none)."""
        return None

    def retention(self, pause: Pause) -> str | None:
        """KV handling of a generation suspended at a segment boundary (None: engine default)."""
        return None

    def decide(self, q: QueueView, running: RunningView, free_kv: int, now: float,
               net_latency: float) -> Decision:
        """One scheduling decision: re-prioritise for ``now``, then apply batch admission."""
        preempt = self.preempt(q, running, now)
        if len(q) == 0:
            return Decision(_NONE, preempt)
        if len(preempt):
            running, free_kv = running.without(preempt, free_kv)
        adm = self.admission
        window = getattr(adm, "window", None)
        k = window(running) if window is not None else len(q)
        order, shed = self.candidates(q, now, net_latency, k, getattr(adm, "hopeless", "keep"))
        rows = adm.select(order, q, running, free_kv, now, net_latency)
        return Decision(q.gen_id[rows], preempt, shed)

    def candidates(self, q: QueueView, now: float, net_latency: float, k: int,
                   hopeless: str = "keep") -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` rows under the admission's overload rule, and the request ids to shed.

        ``keep``: the policy's order. ``last``: rows whose best possible utility is <= 0
        (:func:`~..batching.best_utility`) come after all others, ordered by
        :func:`~..batching.hopeless_keys`. ``shed``: such rows of goals not started yet
        (first segment) are shed; the rest keep the policy's order.
        """
        if hopeless == "keep":
            return self.ranked(q, now, net_latency, k), _NONE
        hopeless_rows = best_utility(q, now, net_latency) <= 0
        if not hopeless_rows.any():
            return self.ranked(q, now, net_latency, k), _NONE
        if hopeless == "shed":
            drop = hopeless_rows & (q.k == 0)
            return self.ranked(q, now, net_latency, k, np.flatnonzero(~drop)), q.gen_id[drop]
        order = self.ranked(q, now, net_latency, k, np.flatnonzero(~hopeless_rows))
        if len(order) < k:
            order = np.concatenate([order, top_rows(hopeless_keys(q), k - len(order),
                                                    np.flatnonzero(hopeless_rows))])
        return order, _NONE


REGISTRY: dict[str, type[Policy]] = {}
P = TypeVar("P", bound=type[Policy])


def register(cls: P) -> P:
    """Class decorator: make a policy selectable by its ``name``."""
    if cls.name in REGISTRY:
        raise ValueError(f"policy name '{cls.name}' registered twice")
    REGISTRY[cls.name] = cls
    return cls


def fcfs_order(q: QueueView) -> np.ndarray:
    """Rows by arrival order (the goal's first arrival, kept across suspensions)."""
    return np.argsort(q.seq, kind="stable")


def displaced(queued_keys: np.ndarray, running_keys: np.ndarray, preemptible: np.ndarray,
              running_ids: np.ndarray, slots: int) -> np.ndarray:
    """Running ids to preempt when running and queued jobs are ranked together (lower key
    first) and only the best ``slots`` may run: the preemptible running jobs that a better
    queued job displaces from the top ``slots`` (Trail / LTR joint ranking)."""
    if len(queued_keys) == 0 or len(running_keys) == 0:
        return _NONE
    keys = np.concatenate([running_keys, queued_keys])
    pinned = np.concatenate([~preemptible, np.zeros(len(queued_keys), bool)])
    # pinned running jobs keep their slots; the rest compete by key for what is left
    free = max(0, slots - int(pinned[: len(running_keys)].sum()))
    compete = np.flatnonzero(~pinned)
    winners = set(compete[np.argsort(keys[compete], kind="stable")][:free].tolist())
    losers = [i for i in range(len(running_keys)) if preemptible[i] and i not in winners]
    out = [running_ids[i] for i in sorted(losers, key=lambda i: -running_keys[i])]  # worst first
    # preempt only as many as queued jobs actually take the freed slots
    n_queued_in = sum(1 for w in winners if w >= len(running_keys))
    room = slots - len(running_keys)
    return np.array(out[: max(0, n_queued_in - max(0, room))], dtype=np.int64)

