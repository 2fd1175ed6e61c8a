"""eval / report / replay outputs: per-policy bags are printed and named,
replay counts failed goals, report rows stay aligned for failed goals, and a table comparing
policies over different numbers of completed goals says so. Bags are written with the project's
own writer (BagWriter) from real ROS messages; the commands run as subprocesses."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[3]
EXE = ROOT / ".venv" / "bin" / "timely-fleet"
ROBOT_FAILED = 4


def tf(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def write_bag(path: Path, goals: list[tuple[str, str, int | None]]) -> None:
    """A bag of GoalRecords and GoalResults: (goal id, task type, result status or None = no result)."""
    from builtin_interfaces.msg import Time
    from rclpy.serialization import serialize_message
    from timely_fleet.msg import GoalRecord, GoalResult, SegmentReport

    from timely_tools.evaluation.bag import GOALS_TOPIC, RESULTS_TOPIC, BagWriter

    w = BagWriter(path)
    for i, (gid, tt, status) in enumerate(goals):
        w.write(GOALS_TOPIC, serialize_message(GoalRecord(
            goal_id=gid, stamp=Time(sec=100 + i), robot_id=f"drone{i}", robot_kind="drone", task_type=tt,
            instruction="look for the cat", ert_s=1.0, alpha=-2.0, beta=1.0, skill_set="tello_minispec",
            max_tokens=64)), (100 + i) * 10**9)
    for i, (gid, tt, status) in enumerate(goals):
        if status is None:
            continue
        segs = [SegmentReport(index=0, dispatch_s=0.4, execution_start_s=0.5, execution_end_s=1.5)] if status == 0 else []
        w.write(RESULTS_TOPIC, serialize_message(GoalResult(
            goal_id=gid, status=status, message="" if status == 0 else "robot drone failed: motor",
            robot_id=f"drone{i}", task_type=tt, ert_s=1.0, alpha=-2.0, beta=1.0, segments=segs)),
            (101 + i) * 10**9)
    w.close()


def table_of(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    return [line for line in lines[start:] if not line.startswith("note:")]


def test_report_rows_stay_aligned_for_a_failed_goal(tmp_path):
    write_bag(tmp_path / "run", [("g0", "drone-urgent", 0), ("g1", "drone-normal", ROBOT_FAILED)])
    proc = tf("report", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "run: 2 goals",
        "policy       task type      goals  done  utility  %beta  resp(s)  p90(s)  wait(s)   tok/s",
        "run          drone-normal       1     0        -      -        -       -        -       -",
        "run          drone-urgent       1     1    1.000  100.0    0.500   0.500    0.500       -",
        "run          all                2     1    1.000  100.0    0.500   0.500    0.500       -",
    ]


def test_report_of_a_multi_policy_eval_bag_names_the_per_policy_bags(tmp_path):
    write_bag(tmp_path / "w1_vllm", [("a", "drone-normal", 0), ("b", "drone-normal", ROBOT_FAILED)])
    write_bag(tmp_path / "w1_timelyllm", [("a", "drone-normal", 0), ("b", "drone-normal", 0)])
    proc = tf("report", "w1", cwd=tmp_path)
    assert "Traceback" not in proc.stderr and proc.returncode == 2
    assert proc.stderr == ("timely-fleet report: w1 does not exist, but `eval --bag w1` with several policies "
                           "wrote one bag per policy: w1_timelyllm, w1_vllm (report those)\n")
    # both in one table, which says that they completed different numbers of goals
    proc = tf("report", "w1_vllm", "w1_timelyllm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = table_of(proc.stdout)
    assert len({len(r) for r in rows}) == 1  # aligned, also with the longer policy labels
    assert [r.split()[:4] for r in rows[1:]] == [["w1_vllm", "drone-normal", "2", "1"], ["w1_vllm", "all", "2", "1"],
                                                 ["w1_timelyllm", "drone-normal", "2", "2"],
                                                 ["w1_timelyllm", "all", "2", "2"]]
    assert proc.stdout.splitlines()[-1] == (
        "note: the policies completed different numbers of goals (w1_vllm 1 of 2, w1_timelyllm 2 of 2); "
        "their means are over different goals (column 'done')")


def test_table_notes_different_completed_counts_only_when_they_differ():
    from timely_tools.evaluation.results import format_table

    def res(policy, done):
        return {"policy": policy, "task_types": {"all": {
            "goals": 5, "completed": done, "mean_utility": 0.5, "utility_pct_of_beta": 50.0,
            "mean_segment_utility": 0.5, "mean_response_s": 1.0, "p90_response_s": 1.0,
            "mean_waiting_s": 1.0, "tokens_per_s": None}}}

    assert "note:" not in format_table([res("vllm", 5), res("timelyllm", 5)])
    assert format_table([res("vllm", 3), res("timelyllm", 5)]).splitlines()[-1] == (
        "note: the policies completed different numbers of goals (vllm 3 of 5, timelyllm 5 of 5); "
        "their means are over different goals (column 'done')")


def test_replay_counts_failed_goals(ros_context, tmp_path):
    """A fake planner answers the first replayed goal SUCCEEDED and the second ROBOT_FAILED."""
    from rclpy.action import ActionServer
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.action import PlanTask

    write_bag(tmp_path / "run", [("g0", "drone-normal", 0), ("g1", "drone-normal", ROBOT_FAILED)])
    node = Node("fake_planner_replay", context=ros_context)
    got = []

    def execute(handle):
        got.append(handle.request.robot_id)
        handle.succeed()
        return PlanTask.Result(status=0 if handle.request.robot_id == "drone0" else ROBOT_FAILED)

    server = ActionServer(node, PlanTask, "plan_task", execute)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(node)
    stop = threading.Event()
    th = threading.Thread(target=lambda: [ex.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)])
    th.start()
    try:
        proc = tf("replay", "run", "--time-scale", "0.1", "--timeout", "30", cwd=tmp_path)
    finally:
        stop.set()
        th.join()
        server.destroy()
        node.destroy_node()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(got) == ["drone0", "drone1"]
    assert proc.stdout.splitlines()[-1] == \
        "replayed 2 goals: 1 succeeded, 1 failed (ROBOT_FAILED 1), 0 without result"


def test_replay_summary_line():
    from types import SimpleNamespace as NS

    from timely_tools.evaluation.replay_cmd import summary_line

    res = [NS(result=NS(status=0)), NS(result=NS(status=4)), NS(result=NS(status=6)), NS(result=NS(status=4)), None]
    assert summary_line(res) == "replayed 5 goals: 1 succeeded, 3 failed (ROBOT_FAILED 2, TIMEOUT 1), 1 without result"


def test_live_eval_with_two_policies_prints_where_each_bag_went(tmp_path):
    """The smallest live run: the node on the simulated engine, two goals, two policies."""
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump({"planner": {"engine": {"kind": "sim"}}}))
    t0 = time.monotonic()
    proc = tf("eval", "--workload", "WID1", "--policy", "vllm,timelyllm", "--engine", "vllm", "--params", "sim.yaml",
              "--limit", "2", "--time-scale", "0.1", "--timeout", "30", "--bag", "w1", "--no-progress", cwd=tmp_path,
              timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-2:] == ["recorded vllm to w1_vllm (timely-fleet report w1_vllm)",
                                             "recorded timelyllm to w1_timelyllm (timely-fleet report w1_timelyllm)"]
    assert (tmp_path / "w1_vllm" / "metadata.yaml").is_file() and (tmp_path / "w1_timelyllm" / "metadata.yaml").is_file()
    # the same --bag again would overwrite: refused before anything starts
    again = tf("eval", "--workload", "WID1", "--policy", "vllm,timelyllm", "--engine", "vllm", "--params", "sim.yaml",
               "--limit", "2", "--bag", "w1", "--no-progress", cwd=tmp_path)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert again.stderr == ("timely-fleet eval: w1_vllm, w1_timelyllm already exist: give --bag a new path "
                            "(a recording never overwrites another)\n")
    assert time.monotonic() - t0 < 120
