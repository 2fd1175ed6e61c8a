"""PUD-based generation priority (TimelyLLM Eq. 4).

``Pri(s_k, t) = [delta_k * TUF0(W(s_k; t)) + (1 - delta_k) * TUF1(W(s_k; t))] / (G(s_k) * L(s_k))``

- ``W(s_k; t)``: waiting time of segment k if its generation starts at t, i.e. the predicted
  execution start of s_k minus its reference time:
  ``W = t + G + net - ref``, with ref = the goal's arrival for k = 0 and the predicted end of
  segment k-1's execution for k > 0 (generation end + network latency = arrival at the robot).
- ``G(s_k)``: estimated generation time of the segment (profiled default, updated online).
- ``L(s_k)``, the slack. The paper says "remaining time until the expected completion of
  generation" without a formula. We use the time left between the predicted completion of this
  segment's generation (plus network) and the moment it is needed:
  ``L = ERT_k - W(s_k; t) = (ref + ERT_k) - (t + G + net)``, ERT_0 = ERT, ERT_k = 0 for k > 0,
  floored at ``slack_floor`` (default 10 ms, about one decode iteration).
  Why: it is the classic laxity of utility-accrual scheduling, so 1/L turns PUD into an urgency
  that grows as the deadline approaches (two goals with the same TUF are ordered by how soon
  they are due), it uses exactly the deadline TUF0/TUF1 already use (ERT for s_0, the predicted
  end of the previous execution for s_k), and a generation whose robot is still busy for
  seconds gets a large L and therefore yields to urgent work. The floor keeps the priority
  finite once the deadline is reached or passed; past it, the ordering is by TUF value / G.
"""

from __future__ import annotations

import numpy as np

from llm_planner_node.core.tuf import TUFParams, tuf0, tuf1, tuf_k

DEFAULT_SLACK_FLOOR_S = 0.01


def waiting_time(now: float, ref: float, g: float, net_latency: float) -> float:
    """W(s_k; t) = t + G + net - ref (seconds)."""
    return now + g + net_latency - ref


def slack(now: float, ref: float, k: int, ert: float, g: float, net_latency: float,
          floor: float = DEFAULT_SLACK_FLOOR_S) -> float:
    """L(s_k) = max(ERT_k - W(s_k; t), floor), ERT_k = ERT if k == 0 else 0."""
    ert_k = ert if k == 0 else 0.0
    return max(ert_k - waiting_time(now, ref, g, net_latency), floor)


def pud_priority(now: float, ref: float, k: int, tuf: TUFParams, g: float, net_latency: float,
                 floor: float = DEFAULT_SLACK_FLOOR_S) -> float:
    """Eq. 4 for one generation (scalar form of :func:`pud_priorities`)."""
    w = waiting_time(now, ref, g, net_latency)
    util = tuf0(w, tuf) if k == 0 else tuf1(w, tuf)
    return util / (g * slack(now, ref, k, tuf.ert, g, net_latency, floor))


def pud_priorities(now: float, ref: np.ndarray, ert_k: np.ndarray, alpha: np.ndarray,
                   beta: np.ndarray, g: np.ndarray, net_latency: float,
                   floor: float = DEFAULT_SLACK_FLOOR_S) -> np.ndarray:
    """Eq. 4 for every queued generation at once (``ert_k``: ERT if k == 0 else 0)."""
    w = (g + (now + net_latency)) - ref
    return tuf_k(w, ert_k, alpha, beta) / (g * np.maximum(ert_k - w, floor))
