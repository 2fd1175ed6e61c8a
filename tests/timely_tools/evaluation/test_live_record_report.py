"""A live run through the real planner node is recorded to a rosbag2; the bag opens with
rosbags, holds the goals in the order they were sent, and `report` on it equals the live run's
metrics. (Node on the simulated engine so this runs in seconds; the vLLM path is the same code.)"""

from __future__ import annotations

import argparse
import time
import json
import math
from collections import Counter

import pytest
import yaml

pytestmark = pytest.mark.ros


def _same(a, b):
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


def test_live_run_recorded_bag_reports_the_same_metrics(tmp_path):
    from timely_tools.evaluation import eval_cmd
    from timely_tools.evaluation.bag import goal_sequence, metrics_from_bag, read_bag
    from timely_tools.evaluation.live import live_instruction
    from timely_tools.evaluation.workload_spec import compose, load_spec

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
    assert "/robot_segments" in topics  # every robot's segments, on the planner's shared topic

    # the goals sent, each once: one plan per robot may move a task to a free robot of the same
    # kind or hold it until one frees (sim/agents.py), so robots and order may differ
    spec = load_spec("WID1")
    sent = compose(spec, spec.seed)[:6]
    recorded = [m for _, m in goal_sequence(bag)]
    assert Counter((m.robot_kind, m.instruction) for m in recorded) == Counter(
        (a.goal.robot_kind, live_instruction(a.goal)) for a in sent)

    # report(bag) == live metrics, field by field
    again = metrics_from_bag(bag, policy="timelyllm")
    assert again["task_types"].keys() == live["task_types"].keys()
    for tt, row in live["task_types"].items():
        for field, value in row.items():
            assert _same(again["task_types"][tt][field], value), (tt, field)


def test_replaying_a_recorded_bag_into_a_running_node_sends_the_same_goals(tmp_path, ros_context):
    """Record a short live run, start a fresh planner + robots, replay the bag into it: the new
    node accepts the same goals in the same order and they complete."""
    from timely_tools.evaluation import eval_cmd
    from timely_tools.evaluation.bag import BagRecorder, goal_sequence, replay
    from timely_tools.evaluation.live import fleet_params_for
    from timely_tools.evaluation.workload_spec import compose, load_spec
    from llm_planner_node.up import running_fleet

    params = tmp_path / "planner.yaml"
    params.write_text(yaml.safe_dump({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}}}))
    bag = tmp_path / "original"
    parser = argparse.ArgumentParser()
    eval_cmd.add_arguments(parser)
    assert eval_cmd.run(parser.parse_args(["--workload", "WID1", "--policy", "timelyllm", "--engine", "vllm",
                                           "--params", str(params), "--limit", "4", "--time-scale", "0.1",
                                           "--bag", str(bag), "--no-progress"])) == 0
    original = goal_sequence(bag)
    spec = load_spec("WID1")
    goals = [a.goal for a in compose(spec, spec.seed)[:4]]
    with running_fleet(fleet_params_for(goals, "timelyllm", str(params)), time_scale=0.1,
                       context=ros_context):
        rec = BagRecorder(tmp_path / "replayed", context=ros_context)

        from llm_planner_node.ros.goal_client import spinning

        with spinning(rec.node, ros_context):
            time.sleep(0.5)
            results = replay(bag, context=ros_context, time_scale=1.0, progress=False)
            time.sleep(1.0)
        rec.close()
    replayed = goal_sequence(tmp_path / "replayed")
    assert [(m.robot_id, m.instruction) for _, m in replayed] == [(m.robot_id, m.instruction) for _, m in original]
    # original relative timing is kept (within scheduling jitter)
    for (t0, _), (t1, _) in zip(original, replayed):
        assert abs(t0 - t1) < 0.25
    assert all(r is not None and r.result.status == 0 for r in results)
