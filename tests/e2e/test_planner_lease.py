"""The planner's lease and the operator's stop, as an operator meets them: `timely-fleet up --only
planner` and `up --only adapters` as separate processes (the default fleet's drone on djitellopy
+ the Tello SDK simulator in its network namespace, the arm on the neuromeka client + the fake
IndyDCP3 servicer), goals sent with `timely-fleet goal`.

- The planner SIGKILLed while both robots execute: each adapter stops its robot within lease_s +
  1 s of the planner's death and reports `stopped: planner lost`; `timely-fleet goal` says the
  planner is gone instead of waiting out its timeout.
- `timely-fleet stop tello_1 indy_1` (signed link, an operator secret): both goals end CANCELLED
  with the operator's name, the drone hovers and the arm stops, and the drone's next goal runs
  normally (the `ok` of its `stop` was consumed, not taken for the next command's reply)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from processes import traceback_in
from test_first_user import Up

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[2]
TF = [sys.executable, "-m", "llm_planner_node.cli"]
LEASE_S = 3.0


def _goal(robot: str, instruction: str) -> subprocess.Popen:
    return subprocess.Popen([*TF, "goal", robot, instruction, "--timeout", "120"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_adapters_stop_their_robots_when_the_planner_dies(own_ros_domain):
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        pytest.skip("network namespaces (iproute2) are needed for the Tello SDK simulator")
    import rclpy
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import STATUS_QOS

    statuses: list[tuple[float, RobotStatus]] = []
    node = rclpy.create_node("lease_watch", context=own_ros_domain)
    node.create_subscription(RobotStatus, "/robot_status", lambda m: statuses.append((time.monotonic(), m)), STATUS_QOS)
    ex = rclpy.executors.SingleThreadedExecutor(context=own_ros_domain)
    ex.add_node(node)
    spin = threading.Thread(target=ex.spin, daemon=True)
    spin.start()
    adapters = Up("--only", "adapters")
    planner = Up("--only", "planner", "--engine", "sim")
    goals = []
    try:
        adapters.wait_ready(120)
        planner.wait_ready(120)
        goals = [_goal("indy_1", "clean the desk"), _goal("tello_1", "look for the cat")]
        # both robots executing their plans (the arm's takes about a minute in real time)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            executing = {m.robot_id for _t, m in statuses if m.state == RobotStatus.STATE_EXECUTING}
            if {"indy_1", "tello_1"} <= executing:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"robots never executed: {[(m.robot_id, m.state, m.error) for _t, m in statuses][-20:]}")
        time.sleep(1.0)
        os.killpg(planner.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        planner.proc.wait()
        outs = [_output(g, 60) for g in goals]
        # who still served plan_task when the goals ended (for a failure's message)
        servers = [(i.node_namespace, i.node_name) for i in node.get_publishers_info_by_topic("/plan_task/_action/status")]
        deadline = time.monotonic() + LEASE_S + 5
        while time.monotonic() < deadline:
            stopped = {m.robot_id: t for t, m in statuses if t > killed_at and "planner lost" in m.error}
            if {"indy_1", "tello_1"} <= set(stopped):
                break
            time.sleep(0.1)
    finally:
        for g in goals:
            if g.poll() is None:
                g.kill()
        log = adapters.stop()
        planner.stop()
        ex.shutdown()
        node.destroy_node()
    print({r: round(t - killed_at, 2) for r, t in stopped.items()}, "s from the kill to `stopped: planner lost`")
    for robot in ("indy_1", "tello_1"):
        assert robot in stopped, (robot, [(m.robot_id, m.state, m.error) for _t, m in statuses][-30:], log[-2000:])
        # stopped within the lease + 1 s of the planner's death
        assert stopped[robot] - killed_at <= LEASE_S + 1.0, (robot, stopped[robot] - killed_at)
    # the robots were brought to idle: the arm stopped, the drone hovers (its 'stop' answered)
    idle = {m.robot_id: m.error for _t, m in statuses if m.state == RobotStatus.STATE_IDLE and "planner lost" in m.error}
    assert set(idle) == {"indy_1", "tello_1"}, idle
    assert not traceback_in(log), traceback_in(log)
    for out in outs:
        assert re.search(r"the planner is gone", out), (out[-6000:], servers)


def _output(g: subprocess.Popen, timeout_s: float) -> str:
    """A goal command's output once it exits, or what it printed before ``timeout_s`` ran out."""
    try:
        return g.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        g.send_signal(signal.SIGUSR1)  # its threads' stacks: where it waits
        time.sleep(1.0)
        g.kill()
        return g.communicate()[0] + f"\n[still running after {timeout_s:g} s]"


def test_operator_stop_halts_the_real_protocol_robots_and_the_next_goal_runs(own_ros_domain, tmp_path):
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        pytest.skip("network namespaces (iproute2) are needed for the Tello SDK simulator")
    import hashlib

    import yaml

    secret = "operator-secret-for-this-test"
    doc = yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())
    doc["security"]["cancel_operator_keys_sha256"] = hashlib.sha256(secret.encode()).hexdigest()
    params = tmp_path / "fleet.yaml"
    params.write_text(yaml.safe_dump(doc))
    import rclpy
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import STATUS_QOS

    statuses: list[tuple[float, RobotStatus]] = []
    node = rclpy.create_node("stop_watch", context=own_ros_domain)
    node.create_subscription(RobotStatus, "/robot_status", lambda m: statuses.append((time.monotonic(), m)), STATUS_QOS)
    ex = rclpy.executors.SingleThreadedExecutor(context=own_ros_domain)
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()
    adapters = Up("--params", str(params), "--only", "adapters")
    planner = Up("--params", str(params), "--only", "planner", "--engine", "sim")
    try:
        adapters.wait_ready(120)
        planner.wait_ready(120)
        goals = [_goal("indy_1", "clean the desk"), _goal("tello_1", "look for the cat")]
        time.sleep(4.0)  # both robots at work
        env = {**os.environ, "TIMELY_FLEET_OPERATOR_SECRET": secret}
        t_stop = time.monotonic()
        stop = subprocess.run([*TF, "stop", "tello_1", "indy_1", "--operator", "tester"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, env=env)
        outs = [g.communicate(timeout=60)[0] for g in goals]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            idle = {m.robot_id: m.error for t, m in statuses
                    if t > t_stop and m.state == RobotStatus.STATE_IDLE and m.error.startswith("stopped")}
            if {"tello_1", "indy_1"} <= set(idle):
                break
            time.sleep(0.1)
        again = subprocess.run([*TF, "goal", "tello_1", "look for the cat", "--timeout", "120"],
                               cwd=ROOT, capture_output=True, text=True, timeout=150)
    finally:
        log = adapters.stop()
        planner.stop()
        ex.shutdown()
        node.destroy_node()
    assert stop.returncode == 0, stop.stdout + stop.stderr
    for out in outs:
        assert re.search(r"^CANCELLED: stopped by operator tester", out, re.M), out[-1500:]
    # the adapters brought both robots to idle (the drone hovering after the Tello 'stop', the arm
    # stopped) and said so on /robot_status
    assert {"tello_1", "indy_1"} <= set(idle), (idle, [(m.robot_id, m.state, m.error) for _t, m in statuses][-20:])
    assert "SUCCEEDED" in again.stdout, again.stdout[-1500:] + again.stderr[-1500:]
    assert not traceback_in(log), traceback_in(log)

