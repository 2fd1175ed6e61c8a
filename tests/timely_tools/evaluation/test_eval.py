"""eval (sim) output, JSON/plots, report from JSON, aggregation == core.metrics.summarize."""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter

import pytest

from llm_planner_node.core.metrics import request_outcome
from timely_tools.evaluation import eval_cmd, report_cmd
from timely_tools.evaluation.results import summarize_outcomes
from timely_tools.evaluation.workload_spec import compose, load_spec
from timely_tools.sim.simulation import simulate


def test_summarize_outcomes_equals_core_summarize():
    spec = load_spec("WID1").with_(duration_s=60.0)
    arr = compose(spec, 1)
    res = simulate(arr, "timelyllm", seed=1)
    outs = [o for o in (request_outcome(r, 0.008) for r in res.requests) if o is not None]
    goals = Counter(r.goal.task_type for r in res.requests)
    tokens = Counter()
    for r in res.requests:
        tokens[r.goal.task_type] += r.generated_tokens
    span = res.end_time - min(a.t for a in arr)
    mine = summarize_outcomes("timelyllm", outs, goals, tokens, span)
    assert [s.as_dict() for s in mine] == [s.as_dict() for s in res.summary]


def _args(**kw):
    base = dict(workload="WID1", policy="vllm,timelyllm", engine="sim", seed=None, max_batch=None,
                chat_segmentation=None, json=None, out=None, no_progress=True, bag=None, robots="",
                time_scale=1.0, limit=None, timeout=10.0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_eval_sim_json_out_and_report(tmp_path, capsys):
    yml = tmp_path / "small.yaml"
    yml.write_text("name: small\nduration_s: 40\neps: 0.5\nmax_tpe: 4\ntraces: [1, 6]\nagents: 6\nseed: 3\n")
    j = tmp_path / "r.json"
    assert eval_cmd.run(_args(workload=str(yml), json=str(j), out=str(tmp_path / "o"))) == 0
    out = capsys.readouterr().out
    doc = json.loads(j.read_text())
    assert [p["policy"] for p in doc["policies"]] == ["vllm", "timelyllm"]
    assert doc["workload"]["name"] == "small" and doc["seed"] == 3
    n = len(compose(load_spec(str(yml))))
    for p in doc["policies"]:
        tt = p["task_types"]
        assert set(tt) == {"drone-normal", "drone-urgent", "all"}
        assert tt["all"]["goals"] == n == tt["drone-normal"]["goals"] + tt["drone-urgent"]["goals"]
        for f in ("mean_utility", "utility_pct_of_beta", "mean_response_s", "p90_response_s",
                  "mean_waiting_s", "completed", "tokens_per_s"):
            assert f in tt["all"]
        assert tt["all"]["p90_response_s"] >= 0
    # same seed -> same sim result as calling simulate directly
    direct = simulate(compose(load_spec(str(yml))), "timelyllm", seed=3).by_type("drone-urgent")
    assert doc["policies"][1]["task_types"]["drone-urgent"]["mean_utility"] == pytest.approx(direct.mean_utility)
    assert (tmp_path / "o" / "utility.png").stat().st_size > 1000
    assert (tmp_path / "o" / "results.json").is_file()
    assert "timelyllm" in out and "drone-urgent" in out
    # report from json prints the same table
    assert report_cmd.run(argparse.Namespace(source=str(j), policy=None, network_latency_ms=8.0,
                                             json=None)) == 0
    rep = capsys.readouterr().out
    table = [ln for ln in out.splitlines() if ln.startswith(("policy ", "vllm ", "timelyllm "))]
    assert len(table) == 1 + 2 * 3
    assert "\n".join(table) in rep


def test_eval_rejects_unknown_policy_and_workload(capsys):
    assert eval_cmd.run(_args(policy="vllm,fastest")) == 2
    assert "unknown policy fastest" in capsys.readouterr().err
    assert eval_cmd.run(_args(workload="nope.yaml")) == 2


def test_chat_sentence_beats_paragraph_and_vllm():
    spec = load_spec("CHAT").with_(duration_s=60.0)
    sen = eval_cmd.run_sim(spec, ["vllm", "timelyllm"], 0, chat_segmentation="sentence")
    para = eval_cmd.run_sim(spec, ["timelyllm"], 0, chat_segmentation="paragraph")
    u = lambda r: r["task_types"]["all"]["mean_utility"]  # noqa: E731
    w = lambda r: r["task_types"]["all"]["mean_waiting_s"]  # noqa: E731
    assert u(sen[1]) > u(para[0]) > u(sen[0])
    assert w(sen[1]) < w(para[0]) < w(sen[0])
    assert not math.isnan(sen[0]["task_types"]["all"]["tokens_per_s"])
