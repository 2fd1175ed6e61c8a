"""Evaluation results: per policy and task type metrics, the printed table, JSON and a bar chart.

Metrics are :class:`~llm_planner_node.core.metrics.Summary` (core/metrics.py is the one
definition). Simulator runs summarise planner requests with ``summarize``; recordings (bags,
live runs) have per-goal :class:`~llm_planner_node.core.metrics.Outcome` s instead, aggregated
by :func:`summarize_outcomes` with exactly ``summarize``'s arithmetic (a test checks both
agree on the same goals).

JSON layout (``timely-fleet eval --json``)::

    {"workload": {...spec...}, "engine": "sim", "seed": 0,
     "policies": [{"policy": "vllm", "task_types": {"drone-normal": {<Summary fields>}, ...,
                   "all": {...}}, "wall_s": 0.1, ...}, ...]}
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from llm_planner_node.core.metrics import Outcome, Summary, outcome_stats
from timely_tools import outfiles

FIELDS = ("goals", "completed", "mean_utility", "utility_pct_of_beta", "mean_segment_utility",
          "mean_response_s", "p90_response_s", "mean_waiting_s", "tokens_per_s")


def summarize_outcomes(policy: str, outcomes: Iterable[Outcome], goals: Mapping[str, int],
                       tokens: Mapping[str, int], span_s: float) -> list[Summary]:
    """Per-task-type summaries plus ``"all"`` from completed goals' outcomes.

    ``goals``/``tokens``: per task type, all goals (completed or not) and tokens generated.
    Same aggregation as :func:`core.metrics.summarize`.
    """
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.task_type].append(o)
        groups["all"].append(o)
    n_goals = dict(goals)
    n_goals["all"] = sum(goals.values())
    n_tok = dict(tokens)
    n_tok["all"] = sum(tokens.values())
    out = []
    for tt in sorted(set(n_goals) | set(groups), key=lambda t: (t == "all", t)):
        outs = groups.get(tt, [])
        tok = n_tok.get(tt, 0)
        out.append(Summary(policy, tt, n_goals.get(tt, len(outs)), len(outs), *outcome_stats(outs),
                           tok / span_s if span_s > 0 else float("nan")))
    return out


def policy_result(policy: str, summaries: Sequence[Summary], **extra: Any) -> dict[str, Any]:
    """One JSON object per policy: ``task_types`` maps task type -> metrics."""
    return {"policy": policy,
            "task_types": {s.task_type: {k: _clean(getattr(s, k)) for k in FIELDS} for s in summaries},
            **extra}


def _clean(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _f(v: Any, fmt: str) -> str:
    """``v`` formatted with ``fmt`` (e.g. ``"8.3f"``); a missing value is "-" in the same width."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return format("-", f">{fmt.split('.')[0]}")
    return format(v, fmt)


def format_table(results: Sequence[Mapping[str, Any]],
                 bound: Mapping[str, Mapping[str, Any]] | None = None, *, pct_of_bound: bool = False) -> str:
    """One row per policy and task type, columns aligned ("-" where a metric has no value, e.g.
    no goal of the type completed); a note below when policies completed different numbers of goals.
    ``bound`` (``eval --bound``): a "bound" row per task type and a ``%bound`` column
    (``pct_of_bound``: the column without the rows, for bounds printed per policy)."""
    pct_of_bound = pct_of_bound or bound is not None
    pw = max([12, *(len(str(r["policy"])) for r in results)])
    tw = max([14, *(len(str(tt)) for r in results for tt in r["task_types"])])
    pb = f" {'%bound':>6}" if pct_of_bound else ""
    lines = [f"{'policy':{pw}} {'task type':{tw}} {'goals':>5} {'done':>5} {'utility':>8} {'%beta':>6}{pb} "
             f"{'resp(s)':>8} {'p90(s)':>7} {'wait(s)':>8} {'tok/s':>7}"]
    for r in results:
        for tt, m in r["task_types"].items():
            pct = f" {_f(m.get('utility_pct_of_bound'), '6.1f')}" if pct_of_bound else ""
            lines.append(f"{str(r['policy']):{pw}} {str(tt):{tw}} {m['goals']:5d} {m['completed']:5d} "
                         f"{_f(m['mean_utility'], '8.3f')} {_f(m['utility_pct_of_beta'], '6.1f')}{pct} "
                         f"{_f(m['mean_response_s'], '8.3f')} {_f(m['p90_response_s'], '7.3f')} "
                         f"{_f(m['mean_waiting_s'], '8.3f')} {_f(m['tokens_per_s'], '7.1f')}")
    if bound is not None:
        lines.append(format_bound_rows(bound, pw, tw))
    note = completed_note(results)
    return "\n".join(lines + ([note] if note else []))


def format_bound_rows(bound: Mapping[str, Mapping[str, Any]], pw: int = 12, tw: int = 14,
                      label: str = "bound") -> str:
    """The bound's row per task type, in :func:`format_table`'s columns."""
    pw = max(pw, len(label))
    return "\n".join(f"{label:{pw}} {str(tt):{tw}} {b['goals']:5d} {'':>5} {_f(b['mean_utility'], '8.3f')} "
                     f"{'':>6} {'100.0':>6}  ({b['method']}, {b['groups']} groups)" for tt, b in bound.items())


def completed_note(results: Sequence[Mapping[str, Any]]) -> str | None:
    """A sentence when policies completed different numbers of goals (their means then cover
    different goals), else None."""
    done = {r["policy"]: (r["task_types"].get("all", {}).get("completed", 0),
                          r["task_types"].get("all", {}).get("goals", 0)) for r in results}
    if len(results) < 2 or len({c for c, _ in done.values()}) == 1:
        return None
    counts = ", ".join(f"{p} {c} of {g}" for p, (c, g) in done.items())
    return (f"note: the policies completed different numbers of goals ({counts}); "
            "their means are over different goals (column 'done')")


def write_json(path: str | Path, doc: Mapping[str, Any]) -> None:
    Path(outfiles.ready(path)).write_text(json.dumps(doc, indent=2, default=_clean) + "\n")


def load_json(path: str | Path) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("policies"), list):
        raise ValueError("no 'policies' list in it")
    return doc


def bar_chart(results: Sequence[Mapping[str, Any]], path: str | Path, title: str = "",
              metric: str = "utility_pct_of_beta", ylabel: str = "utility (% of beta)") -> None:
    """Grouped bars: task types on x, one bar per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = [t for t in results[0]["task_types"]] if results else []
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(types) + 1), 3.4))
    w = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        ys = [r["task_types"].get(t, {}).get(metric) for t in types]
        ys = [np.nan if y is None else y for y in ys]
        ax.bar(np.arange(len(types)) + i * w - 0.4 + w / 2, ys, w, label=r["policy"])
    ax.set_xticks(range(len(types)), types)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
