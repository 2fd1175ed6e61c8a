"""Failover as a team runs it: the robots' adapters, an active planner and two standbys as four
`timely-fleet up` processes on a signed link (the Tello SDK simulator behind djitellopy, the IndyDCP3 servicer behind
the neuromeka client, robots in real time), the active SIGKILLed mid-plan.

The drone's goal, sent with `timely-fleet goal`, and the arm's, sent with a plain rclpy
ActionClient, both end SUCCEEDED through the standby that takes over: the CLI prints one result,
each segment ran once, and the plain client (whose result request went to the planner that died)
finds its result on planner/results by goal id. Exactly one standby takes over; the other follows
the new active planner and, when that one is killed too, takes over from it and serves the next goal."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import uuid

import pytest
import yaml

from tests.e2e.test_first_user import ROOT, TF, Up

pytestmark = pytest.mark.ros

DRONE_PLAN = "tc,90;mf,50;tc,90;mf,50;"
ARM_PLAN = "look(apple);pick(apple);place(apple, tray);"


def fleet_yaml(path) -> str:
    path.write_text(yaml.safe_dump({
        "planner": {"policy": "timelyllm", "engine": {"kind": "scripted"}, "robot_timeout_s": 30.0},
        "security": {"mode": "sign", "keystore": str(path.parent / "keys"), "lease_s": 3.0, "lease_grace_s": 2.0},
        "robots": [
            {"id": "tello_1", "kind": "drone", "skill_set": "tello_minispec", "adapter": "tello-sim",
             "perception": {"source": "scene"}},
            {"id": "indy_1", "kind": "arm", "skill_set": "indy7_arm", "adapter": "indy-sim",
             "objects": ["apple", "tray"]},
        ]}))
    return str(path)


def test_the_standby_finishes_a_drone_and_an_arm_goal_when_the_active_planner_is_killed(tmp_path, own_ros_domain):
    import rclpy
    from rclpy.action import ActionClient
    from rclpy.executors import SingleThreadedExecutor
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import GoalResult

    from llm_planner_node.ros.messages import ACTION_NAME, RESULTS_TOPIC, action_qos_kwargs
    from timely_robot.link.ros import STATUS_QOS

    params = fleet_yaml(tmp_path / "fleet.yaml")
    adapters = Up("--params", params, "--only", "adapters")
    active = Up("--params", params, "--only", "planner")
    standbys = [Up("--params", params, "--standby"),  # a second one on this host, with its own node name
                Up("--params", params, "--standby", "--ros-args", "-r", "__node:=llm_planner_standby_2")]
    node = None
    try:
        for proc in (adapters, active, *standbys):
            proc.wait_ready(90)
        # an outside client: plain rclpy, the generated interfaces, results also read from planner/results
        node = rclpy.create_node(f"plain_client_{uuid.uuid4().hex[:6]}", context=own_ros_domain)
        results: dict[str, GoalResult] = {}
        node.create_subscription(GoalResult, RESULTS_TOPIC, lambda m: results.setdefault(m.goal_id, m), STATUS_QOS)
        client = ActionClient(node, PlanTask, ACTION_NAME, **action_qos_kwargs("client"))
        executor = SingleThreadedExecutor(context=own_ros_domain)
        executor.add_node(node)
        spin = threading.Thread(target=executor.spin, daemon=True)
        spin.start()
        assert client.wait_for_server(timeout_sec=30)

        drone = subprocess.Popen([*TF, "goal", "tello_1", DRONE_PLAN], cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        killed = threading.Event()
        standby_lines_at_kill: list[int] = []

        def read() -> None:
            for line in drone.stdout:
                lines.append(line.rstrip("\n"))
                if "segment 0 finished" in line and not killed.is_set():
                    standby_lines_at_kill.extend(len(s.lines) for s in standbys)
                    killed.set()
                    active.proc.send_signal(signal.SIGKILL)  # mid-plan: segment 1 is running
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        sent = client.send_goal_async(PlanTask.Goal(robot_id="indy_1", instruction=ARM_PLAN, ert_s=1.0, alpha=-2.0,
                                                    beta=1.0))
        deadline = time.monotonic() + 30
        while not sent.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        arm_handle = sent.result()
        assert arm_handle.accepted
        arm_goal_id = bytes(arm_handle.goal_id.uuid).hex()

        drone.wait(timeout=90)
        reader.join(timeout=5)
        out = "\n".join(lines)
        assert killed.is_set(), out
        assert active.proc.wait(timeout=10) == -signal.SIGKILL
        assert drone.returncode == 0, "\n--- a standby ---\n".join([out, *("\n".join(s.lines[-12:]) for s in standbys)])
        # one result, the whole plan, each segment executed once
        assert len(re.findall(r"^(SUCCEEDED|ROBOT_FAILED|TIMEOUT|CANCELLED|REJECTED|INVALID_PLAN)\b", out, re.M)) == 1, out
        assert re.search(r"^SUCCEEDED: plan of 4 segment\(s\) executed", out, re.M), out
        for k in range(4):
            assert len(re.findall(rf"robot tello_1: segment {k} executing", out)) == 1, out
            assert len(re.findall(rf"robot tello_1: segment {k} finished", out)) == 1, out
        assert "re-attached" in out, out

        deadline = time.monotonic() + 60
        while arm_goal_id not in results and time.monotonic() < deadline:
            time.sleep(0.1)
        arm = results.get(arm_goal_id)
        assert arm is not None, "the plain client's goal has no result on planner/results"
        assert arm.status == PlanTask.Result.STATUS_SUCCEEDED, arm.message
        assert arm.plan_text == ARM_PLAN
        assert all(s.execution_end_s >= 0 for s in arm.segments)

        logs = ["\n".join(s.lines) for s in standbys]
        # the standbys followed the signed journal until the kill, and took over only after it
        for s, at_kill in zip(standbys, standby_lines_at_kill):
            assert not any("took over" in line for line in s.lines[:at_kill]), "\n".join(s.lines)
        # exactly one took over; the other follows it
        took = [i for i, log in enumerate(logs) if "took over" in log]
        assert len(took) == 1, logs
        new_active, other = standbys[took[0]], standbys[1 - took[0]]
        assert re.search(r"took over from planner .* at term 2: .*adopted 2 goal\(s\)", logs[took[0]]), logs
        assert re.search(r"now following planner \S+ \(term 2\)", logs[1 - took[0]]), logs
        assert "planner lost" not in "\n".join(adapters.lines), "a robot was stopped by its lease"

        # the new active planner killed as well: the other standby takes over and serves
        new_active.proc.send_signal(signal.SIGKILL)
        new_active.proc.wait(timeout=10)
        after = subprocess.run([*TF, "goal", "tello_1", "tc,90;", "--timeout", "60"], cwd=ROOT,
                               capture_output=True, text=True, timeout=90)
        assert after.returncode == 0 and "SUCCEEDED" in after.stdout, after.stdout + after.stderr
        assert re.search(r"took over from planner .* at term 3", "\n".join(other.lines)), other.lines[-20:]
        executor.shutdown(timeout_sec=2)
    finally:
        if node is not None:
            node.destroy_node()
        for proc in (*standbys, active, adapters):
            proc.stop()
