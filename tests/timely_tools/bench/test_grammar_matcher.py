"""`timely-fleet bench grammar --matcher-only`: the plan grammars' per-token matcher cost
(timely_tools.bench.grammar_matcher), on the shipped tokenizer and real xgrammar."""

from __future__ import annotations

import json
import subprocess
import sys

from transformers import AutoTokenizer

from timely_tools.bench.grammar_matcher import matcher_cost, plans_by_kind
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
from llm_planner_node.engines.vllm_engine import resolve_model_path


def test_every_canonical_plan_is_replayed_token_by_token():
    plans = plans_by_kind()
    assert set(plans) == {"drone", "arm", "chat"}
    tok = AutoTokenizer.from_pretrained(resolve_model_path("embedded"))
    cost = matcher_cost("embedded", repeats=1)
    for kind, kind_plans in plans.items():
        c = cost[kind]
        assert c["rejected"] == []
        assert c["skill_set"] == DEFAULT_SKILL_SET_FOR_KIND[kind]
        assert c["plans"] == len(kind_plans)
        assert c["tokens"] == sum(len(tok.encode(p, add_special_tokens=False)) for p in kind_plans)
        assert 0 < c["median_us"] <= c["max_us"] and c["mean_us"] <= c["max_us"]


def test_a_plan_outside_the_grammar_is_reported_rejected_and_not_timed():
    good, bad = "tp;", "mu,2000;"  # 2000 cm is outside move_up's safe range: the grammar refuses it
    cost = matcher_cost("embedded", plans={"drone": [good, bad]}, repeats=1)["drone"]
    assert cost["rejected"] == [bad]
    tok = AutoTokenizer.from_pretrained(resolve_model_path("embedded"))
    assert cost["tokens"] == len(tok.encode(good, add_special_tokens=False))


def test_matcher_only_command_writes_json_without_starting_vllm(tmp_path):
    out = tmp_path / "m.json"
    run = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "bench", "grammar", "--matcher-only",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "grammar matcher cost per token" in run.stdout
    data = json.loads(out.read_text())
    assert set(data["matcher"]) == {"drone", "arm", "chat"}
    assert all(v["rejected"] == [] and v["tokens"] > 0 for v in data["matcher"].values())
    assert "loading vLLM" not in run.stderr
