"""Missions in recordings: `record` keeps every plan_mission goal and result (planner/missions,
planner/mission_results), `report` lists them (instruction, status, each task's robot and status),
and `replay` re-sends a mission as a mission, never its task's goal as a plain goal.

The first test runs the real planner node on the simulated engine with a recorder beside it; the
second writes a bag by hand for the cases a live run does not make (a mission with no result, a
task goal without its mission's result)."""

from __future__ import annotations

import argparse
import json
import time

import pytest

pytestmark = pytest.mark.ros

ROBOTS = [{"id": "drone_1", "kind": "drone", "adapter": "sim"},  # perception unknown: no mission finds things
          {"id": "base_1", "kind": "base", "adapter": "sim", "places": {"kitchen": [16, 3], "lab": [17, 17]},
           "perception": {"source": "topic", "topic": "/base_1/detections", "classes": ["person", "box"]}}]


def _send_mission(node_ctx, instruction: str, **fields):
    from rclpy.action import ActionClient
    from rclpy.node import Node
    from timely_fleet.action import PlanMission

    from llm_planner_node.ros.goal_client import spinning

    node = Node("bag_mission_client", context=node_ctx)
    client = ActionClient(node, PlanMission, "plan_mission")
    try:
        with spinning(node, node_ctx):
            assert client.wait_for_server(timeout_sec=30)
            sent = client.send_goal_async(PlanMission.Goal(instruction=instruction, ert_s=1.0, alpha=-2.0, beta=1.0,
                                                           **fields))
            handle = _done(sent, 30)
            assert handle.accepted
            return _done(handle.get_result_async(), 90).result
    finally:
        client.destroy()
        node.destroy_node()


def _done(future, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not future.done():
        assert time.monotonic() < deadline, "no answer from the planner"
        time.sleep(0.02)
    return future.result()


def _report(source, capsys, tmp_path):
    from timely_tools.evaluation.report_cmd import run as report_run

    out_json = tmp_path / f"{source.name}.json"
    assert report_run(argparse.Namespace(source=[str(source)], policy=None, network_latency_ms=8.0,
                                         json=str(out_json))) == 0
    return capsys.readouterr().out, json.loads(out_json.read_text())


def test_a_live_mission_is_recorded_reported_and_replayed_as_a_mission(ros_context, tmp_path, capsys):
    from timely_fleet.action import PlanMission

    from llm_planner_node.config.params import parse_params
    from llm_planner_node.ros.goal_client import spinning
    from llm_planner_node.up import running_fleet
    from timely_tools.evaluation import bag as B
    from timely_tools.evaluation.replay_cmd import summary_line

    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}}, "robots": ROBOTS})
    with running_fleet(params, time_scale=0.05, context=ros_context):
        rec = B.BagRecorder(tmp_path / "live", context=ros_context, discover=False)
        with spinning(rec.node, ros_context):
            time.sleep(0.5)  # the recorder's subscriptions matched
            ok = _send_mission(ros_context, "look for the box in the lab")
            refused = _send_mission(ros_context, "find the cat")  # no robot declares a camera for it
            time.sleep(0.5)
        rec.close()
        assert ok.status == PlanMission.Result.STATUS_SUCCEEDED, ok.message
        assert refused.status == PlanMission.Result.STATUS_IMPOSSIBLE, refused.message
        [task] = ok.tasks

        # the bag: both missions as received and as they ended; the task's goal as the goal it ran as
        missions = B.missions_from_bag(tmp_path / "live")
        assert [(m["instruction"], m["status"]) for m in missions] == [
            ("look for the box in the lab", "SUCCEEDED"), ("find the cat", "IMPOSSIBLE")]
        [t] = missions[0]["tasks"]
        assert (t["robot_id"], t["goal_id"], t["status"]) == ("base_1", task.goal_id, "SUCCEEDED")
        assert t["allocated_why"].startswith("base_1 (base): able and free")
        assert missions[1]["tasks"][0]["status"] == "NOT_STARTED" and "drone_1 declares nothing" in missions[1]["message"]
        goals = [m for _, m in B.goal_sequence(tmp_path / "live")]
        assert [(g.goal_id, g.robot_id, g.task_type) for g in goals] == [(task.goal_id, "base_1", "mission")]
        # what a replay sends: the two missions, not their task's goal
        assert [(s.kind, s.record.instruction) for s in B.replay_sequence(tmp_path / "live")] == [
            ("mission", "look for the box in the lab"), ("mission", "find the cat")]

        # report: the metrics' table, then the missions with their tasks' robots and statuses
        out, doc = _report(tmp_path / "live", capsys, tmp_path)
        lines = out.splitlines()
        at = lines.index("missions: 2")
        assert lines[at + 1] == f"  {missions[0]['mission_id'][:8]} \"look for the box in the lab\": SUCCEEDED: t1 on base_1: succeeded"
        assert lines[at + 2] == f"    t1 on base_1: SUCCEEDED (goal {task.goal_id[:8]})"
        assert lines[at + 3].startswith(f"  {missions[1]['mission_id'][:8]} \"find the cat\": IMPOSSIBLE: ")
        assert lines[at + 4] == "    t1 on no robot: NOT_STARTED"
        assert doc["missions"] == missions
        # the task's goal is a goal of the metrics, its end recorded on planner/results as any goal's
        assert {k: doc["policies"][0]["task_types"]["all"][k] for k in ("goals", "completed")} == {"goals": 1,
                                                                                                   "completed": 1}

        # replay into the running planner, recorded: each mission sent again as a mission
        rec2 = B.BagRecorder(tmp_path / "again", context=ros_context, discover=False)
        with spinning(rec2.node, ros_context):
            time.sleep(0.5)
            res = B.replay(tmp_path / "live", context=ros_context, time_scale=0.2, progress=False,
                           result_timeout_s=60)
            time.sleep(0.5)
        rec2.close()
    assert list(res) == [] and [int(r.result.status) for r in res.missions] == [
        PlanMission.Result.STATUS_SUCCEEDED, PlanMission.Result.STATUS_IMPOSSIBLE]
    assert summary_line(res) == ("replayed 0 goals: 0 succeeded, 0 failed, 0 without result; "
                                 "2 missions: 1 succeeded, 1 failed (IMPOSSIBLE 1), 0 without result")
    again = B.missions_from_bag(tmp_path / "again")
    assert [(m["instruction"], m["status"]) for m in again] == [(m["instruction"], m["status"]) for m in missions]
    assert {m["mission_id"] for m in again}.isdisjoint(m["mission_id"] for m in missions)  # new missions
    # one goal for the one task: the recorded task goal was not re-sent beside its mission
    [goal] = [m for _, m in B.goal_sequence(tmp_path / "again")]
    assert goal.robot_id == "base_1" and goal.goal_id == again[0]["tasks"][0]["goal_id"] != task.goal_id


