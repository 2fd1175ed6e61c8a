"""Cost of one scheduling decision, measured on synthetic queues: what ``timely-fleet bench
scheduler`` prints and the paper reproduction's Table 5 (``timely-fleet paper``) reports, beside
TimelyLLM's own numbers (:data:`PAPER_TABLE5_MS`)."""

from __future__ import annotations

import statistics
import time

import numpy as np

from llm_planner_node.core.batching import RunningView
from llm_planner_node.core.policies import Policy, get_policy
from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL, URGENT

PAPER_TABLE5_MS: dict[int, float] = {1: 0.58, 2: 0.83, 4: 1.25, 6: 1.58, 8: 2.03}
SIZES = (1, 2, 4, 6, 8, 100, 1000, 5000)
NET_S = 0.008
NOW_S = 10.0


def make_queue(n: int, rng: np.random.Generator) -> GenerationQueue:
    """``n`` queued generations: 1/3 urgent, 60 % first segments, arrivals in the last 2 s."""
    q = GenerationQueue()
    for i in range(n):
        k = 0 if rng.random() < 0.6 else int(rng.integers(1, 5))
        arrival = NOW_S - rng.uniform(0, 2)
        ref = arrival if k == 0 else NOW_S + rng.uniform(-0.5, 3)
        q.push(i, seq=i, arrival=arrival, k=k, ref=ref, tuf=URGENT if i % 3 == 0 else NORMAL,
               g=0.09, kv_need=1314)
    return q


def make_running(m: int, rng: np.random.Generator) -> RunningView:
    return RunningView(np.arange(10_000, 10_000 + m), NOW_S + rng.uniform(0.1, 2, m),
                       rng.integers(1, 10, m).astype(float), np.full(m, 0.022))


def time_decision(policy: Policy, q: GenerationQueue, running: RunningView,
                  rounds: int = 7, min_round_s: float = 0.02, full_sort: bool = False) -> float:
    """Median over ``rounds`` of the mean seconds per decision (``full_sort``: of a full
    ``Policy.order`` of the queue instead)."""
    def once() -> None:
        if full_sort:
            policy.order(q.view(), NOW_S, NET_S)
        else:
            policy.decide(q.view(), running, 30_000, NOW_S, NET_S)

    number = 1
    while True:  # calibrate so one round lasts at least min_round_s
        t0 = time.perf_counter()
        for _ in range(number):
            once()
        if time.perf_counter() - t0 >= min_round_s:
            break
        number *= 2
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(number):
            once()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def measure(policy_name: str = "timelyllm", sizes: tuple[int, ...] = SIZES, rounds: int = 7,
            min_round_s: float = 0.02, seed: int = 0, admission: str | None = None,
            full_sort: bool = False) -> list[dict[str, float | int | None]]:
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        policy = get_policy(policy_name, admission=admission)
        q, running = make_queue(n, rng), make_running(4, rng)
        ours_ms = 1e3 * time_decision(policy, q, running, rounds, min_round_s)
        paper = PAPER_TABLE5_MS.get(n)
        row: dict[str, float | int | None] = {"queued": n, "ours_ms": ours_ms, "paper_ms": paper,
                                              "speedup": paper / ours_ms if paper else None}
        if full_sort:
            row["full_sort_ms"] = 1e3 * time_decision(policy, q, running, rounds, min_round_s, full_sort=True)
        rows.append(row)
    return rows
