"""Policy registry, flags and queue orderings."""

import numpy as np
import pytest

from llm_planner_node.core.batching import FixedBatch, LatencyGuided, RunningView
from llm_planner_node.core.policies import get_policy, policy_names
from llm_planner_node.core.policies.base import REGISTRY, Policy, register
from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL, URGENT

NET = 0.008


def test_registry_and_flags():
    assert {"vllm", "vllm-stream", "seg-fcfs", "seg-edf", "timelyllm"} <= set(policy_names())
    flags = {n: (get_policy(n).suspends_at_segments, get_policy(n).dispatches_early)
             for n in ("vllm", "vllm-stream", "seg-fcfs", "seg-edf", "timelyllm")}
    assert flags == {"vllm": (False, False), "vllm-stream": (False, True),
                     "seg-fcfs": (True, True), "seg-edf": (True, True), "timelyllm": (True, True)}
    with pytest.raises(ValueError, match="unknown policy"):
        get_policy("nope")


def test_timelyllm_admission_modes():
    assert isinstance(get_policy("timelyllm").admission, LatencyGuided)
    assert get_policy("timelyllm", max_batch=6).admission == FixedBatch(6)
    assert get_policy("vllm", max_batch=12).admission == FixedBatch(12)


def _queue():
    """Three generations at now = 0.5 (G = 90 ms):
    id 0: normal, arrived 0.0, first segment           -> Eq. 4: W = 0.598, L = 0.402
          priority = 1 / (0.09 * 0.402) = 27.64
    id 1: normal, arrived 0.1, segment 2, robot busy until 3.0 -> W = -2.402, TUF1 = 1,
          L = 2.402, priority = 1 / (0.09 * 2.402) = 4.63
    id 2: urgent, arrived 0.45, first segment          -> W = 0.148, L = 0.052,
          priority = 2 / (0.09 * 0.052) = 427.35
    """
    q = GenerationQueue()
    q.push(0, seq=0, arrival=0.0, k=0, ref=0.0, tuf=NORMAL, g=0.09, kv_need=10)
    q.push(1, seq=1, arrival=0.1, k=2, ref=3.0, tuf=NORMAL, g=0.09, kv_need=10)
    q.push(2, seq=2, arrival=0.45, k=0, ref=0.45, tuf=URGENT, g=0.09, kv_need=10)
    return q.view()


@pytest.mark.parametrize("name, expected", [
    ("vllm", [0, 1, 2]), ("vllm-stream", [0, 1, 2]), ("seg-fcfs", [0, 1, 2]),
    ("seg-edf", [2, 0, 1]),    # deadlines 0.65 (urgent), 1.0, 1.1 (initial, kept when suspended)
    ("timelyllm", [2, 0, 1]),  # 427.35 > 27.64 > 4.63
])
def test_orders(name, expected):
    q = _queue()
    assert q.gen_id[get_policy(name).order(q, 0.5, NET)].tolist() == expected


def test_timelyllm_priorities_hand_computed():
    pri = get_policy("timelyllm").priorities(_queue(), 0.5, NET)
    assert pri == pytest.approx([1 / (0.09 * 0.402), 1 / (0.09 * 2.402), 2 / (0.09 * 0.052)])


def test_decide_returns_request_ids_in_priority_order():
    d = get_policy("seg-edf", max_batch=2).decide(_queue(), RunningView.empty(), 1000, 0.5, NET)
    assert d.admit.tolist() == [2, 0] and len(d.preempt) == 0


def test_new_policy_is_one_registered_class():
    @register
    class LIFO(Policy):
        name = "test-lifo"
        suspends_at_segments = True
        dispatches_early = True

        def order(self, q, now, net_latency):
            return np.argsort(-q.seq, kind="stable")

    try:
        q = _queue()
        assert q.gen_id[get_policy("test-lifo").order(q, 0.5, NET)].tolist() == [2, 1, 0]
        with pytest.raises(ValueError):
            register(LIFO)
    finally:
        del REGISTRY["test-lifo"]
