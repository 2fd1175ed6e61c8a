"""Ordering only the top of the queue (batching.top_rows, Policy.ranked/candidates) equals a full
sort by the same key (property-tested), so the cheaper decision changes no schedule."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_planner_node.core.batching import best_utility, hopeless_keys, top_rows
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL, URGENT

NET = 0.008


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_top_rows_equals_full_sort_prefix(data):
    n = data.draw(st.integers(1, 400))
    k = data.draw(st.integers(0, n + 3))
    # few distinct values, so ties at the k-th key are common
    primary = np.array(data.draw(st.lists(st.integers(-4, 4), min_size=n, max_size=n)), float)
    seq = np.array(data.draw(st.permutations(range(n))), np.int64)
    keys = (seq, primary)
    assert top_rows(keys, k).tolist() == np.lexsort(keys)[:k].tolist()
    rows = np.flatnonzero(np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))))
    full = rows[np.lexsort(tuple(key[rows] for key in keys))]
    assert top_rows(keys, k, rows).tolist() == full[:k].tolist()


def _queue(data, n):
    q = GenerationQueue()
    for i in range(n):
        k = data.draw(st.integers(0, 3))
        arrival = data.draw(st.floats(0.0, 10.0))
        ref = arrival if k == 0 else data.draw(st.floats(0.0, 14.0))
        q.push(i, seq=i, arrival=arrival, k=k, ref=ref, tuf=data.draw(st.sampled_from([NORMAL, URGENT])),
               g=data.draw(st.sampled_from([0.05, 0.09, 0.2])), kv_need=100)
    return q.view()


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_policy_ranked_equals_order_prefix(data):
    n = data.draw(st.integers(1, 400))
    q = _queue(data, n)
    now = data.draw(st.floats(0.0, 15.0))
    k = data.draw(st.integers(0, n))
    for name in ("timelyllm", "seg-edf", "seg-fcfs", "vllm-stream", "vllm", "timelyllm-trail"):
        p = get_policy(name)
        assert p.ranked(q, now, NET, k).tolist() == p.order(q, now, NET)[:k].tolist(), name


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_hopeless_last_equals_full_sort_by_the_combined_key(data):
    n = data.draw(st.integers(1, 300))
    q = _queue(data, n)
    now = data.draw(st.floats(0.0, 15.0))
    k = data.draw(st.integers(0, n))
    p = get_policy("timelyllm")
    bad = best_utility(q, now, NET) <= 0
    good_keys = p.sort_keys(q, now, NET)
    full = np.concatenate([np.flatnonzero(~bad)[np.lexsort(tuple(x[~bad] for x in good_keys))],
                           np.flatnonzero(bad)[np.lexsort(tuple(x[bad] for x in hopeless_keys(q)))]])
    order, shed = p.candidates(q, now, NET, k, "last")
    assert order.tolist() == full[:k].tolist() and len(shed) == 0
    order, shed = p.candidates(q, now, NET, k, "shed")
    assert sorted(shed.tolist()) == sorted(q.gen_id[bad & (q.k == 0)].tolist())
    assert not set(q.gen_id[order].tolist()) & set(shed.tolist())
