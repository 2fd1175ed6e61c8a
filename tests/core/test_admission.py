"""The shared batch admission: the literal TimelyLLM 4.4 rule hand-computed against
the paper's formula, the improved rule's differences, and one admission for every segmented
policy."""

import numpy as np
import pytest

from llm_planner_node.core.batching import (IMPROVED, LITERAL, FixedBatch, LatencyGuided, RunningView,
                                            make_admission)
from llm_planner_node.core.policies import get_policy, policy_names
from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL

SEGMENTED = ("vllm-stream", "seg-fcfs", "seg-edf", "timelyllm", "timelyllm-trail", "timelyllm-lamps")


def _queue(n, need=100):
    q = GenerationQueue()
    for i in range(n):
        q.push(i, seq=i, arrival=0.0, k=0, ref=0.0, tuf=NORMAL, g=0.09, kv_need=need)
    return q.view()


def _running(deadline, generated, token_time, max_segment_tokens=10):
    """The planner's running view: remaining = max segment tokens - tokens generated so far."""
    n = len(deadline)
    remaining = np.maximum(1, max_segment_tokens - np.array(generated, float))
    return RunningView(np.arange(100, 100 + n), np.array(deadline, float), remaining,
                       np.array(token_time, float))


def _wcet_and_budget(deadline, generated, token_time, now, net, max_segment_tokens=10):
    """The paper's rule by hand: most urgent = smallest remaining budget (late ones included)."""
    budgets = [d - net - now for d in deadline]
    i = min(range(len(deadline)), key=lambda j: budgets[j])
    return (max_segment_tokens - generated[i]) * token_time[i], budgets[i]


@pytest.mark.parametrize("deadline, generated, token_time", [
    ([1.0, 0.3], [5, 2], [0.02, 0.02]),      # WCET 8 * 0.02 = 0.160 <= budget 0.242: admit
    ([1.0, 0.3], [5, 0], [0.02, 0.025]),     # WCET 10 * 0.025 = 0.250 > 0.242: wait
    ([0.5, 0.9], [9, 0], [0.03, 0.03]),      # urgent = index 0: 1 * 0.03 <= 0.442: admit
    ([0.5, 0.9], [0, 0], [0.05, 0.01]),      # urgent = index 0: 10 * 0.05 = 0.5 > 0.442: wait
    ([0.04, 5.0], [9, 0], [0.02, 0.02]),     # index 0 is late (budget -0.018): blocks (literal)
])
def test_literal_rule_is_the_papers_formula(deadline, generated, token_time):
    now, net = 0.05, 0.008
    wcet, budget = _wcet_and_budget(deadline, generated, token_time, now, net)
    running = _running(deadline, generated, token_time)
    q = _queue(5)
    admitted = LITERAL.select(np.arange(5), q, running, 10_000, now, net)
    assert LITERAL.wcet_ok(running, now, net) == (wcet <= budget)
    # "a lag for one generation": at most one admission per decision
    assert len(admitted) == (1 if wcet <= budget else 0)


def test_literal_rule_empty_pool_and_kv():
    q = _queue(3, need=500)
    assert LITERAL.select(np.arange(3), q, RunningView.empty(), 10_000, 0.0, 0.008).tolist() == [0]
    assert len(LITERAL.select(np.arange(3), q, RunningView.empty(), 400, 0.0, 0.008)) == 0  # KV


def test_improved_rule_differs_where_documented():
    now, net = 0.05, 0.008
    late = _running([0.04, 5.0], [9, 0], [0.02, 0.02])  # the late one is not protected
    assert not LITERAL.wcet_ok(late, now, net) and IMPROVED.wcet_ok(late, now, net)
    q = _queue(64)
    # fill: an empty pool takes up to fill_batch (32) at once, KV permitting
    assert len(IMPROVED.select(np.arange(64), q, RunningView.empty(), 10**6, now, net)) == 32
    assert len(IMPROVED.select(np.arange(64), q, RunningView.empty(), 1_050, now, net)) == 10
    # above the fill, per_step (16) while the check holds, nothing when it fails
    full = _running([5.0] * 32, [0] * 32, [0.02] * 32)
    assert len(IMPROVED.select(np.arange(64), q, full, 10**6, now, net)) == 16
    tight = _running([0.2] * 32, [0] * 32, [0.05] * 32)  # WCET 0.5 > budget 0.142
    assert len(IMPROVED.select(np.arange(64), q, tight, 10**6, now, net)) == 0
    assert IMPROVED.window(full) == 16 and IMPROVED.window(RunningView.empty()) == 32
    assert LITERAL.window(full) == 1


def test_make_admission_names_and_knobs():
    assert make_admission("literal") is LITERAL and make_admission() is IMPROVED
    assert make_admission("improved", hopeless="shed").hopeless == "shed"
    with pytest.raises(ValueError, match="unknown admission"):
        make_admission("eager")
    with pytest.raises(ValueError):
        LatencyGuided(hopeless="drop")


@pytest.mark.parametrize("rule", ["literal", "improved"])
def test_every_segmented_policy_uses_the_same_admission(rule):
    adms = {n: get_policy(n, admission=rule).admission for n in SEGMENTED}
    assert set(adms.values()) == {make_admission(rule)}
    assert get_policy("vllm", admission=rule).admission == FixedBatch(256)  # baseline keeps its own
    assert get_policy("seg-fcfs", max_batch=6, admission=rule).admission == FixedBatch(6)
    # default: improved for segmented policies, no more FixedBatch(256) for seg-fcfs/seg-edf
    assert get_policy("seg-edf").admission is IMPROVED
    for n in policy_names():  # every registered policy accepts the knob
        get_policy(n, admission=rule)