def test_a_bag_written_by_hand_lists_and_replays_what_it_holds(tmp_path):
    """A plain goal, a mission whose task goal the result names, and a mission that had not ended
    when the recording stopped (its task goal known only by its task type)."""
    from builtin_interfaces.msg import Time
    from rclpy.serialization import serialize_message
    from timely_fleet.action import PlanMission
    from timely_fleet.msg import GoalRecord, MissionRecord, MissionResult, MissionTask

    from llm_planner_node.ros.mission_server import NO_GOAL, MISSION_STATUS_OF
    from llm_planner_node.service.missions import MISSION_STATUS_NAMES
    from timely_tools.evaluation import bag as B

    # the names the bag and the MCP front end print are the action's constants
    assert {v: k.name for k, v in MISSION_STATUS_OF.items()} == MISSION_STATUS_NAMES
    assert MISSION_STATUS_NAMES == {getattr(PlanMission.Result, f"STATUS_{n}"): n for n in MISSION_STATUS_NAMES.values()}
    assert B.TASK_NOT_STARTED == NO_GOAL

    w = B.BagWriter(tmp_path / "hand")

    def goal(gid, at, task_type, robot):
        w.write(B.GOALS_TOPIC, serialize_message(GoalRecord(
            goal_id=gid, stamp=Time(sec=at), robot_id=robot, robot_kind="drone", task_type=task_type,
            instruction=f"task of {gid}", ert_s=1.0, alpha=-2.0, beta=1.0)), at * 10**9)

    w.write(B.MISSIONS_TOPIC, serialize_message(MissionRecord(
        mission_id="m1" * 16, stamp=Time(sec=100), instruction="find the cat", robot_kinds=["drone"],
        ert_s=0.2, alpha=-6.67, beta=2.0)), 100 * 10**9)
    goal("g1", 101, "mission", "tello_2")
    goal("plain", 102, "drone-normal", "tello_1")
    w.write(B.MISSION_RESULTS_TOPIC, serialize_message(MissionResult(
        mission_id="m1" * 16, stamp=Time(sec=104), instruction="find the cat", status=1, reason="failed",
        message="t1 on tello_1: timeout: silent", tasks=[MissionTask(
            task="t1", robot_id="tello_1", goal_id="g2", allocated_why="tello_1 (drone): able and free",
            tried_robots=["tello_2"], tried_why=["robot_failed: motor"], status=6)])), 104 * 10**9)
    w.write(B.MISSIONS_TOPIC, serialize_message(MissionRecord(
        mission_id="m2" * 16, stamp=Time(sec=105), instruction="go to the lab", robot_ids=["base_1"],
        ert_s=1.0, alpha=-2.0, beta=1.0)), 105 * 10**9)
    goal("g3", 106, "mission", "base_1")
    w.close()

    seq = B.replay_sequence(tmp_path / "hand")
    assert [(round(s.offset_s, 3), s.kind, s.record.instruction) for s in seq] == [
        (0.0, "mission", "find the cat"), (2.0, "goal", "task of plain"), (5.0, "mission", "go to the lab")]
    g = B.plan_mission_goal(seq[0].record)
    assert (g.instruction, list(g.robot_ids), list(g.robot_kinds), g.ert_s, g.alpha, g.beta) == (
        "find the cat", [], ["drone"], 0.2, -6.67, 2.0)
    missions = B.missions_from_bag(tmp_path / "hand")
    assert [(m["instruction"], m["status"]) for m in missions] == [("find the cat", "FAILED"), ("go to the lab", "no result")]
    assert missions[0]["tasks"] == [{"task": "t1", "robot_id": "tello_1", "goal_id": "g2", "status": "TIMEOUT",
                                     "message": "", "allocated_why": "tello_1 (drone): able and free",
                                     "tried": [["tello_2", "robot_failed: motor"]]}]
    assert B.mission_lines(missions) == [
        "missions: 2",
        f"  {'m1' * 4} \"find the cat\" (robots drone): FAILED: t1 on tello_1: timeout: silent",
        "    t1 on tello_1: TIMEOUT (goal g2); left tello_2: robot_failed: motor",
        f"  {'m2' * 4} \"go to the lab\" (robots base_1): no result",
    ]
