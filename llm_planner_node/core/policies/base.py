"""The policy interface and registry.

A policy sees the queued generations (:class:`~..queue.QueueView`, numpy columns) and the
running ones (:class:`~..batching.RunningView`) at an engine step boundary and returns a
:class:`Decision`: which queued generations to admit (new ones start, suspended ones resume)
and which running ones to preempt. Two class flags say what a segment boundary means:
``suspends_at_segments`` (the engine suspends the generation there and it re-enters the queue)
and ``dispatches_early`` (each segment goes to the robot as soon as it is generated; otherwise
the whole plan is dispatched when generation ends).

A new policy is one module in this package: subclass :class:`Policy`, set ``name`` and the
flags, implement :meth:`Policy.order` (and optionally :meth:`Policy.make_admission` or
:meth:`Policy.preempt`), decorate with :func:`register`. The package imports every module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import numpy as np

from ..batching import Admission, FixedBatch, RunningView
from ..queue import QueueView

#: vLLM's default ``max_num_seqs``: baselines batch as much as KV memory allows.
DEFAULT_MAX_BATCH = 256
_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Decision:
    """Request ids to admit (in priority order) and running request ids to preempt."""

    admit: np.ndarray
    preempt: np.ndarray = field(default_factory=lambda: _NONE)


class Policy(ABC):
    """Orders the queue and chooses admissions at each engine step boundary."""

    name: ClassVar[str]
    suspends_at_segments: ClassVar[bool]
    dispatches_early: ClassVar[bool]

    def __init__(self, max_batch: int | None = None) -> None:
        self.admission: Admission = self.make_admission(max_batch)

    def make_admission(self, max_batch: int | None) -> Admission:
        """Batch admission rule; baselines: fixed batch (default: as much as KV allows)."""
        return FixedBatch(max_batch or DEFAULT_MAX_BATCH)

    @abstractmethod
    def order(self, q: QueueView, now: float, net_latency: float) -> np.ndarray:
        """Queue row indices, best first (all rows)."""

    def preempt(self, q: QueueView, running: RunningView, now: float) -> np.ndarray:
        """Running request ids to suspend now (none for the paper's policies)."""
        return _NONE

    def decide(self, q: QueueView, running: RunningView, free_kv: int, now: float,
               net_latency: float) -> Decision:
        """One scheduling decision: re-prioritise for ``now``, then apply batch admission."""
        preempt = self.preempt(q, running, now)
        if len(q) == 0:
            return Decision(_NONE, preempt)
        rows = self.admission.select(self.order(q, now, net_latency), q, running, free_kv, now,
                                     net_latency)
        return Decision(q.gen_id[rows], preempt)


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

