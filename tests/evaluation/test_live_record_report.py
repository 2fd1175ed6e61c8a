"""A live run through the real planner node is recorded to a rosbag2; the bag opens with
rosbags, holds the goals in the order they were sent, and `report` on it equals the live run's
metrics. (Node on the simulated engine so this runs in seconds; the vLLM path is the same code.)"""

from __future__ import annotations

import argparse
import json
import math

import pytest
import yaml

pytestmark = pytest.mark.ros


def _same(a, b):
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def test_live_run_recorded_bag_reports_the_same_metrics(tmp_path):
    from llm_planner_node.evaluation import eval_cmd
    from llm_planner_node.evaluation.bag import goal_sequence, metrics_from_bag, read_bag
    from llm_planner_node.evaluation.live import live_instruction
    from llm_planner_node.evaluation.workload_spec import compose, load_spec

    params = tmp_path / "planner.yaml"
    params.write_text(yaml.safe_dump({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}}}))
    bag, out = tmp_path / "run", tmp_path / "live.json"
    parser = argparse.ArgumentParser()
    eval_cmd.add_arguments(parser)
    args = parser.parse_args(["--workload", "WID1", "--policy", "timelyllm", "--engine", "vllm",
                              "--params", str(params), "--limit", "6", "--time-scale", "0.1",
                              "--bag", str(bag), "--json", str(out), "--no-progress"])
    assert eval_cmd.run(args) == 0
    live = json.loads(out.read_text())["policies"][0]
    assert live["task_types"]["all"]["goals"] >= 5

    # the bag holds goals, results, robot status and segments, readable with rosbags
    topics = {t for t, _, _ in read_bag(bag)}
    assert {"/planner/goals", "/planner/results", "/robot_status"} <= topics
    assert any(t.startswith("/robots/") and t.endswith("/segments") for t in topics)

    # same goal sequence as sent
    spec = load_spec("WID1")
    sent = compose(spec, spec.seed)[:6]
    recorded = [m for _, m in goal_sequence(bag)]
    accepted = {(m.robot_id, m.instruction) for m in recorded}
    assert [(m.robot_id, m.instruction) for m in recorded] == [
        (a.goal.robot_id, live_instruction(a.goal)) for a in sent if (a.goal.robot_id, live_instruction(a.goal)) in accepted]

    # report(bag) == live metrics, field by field
    again = metrics_from_bag(bag, policy="timelyllm")
    assert again["task_types"].keys() == live["task_types"].keys()
    for tt, row in live["task_types"].items():
        for field, value in row.items():
            assert _same(again["task_types"][tt][field], value), (tt, field)
