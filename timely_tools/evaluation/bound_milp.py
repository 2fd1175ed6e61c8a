"""A real upper bound on the time utility of any schedule: a hindsight MILP over engine iterations.

The abstract problem
--------------------
A **goal** i has an arrival time r_i, a first segment of L_i >= 1 tokens (the tokens the
engine must generate before segment 0 of its plan is complete), a first-iteration cost p_i
(the prefill of its uncached prompt, ``b * prefill_tokens``) and a TUF (ERT_i, alpha_i <= 0,
beta_i > 0). Its **response** is ``R_i = C_i + net - r_i``, C_i the end of the iteration that
completes its first segment and net the network latency; its **utility** is
``TUF0_i(R_i) = min(beta_i, beta_i + alpha_i * (R_i - ERT_i))`` (not clipped at zero).

The **engine** runs iterations one after another; iteration k starts at s_k >= the end of
iteration k-1 and after the arrival of every goal in it, gives one token to each goal in its
batch B_k (any subset of the arrived, unfinished goals: no batch limit) and lasts

    d_k = a + sum_{i in B_k, first time i runs} p_i + c * |{i in B_k, not first}|

i.e. ``a + b * (prefill tokens admitted in it) + c * (decode batch)``. A goal's L_i iterations
need not be consecutive. **Decision**: which goals run in which iteration (and when iterations
start; starting as early as possible is optimal because every TUF is non-increasing).
**Objective**: maximise sum_i TUF0_i(R_i).

MILP (iteration-indexed; K = sum_i L_i iterations suffice, since a non-empty iteration gives at
least one of the sum_i L_i tokens): binaries x_ik ("goal i runs in iteration k"), y_k
("iteration k is used", y_k >= y_{k+1}); f_ik in [0, 1] ("k is goal i's first iteration":
sum_k f_ik = 1, f_ik <= x_ik, f_ik >= x_ik - sum_{k'<k} x_ik', exact for binary x); continuous
s_k, C_i, u_i::

    max sum_i u_i
    sum_k x_ik = L_i;  x_ik <= y_k;  s_k >= r_i x_ik;  s_{k+1} >= e_k
    e_k = s_k + a y_k + sum_i [p_i f_ik + c (x_ik - f_ik)]
    C_i >= e_k - M_ik (1 - x_ik);  u_i <= beta_i;  u_i <= beta_i + alpha_i (C_i + net - r_i - ERT_i)

with 0 <= s_k <= r_max + k (a + c n) + sum p (the latest start of iteration k in any
earliest-start schedule, so no such schedule is cut off), M_ik = that + the longest iteration -
goal i's served-alone completion, and C_i >= its served-alone completion (valid; tightens the
LP). HiGHS solves it exactly
for up to ~8 goals; its LP relaxation (x, y continuous) is a weaker bound for larger groups.
A MILP stopped at its time limit reports HiGHS's dual bound, which is still an upper bound.

Why it bounds every policy the simulator can run (same arrivals, same IterationModel)
----------------------------------------------------------------------------------------
Take any simulated run. Keep its iteration start times, and in each iteration keep only the
tokens that belong to some goal's first segment (drop later segments, drop iterations left
empty). Each kept iteration gets no longer: the simulator charges ``a + b*prefill + c*decode``
plus swap time, and (with :func:`problem_from_arrivals` ``strict=True``, the default)

- a goal's later iteration is charged c_eff = min(b, c) here, no more than the simulator's
  ``c`` (decode) or ``b * pending`` with pending >= 1 (a resumed generation's partial block);
- a goal's first iteration is charged p_i = min(c, b * P_i^min) with P_i^min the least prompt
  prefill the simulated prefix cache can ever charge for its first token (its task tokens
  beyond the resident skill-set prefix's full blocks, or, if it was suspended before it ever
  ran, its context's last partial block);
- the intercept is min(a, prefill-only intercept);
- batch sizes, KV capacity, preemption and suspension costs, planner overheads are ignored.

So the kept iterations start no earlier than their goals' arrivals, do not overlap, each goal
appears in exactly L_i of them, and each ends no later than in the run: a feasible MILP
solution in which every first segment completes no later than it did in the run. The run's
segment 0 is dispatched at or after that completion and executes at or after dispatch + net
(``core/metrics.py``: S_0 = max(d_0 + net, ...)), so R_i(MILP) <= R_i(run) and, TUFs being
non-increasing, sum_i TUF0_i(R_i(MILP)) >= the run's total time utility. Hence the MILP optimum
(and its LP relaxation, and any HiGHS dual bound) >= every policy's total utility. No time
discretisation is used: iteration times are continuous.

Three more bounds, each valid on its own: ``sum(beta)``; "served alone" (each goal alone on the
engine: L_i back-to-back iterations from r_i, ``TUF0(a + p_i + (L_i-1)(a+c) + net)``; it
dropping every other goal only shortens iterations); and the **group decomposition** used for
large workloads: split the goals into groups (consecutive arrivals, at most ``group_max``
each) and give each group an engine of its own. Restricting any schedule to one group's goals
is a feasible schedule of that group (as above), so the sum of the group optima bounds the
total; singletons give the served-alone bound, so groups are never looser than it. The same
argument restricted to one task type's goals bounds that type's total utility. ``bound`` is the
minimum of the valid bounds.

``strict=False`` uses the simulator's ordinary costs (prefill of the task tokens at admission,
decode c): tighter and what the simulator does on its usual path, but not a bound for a policy
that suspends a generation before its first iteration or resumes one mid-segment.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from llm_planner_node.core.planner import PlannerConfig
from llm_planner_node.core.tuf import TUFParams, tuf0
from llm_planner_node.engines.sim_engine import SimEngineConfig


@dataclass(frozen=True)
class BoundGoal:
    """One goal of the abstract problem (module docstring)."""

    arrival: float
    first_tokens: int  # L_i: tokens until its first segment is complete
    first_cost_s: float  # p_i: what its first iteration adds (b * prefill tokens)
    tuf: TUFParams
    task_type: str = ""

    def __post_init__(self) -> None:
        if self.first_tokens < 1:
            raise ValueError(f"first_tokens must be >= 1, got {self.first_tokens}")
        if self.first_cost_s < 0:
            raise ValueError(f"first_cost_s must be >= 0, got {self.first_cost_s}")


@dataclass(frozen=True)
class BoundEngine:
    """Iteration cost ``a + sum(first costs) + c * (later tokens)``; network latency ``net``."""

    a_s: float
    c_s: float
    network_latency_s: float


@dataclass(frozen=True)
class Problem:
    goals: tuple[BoundGoal, ...]
    engine: BoundEngine


def problem_from_arrivals(arrivals: Sequence[Any], engine_config: SimEngineConfig = SimEngineConfig(),
                          planner_config: PlannerConfig = PlannerConfig(), *, strict: bool = True) -> Problem:
    """The abstract problem of simulator arrivals (``sim.workload.Arrival``, SimPrompt goals).

    ``strict``: costs no larger than anything the simulated engine can charge (module docstring),
    so the result bounds every policy; False: the engine's ordinary admission costs.
    """
    it = engine_config.iteration
    a, b, c = it.a_s, it.b_s_per_prefill_token, it.c_s_per_decode_seq
    blk = engine_config.block_size
    if strict and it.prefill_a_s is not None:
        a = min(a, it.prefill_a_s)
    goals = []
    for arr in arrivals:
        p = arr.goal.prompt
        prompt = p.prompt_tokens
        admit = prompt - (p.shared_prefix_tokens // blk) * blk
        L = min(p.segments[0].n_tokens, arr.goal.max_tokens)
        if strict:
            parked = prompt - min(prompt // blk * blk, prompt - 1)
            first = min(c, b * min(admit, parked))
        else:
            first = b * admit
        goals.append(BoundGoal(float(arr.t), int(L), float(first), arr.goal.tuf, arr.goal.task_type))
    return Problem(tuple(goals), BoundEngine(a, min(b, c) if strict else c, planner_config.network_latency_s))


def utility(g: BoundGoal, completion: float, eng: BoundEngine) -> float:
    return tuf0(completion + eng.network_latency_s - g.arrival, g.tuf)


def served_alone(g: BoundGoal, eng: BoundEngine) -> float:
    """The goal's best utility with the engine to itself: L_i back-to-back iterations from r_i."""
    return utility(g, g.arrival + eng.a_s + g.first_cost_s + (g.first_tokens - 1) * (eng.a_s + eng.c_s), eng)


