"""The flat parameter schema (ROS-free): generated from params.py, round trips, run-time updates."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields, replace

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from llm_planner_node.core.policies import policy_names
from timely_robot.skills import BUILT_IN_SKILL_SETS, DEFAULT_SKILL_SETS, ROBOT_KINDS
from llm_planner_node.config.schema import (RUNTIME_NAMES, from_flat, is_runtime, read_only_reason, schema,
                                           spec_map, to_flat, validate_update)
from timely_robot.config import SecurityParams, ADAPTERS, ParamError, RobotParams
from llm_planner_node.config.params import (
    DEFAULT_PARAMS, DTYPES, EngineParams, FleetParams, MemoryParams, PlannerParams, TufParams, load_params,
    memory_file, parse_params, sim_only_policies)
from llm_planner_node.ros.params import fleet_yaml_to_ros_params


@pytest.fixture(scope="module")
def fleet() -> FleetParams:
    return load_params(DEFAULT_PARAMS)


def test_every_dataclass_field_is_a_parameter(fleet):
    names = {s.name for s in schema(fleet)}
    for f in fields(EngineParams):
        assert f"engine.{f.name}" in names
    for preset in fleet.planner.tuf_presets:
        for f in fields(TufParams):
            assert f"tuf_presets.{preset}.{f.name}" in names
    for section in ("plan_limits", "sampling"):
        for lang, settings in getattr(fleet.planner, section).items():
            for f in fields(settings):
                assert f"{section}.{lang}.{f.name}" in names
    for f in fields(MemoryParams):
        assert f"memory.{f.name}" in names
    for f in fields(PlannerParams):
        if f.name in ("engine", "tuf_presets", "plan_limits", "sampling", "memory"):
            continue
        assert {"batching_mode": "batching.mode", "max_batch": "batching.max_batch"}.get(f.name, f.name) in names
    assert "robots.ids" in names
    for robot in fleet.robots:
        for f in fields(RobotParams):
            if f.name != "id":
                assert f"robots.{robot.id}.{f.name}" in names
    for f in fields(SecurityParams):
        assert f"security.{f.name}" in names
    # nothing else: the schema is exactly the dataclasses
    n_planner = (len(fields(PlannerParams)) - 5 + len(fields(EngineParams)) + len(fields(MemoryParams))
                 + 3 * len(fleet.planner.tuf_presets)
                 + sum(len(fields(v)) for v in fleet.planner.plan_limits.values())
                 + sum(len(fields(v)) for v in fleet.planner.sampling.values()))
    assert len(names) == (n_planner + len(fields(SecurityParams)) + 1
                          + (len(fields(RobotParams)) - 1) * len(fleet.robots))


def test_specs_carry_defaults_types_ranges_choices_and_read_only(fleet):
    specs = spec_map(fleet)
    assert all(s.description for s in specs.values())
    t = specs["robot_timeout_s"]
    assert (t.type, t.default, t.gt, t.read_only, t.unit) == (float, 30.0, 0, False, "seconds")
    assert specs["network_latency_s"].ge == 0
    assert specs["tuf_presets.urgent.alpha"].le == 0 and specs["tuf_presets.urgent.alpha"].default == -6.67
    assert specs["engine.block_size"].ge == 32 and specs["engine.block_size"].step == 32
    assert specs["batching.max_batch"].ge == 1
    assert specs["engine.seed"].ge == 0
    assert specs["engine.enforce_eager"].type is bool
    assert specs["robots.ids"].type is list and specs["robots.ids"].default == [r.id for r in fleet.robots]
    assert specs["policy"].choices == tuple(policy_names())
    assert specs["engine.kind"].choices == ("vllm", "remote", "sim", "scripted")
    assert specs["engine.dtype"].choices == DTYPES
    assert specs["batching.mode"].choices == ("adaptive", "fixed")
    assert specs["robots.tello_1.kind"].choices == ROBOT_KINDS
    assert specs["robots.tello_1.skill_set"].choices == tuple(DEFAULT_SKILL_SETS)
    assert specs["robots.tello_1.adapter"].choices == ADAPTERS
    runtime = {n for n, s in specs.items() if not s.read_only}
    assert runtime == set(RUNTIME_NAMES) | {n for n in specs if n.startswith("tuf_presets.")}
    assert specs["robot_timeout_s"].constraints() == "> 0 (seconds)"
    assert specs["engine.kind"].constraints() == "one of: vllm, remote, sim, scripted; read-only while the node runs"


def test_round_trip_of_the_shipped_yaml(fleet):
    flat = to_flat(fleet)
    assert flat["engine.kind"] == "vllm" and flat["tuf_presets.urgent.ert_s"] == 0.2
    assert flat["robots.ids"] == ["tello_1", "tello_2", "indy_1", "chat_1", "base_1"]
    assert from_flat(flat) == fleet


def test_ros_parameters_file_document_nests_the_flat_names(fleet):
    doc = fleet_yaml_to_ros_params(fleet, "planner")
    p = doc["planner"]["ros__parameters"]
    assert p["engine"]["kind"] == "vllm" and p["tuf_presets"]["normal"]["ert_s"] == 1.0
    assert p["robots"]["ids"] == ["tello_1", "tello_2", "indy_1", "chat_1", "base_1"]
    indy = dict(p["robots"]["indy_1"])
    assert "apple" in indy.pop("objects") and "basket" in fleet.robot("indy_1").objects
    assert indy.pop("budget") == ""  # the arm kind's default budget
    assert indy.pop("approval") == ""  # no segment waits for an operator
    assert indy.pop("perception") == ""  # none declared: the simulated arm uses its scene
    assert indy.pop("simulator") == ""  # the simulator's default world
    assert indy.pop("places") == "" and indy.pop("nav2") == "" and indy.pop("skills") == ""  # a base's; adapter ros
    assert indy.pop("origin") == ""  # none declared: its frame is the fleet's
    assert indy == {"kind": "arm", "skill_set": "indy7_arm", "adapter": "indy-sim", "host": ""}
    assert p["plan_limits"]["minispec"]["max_loop"] == 12 and p["sampling"]["chat"]["repetition_penalty"] == 1.2
    assert p["robot_timeout_s"] == 30.0


def test_params_export_command_prints_a_ros_parameters_file(tmp_path, fleet):
    src = tmp_path / "fleet.yaml"
    src.write_text(DEFAULT_PARAMS.read_text().replace("max_tokens: 128", "max_tokens: 99"))
    out = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "params", "export", "--params", str(src),
                          "--node-name", "my_planner"], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "TIMELY_FLEET_ENV": "1"}).stdout
    doc = yaml.safe_load(out)
    assert doc["my_planner"]["ros__parameters"]["max_tokens"] == 99
    assert doc == fleet_yaml_to_ros_params(replace(fleet, planner=replace(fleet.planner, max_tokens=99)),
                                           "my_planner")


# -- run-time updates ---------------------------------------------------------------------------

def test_validate_update_accepts_a_run_time_change(fleet):
    new, reason = validate_update(fleet, {"robot_timeout_s": 5.0})
    assert reason == "" and new.planner.robot_timeout_s == 5.0
    assert new.planner.engine == fleet.planner.engine and new.robots == fleet.robots
    new, _ = validate_update(fleet, {"tuf_presets.urgent.ert_s": 0.3, "max_tokens": 64, "network_latency_s": 1})
    assert new.planner.tuf_presets["urgent"] == TufParams(0.3, -6.67, 2.0)
    assert new.planner.max_tokens == 64 and new.planner.network_latency_s == 1.0


@pytest.mark.parametrize("name, value", [("engine.kind", "sim"), ("policy", "vllm"), ("robots.ids", ["x"]),
                                         ("robots.tello_1.adapter", "sim"), ("batching.max_batch", 4)])
def test_validate_update_refuses_read_only_names(fleet, name, value):
    assert validate_update(fleet, {name: value}) == (
        None, f"'{name}' is read-only while the node runs; change it in the parameter file and restart")
    assert read_only_reason(name) == validate_update(fleet, {name: value})[1]
    assert not is_runtime(name)


@pytest.mark.parametrize("changes, reason", [
    ({"robot_timeout_s": -1.0}, "robot_timeout_s must be > 0 (seconds), got -1.0"),
    ({"robot_timeout_s": 0}, "robot_timeout_s must be > 0 (seconds), got 0"),
    ({"network_latency_s": -0.5}, "network_latency_s must be >= 0 (seconds), got -0.5"),
    ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
    ({"max_tokens": 2.5}, "max_tokens must be an integer, got 2.5"),
    ({"max_instruction_chars": "many"}, "max_instruction_chars must be a number, got 'many'"),
    ({"tuf_presets.normal.alpha": 1.0}, "tuf_presets.normal.alpha must be <= 0, got 1.0"),
    ({"tuf_presets.normal.ert_s": 0.0}, "tuf_presets.normal.ert_s must be > 0 (seconds), got 0.0"),
    ({"robot_timeout": 5.0}, "'robot_timeout' is not a parameter (did you mean 'robot_timeout_s'?)"),
])
def test_validate_update_refuses_invalid_values_with_params_sentences(fleet, changes, reason):
    assert validate_update(fleet, changes) == (None, reason)


def test_from_flat_reports_robot_mistakes_by_parameter_name(fleet):
    flat = to_flat(fleet)
    with pytest.raises(ParamError, match=r"^robots\.indy_1\.kind 'boat' must be one of drone, sim, arm, base, chat$"):
        from_flat({**flat, "robots.indy_1.kind": "boat"})
    with pytest.raises(ParamError, match=r"^robots\.tello_1: adapter 'tello' needs the robot's 'host' address$"):
        from_flat({**flat, "robots.tello_1.adapter": "tello"})
    with pytest.raises(ParamError, match=r"^robots\.extra\.kind is not set"):
        from_flat({**flat, "robots.ids": [*flat["robots.ids"], "extra"]})
    with pytest.raises(ParamError, match=r"^robots\.ghost\.kind: robot 'ghost' is not in robots\.ids"):
        from_flat({**flat, "robots.ghost.kind": "arm"})
    with pytest.raises(ParamError, match=r"^engine\.kind must be one of vllm, remote, sim, scripted, got 'tpu'$"):
        from_flat({**flat, "engine.kind": "tpu"})
    with pytest.raises(ParamError, match=r"^policy 'timelylm' is not a known policy \(did you mean 'timelyllm'\?\)$"):
        from_flat({**flat, "policy": "timelylm"})
    with pytest.raises(ParamError, match=r"^policy 'lamps' needs per-segment length predictions"):
        from_flat({**flat, "policy": "lamps"})  # FleetParams.check(): the cross-key rules too
    assert from_flat({**flat, "policy": "lamps", "engine.kind": "sim"}).planner.policy == "lamps"
    assert from_flat({**flat, "robots.indy_1.skill_set": ""}).robot("indy_1").skill_set == "indy7_arm"


# -- hypothesis: any valid FleetParams survives the flat form ---------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: s != "ids")
_pos = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False)
_tuf = st.builds(TufParams, ert_s=_pos, alpha=st.floats(min_value=-50, max_value=0), beta=_pos)


@st.composite
def _robot(draw, rid):
    kind = draw(st.sampled_from(ROBOT_KINDS))
    # a base's adapters drive bases only (timely_robot.config.BASE_ADAPTERS)
    # (adapter ros needs declared skills: tests/timely_robot/test_declared.py)
    adapter = draw(st.sampled_from([a for a in ADAPTERS if a != "ros" and ((a in ("nav2", "nav2-sim")) == (kind == "base")
                                    or a in ("sim", "external"))]))
    host = draw(st.sampled_from(["10.0.0.2", "robot.local"])) if adapter in ("tello", "indy") else \
        draw(st.sampled_from(["", "h"]))
    return RobotParams(rid, kind, draw(st.sampled_from([s.id for s in BUILT_IN_SKILL_SETS])), adapter, host)


@st.composite
def _fleet(draw):
    engine = EngineParams(kind="sim", model=draw(st.sampled_from(["embedded", "/models/x"])),
                          dtype=draw(st.sampled_from(DTYPES)), max_model_len=draw(st.integers(1, 1 << 16)),
                          block_size=32 * draw(st.integers(1, 8)), kv_cache_gib=draw(_pos),
                          tensor_parallel_size=draw(st.integers(1, 8)), data_parallel_size=draw(st.integers(1, 4)),
                          max_num_seqs=draw(st.integers(1, 512)), enforce_eager=draw(st.booleans()),
                          seed=draw(st.integers(0, 1 << 31)))
    planner = PlannerParams(policy=draw(st.sampled_from(policy_names())), engine=engine,
                            batching_mode=draw(st.sampled_from(["adaptive", "fixed"])),
                            max_batch=draw(st.integers(1, 64)),
                            tuf_presets=draw(st.dictionaries(_names, _tuf, min_size=1, max_size=3)),
                            max_instruction_chars=draw(st.integers(1, 10**6)), max_tokens=draw(st.integers(1, 4096)),
                            robot_timeout_s=draw(_pos), network_latency_s=draw(st.floats(0, 10)))
    ids = draw(st.lists(_names, max_size=4, unique=True))
    return FleetParams(planner, tuple(draw(_robot(i)) for i in ids))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_fleet())
def test_round_trip_of_any_valid_fleet(params):
    assert from_flat(to_flat(params)) == params
    # and through the ROS parameters file document (nested, then flattened again)
    doc = fleet_yaml_to_ros_params(params)["llm_planner"]["ros__parameters"]

    def flatten(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from flatten(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    flat = dict(flatten(doc))
    flat.setdefault("robots.ids", [])
    assert from_flat(flat) == params


def test_sim_only_policies_are_choices_but_checked(fleet):
    assert set(sim_only_policies()) <= set(spec_map(fleet)["policy"].choices)


def test_the_fleet_memory_file_is_one_per_node_and_its_mistakes_are_one_sentence(fleet, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert memory_file(MemoryParams(), "llm_planner_standby") == (tmp_path / "timely_fleet"
                                                                  / "memory_llm_planner_standby.sqlite")
    assert memory_file(MemoryParams(path="off"), "llm_planner") is None
    assert memory_file(MemoryParams(path=""), "llm_planner") is None
    flat = to_flat(fleet)
    assert flat["memory.path"] == "default" and flat["memory.max_age_s"] == 86400.0
    with pytest.raises(ParamError, match=r"^memory\.max_age_s must be > 0 \(seconds\), got 0$"):
        from_flat({**flat, "memory.max_age_s": 0})
    with pytest.raises(ParamError, match=r"^memory\.path '.*' is a directory: give a file path"):
        from_flat({**flat, "memory.path": str(tmp_path)})
    with pytest.raises(ParamError, match=r"^planner\.memory: unknown parameter 'max_age' \(did you mean 'max_age_s'"):
        parse_params({"planner": {"memory": {"max_age": 5}}, "robots": [{"id": "d1", "kind": "drone"}]})
    assert validate_update(fleet, {"memory.max_age_s": 60.0})[1] == read_only_reason("memory.max_age_s")
