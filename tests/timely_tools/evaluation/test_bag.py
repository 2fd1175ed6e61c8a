"""Recording over real rclpy, reading with rosbags, report == direct metrics, replay order."""

from __future__ import annotations

import math
import threading
import time

import pytest

from timely_tools.evaluation import bag as B
from timely_tools.evaluation.report_cmd import run as report_run


def _msgs():
    from builtin_interfaces.msg import Time
    from timely_fleet.msg import (GoalRecord, GoalResult, RobotStatus, SegmentReport, Skill,
                                  SkillSegment)

    goals, segs, status = [], [], []
    # goal g0: urgent drone, 2 segments; g1: normal drone, 1 segment; g2: accepted, never finished
    spec = [("g0", "drone1", "drone-urgent", (0.2, -6.67, 2.0)),
            ("g1", "drone2", "drone-normal", (1.0, -2.0, 1.0)),
            ("g2", "drone1", "drone-normal", (1.0, -2.0, 1.0))]
    for i, (gid, rid, tt, (ert, a, b)) in enumerate(spec):
        goals.append(GoalRecord(goal_id=gid, stamp=Time(sec=100 + i, nanosec=250_000_000 * i),
                                robot_id=rid, robot_kind="drone", task_type=tt,
                                instruction=f"task {i}", ert_s=ert, alpha=a, beta=b,
                                skill_set="tello_minispec", max_tokens=64))
    sk = Skill(name="move_forward", arg_names=["distance"], arg_values=["100"])
    segs.append(SkillSegment(goal_id="g0", robot_id="drone1", sequence=0, text="mf(100);", skills=[sk]))
    segs.append(SkillSegment(goal_id="g1", robot_id="drone2", sequence=0, text="mf(100);", skills=[sk]))
    status.append(RobotStatus(robot_id="drone1", goal_id="g0", sequence=0, state=3))
    r0 = GoalResult(goal_id="g0", status=0, robot_id="drone1", task_type="drone-urgent",
                    ert_s=0.2, alpha=-6.67, beta=2.0, plan_text="mf(100); mb(50);",
                    segments=[SegmentReport(index=0, dispatch_s=0.29, execution_start_s=0.3, execution_end_s=1.3),
                              SegmentReport(index=1, dispatch_s=0.9, execution_start_s=1.5, execution_end_s=2.0)],
                    response_time_s=0.3, robot_waiting_s=0.5, time_utility=2 - 6.67 * 0.1)
    r1 = GoalResult(goal_id="g1", status=0, robot_id="drone2", task_type="drone-normal",
                    ert_s=1.0, alpha=-2.0, beta=1.0,
                    segments=[SegmentReport(index=0, dispatch_s=1.1, execution_start_s=1.2, execution_end_s=3.2)],
                    response_time_s=1.2, robot_waiting_s=1.2, time_utility=0.6)
    return goals, segs, status, [r0, r1]