def schedule_utility(goals: Sequence[BoundGoal], eng: BoundEngine, batches: Sequence[Iterable[int]]) -> float:
    """Total utility of a schedule (a sequence of batches of goal indices), iterations started as
    early as possible; -inf if it does not complete every first segment exactly."""
    left = [g.first_tokens for g in goals]
    t, total = -math.inf, 0.0
    for batch in batches:
        batch = list(batch)
        if not batch or len(set(batch)) != len(batch) or any(left[i] <= 0 for i in batch):
            return -math.inf
        t = max([t] + [goals[i].arrival for i in batch])
        t += eng.a_s + sum(goals[i].first_cost_s if left[i] == goals[i].first_tokens else eng.c_s for i in batch)
        for i in batch:
            left[i] -= 1
            if left[i] == 0:
                total += utility(goals[i], t, eng)
    return total if not any(left) else -math.inf


def brute_force(goals: Sequence[BoundGoal], eng: BoundEngine, max_schedules: int = 2_000_000) -> tuple[float, int]:
    """(best total utility, schedules enumerated): every sequence of non-empty batches of
    unfinished goals, each started as early as possible. For tiny instances (tests)."""
    n = len(goals)
    left = [g.first_tokens for g in goals]
    best, count = -math.inf, 0

    def rec(t: float, acc: float) -> None:
        nonlocal best, count
        active = [i for i in range(n) if left[i] > 0]
        if not active:
            count += 1
            if count > max_schedules:
                raise RuntimeError(f"more than {max_schedules} schedules")
            best = max(best, acc)
            return
        for size in range(1, len(active) + 1):
            for batch in itertools.combinations(active, size):
                s = max([t] + [goals[i].arrival for i in batch])
                e = s + eng.a_s + sum(goals[i].first_cost_s if left[i] == goals[i].first_tokens else eng.c_s
                                      for i in batch)
                gain = 0.0
                for i in batch:
                    left[i] -= 1
                    if left[i] == 0:
                        gain += utility(goals[i], e, eng)
                rec(e, acc + gain)
                for i in batch:
                    left[i] += 1

    rec(-math.inf, 0.0)
    return best, count


