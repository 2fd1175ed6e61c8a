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


@dataclass(frozen=True)
class TUFParams:
    """Parameters of one goal's TUF. Invalid values raise ValueError (goals are rejected)."""

    ert: float
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        for name in ("ert", "alpha", "beta"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"TUF {name} must be finite, got {getattr(self, name)}")
        if self.ert <= 0:
            raise ValueError(f"TUF ERT must be > 0 s, got {self.ert}")
        if self.alpha > 0:
            raise ValueError(f"TUF alpha must be <= 0 (utility cannot grow with delay), got {self.alpha}")
        if self.beta <= 0:
            raise ValueError(f"TUF beta must be > 0, got {self.beta}")

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
