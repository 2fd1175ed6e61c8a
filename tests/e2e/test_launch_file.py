"""launch/planner.launch.py against the launch_ros API of Jazzy/Kilted.

`launch` and `launch_ros` are not on PyPI (no ros-kilted-launch* wheels), so where they are not
importable the launch file runs against small stand-ins that record what it asks for, and each
`launch_ros.actions.Node` keyword is checked against the real signature (launch_ros 0.26.x =
Jazzy and 0.28.x = Kilted, `launch_ros/actions/node.py`, identical in both). The resolved nodes
are then started as launch_ros starts them: the executable, its `arguments`, then
`--ros-args -r __node:=NAME -r __ns:=NS --params-file ...` (dict parameters written to a YAML
file keyed by the node's full name), and an independent node checks the names on the ROS graph.
Where a system ROS 2 provides `launch_ros`, the real `Node` signature is checked as well.
"""

from __future__ import annotations

import importlib.util
import inspect
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import yaml

from processes import stop_all

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_FILE = ROOT / "launch" / "planner.launch.py"
INSTALL_LIB = ROOT / "ros2_ws" / "install" / "timely_fleet" / "lib" / "timely_fleet"

#: keyword-only parameters of launch_ros.actions.Node.__init__ (Jazzy 0.26.x, Kilted 0.28.x)
NODE_KEYWORDS = {"executable", "package", "name", "namespace", "exec_name", "parameters", "remappings",
                 "ros_arguments", "arguments"}
#: launch.actions.ExecuteProcess keywords the launch file may pass through **kwargs
EXECUTE_PROCESS_KEYWORDS = {"output", "emulate_tty", "respawn", "respawn_delay", "sigterm_timeout",
                            "sigkill_timeout", "additional_env", "env", "cwd", "prefix", "log_cmd"}


class _Recorded:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration:
    def __init__(self, name):
        self.name = name

    def perform(self, context):
        return context[self.name]


def _stand_ins() -> dict[str, types.ModuleType]:
    mods = {name: types.ModuleType(name) for name in
            ("launch", "launch.actions", "launch.substitutions", "launch_ros", "launch_ros.actions")}
    mods["launch"].LaunchDescription = lambda entities: list(entities)
    for cls in ("DeclareLaunchArgument", "OpaqueFunction"):
        setattr(mods["launch.actions"], cls, type(cls, (_Recorded,), {}))
    mods["launch.substitutions"].LaunchConfiguration = _LaunchConfiguration

    class Node(_Recorded):
        def __init__(self, **kwargs):
            unknown = set(kwargs) - NODE_KEYWORDS - EXECUTE_PROCESS_KEYWORDS
            assert not unknown, f"launch_ros Node has no keyword(s) {unknown}"
            assert kwargs.get("parameters") is None or isinstance(kwargs["parameters"], list)
            super().__init__(**kwargs)

    mods["launch_ros.actions"].Node = Node
    return mods


