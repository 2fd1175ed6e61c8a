"""Workload specs: validation, presets = TimelyLLM Table 3, composed statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llm_planner_node.core.tuf import NORMAL, TUFParams
from timely_tools.evaluation.traces import chat_segments, compose_story, library
from timely_tools.evaluation.workload_spec import (SpecError, compose, load_spec, parse_spec,
                                                       stats)
from timely_tools.sim.workload import WORKLOADS, generate

# TimelyLLM Table 3: eps, max_tpe, traces, agents, duration
TABLE3 = {"WID1": (0.25, 8, tuple(range(1, 9)), 25, 260.0),
          "WID2": (0.25, 16, tuple(range(1, 9)), 42, 300.0),
          "WID3": (0.1, 8, (9, 10, 11), 40, 900.0)}


@pytest.mark.parametrize("wid", sorted(TABLE3))
def test_presets_are_table3(wid):
    s = load_spec(wid)
    assert (s.eps, s.max_tpe, s.traces, s.agents, s.duration_s) == TABLE3[wid]
    assert s.network_latency_ms == 8.0


@pytest.mark.parametrize("wid", sorted(TABLE3))
def test_presets_reproduce_table3_statistics(wid):
    eps, max_tpe, _, agents, duration = TABLE3[wid]
    spec = load_spec(wid)
    seeds = range(8)
    st = [stats(compose(spec, seed)) for seed in seeds]
    n = len(st)
    # events: Poisson(eps * duration) -> mean over seeds within 3 standard errors
    lam = eps * duration
    ev = np.array([s.events for s in st])
    assert abs(ev.mean() - lam) <= 3 * math.sqrt(lam / n)
    # tasks per event: uniform 1..max_tpe, mean (1+M)/2, variance (M^2-1)/12
    tpe = np.concatenate([_tasks_per_event(compose(spec, seed)) for seed in seeds])
    mu, var = (1 + max_tpe) / 2, (max_tpe ** 2 - 1) / 12
    assert abs(tpe.mean() - mu) <= 3 * math.sqrt(var / len(tpe))
    assert tpe.max() <= max_tpe and tpe.min() >= 1
    for s in st:
        assert s.agents <= agents
        assert 0 <= s.first_s and s.last_s < duration
    # over 8 seeds every agent is used at least once (P(miss) is negligible)
    used = set().union(*({a.goal.robot_id for a in compose(spec, seed)} for seed in seeds))
    assert len(used) == agents
    # the last event is close to the end: mean gap ~ 1/eps
    assert np.mean([duration - s.last_s for s in st]) < 4 / eps


def _tasks_per_event(arrivals):
    _, counts = np.unique([a.t for a in arrivals], return_counts=True)
    return counts


def test_compose_equals_sim_generate():
    a = compose(load_spec("WID1"), 3)
    b = generate(WORKLOADS["WID1"], 3)
    assert [(x.t, x.goal) for x in a] == [(x.t, x.goal) for x in b]


def test_tuf_override_and_latency():
    spec = parse_spec({"name": "x", "duration_s": 60, "eps": 0.5, "max_tpe": 4, "traces": [1, 6],
                       "agents": 10, "seed": 1, "network_latency_ms": 20,
                       "tuf": {"urgent": {"ert": 0.3, "alpha": -4, "beta": 3}}})
    arr = compose(spec)
    tufs = {a.goal.task_type: a.goal.tuf for a in arr}
    assert tufs["drone-urgent"] == TUFParams(0.3, -4.0, 3.0)
    assert tufs["drone-normal"] == NORMAL
    assert spec.planner_config().network_latency_s == pytest.approx(0.020)


@pytest.mark.parametrize("bad,msg", [
    ({"duration_s": 10}, "missing"),
    ({"eps": -1}, "'eps' must be > 0"),
    ({"max_tpe": 2.5}, "'max_tpe' must be an integer"),
    ({"traces": [12]}, "unknown trace 12"),
    ({"traces": []}, "non-empty"),
    ({"colour": "red"}, "unknown field"),
    ({"tuf": {"urgent": {"ert": 0.2, "alpha": 1, "beta": 2}}}, "alpha must be <= 0"),
    ({"tuf": {"panic": {"ert": 0.2, "alpha": -1, "beta": 2}}}, "tuf class 'panic'"),
    ({"chat_segmentation": "word"}, "chat_segmentation"),
])
def test_invalid_specs_raise_clear_errors(bad, msg):
    base = {"name": "x", "duration_s": 60, "eps": 0.5, "max_tpe": 4, "traces": [1], "agents": 10}
    data = {**base, **bad}
    if bad == {"duration_s": 10}:
        del data["agents"]
    with pytest.raises(SpecError, match=msg):
        parse_spec(data, "t.yaml")


def test_unknown_preset():
    with pytest.raises(SpecError, match="not a preset"):
        load_spec("WID9")


def test_library_has_11_traces_with_paper_classes():
    lib = library()
    assert [t.id for t in lib] == list(range(1, 12))
    assert [t.tuf_class for t in lib] == ["normal"] * 5 + ["urgent"] * 3 + ["normal"] * 3
    assert {t.robot_kind for t in lib[:8]} == {"drone"} and {t.robot_kind for t in lib[8:]} == {"arm"}
    drone = np.mean([t.plan_tokens for t in lib[:8]])
    arm = np.mean([t.plan_tokens for t in lib[8:]])
    assert 10 <= drone <= 40 and 60 <= arm <= 160  # paper: ~20 and ~100 tokens


def test_chat_segmentation_and_tokens():
    story = "One two three. Four five!\n\nSix seven eight nine ten."
    sen = chat_segments(story, "sentence")
    par = chat_segments(story, "paragraph")
    assert [s.text for s in sen] == ["One two three.", "Four five!", "Six seven eight nine ten."]
    assert [s.n_tokens for s in sen] == [4, 3, 8]  # ceil(1.3*3)=4, ceil(2.6)=3, ceil(6.5)=7 + eos
    assert [s.n_tokens for s in par] == [ceil13(5), ceil13(5) + 1]
    assert len(chat_segments(story, "none")) == 1


def ceil13(words):
    return math.ceil(1.3 * words)


def test_chat_workload_same_arrivals_for_both_segmentations():
    spec = load_spec("CHAT")
    sen = compose(spec, 2, chat_segmentation="sentence")
    par = compose(spec, 2, chat_segmentation="paragraph")
    assert [a.t for a in sen] == [a.t for a in par]
    assert [a.goal.instruction for a in sen] == [a.goal.instruction for a in par]
    s0, p0 = sen[0].goal.prompt, par[0].goal.prompt
    assert len(s0.segments) > len(p0.segments) >= 4
    # same text either way
    assert " ".join(s.text for s in s0.segments).split() == " ".join(s.text for s in p0.segments).split()
    assert all(a.goal.tuf == NORMAL for a in sen)


def test_story_lengths():
    rng = np.random.default_rng(0)
    words = [len(compose_story(rng)[1].split()) for _ in range(50)]
    assert 100 <= min(words) and max(words) <= 700
