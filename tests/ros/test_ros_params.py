"""Fleet settings as declared ROS 2 parameters, over real rclpy and the real parameter services."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from llm_planner_node.config.schema import schema, to_flat
from llm_planner_node.config.params import DEFAULT_PARAMS, load_params
from timely_robot.config import ParamError

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def fleet():
    return load_params(DEFAULT_PARAMS)


def _node(ctx, name="llm_planner", **kw):
    from rclpy.node import Node

    return Node(name, context=ctx, **kw)


def _wait(executor, future, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not future.done() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
    assert future.done(), "no answer from the parameter service"
    return future.result()


def test_yaml_values_are_the_defaults(ros_context, fleet):
    from rcl_interfaces.msg import ParameterType

    from llm_planner_node.ros.params import PARAMS_FILE, declare_parameters

    node = _node(ros_context)
    try:
        assert declare_parameters(node) == fleet
        assert node.get_parameter(PARAMS_FILE).value == str(DEFAULT_PARAMS)
        for name, value in to_flat(fleet).items():
            if value == []:  # ROS cannot hold an empty array of a type: declared typed and unset
                assert node.describe_parameter(name).type == ParameterType.PARAMETER_STRING_ARRAY, name
                assert not node.has_parameter(name) or node.get_parameter_or(name).value is None, name
                continue
            assert node.get_parameter(name).value == value, name
        d = node.describe_parameter("engine.block_size")
        assert d.read_only and d.description and d.integer_range[0].from_value == 32
        assert d.integer_range[0].step == 32
        d = node.describe_parameter("robot_timeout_s")
        assert not d.read_only and "> 0 (seconds)" in d.additional_constraints and not d.floating_point_range
        d = node.describe_parameter("network_latency_s")
        assert d.floating_point_range[0].from_value == 0.0
        assert "one of: vllm, remote, sim, scripted" in node.describe_parameter("engine.kind").additional_constraints
        assert node.describe_parameter("tuf_presets.urgent.alpha").floating_point_range[0].to_value == 0.0
    finally:
        node.destroy_node()


def test_ros_args_params_file_and_overrides_win_over_the_yaml(ros_context, tmp_path, fleet):
    from rclpy.parameter import Parameter

    from llm_planner_node.ros.params import declare_parameters

    pfile = tmp_path / "over.yaml"
    pfile.write_text("llm_planner:\n  ros__parameters:\n    policy: vllm\n    engine: {kind: sim}\n"
                     "    tuf_presets:\n      urgent: {ert_s: 0.3}\n"
                     "    robots:\n      ids: [tello_2, arm_9]\n      arm_9: {kind: arm, adapter: indy-sim}\n")
    node = _node(ros_context, cli_args=["--ros-args", "-p", "robot_timeout_s:=7.5", "--params-file", str(pfile),
                                        "-p", "max_tokens:=64", "-p", "network_latency_s:=1"],
                 parameter_overrides=[Parameter("batching.mode", value="fixed")])
    try:
        p = declare_parameters(node)
        assert p.planner.robot_timeout_s == 7.5 and p.planner.max_tokens == 64
        assert p.planner.network_latency_s == 1.0  # a whole number for a float parameter is taken as it
        assert p.planner.policy == "vllm" and p.planner.engine.kind == "sim" and p.planner.batching_mode == "fixed"
        assert p.planner.tuf_presets["urgent"].as_tuple() == (0.3, -6.67, 2.0)
        assert p.planner.engine.model == fleet.planner.engine.model  # untouched: the YAML's value
        assert [r.id for r in p.robots] == ["tello_2", "arm_9"]
        assert p.robot("arm_9").skill_set == "indy7_arm" and p.robot("tello_2") == fleet.robot("tello_2")
        assert not node.has_parameter("robots.tello_1.kind")
        assert node.get_parameter("robots.arm_9.adapter").value == "indy-sim"
    finally:
        node.destroy_node()


def test_params_file_parameter_names_the_yaml(ros_context, tmp_path):
    from rclpy.parameter import Parameter

    from llm_planner_node.ros.params import declare_parameters

    src = tmp_path / "fleet.yaml"
    src.write_text(DEFAULT_PARAMS.read_text().replace("max_tokens: 128", "max_tokens: 77"))
    node = _node(ros_context, parameter_overrides=[Parameter("params_file", value=str(src))])
    try:
        assert declare_parameters(node).planner.max_tokens == 77
        assert node.describe_parameter("params_file").read_only
    finally:
        node.destroy_node()


@pytest.mark.parametrize("args, sentence", [
    (["-p", "robot_timeout_s:=-2.0"], "robot_timeout_s must be > 0 (seconds), got -2.0"),
    (["-p", "engine.kind:=tpu"], "engine.kind must be one of vllm, remote, sim, scripted, got 'tpu'"),
    (["-p", "max_tokens:=abc"], "max_tokens must be a number, got 'abc'"),
    (["-p", "engine.block_size:=48"], "engine.block_size must be a multiple of 32 (vLLM CPU), got 48"),
    (["-p", "robots.ids:=[tello_1, boat_1]"], "robots.boat_1.kind is not set"),
    (["-p", "tuf_presets.late.ert_s:=3.0"], "tuf_presets.late is missing alpha, beta"),
])
def test_an_invalid_override_stops_with_params_sentence(ros_context, args, sentence):
    from llm_planner_node.ros.params import declare_parameters

    node = _node(ros_context, cli_args=["--ros-args", *args])
    try:
        with pytest.raises(ParamError) as e:
            declare_parameters(node)
        assert str(e.value).startswith(sentence)
    finally:
        node.destroy_node()


def test_parameter_services_list_get_set_and_refuse(ros_context, fleet):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient

    from llm_planner_node.ros.params import add_validation_callback, declare_parameters

    server = _node(ros_context)
    client_node = _node(ros_context, "param_client")
    current = [declare_parameters(server)]
    applied = []

    def apply(new):
        applied.append(new)
        current[0] = new

    add_validation_callback(server, lambda: current[0], apply)
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(server)
    executor.add_node(client_node)
    client = AsyncParameterClient(client_node, "llm_planner")
    try:
        deadline = time.monotonic() + 10
        while not client.services_are_ready() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert client.services_are_ready()

        listed = set(_wait(executor, client.list_parameters()).result.names)
        assert {s.name for s in schema(fleet)} | {"params_file"} <= listed

        got = _wait(executor, client.get_parameters(["robot_timeout_s", "engine.kind", "robots.ids"])).values
        assert (got[0].double_value, got[1].string_value) == (30.0, "vllm")
        assert list(got[2].string_array_value) == ["tello_1", "tello_2", "indy_1", "chat_1", "base_1"]

        described = _wait(executor, client.describe_parameters(["network_latency_s", "engine.block_size"])).descriptors
        assert described[0].floating_point_range[0].from_value == 0.0 and not described[0].read_only
        assert described[1].read_only and described[1].integer_range[0].step == 32

        ok = _wait(executor, client.set_parameters([Parameter("robot_timeout_s", value=5.0)])).results[0]
        assert ok.successful, ok.reason
        assert applied[-1].planner.robot_timeout_s == 5.0
        assert applied[-1] == replace(fleet, planner=replace(fleet.planner, robot_timeout_s=5.0))
        assert server.get_parameter("robot_timeout_s").value == 5.0

        # `ros2 param set /llm_planner robot_timeout_s 10` sends an integer
        ok = _wait(executor, client.set_parameters([Parameter("robot_timeout_s", value=10)])).results[0]
        assert ok.successful, ok.reason
        assert applied[-1].planner.robot_timeout_s == 10.0 and server.get_parameter("robot_timeout_s").value == 10.0

        n_applied = len(applied)
        bad = _wait(executor, client.set_parameters([Parameter("robot_timeout_s", value=-1.0)])).results[0]
        assert not bad.successful and bad.reason == "robot_timeout_s must be > 0 (seconds), got -1.0"
        ro = _wait(executor, client.set_parameters([Parameter("engine.kind", value="sim")])).results[0]
        assert not ro.successful and "read-only" in ro.reason and "engine.kind" in ro.reason
        alpha = _wait(executor, client.set_parameters([Parameter("tuf_presets.normal.alpha", value=0.5)])).results[0]
        assert not alpha.successful and "tuf_presets.normal.alpha" in alpha.reason
        assert len(applied) == n_applied and current[0].planner.robot_timeout_s == 10.0
        assert server.get_parameter("robot_timeout_s").value == 10.0
        assert server.get_parameter("engine.kind").value == "vllm"
    finally:
        client_node.destroy_node()
        server.destroy_node()


def test_exported_ros_params_file_gives_the_same_fleet(ros_context, tmp_path, fleet):
    from rclpy.parameter import Parameter

    from llm_planner_node.ros.params import declare_parameters

    out = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "params", "export"],
                         capture_output=True, text=True, check=True, env={**os.environ, "TIMELY_FLEET_ENV": "1"}).stdout
    exported = tmp_path / "ros_params.yaml"
    exported.write_text(out)
    # defaults from another YAML (one robot, other values): everything must come from the exported file
    other = tmp_path / "other.yaml"
    other.write_text("planner: {policy: vllm, engine: {kind: sim, dtype: half}, max_tokens: 5,"
                     " tuf_presets: {normal: {ert_s: 9.0, alpha: -1.0, beta: 3.0}}}\n"
                     "robots: [{id: solo, kind: chat}]\n")
    node = _node(ros_context, cli_args=["--ros-args", "--params-file", str(exported)],
                 parameter_overrides=[Parameter("params_file", value=str(other))])
    try:
        assert declare_parameters(node) == fleet  # robots and TUF presets too come from the exported file
    finally:
        node.destroy_node()
    # with the fleet YAML itself as defaults, the export is exactly the same fleet
    node = _node(ros_context, cli_args=["--ros-args", "--params-file", str(exported)])
    try:
        assert declare_parameters(node) == fleet
    finally:
        node.destroy_node()