def _resolve(monkeypatch, **arguments: str) -> tuple[dict[str, str], list[dict]]:
    """Run generate_launch_description and its OpaqueFunction; return (defaults, Node kwargs)."""
    for name, mod in _stand_ins().items():
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("planner_launch_under_test", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entities = module.generate_launch_description()
    defaults = {e.args[0]: e.kwargs["default_value"] for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    context = {**defaults, **arguments}
    nodes = []
    for e in entities:
        if type(e).__name__ == "OpaqueFunction":
            nodes += [n.kwargs for n in e.kwargs["function"](context)]
    return defaults, nodes


def test_real_launch_ros_node_signature_when_available():
    if importlib.util.find_spec("launch_ros") is None:
        pytest.skip("launch_ros is not installed (not on PyPI); checked against its source instead")
    from launch_ros.actions import Node

    params = inspect.signature(Node.__init__).parameters
    assert NODE_KEYWORDS <= {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}


def test_defaults_keep_the_yaml_engine_and_add_no_remaps(monkeypatch):
    defaults, nodes = _resolve(monkeypatch)
    assert set(defaults) == {"params", "namespace", "engine", "ros_params", "use_sim_time", "role"}
    assert defaults["role"] == "active"
    assert defaults["params"].endswith("share/timely_fleet/config/fleet.yaml") and Path(defaults["params"]).is_file()
    assert defaults["engine"] == "" and defaults["namespace"] == "" and defaults["use_sim_time"] == "false"
    planner, adapters = nodes
    assert (planner["executable"], planner["name"]) == ("planner_node", "llm_planner")
    assert (adapters["executable"], adapters["name"]) == ("fleet_adapters", "fleet_adapters")
    assert planner["arguments"] == ["--params", defaults["params"]]  # no --engine: the YAML's kind stays
    assert adapters["arguments"] == ["--params", defaults["params"]]
    for node in nodes:
        assert node["package"] == "timely_fleet" and node["namespace"] is None
        assert node["parameters"] == [{"use_sim_time": False}]
        assert not any("__node" in a or "__ns" in a or a in ("-r", "--ros-args") for a in node["arguments"])
        assert "remappings" not in node and "ros_arguments" not in node


def test_engine_namespace_ros_params_and_sim_time_pass_through(monkeypatch, tmp_path):
    ros_params = tmp_path / "planner_ros.yaml"
    _, nodes = _resolve(monkeypatch, params="/f.yaml", engine="sim", namespace="fleet_a",
                        ros_params=str(ros_params), use_sim_time="true")
    planner, adapters = nodes
    assert planner["arguments"] == ["--params", "/f.yaml", "--engine", "sim"]
    assert adapters["arguments"] == ["--params", "/f.yaml"]
    assert planner["namespace"] == adapters["namespace"] == "fleet_a"
    assert planner["parameters"] == [{"use_sim_time": True}, str(ros_params)]
    assert adapters["parameters"] == [{"use_sim_time": True}]
    with pytest.raises(ValueError, match="use_sim_time must be true or false"):
        _resolve(monkeypatch, use_sim_time="maybe")


def test_role_starts_a_standby_planner_alone_or_beside_the_active_one(monkeypatch):
    _, nodes = _resolve(monkeypatch, params="/f.yaml", role="standby")
    (standby,) = nodes
    assert (standby["executable"], standby["name"]) == ("planner_node", "llm_planner_standby")
    assert standby["arguments"] == ["--params", "/f.yaml", "--standby"]
    _, nodes = _resolve(monkeypatch, params="/f.yaml", role="pair", engine="sim")
    assert [(n["executable"], n["name"]) for n in nodes] == [
        ("planner_node", "llm_planner"), ("planner_node", "llm_planner_standby"), ("fleet_adapters", "fleet_adapters")]
    assert nodes[1]["arguments"] == ["--params", "/f.yaml", "--engine", "sim", "--standby"]
    with pytest.raises(ValueError, match="role must be one of active, standby, pair"):
        _resolve(monkeypatch, role="backup")


def _launch_ros_command(node: dict, tmp_path: Path) -> list[str]:
    """The command line launch_ros.actions.Node runs for these keywords (Jazzy/Kilted)."""
    ns = node["namespace"]
    fq_name = (f"/{ns}" if ns else "") + "/" + node["name"]
    cmd = [str(INSTALL_LIB / node["executable"]), *node["arguments"], "--ros-args", "-r", f"__node:={node['name']}"]
    if ns:
        cmd += ["-r", f"__ns:=/{ns}"]
    for i, p in enumerate(node["parameters"]):
        if isinstance(p, dict):
            path = tmp_path / f"launch_params_{node['name']}_{i}.yaml"
            path.write_text(yaml.safe_dump({fq_name: {"ros__parameters": p}}))
            p = str(path)
        cmd += ["--params-file", p]
    return cmd


def test_launched_nodes_have_the_right_names_once(monkeypatch, ros_context, tmp_path):
    """Both processes up with engine:=sim, one simulated drone, a namespace and a ROS parameters
    file: exactly /fleet_a/llm_planner and /fleet_a/fleet_adapters appear on the graph, once each."""
    import rclpy
    from rclpy.parameter_client import AsyncParameterClient

    params = tmp_path / "fleet.yaml"
    params.write_text(yaml.safe_dump({"planner": {"policy": "timelyllm", "engine": {"kind": "vllm"}},
                                      "robots": [{"id": "lf_drone", "kind": "drone", "adapter": "sim"}]}))
    ros_params = tmp_path / "planner_ros.yaml"
    ros_params.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"use_sim_time": False}}}))
    _, nodes = _resolve(monkeypatch, params=str(params), engine="sim", namespace="fleet_a",
                        ros_params=str(ros_params), use_sim_time="false")
    procs = [subprocess.Popen(_launch_ros_command(n, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True) for n in nodes]
    from rclpy.executors import SingleThreadedExecutor

    probe = rclpy.create_node("launch_file_probe", context=ros_context)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe)
    try:
        wanted = {("llm_planner", "/fleet_a"), ("fleet_adapters", "/fleet_a")}
        deadline = time.monotonic() + 60
        seen: list[tuple[str, str]] = []
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.2)
            seen = [tuple(x) for x in probe.get_node_names_and_namespaces()]
            if wanted <= set(seen) or any(p.poll() is not None for p in procs):
                break
        time.sleep(1.0)  # let any further node of those processes appear
        executor.spin_once(timeout_sec=0.2)
        seen = [tuple(x) for x in probe.get_node_names_and_namespaces() if tuple(x) != ("launch_file_probe", "/")]
        assert wanted <= set(seen), f"nodes on the graph: {seen}"
        # hidden helper nodes (leading "_", e.g. the planner's status receiver) are not counted
        ours = [x for x in seen if x[1] == "/fleet_a" and not x[0].startswith("_")]
        assert sorted(ours) == sorted(wanted), f"duplicate or extra nodes in /fleet_a: {ours}"
        client = AsyncParameterClient(probe, "/fleet_a/llm_planner")
        assert client.wait_for_services(10), "no parameter services on /fleet_a/llm_planner"
        future = client.get_parameters(["use_sim_time"])
        executor.spin_until_future_complete(future, timeout_sec=10)
        assert future.result().values[0].bool_value is False
    finally:
        probe.destroy_node()
        stop_all(procs, 20)
    outputs = [p.stdout.read() for p in procs]
    assert all(p.returncode in (0, -signal.SIGINT) for p in procs), ([p.returncode for p in procs], outputs)
