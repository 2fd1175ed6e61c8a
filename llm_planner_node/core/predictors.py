"""Output-length predictors behind one small interface (Trail, LTR, LAMPS and combinations).

The :class:`~.planner.Planner` asks a :class:`LengthPredictor` for each generation's estimate when
the goal is submitted (:meth:`~LengthPredictor.initial`) and after every token batch
(:meth:`~LengthPredictor.update`); the values go into the queue's ``pred``/``pred0`` columns and
the running view, where policies read them. Values are *remaining output tokens* for length
predictors (Trail, oracle) or a *rank key* for rankers (LTR: lower key = shorter output); a
policy only orders by them unless it says it needs tokens.

Implementations here are pure Python/numpy and feed the simulator from the trace:

- :class:`OracleLengths`: the plan's true length times calibrated log-normal noise;
- :class:`SimTrailProbe`: Trail's per-token bin probabilities synthesised from the true
  remaining length with a given probe accuracy, refined with Trail's Bayesian update
  (:class:`TrailRefiner`, the same code the real probe uses);
- :class:`TablePredictor`: predictions precomputed offline by a real predictor, keyed by the
  goal's instruction.

The real predictors (a hidden-state probe on the planner model with a forward hook, a ListMLE
ranker) need torch and live in :mod:`llm_planner_node.predictors`; they implement the same
protocol for the live node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Protocol

import numpy as np

if TYPE_CHECKING:
    from llm_planner_node.core.task_model import Goal


class LengthPredictor(Protocol):
    """Remaining-length estimate (or rank key) per generation."""

    def initial(self, gen_id: int, goal: Goal) -> float:
        """Estimate before the first token (Trail: from the prompt; LTR: the score, once)."""
        ...

    def update(self, gen_id: int, generated: int) -> float:
        """Estimate after ``generated`` output tokens (Trail: per-token refinement)."""
        ...

    def forget(self, gen_id: int) -> None:
        """Drop per-generation state (the generation ended)."""
        ...

    # Optional: ``observe_tokens(gen_id, new_token_ids, generated) -> float`` is called instead of
    # ``update`` when the engine reports the new tokens' ids (the live vLLM engine does), so a
    # predictor can look at the generated text itself (Trail's per-token probe).


def true_output_tokens(prompt: object, max_tokens: int) -> int:
    """Total output tokens of a simulated plan (``SimPrompt``-like: ``segments[i].n_tokens``)."""
    segments = getattr(prompt, "segments", None)
    if segments is None:
        raise TypeError(f"a simulator-fed predictor needs a simulated prompt, got {type(prompt).__name__}; "
                        "the live node passes a real predictor (llm_planner_node.predictors)")
    return min(max_tokens, sum(int(s.n_tokens) for s in segments))


# ------------------------------------------------------------------------- Trail bins + Bayes
@dataclass(frozen=True)
class LengthBins:
    """``k`` equal bins of remaining length over ``[0, max_len]`` (Trail: k = 10, 512 tokens)."""

    k: int = 10
    max_len: float = 512.0

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(0.0, self.max_len, self.k + 1)

    @property
    def widths(self) -> np.ndarray:
        return np.diff(self.edges)

    @property
    def midpoints(self) -> np.ndarray:
        e = self.edges
        return (e[:-1] + e[1:]) / 2

    def index(self, remaining: float | np.ndarray) -> np.ndarray:
        """Bin of a remaining length (values past ``max_len`` fall in the last bin)."""
        return np.clip((np.asarray(remaining) / self.widths[0]).astype(int), 0, self.k - 1)


def trail_transition(widths: np.ndarray) -> np.ndarray:
    """Trail's per-token transition matrix [R]: ``T[i,i] = 1 - 1/w_i``, ``T[i,i-1] = 1/w_i``,
    the lowest bin absorbing (one generated token moves 1/w_i of a bin's mass one bin down)."""
    k = len(widths)
    t = np.zeros((k, k))
    for i in range(k):
        if i == 0:
            t[0, 0] = 1.0
        else:
            t[i, i] = 1.0 - 1.0 / widths[i]
            t[i, i - 1] = 1.0 / widths[i]
    return t


def bayes_update(q_prev: np.ndarray, p: np.ndarray, transition: np.ndarray) -> np.ndarray:
    """Trail's refinement [R]: prior ``q~ = q_{t-1} T``; posterior ``q_t[i] ~ q~[i] * p_t[i]``.
    Falls back to the prior if the probe puts no mass where the prior has any."""
    prior = q_prev @ transition
    post = prior * p
    s = post.sum()
    return post / s if s > 0 else prior


@dataclass
class TrailRefiner:
    """Per-generation posterior over length bins; point estimate ``sum_i q_t[i] * mid_i``."""

    bins: LengthBins = field(default_factory=LengthBins)

    def __post_init__(self) -> None:
        self.transition = trail_transition(self.bins.widths)
        self._q: dict[int, np.ndarray] = {}

    def start(self, gen_id: int, p0: np.ndarray) -> float:
        """First prediction from the prompt: the probe's distribution itself."""
        q = np.asarray(p0, float)
        self._q[gen_id] = q / q.sum()
        return self.estimate(gen_id)

    def step(self, gen_id: int, p: np.ndarray, tokens: int = 1) -> float:
        """Refine with the probe output after ``tokens`` more tokens (T applied per token)."""
        q = self._q[gen_id]
        if tokens > 1:
            q = q @ np.linalg.matrix_power(self.transition, tokens - 1)
        self._q[gen_id] = bayes_update(q, np.asarray(p, float), self.transition)
        return self.estimate(gen_id)

    def estimate(self, gen_id: int) -> float:
        return float(self._q[gen_id] @ self.bins.midpoints)

    def forget(self, gen_id: int) -> None:
        self._q.pop(gen_id, None)


# ------------------------------------------------------------------------- simulator-fed
class OracleLengths:
    """True plan length x ``exp(N(0, sigma^2))`` (``sigma = 0``: the oracle); remaining =
    ``max(1, estimate - generated)``. Deterministic under ``seed`` and the goal order."""

    def __init__(self, sigma: float = 0.0, seed: int = 0) -> None:
        self.sigma = sigma
        self._rng = np.random.default_rng(seed)
        self._est: dict[int, float] = {}

    def initial(self, gen_id: int, goal: Goal) -> float:
        n = true_output_tokens(goal.prompt, goal.max_tokens)
        noise = float(np.exp(self._rng.normal(0.0, self.sigma))) if self.sigma > 0 else 1.0
        self._est[gen_id] = n * noise
        return self._est[gen_id]

    def update(self, gen_id: int, generated: int) -> float:
        return max(1.0, self._est[gen_id] - generated)

    def forget(self, gen_id: int) -> None:
        self._est.pop(gen_id, None)


class SegmentLengths:
    """Tokens until the next segment boundary (LAMPS: output before the next API call; the
    segment part of G for TimelyLLM): the true count times one log-normal noise factor per
    generation (``sigma = 0``: the oracle)."""

    def __init__(self, sigma: float = 0.0, seed: int = 0) -> None:
        self.sigma = sigma
        self._rng = np.random.default_rng(seed)
        self._ends: dict[int, np.ndarray] = {}
        self._noise: dict[int, float] = {}

    def initial(self, gen_id: int, goal: Goal) -> float:
        true_output_tokens(goal.prompt, goal.max_tokens)  # type check
        ends = np.cumsum([int(s.n_tokens) for s in goal.prompt.segments])  # type: ignore[attr-defined]
        self._ends[gen_id] = np.minimum(ends, goal.max_tokens)
        self._noise[gen_id] = float(np.exp(self._rng.normal(0.0, self.sigma))) if self.sigma > 0 else 1.0
        return self.update(gen_id, 0)

    def update(self, gen_id: int, generated: int) -> float:
        ends = self._ends[gen_id]
        nxt = ends[ends > generated]
        left = float(nxt[0] - generated) if len(nxt) else 1.0
        return max(1.0, left * self._noise[gen_id])

    def forget(self, gen_id: int) -> None:
        self._ends.pop(gen_id, None)
        self._noise.pop(gen_id, None)


def probe_distribution(true_bin: int, k: int, accuracy: float) -> np.ndarray:
    """A calibrated probe output: ``accuracy`` on the true bin, the rest decaying
    geometrically (factor 1/2) with the distance to it (a classifier's typical confusion)."""
    d = np.abs(np.arange(k) - true_bin)
    rest = np.where(d > 0, 0.5 ** d, 0.0)
    p = (1 - accuracy) * rest / rest.sum() if rest.sum() > 0 else rest
    p[true_bin] = accuracy if rest.sum() > 0 else 1.0
    return p


class SimTrailProbe:
    """Trail in the simulator: each token the 'probe' emits :func:`probe_distribution` around a
    noisy view of the true remaining length (the predicted bin is off by one with probability
    ``1 - accuracy``), refined by :class:`TrailRefiner` exactly as the live probe is."""

    def __init__(self, bins: LengthBins = LengthBins(), accuracy: float = 0.6, seed: int = 0) -> None:
        self.bins = bins
        self.accuracy = accuracy
        self.refiner = TrailRefiner(bins)
        self._rng = np.random.default_rng(seed)
        self._total: dict[int, int] = {}
        self._seen: dict[int, int] = {}

    def _probe(self, remaining: int) -> np.ndarray:
        b = int(self.bins.index(remaining))
        if self._rng.random() > self.accuracy:
            b = int(np.clip(b + self._rng.choice((-1, 1)), 0, self.bins.k - 1))
        return probe_distribution(b, self.bins.k, self.accuracy)

    def initial(self, gen_id: int, goal: Goal) -> float:
        n = true_output_tokens(goal.prompt, goal.max_tokens)
        self._total[gen_id], self._seen[gen_id] = n, 0
        return self.refiner.start(gen_id, self._probe(n))

    def update(self, gen_id: int, generated: int) -> float:
        new = generated - self._seen[gen_id]
        if new <= 0:
            return self.refiner.estimate(gen_id)
        self._seen[gen_id] = generated
        return self.refiner.step(gen_id, self._probe(max(0, self._total[gen_id] - generated)), new)

    def forget(self, gen_id: int) -> None:
        self.refiner.forget(gen_id)
        self._total.pop(gen_id, None)
        self._seen.pop(gen_id, None)


class TablePredictor:
    """Predictions computed offline by a real predictor: instruction -> initial estimate (tokens
    or rank key); remaining = ``initial - generated`` for tokens, the key itself for ranks."""

    def __init__(self, table: Mapping[str, float], *, rank_keys: bool = False,
                 default: float = 0.0) -> None:
        self.table = dict(table)
        self.rank_keys = rank_keys
        self.default = default
        self._est: dict[int, float] = {}

    def initial(self, gen_id: int, goal: Goal) -> float:
        self._est[gen_id] = float(self.table.get(goal.instruction, self.default))
        return self._est[gen_id]

    def update(self, gen_id: int, generated: int) -> float:
        e = self._est[gen_id]
        return e if self.rank_keys else max(1.0, e - generated)

    def forget(self, gen_id: int) -> None:
        self._est.pop(gen_id, None)
