"""launch/planner.launch.py starts two installed executables; run them as separate processes
(as `ros2 launch` does, ROS arguments appended) and serve a goal across process boundaries."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from processes import stop_all

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[2]
INSTALL_LIB = ROOT / "ros2_ws" / "install" / "timely_fleet" / "lib" / "timely_fleet"


def launched_executables() -> list[str]:
    tree = ast.parse((ROOT / "launch" / "planner.launch.py").read_text())
    return [kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == "executable"]


def test_launch_file_names_installed_executables():
    names = launched_executables()
    # the active and the standby planner are both planner_node (launch role:=pair)
    assert sorted(set(names)) == ["fleet_adapters", "planner_node"]
    for name in names:
        assert os.access(INSTALL_LIB / name, os.X_OK), f"{name} not installed by colcon"
    share = ROOT / "ros2_ws" / "install" / "timely_fleet" / "share" / "timely_fleet"
    assert (share / "launch" / "planner.launch.py").is_file() and (share / "config" / "fleet.yaml").is_file()


def test_planner_and_adapters_as_separate_processes_serve_a_goal(ros_context, tmp_path):
    from llm_planner_node.ros.goal_client import GoalClient, spinning

    params = tmp_path / "fleet.yaml"
    params.write_text(yaml.safe_dump({
        "planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
        "robots": [{"id": "lp_drone", "kind": "drone", "adapter": "sim"}],
    }))
    procs = [subprocess.Popen([str(INSTALL_LIB / exe), "--params", str(params), *extra,
                               "--ros-args", "-r", f"__node:={exe}_test"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
             for exe, extra in (("planner_node", ["--engine", "sim"]), ("fleet_adapters", ["--time-scale", "0.05"]))]
    client = GoalClient(ros_context)
    try:
        with spinning(client.node, ros_context):
            assert client.wait_for_server(60), "planner_node process did not come up"
            res = client.send("lp_drone", "look for the cat").result(60)
        assert res.status == 0, res.message
        assert len(res.segments) >= 2 and res.segments[-1].execution_end_s > 0
    finally:
        client.destroy()
        stop_all(procs, 15)
    outputs = [p.stdout.read() for p in procs]
    assert "starting planner" in outputs[0] and "stopped" in outputs[0]
    assert "starting 1 robot adapter(s)" in outputs[1]
