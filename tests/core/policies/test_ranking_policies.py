"""Trail (SPRPT with limited preemption) and LTR (rank order, starvation) decisions."""

import numpy as np

from llm_planner_node.core.batching import RunningView
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.policies.base import displaced
from llm_planner_node.core.policies.ltr import Starvation
from llm_planner_node.core.policies.trail import preemptible
from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for


def _queue(preds):
    q = GenerationQueue()
    for i, p in enumerate(preds):
        q.push(i, seq=i, arrival=0.0, k=0, ref=0.0, tuf=NORMAL, g=0.09, kv_need=10, pred=p, pred0=p)
    return q.view()


def _running(ids, pred, pred0, age):
    n = len(ids)
    return RunningView(np.array(ids), np.zeros(n), np.ones(n), np.full(n, 0.02), np.array(pred, float),
                       np.array(pred0, float), np.array(age), np.full(n, 100), np.full(n, 10))


def test_trail_limited_preemption_rule():
    # c = 0.8, r = 100: preemptible while age < 80
    assert preemptible(np.array([0, 79, 80, 200]), np.full(4, 100.0), 0.8).tolist() == [True, True, False, False]


def test_displaced_hand_computed():
    # 2 slots, running 10 (pred 50, preemptible) and 11 (pred 400, preemptible); queued 5 and 300
    out = displaced(np.array([5.0, 300.0]), np.array([50.0, 400.0]), np.array([True, True]),
                    np.array([10, 11]), 2)
    assert out.tolist() == [11]
    # 11 is past c * r: pinned, nothing preempted
    assert displaced(np.array([5.0]), np.array([50.0, 400.0]), np.array([True, False]),
                     np.array([10, 11]), 2).tolist() == [10]
    assert displaced(np.array([5.0]), np.array([50.0, 400.0]), np.array([False, False]),
                     np.array([10, 11]), 2).tolist() == []
    # a free slot absorbs the better queued job: no preemption
    assert displaced(np.array([5.0]), np.array([50.0]), np.array([True]), np.array([10]), 2).tolist() == []


def test_trail_orders_and_preempts():
    trail = get_policy("trail", max_batch=1, c=0.8)
    q = _queue([300.0, 20.0, 100.0])
    assert q.gen_id[trail.order(q, 0.0, 0.008)].tolist() == [1, 2, 0]
    d = trail.decide(q, _running([9], [200.0], [250.0], [10]), 10_000, 0.0, 0.008)
    assert d.preempt.tolist() == [9] and d.admit.tolist() == [1]
    d = trail.decide(q, _running([9], [200.0], [250.0], [220]), 10_000, 0.0, 0.008)  # age >= c r
    assert d.preempt.tolist() == [] and d.admit.tolist() == []


def test_ltr_rank_order_and_starvation():
    s = Starvation(threshold=2, quantum=3)
    ids = np.array([1, 2])
    s.step(set(), ids)
    s.step(set(), ids)  # two unscheduled steps -> promoted
    assert s.keys(ids, np.array([5.0, 1.0])).tolist() == [-np.inf, -np.inf]
    for _ in range(3):
        s.step({1, 2}, ids)
    assert s.keys(ids, np.array([5.0, 1.0])).tolist() == [5.0, 1.0]
    ltr = get_policy("ltr", max_batch=1)
    q = _queue([30.0, 10.0, 20.0])
    assert ltr.decide(q, RunningView.empty(), 10_000, 0.0, 0.008).admit.tolist() == [1]


def test_trail_and_ltr_beat_fcfs_when_a_long_job_arrives_first():
    # one long arm plan then short drone plans, one slot: SPRPT serves the short ones first
    arrivals = [Arrival(0.0, goal_for(10, "arm0"))] + [Arrival(0.001, goal_for(7, f"d{i}")) for i in range(4)]
    lat = {}
    for p in ("vllm", "trail", "ltr"):
        res = simulate(arrivals, p, max_batch=1)
        lat[p] = np.mean([r.gen_end[-1] - r.arrival for r in res.requests])
    assert lat["trail"] < lat["vllm"] and lat["ltr"] < lat["vllm"]
