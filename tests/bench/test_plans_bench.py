"""`timely-fleet bench plans`: judging one generation (valid, match, executed on the simulated
robots, unsafe), the report of a model that wrote nothing useful, the command's errors, and one
end-to-end run on the shipped model with vLLM (marked vllm/slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_planner_node.bench import plan_match as pm
from llm_planner_node.bench.plans_bench import (DEFAULT_INSTRUCTIONS, MAX_EXECUTED_CALLS, PlanRun,
                                                execute_dispatched, judge, report, summarize)
from llm_planner_node.segmenters import get_segmenter, segment_all

ROOT = Path(__file__).resolve().parents[2]
RUN_KEYS = {"model", "constrained", "instructions", "valid", "semantic_match", "executed_ok", "unsafe_dispatched",
            "invalid_plan", "truncated", "tokens_per_s", "first_segment_s_median", "per_kind"}
RATES = ("valid_rate", "semantic_match_rate", "executed_ok_rate", "unsafe_dispatched_rate", "invalid_plan_rate",
         "truncated_rate")


def segments(plan: str, kind: str):
    return segment_all(get_segmenter(kind, pm.skill_set_for(kind).id), [plan])


def planned(kind: str, require, plan: str, status: str = "eos", *, forbid=(), max_calls=None, error: str = ""):
    it = pm.parse_instruction({"kind": kind, "instruction": "t", "require": require, "forbid": list(forbid),
                               "max_calls": max_calls})
    segs = segments(plan, kind) if plan else []
    return PlanRun(it, status=status, error=error, segments=segs, plan=plan, t_add=1.0,
                   t_first_segment=1.25 if segs else None, t_end=2.0, tokens=7)


def test_a_good_drone_plan_is_valid_matches_and_runs_on_the_simulated_drone():
    r = judge(planned("drone", [["move_up", 100], ["land"]], "to;mu,100;_1=iv,cat;?_1==True{tp};lnd;", max_calls=8))
    assert (r["valid"], r["semantic_match"], r["executed_ok"], r["unsafe_dispatched"]) == (True, True, True, False)
    assert r["executed_calls"] == 5 and r["calls"] == 5 and r["first_segment_s"] == 0.25 and r["segments"] == 5


def test_a_good_arm_plan_runs_on_the_simulated_arm():
    r = judge(planned("arm", [["pick", "apple"], ["place", "apple", "basket"]],
                      "home(); look(apple); pick(apple); place(apple, basket); home();"))
    assert r["valid"] and r["semantic_match"] and r["executed_ok"] and r["executed_calls"] == 5


def test_a_valid_plan_that_misses_says_why():
    r = judge(planned("drone", [["move_up", 100]], "mu,50;"))
    assert r["valid"] and not r["semantic_match"] and r["why"] == "missing move_up(100)"
    r = judge(planned("arm", [["wipe"]], "home(); pick(cup); wipe(desk); home();", forbid=["pick"]))
    assert r["valid"] and not r["semantic_match"] and r["why"] == "forbidden pick"
    r = judge(planned("drone", [["take_picture"]], "5{tp};", max_calls=3))
    assert r["valid"] and not r["semantic_match"] and r["why"] == "5 calls > max_calls 3"


def test_ends_other_than_eos_are_not_valid_but_what_was_dispatched_still_runs():
    r = judge(planned("drone", [["move_up", 100]], "mu,100;", "truncated"))
    assert not r["valid"] and r["truncated"] and r["executed_ok"] and not r["semantic_match"]
    r = judge(planned("drone", [["land"]], "mu,100;", "invalid_plan", error="invalid plan: unbalanced '}'"))
    assert not r["valid"] and r["invalid_plan"] and r["why"].startswith("invalid_plan: invalid plan")
    r = judge(planned("drone", [["land"]], "", "timeout"))
    assert r["failed"] and not r["executed_ok"] and r["execution_error"] == "nothing dispatched"


def test_a_long_loop_is_unsafe_and_stopped_on_the_simulated_drone():
    r = judge(planned("drone", [["turn_cw", 30]], "12{tc,30};"))
    assert r["unsafe_dispatched"] and r["executed_ok"] and r["executed_calls"] == 12
    ok, ran, why = execute_dispatched(segments("300{tp};", "drone"), "drone")
    assert (ok, ran, why) == (False, MAX_EXECUTED_CALLS, f"stopped after {MAX_EXECUTED_CALLS} calls")


def test_the_adapter_refuses_what_it_would_refuse():
    # a variable argument checked at run time: scan's answer (a bool) as a distance
    ok, ran, why = execute_dispatched(segments("_1=s,cat;mf,_1;", "drone"), "drone")
    assert not ok and ran == 1 and "move_forward" in why


def test_variables_live_across_the_segments_of_a_goal():
    ok, ran, _ = execute_dispatched(segments("_1=s,cat;?_1==True{g,cat;tp};->_1;tp;", "drone"), "drone")
    assert ok and ran == 3  # scan, goto, take_picture; nothing after the return


def test_the_report_of_a_model_that_wrote_nothing_useful():
    runs = [planned("drone", [["land"]], "", "invalid_plan", error="invalid plan: skill 'Sure' is not in ..."),
            planned("arm", [["home"]], "", "eos"), planned("arm", [["home"]], "", "timeout")]
    res = [judge(r) for r in runs]
    assert res[0]["why"].startswith("invalid_plan: invalid plan") and res[0]["invalid_plan"]
    assert res[1]["why"] == "empty plan" and not res[1]["valid"] and res[2]["why"] == "timeout" and res[2]["failed"]
    s = summarize(res, 0, 0.0)
    assert s["valid"] == 0 and s["tokens_per_s"] is None and s["first_segment_s_median"] is None
    run = {"model": "nothing-useful", "constrained": False} | s
    run |= {"per_kind": {"drone": summarize(res[:1], 0, 0.0), "arm": summarize(res[1:], 0, 0.0)}, "items": res}
    text = report({"instructions_file": "x.jsonl", "instructions": 3, "max_tokens": 128, "runs": [run],
                   "errors": [{"model": "gone", "error": "OSError: no such model"}]})
    assert "nothing-useful" in text and "gone: NOT RUN" in text and "empty plan" in text
    json.dumps(run)
    empty = summarize([], 0, 0.0)
    assert empty["instructions"] == 0 and empty["valid_rate"] is None


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = ROOT / ".venv" / "bin" / "timely-fleet"
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "llm_planner_node.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_bad_instruction_file_is_one_sentence_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "drone", "instruction": "land", "require": [["lnd"]]}\n')
    p = _cli("bench", "plans", "--instructions", str(bad))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"timely-fleet bench plans: {bad}, line 1: require pattern 1: use the full skill "
                                "name 'land', not 'lnd'")


def test_the_command_is_registered():
    from llm_planner_node.cli import COMMANDS, build_parser

    assert COMMANDS["bench plans"][1] == "llm_planner_node.bench.plans_bench"
    a = build_parser("bench plans").parse_args(["bench", "plans", "--model", "a", "--model", "b", "--limit", "3",
                                                "--constrained-decoding", "both", "--kind", "arm"])
    assert (a.model, a.limit, a.constrained_decoding, a.kind) == (["a", "b"], 3, "both", "arm")
    assert Path(a.instructions) == DEFAULT_INSTRUCTIONS


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_bench_plans_end_to_end_on_the_shipped_model(tmp_path):
    """Six held-out instructions (drone and arm) on the embedded model, with and without the
    grammar (~40 s on 2 cores, most of it vLLM's start)."""
    out = tmp_path / "plans.json"
    p = _cli("bench", "plans", "--limit", "6", "--constrained-decoding", "both", "--json", str(out), timeout=300)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    doc = json.loads(out.read_text())
    assert doc["instructions"] == 6 and doc["errors"] == [] and doc["max_tokens"] >= 1
    assert [(r["model"], r["constrained"]) for r in doc["runs"]] == [("embedded", True), ("embedded", False)]
    for r in doc["runs"]:
        assert RUN_KEYS <= set(r) and r["instructions"] == 6
        assert set(r["per_kind"]) == {"drone", "arm"}
        assert sum(k["instructions"] for k in r["per_kind"].values()) == 6
        for s in [r, *r["per_kind"].values()]:
            assert RUN_KEYS - {"model", "constrained", "per_kind"} <= set(s)
            for m in ("valid", "semantic_match", "executed_ok", "unsafe_dispatched", "invalid_plan", "truncated"):
                assert isinstance(s[m], int) and 0 <= s[m] <= s["instructions"]
            assert all(0.0 <= s[k] <= 1.0 for k in RATES)
            assert s["semantic_match"] <= s["valid"]
        assert len(r["items"]) == 6 and all(isinstance(x["plan"], str) for x in r["items"])
    grammar = doc["runs"][0]
    assert grammar["valid"] == grammar["instructions"] == 6
    assert grammar["invalid_plan"] == 0 and grammar["truncated"] == 0 and grammar["executed_ok"] == 6
    assert grammar["tokens_per_s"] > 0 and grammar["first_segment_s_median"] > 0
    assert "embedded" in p.stdout and "grammar" in p.stdout and "free" in p.stdout
