"""The generation queue: features of every queued or suspended generation as numpy columns.

Policies re-prioritise the whole queue for the current time at every fetch (TimelyLLM 4.3,
"Dynamic priority adjustment"), so features are kept column-wise (struct of arrays) and a
policy computes all priorities with a handful of vectorised operations. Insertions append;
removals swap the last row into the hole, so both are O(1). Row order is arbitrary: policies
order by their own keys (``seq`` is the arrival order for FCFS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from llm_planner_node.core.tuf import TUFParams

_FLOAT_COLS = ("arrival", "ref", "ert", "ert_k", "alpha", "beta", "g", "pred", "pred0", "call_s")
_INT_COLS = ("gen_id", "seq", "k", "kv_need", "age", "ctx", "ready")
_COLS = _INT_COLS + _FLOAT_COLS


@dataclass(frozen=True)
class QueueView:
    """Read-only column views of the queued generations (row i is one generation).

    gen_id: request id; seq: arrival order; arrival: goal arrival time; k: index of the segment
    to generate next; ref: W reference (arrival for k = 0, predicted end of segment k-1's
    execution otherwise); ert: the goal's ERT; ert_k: ERT if k == 0 else 0; alpha, beta: TUF;
    g: G(s_k) estimate; kv_need: KV tokens to admit it.

    Length-aware policies (Trail, LTR, LAMPS, hybrid) also read: pred: remaining-length
    estimate or rank key (:mod:`..predictors`); pred0: the initial estimate; age: output tokens
    generated so far; ctx: context tokens (prompt + generated); call_s: predicted duration of
    the robot action ("API call") the generation waits on (0 if none); ready: 1 unless the
    generation waits for that action to finish (segment k-1 still executing).
    """

    gen_id: np.ndarray
    seq: np.ndarray
    arrival: np.ndarray
    k: np.ndarray
    ref: np.ndarray
    ert: np.ndarray
    ert_k: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    g: np.ndarray
    kv_need: np.ndarray
    pred: np.ndarray
    pred0: np.ndarray
    call_s: np.ndarray
    age: np.ndarray
    ctx: np.ndarray
    ready: np.ndarray

    def __len__(self) -> int:
        return len(self.gen_id)

    def row(self, i: int) -> dict[str, float | int]:
        """Row ``i`` as column -> value (a snapshot, independent of the queue)."""
        return {c: getattr(self, c)[i].item() for c in _COLS}

    @classmethod
    def of(cls, rows: Sequence[dict[str, float | int]]) -> QueueView:
        """A view of the given rows (:meth:`row` or :func:`queue_row` dicts), in that order."""
        return cls(**{c: np.array([r[c] for r in rows], dtype=np.int64 if c in _INT_COLS else float)
                      for c in _COLS})


def queue_row(gen_id: int, *, seq: int, arrival: float, k: int, ref: float, tuf: TUFParams,
              g: float, kv_need: int, pred: float = 0.0, pred0: float = 0.0, call_s: float = 0.0,
              age: int = 0, ctx: int = 0, ready: bool = True) -> dict[str, float | int]:
    """The columns of one queued generation (``ert_k``, ``alpha``, ``beta`` from its TUF)."""
    return dict(gen_id=gen_id, seq=seq, arrival=arrival, k=k, ref=ref, ert=tuf.ert,
                ert_k=tuf.ert if k == 0 else 0.0, alpha=tuf.alpha, beta=tuf.beta, g=g,
                kv_need=kv_need, pred=pred, pred0=pred0, call_s=call_s, age=age, ctx=ctx,
                ready=int(ready))


class GenerationQueue:
    """Column store of queued generations keyed by request id."""

    def __init__(self, capacity: int = 64) -> None:
        self._n = 0
        self._cols: dict[str, np.ndarray] = {c: np.zeros(capacity) for c in _FLOAT_COLS}
        self._cols.update({c: np.zeros(capacity, dtype=np.int64) for c in _INT_COLS})
        self._row: dict[int, int] = {}
        self._view: QueueView | None = None  # cached until the row count changes

    def __len__(self) -> int:
        return self._n

    def __contains__(self, gen_id: int) -> bool:
        return gen_id in self._row

    def push(self, gen_id: int, *, seq: int, arrival: float, k: int, ref: float, tuf: TUFParams,
             g: float, kv_need: int, pred: float = 0.0, pred0: float = 0.0, call_s: float = 0.0,
             age: int = 0, ctx: int = 0, ready: bool = True) -> None:
        if gen_id in self._row:
            raise KeyError(f"generation {gen_id} is already queued")
        if self._n == len(self._cols["gen_id"]):
            self._cols = {c: np.concatenate([a, np.zeros_like(a)]) for c, a in self._cols.items()}
        i = self._n
        self._view = None
        values = queue_row(gen_id, seq=seq, arrival=arrival, k=k, ref=ref, tuf=tuf, g=g, kv_need=kv_need,
                           pred=pred, pred0=pred0, call_s=call_s, age=age, ctx=ctx, ready=ready)
        for c, v in values.items():
            self._cols[c][i] = v
        self._row[gen_id] = i
        self._n += 1

    def remove(self, gen_id: int) -> bool:
        i = self._row.pop(gen_id, None)
        if i is None:
            return False
        last = self._n - 1
        self._view = None
        if i != last:
            for a in self._cols.values():
                a[i] = a[last]
            self._row[int(self._cols["gen_id"][i])] = i
        self._n = last
        return True

    def set_ref(self, gen_id: int, ref: float) -> None:
        """Update the W reference of a queued generation (new execution-time information)."""
        i = self._row.get(gen_id)
        if i is not None:
            self._cols["ref"][i] = ref

    def set_ready(self, gen_id: int) -> None:
        """The robot action a queued generation waits on has finished."""
        i = self._row.get(gen_id)
        if i is not None:
            self._cols["ready"][i] = 1

    def view(self) -> QueueView:
        """Column views of the current rows (shared with the queue: read-only for callers)."""
        if self._view is None:
            n = self._n
            self._view = QueueView(**{c: a[:n] for c, a in self._cols.items()})
        return self._view
