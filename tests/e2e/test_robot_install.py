"""A robot's computer installs the robot side alone, as its guide says (docs/guides/robot_computer.md):
`make setup-robot` into a fresh venv, from a wheel built of robot/ (not an editable install), with
neither vLLM, torch, transformers nor the planner in it; its link key copied over with
`timely-robot key install`; then `timely-robot up` serves a simulated drone to a planner in another
process, which sends it signed segments, and the goal succeeds."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from processes import ROOT, TF, Proc, stop_all

pytestmark = [pytest.mark.ros, pytest.mark.slow]

NORMAL = (1.0, -2.0, 1.0)


def _robot_env() -> dict[str, str]:
    """A user's shell on the robot's computer: no planner venv, no ROS paths; the test's ROS domain
    and loopback discovery kept (tests talk only to loopback)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.expanduser("~"), "LANG": "C.UTF-8",
           "ROS_DOMAIN_ID": os.environ["ROS_DOMAIN_ID"],
           "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")}
    for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE", "TMPDIR"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def test_a_robot_computer_runs_its_adapters_without_the_planner(tmp_path, ros_context):
    venv = tmp_path / "venv-robot"
    env = {**_robot_env(), "TIMELY_ROBOT_VENV": str(venv), "TIMELY_ROBOT_DETECTOR": "0"}
    p = subprocess.run(["make", "-s", "setup-robot"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "ready" in p.stdout
    py = str(venv / "bin" / "python")
    # a wheel's files, not the source tree; and none of the planner's stack
    code = ("import importlib.util as u, json, robot_adapters, timely_robot; print(json.dumps("
            "[[m, u.find_spec(m) is None] for m in ('vllm', 'torch', 'transformers', 'llm_planner_node')]"
            " + [robot_adapters.__file__, timely_robot.__file__]))")
    out = subprocess.run([py, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    *absent, adapters_file, robot_file = yaml.safe_load(out.stdout)
    assert absent == [["vllm", True], ["torch", True], ["transformers", True], ["llm_planner_node", True]]
    assert adapters_file.startswith(str(venv)) and robot_file.startswith(str(venv))
    again = subprocess.run(["make", "-s", "setup-robot"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "building" not in again.stdout, again.stdout  # idempotent

    # the planner's computer makes the keys; the robot's computer installs its own
    fleet = {"planner": {"engine": {"kind": "sim"}, "robot_timeout_s": 20.0},
             "security": {"mode": "sign", "keystore": str(tmp_path / "planner_keys")},
             "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]}
    (tmp_path / "planner.yaml").write_text(yaml.safe_dump(fleet))
    on_robot = {**fleet, "security": {"mode": "sign", "keystore": str(tmp_path / "robot_keys")}}
    (tmp_path / "robot.yaml").write_text(yaml.safe_dump(on_robot))
    robot_cmd = str(venv / "bin" / "timely-robot")
    refused = subprocess.run([robot_cmd, "up", "--params", str(tmp_path / "robot.yaml")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith("timely-robot up: robot d1 has no link key in ")
    keys = subprocess.run([*TF, "keys", "--params", str(tmp_path / "planner.yaml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert keys.returncode == 0, keys.stderr
    key_copy = tmp_path / "d1.key"
    shutil.copy(tmp_path / "planner_keys" / "d1.key", key_copy)  # as scp would, its mode not kept
    key_copy.chmod(0o644)
    inst = subprocess.run([robot_cmd, "key", "install", "d1", str(key_copy), "--params", str(tmp_path / "robot.yaml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert inst.returncode == 0, inst.stderr
    assert (tmp_path / "robot_keys" / "d1.key").stat().st_mode & 0o077 == 0
    wrong = subprocess.run([robot_cmd, "key", "install", "d2", str(key_copy), "--keystore", str(tmp_path / "k2")],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "is the key of robot 'd1', not of 'd2'" in wrong.stderr

    robot = subprocess.Popen([robot_cmd, "up", "--params", str(tmp_path / "robot.yaml"), "--time-scale", "0.2"],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    planner = Proc("up", "--only", "planner", "--params", str(tmp_path / "planner.yaml"), "--time-scale", "0.2",
                   ready=r"ready in")
    try:
        planner.wait_ready(120)
        from llm_planner_node.ros.goal_client import GoalClient, spinning

        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            res = client.send("d1", "look for the cat", tuf=NORMAL).result(90)
            assert res is not None and res.status == 0, (res, "\n".join(planner.lines[-20:]))
            assert "executed" in res.message
        client.destroy()
    finally:
        planner.stop()
        stop_all([robot])
    robot_log = robot.stdout.read()
    assert "ready: the adapters of 1 robot(s) (d1), link sign" in robot_log, robot_log[-3000:]
    assert "Traceback" not in robot_log, robot_log[-3000:]
