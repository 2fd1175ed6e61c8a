"""Trail's per-token Bayesian refinement with the real hidden-state probe, fed the token ids
the live engine reports: better remaining-length estimates than the prior step alone."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")


def test_observing_generated_tokens_beats_the_prior_step_on_held_out_plans():
    from transformers import AutoTokenizer

    from llm_planner_node.core.task_model import Goal
    from llm_planner_node.core.tuf import NORMAL
    from llm_planner_node.planner_model import DEFAULT_MODEL_PATH
    from llm_planner_node.planner_model.corpus import held_out_variations
    from llm_planner_node.predictors.trail_probe import TrailProbePredictor

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_PATH)
    live, prior = TrailProbePredictor(), TrailProbePredictor(refine_with_tokens=False)
    err_live, err_prior = [], []
    for gid, e in enumerate(held_out_variations(1)):
        goal = Goal("r", e.robot_kind, "t", "", NORMAL, 200, None, e.instruction)
        live.initial(gid, goal)
        prior.initial(gid, goal)
        start = list(live._context[gid])
        # what the model generates after "Plan:" (a space, the plan, end of sequence)
        plan = tok(" " + e.plan, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        n = len(plan)
        for t in range(1, n):
            err_live.append(abs(live.observe_tokens(gid, (plan[t - 1],), t) - (n - t)))
            err_prior.append(abs(prior.observe_tokens(gid, (plan[t - 1],), t) - (n - t)))
        assert live._context[gid] == start + plan[:-1]  # probe reads prompt + generated ids
        live.forget(gid)
        assert gid not in live._context
    assert np.mean(err_live) < 0.8 * np.mean(err_prior), (np.mean(err_live), np.mean(err_prior))
