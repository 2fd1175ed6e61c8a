"""Predictor interface: Trail's Bayesian refinement (hand-computed 3-bin example), simulator-fed
predictors."""

import numpy as np
import pytest

from llm_planner_node.core.predictors import (LengthBins, OracleLengths, SegmentLengths, SimTrailProbe,
                                              TablePredictor, TrailRefiner, bayes_update,
                                              probe_distribution, trail_transition)
from llm_planner_node.core.task_model import Goal
from llm_planner_node.core.tuf import NORMAL
from llm_planner_node.engines.sim_traces import TRACES


def _goal(prompt, instruction="", max_tokens=64):
    return Goal("r0", "drone", "drone-normal", prompt, NORMAL, max_tokens, None, instruction)


def test_transition_matrix_3_bins():
    # bins of width 2, 4, 4: T[1,1] = 1 - 1/4, T[1,0] = 1/4; lowest bin absorbing
    t = trail_transition(np.array([2.0, 4.0, 4.0]))
    assert t == pytest.approx(np.array([[1, 0, 0], [0.25, 0.75, 0], [0, 0.25, 0.75]]))
    assert t.sum(axis=1) == pytest.approx(np.ones(3))


def test_bayes_update_hand_computed():
    t = trail_transition(np.array([2.0, 4.0, 4.0]))
    q = np.array([0.2, 0.5, 0.3])
    p = np.array([0.1, 0.6, 0.3])
    # prior = q T = [0.2 + 0.5/4, 0.5*0.75 + 0.3/4, 0.3*0.75] = [0.325, 0.45, 0.225]
    # posterior ~ [0.0325, 0.27, 0.0675] / 0.37
    assert bayes_update(q, p, t) == pytest.approx(np.array([0.0325, 0.27, 0.0675]) / 0.37)


def test_refiner_point_estimate_and_multi_token_step():
    r = TrailRefiner(LengthBins(k=3, max_len=30))  # midpoints 5, 15, 25
    assert r.start(0, np.array([0.0, 0.0, 1.0])) == pytest.approx(25)
    # two tokens at once: T applied twice, then the update with a flat probe
    est = r.step(0, np.ones(3), tokens=2)
    w = 10.0
    q = np.array([(1 / w) ** 2, 2 * (1 - 1 / w) / w, (1 - 1 / w) ** 2])  # [0.01, 0.18, 0.81]
    assert est == pytest.approx(q @ np.array([5, 15, 25]) / q.sum())


def test_probe_distribution_calibrated():
    p = probe_distribution(1, 4, 0.6)
    assert p.sum() == pytest.approx(1) and p[1] == pytest.approx(0.6) and p[0] == pytest.approx(p[2])
    assert probe_distribution(0, 1, 0.6) == pytest.approx([1.0])


def test_sim_trail_probe_tracks_remaining_length():
    prompt = TRACES[10].prompt  # ~100-token arm plan
    n = sum(s.n_tokens for s in prompt.segments)
    probe = SimTrailProbe(LengthBins(10, 200), accuracy=0.8, seed=1)
    e0 = probe.initial(0, _goal(prompt, max_tokens=192))
    assert abs(e0 - n) <= 30
    errs = [abs(probe.update(0, g) - (n - g)) for g in range(1, n)]
    assert np.mean(errs) < 20
    probe.forget(0)


def test_oracle_and_segment_lengths_and_table():
    prompt = TRACES[1].prompt
    n = sum(s.n_tokens for s in prompt.segments)
    o = OracleLengths()
    assert o.initial(0, _goal(prompt)) == n and o.update(0, 3) == n - 3
    s = SegmentLengths()
    first = prompt.segments[0].n_tokens
    assert s.initial(0, _goal(prompt)) == first and s.update(0, first) == prompt.segments[1].n_tokens
    t = TablePredictor({"a": -2.0}, rank_keys=True)
    assert t.initial(0, _goal(None, "a")) == -2.0 and t.update(0, 10) == -2.0
    with pytest.raises(TypeError, match="simulated prompt"):
        o.initial(1, _goal("text prompt"))
