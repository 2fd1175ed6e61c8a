"""Time-utility functions (TimelyLLM Eq. 1 and the TUF0/TUF1 pair of Section 4.2).

``TUF(t) = min(beta, alpha * (t - ERT) + beta)`` with t the response time, ERT the expected
response time (deadline), alpha <= 0 the decline slope and beta the initial utility. The
function is taken literally: it is not clipped at zero, so a very late response has negative
utility (the slope is the user's statement of how bad lateness is).

TUF0 is the agent's own TUF, used for the first segment. TUF1 is used for every later segment:
same alpha and beta, ERT = 0 (the next segment should be ready when the previous one finishes
executing), ``TUF1(t) = min(beta, alpha * max(t, 0) + beta)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


#: Bounds on a TUF: sane for any robot task, and far from float overflow in the priority
#: arithmetic (Eq. 4 divides by the slack and multiplies by alpha).
MAX_ERT_S = 86_400.0
MAX_TUF_MAGNITUDE = 1e6


def tuf_problem(ert: float, alpha: float, beta: float) -> str | None:
    """Why (ERT, alpha, beta) is not a valid TUF (Eq. 1: ERT > 0, alpha <= 0, beta > 0, all finite
    and bounded), or None. The one rule for goals (the service's intake), TUF presets (the YAML,
    ``timely-fleet goal``) and :class:`TUFParams`."""
    if not (math.isfinite(ert) and 0 < ert <= MAX_ERT_S):
        return f"ert_s must be > 0 and <= {MAX_ERT_S:g} seconds, got {ert:g}"
    if not (math.isfinite(alpha) and -MAX_TUF_MAGNITUDE <= alpha <= 0):
        return f"alpha must be <= 0 (utility cannot grow with lateness) and >= {-MAX_TUF_MAGNITUDE:g}, got {alpha:g}"
    if not (math.isfinite(beta) and 0 < beta <= MAX_TUF_MAGNITUDE):
        return f"beta must be > 0 and <= {MAX_TUF_MAGNITUDE:g}, got {beta:g}"
    return None


@dataclass(frozen=True)
class TUFParams:
    """Parameters of one goal's TUF. Invalid values raise ValueError (:func:`tuf_problem`)."""

    ert: float
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        why = tuf_problem(self.ert, self.alpha, self.beta)
        if why is not None:
            raise ValueError(f"TUF {why}")

    @property
    def zero_time(self) -> float:
        """Response time at which TUF0 reaches 0 (infinite for a flat TUF)."""
        return math.inf if self.alpha == 0 else self.ert - self.beta / self.alpha


#: The paper's normal tasks (Section 2.3): ERT 1 s, beta 1, alpha -2 (utility 0 at 1.5 s).
NORMAL = TUFParams(ert=1.0, alpha=-2.0, beta=1.0)
#: The paper's urgent tasks: ERT 0.2 s, beta 2, alpha -6.67 (utility 0 at ~0.5 s).
URGENT = TUFParams(ert=0.2, alpha=-6.67, beta=2.0)
PRESETS: dict[str, TUFParams] = {"normal": NORMAL, "urgent": URGENT}


def tuf0(t: float, p: TUFParams) -> float:
    """TUF0(t) = min(beta, alpha * (t - ERT) + beta): Eq. 1 for the first segment."""
    return min(p.beta, p.alpha * (t - p.ert) + p.beta)


def tuf1(t: float, p: TUFParams) -> float:
    """TUF1(t) = min(beta, alpha * max(t, 0) + beta): Eq. 1 with ERT = 0, later segments."""
    return min(p.beta, p.alpha * max(t, 0.0) + p.beta)


def tuf_k(w: np.ndarray, ert_k: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """Vectorised delta_k * TUF0(W) + (1 - delta_k) * TUF1(W) (numerator of Eq. 4).

    ``ert_k`` is ERT for first segments and 0 for later ones. Because alpha <= 0,
    ``min(beta, alpha * x + beta) = beta + alpha * max(x, 0)``; with x = W - ERT that is TUF0, and
    with x = W - 0 it is TUF1 (whose own max(t, 0) is then redundant).
    """
    return beta + alpha * np.maximum(w - ert_k, 0.0)
