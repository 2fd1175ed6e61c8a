"""Evaluation metrics, one definition everywhere (docs/guides/evaluation.md, "Metrics"; TimelyLLM Eq. 3, Fig. 3).

For a goal with segments k = 0..K, dispatched at ``d_k`` and executing for ``E_k``:

- arrival at the robot ``a_k = d_k + network latency``;
  execution start ``S_k = max(a_k, end of segment k-1's execution)``, end ``F_k = S_k + E_k``;
- response time ``W(s_0) = S_0 - goal arrival``; time utility ``TUF0(W(s_0))``;
- waiting time of segment k > 0: ``W(s_k) = S_k - F_{k-1}``;
- robot waiting time = completion ``F_K`` - goal arrival - sum_k E_k (= sum_k W(s_k));
- segment utility ``TUF0(W(s_0)) + sum_{k>=1} TUF1(W(s_k))`` (Eq. 3).

Aggregates per task type and policy: mean time utility and its % of beta, mean and P90 response,
mean robot waiting, goals completed, engine throughput in tokens/s.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from llm_planner_node.core.task_model import EndKind, GenState, Request
from llm_planner_node.core.tuf import TUFParams, tuf0, tuf1


def segment_timeline(dispatched_at: Sequence[float], exec_durations: Sequence[float],
                     network_latency: float) -> tuple[list[float], list[float]]:
    """Execution starts and ends: ``S_k = max(d_k + net, F_{k-1})``, ``F_k = S_k + E_k``."""
    starts, ends, prev_end = [], [], -np.inf
    for d, e in zip(dispatched_at, exec_durations, strict=True):
        s = max(d + network_latency, prev_end)
        prev_end = s + e
        starts.append(s)
        ends.append(prev_end)
    return starts, ends


@dataclass(frozen=True)
class Outcome:
    """Timing metrics of one completed goal (seconds; utilities in TUF units)."""

    request_id: int
    task_type: str
    tuf: TUFParams
    response_s: float
    time_utility: float
    segment_utility: float
    segment_waits: tuple[float, ...]
    waiting_s: float
    completion_s: float
    tokens: int


def outcome(arrival: float, tuf: TUFParams, dispatched_at: Sequence[float],
            exec_durations: Sequence[float], network_latency: float, *, request_id: int = -1,
            task_type: str = "", tokens: int = 0) -> Outcome:
    """Metrics of one goal from its dispatch times and execution durations."""
    if not dispatched_at or len(dispatched_at) != len(exec_durations):
        raise ValueError("need one execution duration per dispatched segment (at least one)")
    starts, ends = segment_timeline(dispatched_at, exec_durations, network_latency)
    waits = [starts[0] - arrival] + [starts[k] - ends[k - 1] for k in range(1, len(starts))]
    response = waits[0]
    seg_util = tuf0(response, tuf) + sum(tuf1(w, tuf) for w in waits[1:])
    completion = ends[-1] - arrival
    return Outcome(request_id, task_type, tuf, response, tuf0(response, tuf), seg_util,
                   tuple(waits), completion - sum(exec_durations), completion, tokens)


def request_outcome(req: Request, network_latency: float) -> Outcome | None:
    """Outcome of a SUCCEEDED request from the planner's record (None otherwise). A TRUNCATED
    plan (cut at max_tokens) executed only its first segments: not a completed goal, as in the
    live and rosbag reports, which count SUCCEEDED results only."""
    if req.end is not EndKind.SUCCEEDED:
        return None
    durations = [e - s for s, e in zip(req.exec_start, req.exec_end, strict=True)]  # type: ignore[operator]
    return outcome(req.arrival, req.goal.tuf, req.dispatched_at, durations, network_latency,
                   request_id=req.id, task_type=req.goal.task_type, tokens=req.generated_tokens)


def measured_times(req: Request) -> tuple[float, float, float]:
    """(response, robot waiting, time utility) of a live request from the execution starts and
    ends its robot reported (the same definitions, measured instead of modelled): response =
    ``S_0 - arrival`` and utility ``TUF0(response)`` once segment 0 started, else (-1, -1, 0);
    robot waiting = ``F_K - arrival - sum_k E_k`` once the plan executed completely, else -1.
    A goal that re-planned is measured over all its plans (segment 0 is its first plan's)."""
    first = req.chain[0]
    if not first.exec_start or first.exec_start[0] is None:
        return -1.0, -1.0, 0.0
    response = first.exec_start[0] - req.arrival
    waiting = -1.0
    if req.state is GenState.FINISHED and req.exec_end and req.exec_end[-1] is not None:
        executed = sum(e - s for r in req.chain for s, e in zip(r.exec_start, r.exec_end)
                       if s is not None and e is not None)
        waiting = req.exec_end[-1] - req.arrival - executed
    return float(response), float(waiting), float(tuf0(response, req.goal.tuf))


@dataclass(frozen=True)
class Summary:
    """Aggregate metrics of one task type (``"all"`` for every goal) under one policy."""

    policy: str
    task_type: str
    goals: int
    completed: int
    mean_utility: float
    utility_pct_of_beta: float
    mean_segment_utility: float
    mean_response_s: float
    p90_response_s: float
    mean_waiting_s: float
    tokens_per_s: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def outcome_stats(outs: Sequence[Outcome]) -> tuple[float, float, float, float, float, float]:
    """(mean utility, mean % of beta, mean segment utility, mean response, P90 response, mean
    robot waiting) of completed goals; NaNs when there are none."""
    if not outs:
        return (float("nan"),) * 6
    util = np.array([o.time_utility for o in outs])
    beta = np.array([o.tuf.beta for o in outs])
    resp = np.array([o.response_s for o in outs])
    return (float(util.mean()), float(100 * (util / beta).mean()),
            float(np.mean([o.segment_utility for o in outs])), float(resp.mean()),
            float(np.percentile(resp, 90)), float(np.mean([o.waiting_s for o in outs])))


def summarize(policy: str, requests: Iterable[Request], network_latency: float,
              span_s: float) -> list[Summary]:
    """Per-task-type summaries plus ``"all"``; tokens/s = generated tokens / ``span_s``."""
    groups: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        groups[r.goal.task_type].append(r)
        groups["all"].append(r)
    out = []
    for task_type in sorted(groups, key=lambda t: (t == "all", t)):
        reqs = groups[task_type]
        outs = [o for o in (request_outcome(r, network_latency) for r in reqs) if o is not None]
        tokens = sum(r.generated_tokens for r in reqs)
        out.append(Summary(policy, task_type, len(reqs), len(outs), *outcome_stats(outs),
                           tokens / span_s if span_s > 0 else float("nan")))
    return out