def test_record_open_report_equals_direct(ros_context, tmp_path):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from timely_fleet.msg import GoalRecord, GoalResult, RobotStatus, SkillSegment

    goals, segs, status, results = _msgs()
    path = tmp_path / "run1"
    rec = B.BagRecorder(path, context=ros_context, robots=["drone1"], discover=True,
                        discover_period_s=0.1)
    pub_node = Node("fake_planner", context=ros_context)
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    pg = pub_node.create_publisher(GoalRecord, B.GOALS_TOPIC, qos)
    pr = pub_node.create_publisher(GoalResult, B.RESULTS_TOPIC, qos)
    ps = pub_node.create_publisher(RobotStatus, B.STATUS_TOPIC, qos)
    # g0's segment on the shared topic (the planner's default), g1's on drone2's own topic
    # (security.per_robot_topics), which the recorder finds by discovery
    pseg = {"drone1": pub_node.create_publisher(SkillSegment, B.SEGMENTS_TOPIC, qos),
            "drone2": pub_node.create_publisher(SkillSegment, "/robots/drone2/segments", qos)}
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(rec.node)
    ex.add_node(pub_node)

    def spin_until(cond, timeout=10.0):
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            ex.spin_once(timeout_sec=0.05)
        return cond()

    # wait for discovery: recorder subscribed to drone2's topic, and every publisher matched
    assert spin_until(lambda: "/robots/drone2/segments" in rec.topics)
    pubs = [pg, pr, ps, *pseg.values()]
    assert spin_until(lambda: all(p.get_subscription_count() >= 1 for p in pubs))
    for g in goals:
        pg.publish(g)
    for s in segs:
        pseg[s.robot_id].publish(s)
    ps.publish(status[0])
    for r in results:
        pr.publish(r)
    want = {B.GOALS_TOPIC: 3, B.RESULTS_TOPIC: 2, B.STATUS_TOPIC: 1,
            B.SEGMENTS_TOPIC: 1, "/robots/drone2/segments": 1}
    assert spin_until(lambda: all(rec.writer.count[t] >= n for t, n in want.items()))
    rec.close()
    pub_node.destroy_node()

    # the bag opens with rosbags and holds the goal sequence in order
    msgs = list(B.read_bag(path))
    assert {t for t, _, _ in msgs} == set(want)
    seq = B.goal_sequence(path)
    assert [m.goal_id for _, m in seq] == ["g0", "g1", "g2"]
    assert [round(t, 6) for t, _ in seq] == [0.0, 1.25, 2.5]  # from the stamps
    assert [m.ert_s for _, m in seq] == [0.2, 1.0, 1.0]
    seg_msgs = [m for t, _, m in msgs if t == B.SEGMENTS_TOPIC or t.endswith("/segments")]
    assert sorted(m.goal_id for m in seg_msgs) == ["g0", "g1"]
    assert seg_msgs[0].skills[0].name == "move_forward"

    # report on the bag == metrics from the published messages
    from_bag = B.metrics_from_bag(path, policy="x")
    direct = B.metrics_from_results(results, goals, policy="x")
    assert from_bag == direct
    tt = from_bag["task_types"]
    # hand-computed: g0 response 0.3 -> 2 - 6.67*0.1 = 1.333; waiting 2.0 - 1.5 = 0.5
    assert tt["drone-urgent"]["mean_utility"] == pytest.approx(2 - 0.667)
    assert tt["drone-urgent"]["mean_response_s"] == pytest.approx(0.3)
    assert tt["drone-urgent"]["mean_waiting_s"] == pytest.approx(0.5)
    assert tt["drone-urgent"]["mean_segment_utility"] == pytest.approx(2 - 0.667 + 2 - 6.67 * 0.2)
    # g1: response 1.2 -> 1 - 2*0.2 = 0.6; g2 accepted but unfinished
    assert tt["drone-normal"]["goals"] == 2 and tt["drone-normal"]["completed"] == 1
    assert tt["drone-normal"]["mean_utility"] == pytest.approx(0.6)
    assert tt["all"]["goals"] == 3 and tt["all"]["completed"] == 2
    assert tt["all"]["utility_pct_of_beta"] == pytest.approx(100 * ((2 - 0.667) / 2 + 0.6) / 2)
    assert tt["all"]["tokens_per_s"] is None  # unknown from results

    # the report command prints the same table
    import argparse
    args = argparse.Namespace(source=str(path), policy="x", network_latency_ms=8.0,
                              json=str(tmp_path / "m.json"))
    assert report_run(args) == 0
    import json
    assert json.loads((tmp_path / "m.json").read_text())["policies"][0] == json.loads(json.dumps(from_bag))

    # replay: a fake plan_task server receives the same goal sequence, in order
    _replay_to_fake_server(ros_context, path, [m for _, m in seq])


def _replay_to_fake_server(ctx, path, records):
    from rclpy.action import ActionServer
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.action import PlanTask

    got = []
    node = Node("fake_plan_task", context=ctx)

    def execute(handle):
        got.append((time.monotonic(), handle.request))
        handle.succeed()
        return PlanTask.Result(status=0)

    server = ActionServer(node, PlanTask, "plan_task", execute)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    stop = threading.Event()
    th = threading.Thread(target=lambda: [ex.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)])
    th.start()
    try:
        res = B.replay(path, context=ctx, time_scale=0.2, progress=False, result_timeout_s=20)
    finally:
        stop.set()
        th.join()
        server.destroy()
        node.destroy_node()
    assert all(r is not None and r.result.status == 0 for r in res)
    assert [g.instruction for _, g in got] == [r.instruction for r in records]
    for (_, g), r in zip(got, records):
        for f in B.GOAL_FIELDS:
            assert getattr(g, f) == getattr(r, f), f
    # original relative order and spacing (scaled by 0.2: 0.25 s apart); no tight timing assert
    ts = [t for t, _ in got]
    assert ts == sorted(ts)


def test_outcome_from_result_without_measured_execution():
    class S:  # dispatch-only segment: start = dispatch + latency
        def __init__(self, i, d):
            self.index, self.dispatch_s, self.execution_start_s, self.execution_end_s = i, d, -1.0, -1.0

    class R:
        status, ert_s, alpha, beta, task_type = 0, 1.0, -2.0, 1.0, "x"
        segments = [S(0, 1.092)]

    o = B.outcome_from_result(R(), 0.008)
    assert o.response_s == pytest.approx(1.1)
    assert o.time_utility == pytest.approx(0.8)
    assert math.isclose(o.waiting_s, 1.1)