@dataclass(frozen=True)
class MilpResult:
    bound: float  # upper bound on the total utility (optimum if ``optimal``)
    primal: float  # utility of the best schedule found (nan for the LP relaxation)
    optimal: bool
    relaxed: bool
    batches: tuple[tuple[int, ...], ...]  # the schedule found (MILP only)
    solve_s: float


def solve_milp(goals: Sequence[BoundGoal], eng: BoundEngine, *, relax: bool = False,
               time_limit_s: float = 10.0) -> MilpResult:
    """The iteration-indexed MILP of the module docstring (``relax``: its LP relaxation)."""
    import highspy

    t0 = time.perf_counter()
    n = len(goals)
    if n == 0:
        return MilpResult(0.0, 0.0, True, relax, (), 0.0)
    r0 = min(g.arrival for g in goals)
    r = np.array([g.arrival - r0 for g in goals])
    L = np.array([g.first_tokens for g in goals])
    p = np.array([g.first_cost_s for g in goals])
    a, c, net = eng.a_s, eng.c_s, eng.network_latency_s
    K = int(L.sum())
    d_max = a + float(p.sum()) + c * n
    inf = highspy.kHighsInf
    # columns: x[i,k] (n*K), f[i,k] (n*K), y[k] (K), s[k] (K), C[i] (n), u[i] (n)
    X, F, Y, S, C, U = 0, n * K, 2 * n * K, 2 * n * K + K, 2 * n * K + 2 * K, 2 * n * K + 2 * K + n
    ncol = U + n

    def x(i: int, k: int) -> int:
        return X + i * K + k

    def f(i: int, k: int) -> int:
        return F + i * K + k

    lo = np.zeros(ncol)
    hi = np.ones(ncol)
    # iteration k of an earliest-start schedule starts by r_max + k (a + c n) + sum p
    s_max = float(r.max()) + np.arange(K) * (a + c * n) + float(p.sum())
    hi[S:S + K] = s_max
    alone = np.array([served_alone(g, eng) for g in goals])
    for i, g in enumerate(goals):  # C_i >= its served-alone completion (valid, tightens the LP)
        lo[C + i] = r[i] + a + p[i] + (L[i] - 1) * (a + c)
        hi[C + i] = inf
    lo[U:U + n] = -inf
    hi[U:U + n] = alone  # u_i <= served alone <= beta_i
    cost = np.zeros(ncol)
    cost[U:U + n] = 1.0
    rows: list[tuple[float, float, list[int], list[float]]] = []

    def row(lb: float, ub: float, idx: list[int], val: list[float]) -> None:
        merged: dict[int, float] = {}
        for j, v in zip(idx, val):
            merged[j] = merged.get(j, 0.0) + float(v)
        rows.append((lb, ub, list(merged), list(merged.values())))

    def dur(k: int) -> tuple[list[int], list[float]]:  # d_k = a y_k + sum_i [c x_ik + (p_i - c) f_ik]
        idx, val = [Y + k], [a]
        for i in range(n):
            idx += [x(i, k), f(i, k)]
            val += [c, p[i] - c]
        return idx, val

    for i in range(n):
        row(L[i], L[i], [x(i, k) for k in range(K)], [1.0] * K)
        row(1, 1, [f(i, k) for k in range(K)], [1.0] * K)
        for k in range(K):
            row(-inf, 0, [f(i, k), x(i, k)], [1, -1])  # f <= x
            row(-inf, 0, [x(i, k), f(i, k)] + [x(i, q) for q in range(k)], [1, -1] + [-1] * k)  # f >= x - earlier
            row(-inf, 0, [x(i, k), Y + k], [1, -1])  # x <= y
            if r[i] > 0:
                row(0, inf, [S + k, x(i, k)], [1, -r[i]])  # s_k >= r_i x_ik
            if k >= L[i] - 1:  # C_i >= e_k - M_ik (1 - x_ik), M_ik = latest e_k - earliest C_i
                Mik = max(0.0, s_max[k] + d_max - lo[C + i])
                di, dv = dur(k)
                row(-Mik, inf, [C + i, S + k, x(i, k)] + di, [1, -1, -Mik] + [-v for v in dv])
        g = goals[i]
        # u_i <= beta_i + alpha_i (C_i + net - r_i - ERT_i)
        row(-inf, g.tuf.beta + g.tuf.alpha * (net - r[i] - g.tuf.ert), [U + i, C + i], [1, -g.tuf.alpha])
    for k in range(K - 1):
        row(-inf, 0, [Y + k + 1, Y + k], [1, -1])
        di, dv = dur(k)
        row(0, inf, [S + k + 1, S + k] + di, [1, -1] + [-v for v in dv])  # s_{k+1} >= e_k

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 1e-7)
    h.setOptionValue("mip_abs_gap", 1e-7)
    h.addVars(ncol, lo, hi)
    h.changeColsCost(ncol, np.arange(ncol, dtype=np.int32), cost)
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    starts, idx_all, val_all = [], [], []
    for lb, ub, idx, val in rows:
        starts.append(len(idx_all))
        idx_all += idx
        val_all += val
    st = h.addRows(len(rows), np.array([q[0] for q in rows], dtype=float), np.array([q[1] for q in rows], dtype=float),
              len(idx_all), np.array(starts, dtype=np.int32), np.array(idx_all, dtype=np.int32),
              np.array(val_all, dtype=float))
    if st != highspy.HighsStatus.kOk:
        raise RuntimeError(f"HiGHS refused the model rows: {st}")
    if not relax:
        ints = np.r_[np.arange(X, X + n * K), np.arange(Y, Y + K)].astype(np.int32)
        h.changeColsIntegrality(len(ints), ints, np.full(len(ints), highspy.HighsVarType.kInteger))
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    sol = np.asarray(h.getSolution().col_value) if info.primal_solution_status else np.array([])
    if relax:
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"LP relaxation not solved: {h.modelStatusToString(status)}")
        return MilpResult(float(info.objective_function_value), math.nan, True, True, (),
                          time.perf_counter() - t0)
    batches: tuple[tuple[int, ...], ...] = ()
    primal = -math.inf
    if sol.size:
        xs = sol[X:X + n * K].reshape(n, K) > 0.5
        batches = tuple(tuple(int(i) for i in np.flatnonzero(xs[:, k])) for k in range(K) if xs[:, k].any())
        primal = schedule_utility(goals, eng, batches)  # re-evaluated exactly, not the solver's value
    optimal = status == highspy.HighsModelStatus.kOptimal
    bound = float(info.mip_dual_bound)
    if not math.isfinite(bound):
        bound = float(alone.sum())
    if optimal:
        bound = max(primal, float(info.objective_function_value)) if math.isfinite(primal) else bound
    return MilpResult(bound, primal, optimal, False, batches, time.perf_counter() - t0)


