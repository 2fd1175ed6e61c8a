"""Fixed and latency-guided batch admission (TimelyLLM 4.4), hand-computed."""

import numpy as np

from llm_planner_node.core.batching import FixedBatch, LatencyGuided, RunningView
from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL


def _queue(needs):
    q = GenerationQueue()
    for i, n in enumerate(needs):
        q.push(i, seq=i, arrival=0.0, k=0, ref=0.0, tuf=NORMAL, g=0.09, kv_need=n)
    return q.view()


def _running(deadline, remaining, token_time):
    n = len(deadline)
    return RunningView(np.arange(100, 100 + n), np.array(deadline, float),
                       np.array(remaining, float), np.array(token_time, float))


def _rows(q, gids):
    return np.array([int(np.flatnonzero(q.gen_id == g)[0]) for g in gids], dtype=np.int64)


def test_fixed_batch_slots():
    q = _queue([100, 100, 100])
    got = FixedBatch(2).select(_rows(q, [2, 0, 1]), q, _running([9], [5], [0.02]), 1000, 0.0, 0.008)
    assert q.gen_id[got].tolist() == [2]  # 2 - 1 running = 1 slot


def test_fixed_batch_kv_prefix_stops_at_first_misfit():
    q = _queue([300, 500, 400])
    empty = RunningView.empty()
    # cumulative 300, 800, 1200 vs 900 free -> first two
    assert q.gen_id[FixedBatch(8).select(_rows(q, [0, 1, 2]), q, empty, 900, 0, 0)].tolist() == [0, 1]
    # 400, 700, 1200 -> [2, 0]
    assert q.gen_id[FixedBatch(8).select(_rows(q, [2, 0, 1]), q, empty, 900, 0, 0)].tolist() == [2, 0]
    # head needs 500 > 400 free: nothing, even though row 0 (300) would fit (no skipping)
    assert len(FixedBatch(8).select(_rows(q, [1, 0]), q, empty, 400, 0, 0)) == 0


def test_latency_guided_wcet_check():
    lg = LatencyGuided(per_step=1)
    now, net = 0.05, 0.008
    # budgets = deadline - net - now = 0.942 and 0.242; the urgent one is index 1
    ok = _running([1.0, 0.3], [5, 8], [0.02, 0.02])        # WCET 8 * 0.02 = 0.16 <= 0.242
    tight = _running([1.0, 0.3], [5, 10], [0.02, 0.025])   # WCET 10 * 0.025 = 0.25 > 0.242
    assert lg.wcet_ok(ok, now, net)
    assert not lg.wcet_ok(tight, now, net)
    q = _queue([100, 100])
    order = _rows(q, [1, 0])
    assert q.gen_id[lg.select(order, q, ok, 10_000, now, net)].tolist() == [1]
    assert len(lg.select(order, q, tight, 10_000, now, net)) == 0


def test_latency_guided_ignores_already_late_generations():
    lg = LatencyGuided()
    # index 0 is past its deadline (budget -0.058): not protected; index 1 has budget 0.942,
    # WCET 5 * 0.02 = 0.1 -> admit
    assert lg.wcet_ok(_running([0.0, 1.0], [9, 5], [0.05, 0.02]), 0.05, 0.008)
    assert lg.wcet_ok(_running([0.0], [9], [0.05]), 0.05, 0.008)


def test_latency_guided_per_step_and_kv():
    q = _queue([100] * 6)
    order = np.arange(6)
    assert len(LatencyGuided(per_step=4).select(order, q, RunningView.empty(), 10_000, 0, 0)) == 4
    assert len(LatencyGuided(per_step=4).select(order, q, RunningView.empty(), 250, 0, 0)) == 2
