"""The real predictors: ListMLE, Kendall's tau-b, the forward hook, the shipped weights."""

import json
import math

import numpy as np
import pytest
import torch

from llm_planner_node.core.task_model import Goal
from llm_planner_node.core.tuf import NORMAL
from llm_planner_node.predictors import ltr_ranker, trail_probe
from llm_planner_node.predictors.features import PlannerModel, layer_hook
from timely_tools.training.train_predictors import OUT


def test_listmle_tiny_list_hand_computed():
    # lengths [30, 10, 20] -> order shortest first: items 1, 2, 0 with scores 2, 1, 0
    scores = torch.tensor([0.0, 2.0, 1.0])
    loss = ltr_ranker.listmle_loss(scores, torch.tensor([30.0, 10.0, 20.0]))
    expected = -((2 - math.log(math.e ** 2 + math.e + 1)) + (1 - math.log(math.e + 1)) + 0.0)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # the reverse scores are worse
    assert ltr_ranker.listmle_loss(-scores, torch.tensor([30.0, 10.0, 20.0])).item() > loss.item()


def test_kendall_tau_b_with_ties():
    assert ltr_ranker.kendall_tau_b(np.array([1, 2, 3]), np.array([1, 2, 3])) == pytest.approx(1.0)
    assert ltr_ranker.kendall_tau_b(np.array([1, 2, 3]), np.array([3, 2, 1])) == pytest.approx(-1.0)
    # x = [1, 2, 2], y = [1, 2, 3]: C = 2, D = 0, ties in x: 1 -> 2 / sqrt(2 * 3)
    assert ltr_ranker.kendall_tau_b(np.array([1, 2, 2]), np.array([1, 2, 3])) == pytest.approx(2 / math.sqrt(6))


@pytest.fixture(scope="module")
def pm():
    torch.set_num_threads(1)
    return PlannerModel()


def test_forward_hook_captures_layer_and_is_removed(pm):
    ids = pm.ids("Task: find the cat")
    before = len(pm.model.model.layers[2]._forward_hooks)
    with layer_hook(pm.model, 2) as cap:
        with torch.no_grad():
            out = pm.model(torch.tensor([ids]), output_hidden_states=True)
    assert len(cap) == 1 and torch.allclose(cap[0], out.hidden_states[3])
    assert len(pm.model.model.layers[2]._forward_hooks) <= max(before, 1)  # ours removed (transformers may add its own)
    with torch.no_grad():
        pm.model(torch.tensor([ids]))
    assert len(cap) == 1


def test_shipped_predictors_and_report(pm):
    report = json.loads((OUT / "report.json").read_text())
    assert report["ltr"]["kendall_tau_b"] > 0.5
    assert report["trail"]["mae_initial"] < report["trail"]["mae_constant_mean"]
    drone = Goal("d0", "drone", "drone-normal", "", NORMAL, 64, None, "look for the cat")
    arm = Goal("a0", "arm", "arm", "", NORMAL, 192, None, "clean the desk: put the cup, pen and plate away")
    trail = trail_probe.TrailProbePredictor(pm)
    d, a = trail.initial(0, drone), trail.initial(1, arm)
    assert 0 < d < a  # arm plans are longer
    assert trail.update(0, 5) <= d
    ltr = ltr_ranker.LTRPredictor(pm)
    assert ltr.initial(0, drone) < ltr.initial(1, arm)  # lower key = shorter


def test_ltr_eval_hand_computed():
    from timely_tools.training.train_predictors import ltr_eval

    f = {"emb": [[1.0], [2.0], [3.0]], "len": [10, 20, 30]}
    # score = emb: longer prompts score higher, so the keys (-score) put the longest first
    assert ltr_eval(np.array([1.0]), 0.0, np.zeros(1), np.ones(1), f)["kendall_tau_b"] == pytest.approx(-1.0)
    # score = -emb: keys in length order
    r = ltr_eval(np.array([-1.0]), 5.0, np.zeros(1), np.ones(1), f)
    assert r["kendall_tau_b"] == pytest.approx(1.0) and r["oracle_tau_b_bucketed"] == pytest.approx(1.0)


def test_evaluate_reproduces_the_shipped_report():
    """``train --evaluate`` re-measures the shipped weights on the held-out set: the stored
    report.json (the numbers the README and `compare` quote) is current for these weights."""
    from timely_tools.training.train_predictors import evaluate

    report = json.loads((OUT / "report.json").read_text())
    torch.set_num_threads(1)
    r = evaluate(OUT, report["n_per_task"], report["seed"])
    assert r["test_prompts"] == report["ltr"]["test_prompts"]
    for k in ("mae_initial", "mae_constant_mean", "mae_per_token_raw", "mae_per_token_bayes"):
        assert r["trail"][k] == pytest.approx(report["trail"][k], rel=1e-6), k
    assert r["ltr"]["kendall_tau_b"] == pytest.approx(report["ltr"]["kendall_tau_b"], rel=1e-6)