def groups_of(goals: Sequence[BoundGoal], group_max: int) -> list[list[int]]:
    """Goal indices split into groups of consecutive arrivals, at most ``group_max`` each
    (``group_max <= 0``: one group); a full window is cut at its last largest arrival gap. Any
    partition gives a valid bound; cutting where goals interact least keeps it tight."""
    order = sorted(range(len(goals)), key=lambda i: goals[i].arrival)
    if group_max <= 0:
        return [order] if order else []
    out: list[list[int]] = []
    i = 0
    while i < len(order):
        j = min(len(order), i + group_max)
        # cut at the largest gap inside the window (after at least one goal), if the window is full
        if j < len(order):
            gaps = [goals[order[q + 1]].arrival - goals[order[q]].arrival for q in range(i, j)]
            best = len(gaps) - 1 - int(np.argmax(gaps[::-1]))  # the last largest gap
            j = i + best + 1
        out.append(order[i:j])
        i = j
    return out


@dataclass
class BoundReport:
    """Upper bounds on one set of goals' total time utility (``bound`` = the least of them)."""

    goals: int
    sum_beta: float
    served_alone: float
    schedule: float  # sum over groups of the MILP optimum / dual bound / LP relaxation
    bound: float
    method: str  # "milp" (every group solved to optimality), "milp+lp", "milp-dual", ...
    groups: int
    largest_group: int
    solve_s: float
    best_found: float = math.nan  # feasible: sum of the groups' MILP schedules (not a bound)
    exact: bool = False  # bound == the optimum of the whole instance (one group, solved)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        n = max(self.goals, 1)
        return {"goals": self.goals, "mean_utility": self.bound / n, "total_utility": self.bound,
                "sum_beta_mean": self.sum_beta / n, "served_alone_mean": self.served_alone / n,
                "schedule_bound_mean": self.schedule / n, "method": self.method, "groups": self.groups,
                "largest_group": self.largest_group, "exact": self.exact, "solve_s": round(self.solve_s, 3)}


