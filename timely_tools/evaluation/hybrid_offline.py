"""The offline half of hybrid offline-online scheduling (paper 002): makespan bin packing of a
known workload onto J clients with HiGHS, and the lower bound T_LB.

- :func:`makespan_plan`: P||Cmax as a MIP (paper Eqs. 26-30 in their simplest form)
  ``min C  s.t.  sum_j x_ij = 1,  sum_i p_i x_ij <= C,  x binary``, warm-started with LPT and
  time-limited (the paper ran SCIP for 10-20 min; we stop after ``time_limit_s`` and keep the
  best of the MIP incumbent and LPT). Returns request -> client and the solver's lower bound.
- :func:`t_lb`: ``T_LB = t_p + t_d``, ``t_p = T^p(N_cap) * ceil(sum N^p_i / N_cap)`` (all
  prompts prefilled in full rounds of ``N_cap`` tokens), ``t_d`` a lower bound of the decode
  makespan with J clients (each client decodes its requests' tokens one per round of
  ``T^d(J)``): ``max(sum N^d_i / J, max N^d_i) * T^d(J)``, or the MIP bound of that packing.

highspy is an evaluation-time dependency only: the core's online policy uses LPT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llm_planner_node.core.policies.hybrid import lpt_assign
from llm_planner_node.engines.sim_engine import IterationModel


@dataclass(frozen=True)
class OfflinePlan:
    assign: np.ndarray  # request index -> client
    makespan: float  # in the units of the sizes
    lower_bound: float
    solver: str  # "mip-optimal", "mip-time-limit", "lpt"


def lpt_makespan(sizes: np.ndarray, clients: int) -> tuple[np.ndarray, float]:
    loads = np.zeros(clients)
    assign = lpt_assign(np.asarray(sizes, float), loads)
    return assign, float(loads.max())


def simple_bound(sizes: np.ndarray, clients: int) -> float:
    """``max(sum p / J, max p)``: the LP bound of P||Cmax."""
    return float(max(np.sum(sizes) / clients, np.max(sizes)))


def makespan_plan(sizes: np.ndarray, clients: int, time_limit_s: float = 30.0) -> OfflinePlan:
    """Assign jobs of ``sizes`` to ``clients`` minimising the makespan (module docstring)."""
    import highspy

    p = np.asarray(sizes, float)
    n, m = len(p), clients
    lpt, lpt_ms = lpt_makespan(p, m)
    lb0 = simple_bound(p, m)
    if lpt_ms <= lb0 + 1e-9:
        return OfflinePlan(lpt, lpt_ms, lb0, "lpt")
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("threads", 1)
    inf = highspy.kHighsInf
    nx = n * m  # x[i*m + j], then C
    cost = np.zeros(nx + 1)
    cost[-1] = 1.0
    h.addVars(nx + 1, np.zeros(nx + 1), np.r_[np.ones(nx), inf])
    h.changeColsCost(nx + 1, np.arange(nx + 1, dtype=np.int32), cost)
    h.changeColsIntegrality(nx, np.arange(nx, dtype=np.int32),
                            np.full(nx, highspy.HighsVarType.kInteger))
    # each job on one client
    starts = np.arange(0, nx, m, dtype=np.int32)
    h.addRows(n, np.ones(n), np.ones(n), nx, starts, np.arange(nx, dtype=np.int32), np.ones(nx))
    # client loads <= C
    idx = np.concatenate([np.r_[np.arange(j, nx, m), nx] for j in range(m)]).astype(np.int32)
    val = np.concatenate([np.r_[p, -1.0] for _ in range(m)])
    h.addRows(m, np.full(m, -inf), np.zeros(m), len(idx), np.arange(0, len(idx), n + 1, dtype=np.int32),
              idx, val)
    warm = np.zeros(nx + 1)
    warm[np.arange(n) * m + lpt] = 1.0
    warm[-1] = lpt_ms
    sol = highspy.HighsSolution()
    sol.col_value = list(warm)
    h.setSolution(sol)
    h.run()
    info = h.getInfo()
    bound = max(lb0, float(info.mip_dual_bound)) if math.isfinite(info.mip_dual_bound) else lb0
    x = np.asarray(h.getSolution().col_value)
    if len(x) == nx + 1 and x[-1] < lpt_ms - 1e-9:
        assign = x[:nx].reshape(n, m).argmax(axis=1)
        ms = float(np.bincount(assign, weights=p, minlength=m).max())
        optimal = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        return OfflinePlan(assign, ms, bound, "mip-optimal" if optimal else "mip-time-limit")
    return OfflinePlan(lpt, lpt_ms, bound, "lpt")


def t_lb(prompt_tokens: np.ndarray, output_tokens: np.ndarray, clients: int,
         model: IterationModel, prefill_cap_tokens: int, decode_bound_rounds: float | None = None) -> float:
    """Hybrid paper's lower bound ``T_LB = t_p + t_d`` in seconds (module docstring).
    ``decode_bound_rounds``: a better bound of the decode packing in rounds (e.g. the MIP's)."""
    t_p = model.time(prefill_cap_tokens, 0) * math.ceil(float(np.sum(prompt_tokens)) / prefill_cap_tokens)
    rounds = simple_bound(np.asarray(output_tokens, float), clients)
    if decode_bound_rounds is not None:
        rounds = max(rounds, decode_bound_rounds)
    return t_p + rounds * model.time(0, clients)
