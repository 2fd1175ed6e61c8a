"""Workload generation, JSON workloads and the simulator command."""

import argparse
import json
from collections import Counter

import pytest

from timely_robot.skills import SkillCall, SkillError
from llm_planner_node.core.tuf import URGENT
from timely_tools.sim import run as sim_run
from llm_planner_node.engines.sim_traces import TRACES
from timely_tools.sim.workload import WORKLOADS, generate, load_workload


def test_wid1_shape():
    arr = generate(WORKLOADS["WID1"], seed=0)
    per_event = Counter(a.t for a in arr)
    assert 40 <= len(per_event) <= 95           # Poisson, rate 0.25/s over 260 s: mean 65
    assert max(per_event.values()) <= 8
    for t in per_event:                         # parallel tasks run on distinct agents
        robots = [a.goal.robot_id for a in arr if a.t == t]
        assert len(robots) == len(set(robots))
    assert {a.goal.task_type for a in arr} == {"drone-normal", "drone-urgent"}
    assert generate(WORKLOADS["WID1"], seed=0) == arr


def test_traces_are_lrtrace_like():
    for tid in range(1, 9):
        p = TRACES[tid].prompt
        assert 2 <= len(p.segments) <= 5 and 12 <= sum(s.n_tokens for s in p.segments) <= 26
    for tid in (9, 10, 11):
        assert 85 <= sum(s.n_tokens for s in TRACES[tid].prompt.segments) <= 130
    assert TRACES[6].tuf == URGENT


def _write(tmp_path, arrivals):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"arrivals": arrivals}))
    return path


CUSTOM = {"t": 0.5, "robot_id": "d1", "robot_kind": "drone", "task_type": "drone-urgent",
          "tuf": {"ert": 0.3, "alpha": -5, "beta": 2}, "max_tokens": 32,
          "prompt": {"shared_prefix_tokens": 1000, "task_tokens": 40,
                     "segments": [{"text": "mb(100);", "n_tokens": 5, "calls": [["mb", [100]]]},
                                  {"text": "lnd();", "n_tokens": 4, "calls": [["lnd", []]]}]}}


def test_json_workload(tmp_path):
    arr = load_workload(_write(tmp_path, [{"t": 0.0, "trace": 3, "robot_id": "d0"}, CUSTOM]))
    assert arr[0].goal.prompt == TRACES[3].prompt
    g = arr[1].goal
    assert g.tuf.ert == 0.3 and g.max_tokens == 32 and g.skill_set_id == "tello_minispec"
    assert g.prompt.segments[0].calls == (SkillCall("move_backward", (100,)),)


def test_json_workload_rejects_unsafe_skill(tmp_path):
    bad = json.loads(json.dumps(CUSTOM))
    bad["prompt"]["segments"][0]["calls"] = [["mf", [5000]]]  # above Tello's 500 cm
    with pytest.raises(SkillError):
        load_workload(_write(tmp_path, [bad]))


def test_sim_command(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    sim_run.add_arguments(parser)
    out = tmp_path / "out" / "r.json"  # a folder that does not exist yet
    path = _write(tmp_path, [{"t": 0.0, "trace": 1, "robot_id": "d0"}, CUSTOM])
    assert sim_run.run(parser.parse_args(["--workload", str(path), "--policies", "vllm", "timelyllm",
                                          "--json", str(out)])) == 0
    rows = json.loads(out.read_text())["summaries"]
    assert {(r["policy"], r["task_type"]) for r in rows} >= {("vllm", "all"), ("timelyllm", "drone-urgent")}
    assert all(r["completed"] == r["goals"] for r in rows)
    assert "timelyllm" in capsys.readouterr().out