def upper_bound(goals: Sequence[BoundGoal], eng: BoundEngine, *, exact_max_goals: int = 8,
                group_max: int = 8, time_limit_s: float = 5.0) -> BoundReport:
    """min(sum beta, served alone, sum over groups of the schedule bound): groups of at most
    ``exact_max_goals`` goals are solved as MILPs (their dual bound if the time limit hits),
    larger ones by the LP relaxation."""
    t0 = time.perf_counter()
    sum_beta = float(sum(g.tuf.beta for g in goals))
    alone = float(sum(served_alone(g, eng) for g in goals))
    sched, feas, exact = 0.0, 0.0, True
    how: dict[str, int] = {}
    grs = groups_of(goals, group_max)
    for gr in grs:
        sub = [goals[i] for i in gr]
        ub = sum(served_alone(g, eng) for g in sub)
        lb = schedule_utility(sub, eng, greedy_schedule(sub, eng))
        if lb >= ub - 1e-12:  # a schedule reaches the served-alone bound: the group's optimum
            sched += ub
            feas += lb
            how["greedy=alone"] = how.get("greedy=alone", 0) + 1
            continue
        res = solve_milp(sub, eng, relax=len(sub) > exact_max_goals, time_limit_s=time_limit_s)
        sched += min(res.bound, ub)
        feas += max(res.primal, lb) if not res.relaxed else lb
        key = "lp" if res.relaxed else ("milp" if res.optimal else "milp-dual")
        how[key] = how.get(key, 0) + 1
        exact &= res.optimal and not res.relaxed
    bound = min(sum_beta, alone, sched)
    method = ", ".join(f"{k} {v}" for k, v in sorted(how.items())) or "none"
    return BoundReport(len(goals), sum_beta, alone, sched, bound, method, len(grs),
                       max((len(g) for g in grs), default=0), time.perf_counter() - t0,
                       best_found=feas, exact=exact and len(grs) <= 1 and bound == sched)


def greedy_schedule(goals: Sequence[BoundGoal], eng: BoundEngine) -> list[tuple[int, ...]]:
    """A feasible schedule: every iteration runs every arrived, unfinished goal (continuous
    batching with no limit); an idle engine waits for the next arrival."""
    left = [g.first_tokens for g in goals]
    out: list[tuple[int, ...]] = []
    t = -math.inf
    while any(left):
        t = max(t, min(g.arrival for g, n in zip(goals, left) if n > 0))
        batch = tuple(i for i, g in enumerate(goals) if left[i] > 0 and g.arrival <= t)
        t += eng.a_s + sum(goals[i].first_cost_s if left[i] == goals[i].first_tokens else eng.c_s for i in batch)
        for i in batch:
            left[i] -= 1
        out.append(batch)
    return out


def bound_by_type(arrivals: Sequence[Any], engine_config: SimEngineConfig = SimEngineConfig(),
                  planner_config: PlannerConfig = PlannerConfig(), *, strict: bool = True,
                  **kw: Any) -> dict[str, dict[str, Any]]:
    """``{"all": {...}, <task type>: {...}}`` (:meth:`BoundReport.as_dict`): each type's bound
    comes from its own goals alone on the engine; "all" also takes the sum of the type bounds
    when that is lower."""
    prob = problem_from_arrivals(arrivals, engine_config, planner_config, strict=strict)
    types = sorted({g.task_type for g in prob.goals})
    out: dict[str, dict[str, Any]] = {}
    per: dict[str, BoundReport] = {}
    for tt in types:
        per[tt] = upper_bound([g for g in prob.goals if g.task_type == tt], prob.engine, **kw)
        out[tt] = per[tt].as_dict()
    allr = upper_bound(list(prob.goals), prob.engine, **kw) if len(types) != 1 else per[types[0]]
    by_types = sum(r.bound for r in per.values())
    if by_types < allr.bound - 1e-12:
        allr = BoundReport(allr.goals, allr.sum_beta, allr.served_alone, allr.schedule, by_types,
                           allr.method + "; sum of task types", allr.groups, allr.largest_group,
                           allr.solve_s + sum(r.solve_s for r in per.values()), allr.best_found)
    out["all"] = allr.as_dict()
    return out


def add_pct_of_bound(results: Sequence[dict[str, Any]], bound: dict[str, dict[str, Any]]) -> None:
    """Add ``utility_pct_of_bound`` = 100 x policy mean utility / bound mean utility to every
    policy's task types (None where the bound is <= 0 or the policy has no mean)."""
    for r in results:
        for tt, m in r["task_types"].items():
            b = bound.get(tt, {}).get("mean_utility")
            u = m.get("mean_utility")
            m["utility_pct_of_bound"] = (100.0 * u / b if b is not None and b > 0 and u is not None
                                         and math.isfinite(u) else None)
