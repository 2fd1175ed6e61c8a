"""The node's parameter file (YAML): load, validate, explain mistakes in one sentence each.

Schema (see config/fleet.yaml for a commented example)::

    planner:
      policy: timelyllm            # any registered policy name
      engine: {kind: vllm|sim, model: embedded|<HF path>, dtype, max_model_len, block_size,
               kv_cache_gib, tensor_parallel_size, data_parallel_size, max_num_seqs, enforce_eager}
      batching: {mode: adaptive|fixed, max_batch}
      tuf_presets: {<class>: {ert_s, alpha, beta}}
      max_instruction_chars, max_tokens, robot_timeout_s, network_latency_s
    robots: [{id, kind: drone|arm|chat|sim, skill_set, adapter: sim|tello|tello-sim|indy|indy-sim|external, host}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .core.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, ROBOT_KINDS

DEFAULT_PARAMS = Path(__file__).resolve().parents[1] / "config" / "fleet.yaml"


class ParamError(ValueError):
    """A parameter file mistake, phrased so the user knows what to change."""


@dataclass(frozen=True)
class TufParams:
    """Time-utility function parameters (TimelyLLM Eq. 1)."""

    ert_s: float
    alpha: float
    beta: float

    def check(self, where: str) -> "TufParams":
        if not self.ert_s > 0:
            raise ParamError(f"{where}: ert_s must be > 0 (seconds), got {self.ert_s}")
        if self.alpha > 0:
            raise ParamError(f"{where}: alpha must be <= 0 (utility decreases after the ERT), got {self.alpha}")
        if not self.beta > 0:
            raise ParamError(f"{where}: beta must be > 0, got {self.beta}")
        return self


@dataclass(frozen=True)
class EngineParams:
    kind: str = "vllm"
    model: str = "embedded"
    dtype: str = "float32"
    max_model_len: int = 1024
    block_size: int = 32
    kv_cache_gib: float = 0.25
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_num_seqs: int = 32
    enforce_eager: bool = True
    seed: int = 0


ADAPTERS = ("sim", "tello", "tello-sim", "indy", "indy-sim", "external")


@dataclass(frozen=True)
class RobotParams:
    """One robot: its adapter (see llm_planner_node/up.py) and, for real hardware, its address."""

    id: str
    kind: str
    skill_set: str
    adapter: str = "sim"
    host: str = ""


@dataclass(frozen=True)
class PlannerParams:
    policy: str = "timelyllm"
    engine: EngineParams = field(default_factory=EngineParams)
    batching_mode: str = "adaptive"
    max_batch: int = 8
    tuf_presets: dict[str, TufParams] = field(
        default_factory=lambda: {
            "normal": TufParams(1.0, -2.0, 1.0),
            "urgent": TufParams(0.2, -6.67, 2.0),
        }
    )
    max_instruction_chars: int = 2000
    max_tokens: int = 128
    robot_timeout_s: float = 30.0
    network_latency_s: float = 0.0


@dataclass(frozen=True)
class FleetParams:
    planner: PlannerParams
    robots: tuple[RobotParams, ...]

    def robot(self, robot_id: str) -> RobotParams | None:
        return next((r for r in self.robots if r.id == robot_id), None)


def _take(section: dict[str, Any], where: str, cls: type, key_map: dict[str, str] | None = None) -> dict[str, Any]:
    """Check a YAML mapping's keys against a dataclass and convert the value types."""
    if not isinstance(section, dict):
        raise ParamError(f"{where} must be a mapping, got {type(section).__name__}")
    fields = {f.name: f for f in cls.__dataclass_fields__.values()}  # type: ignore[attr-defined]
    key_map = key_map or {}
    out: dict[str, Any] = {}
    for key, value in section.items():
        name = key_map.get(key, key)
        if name not in fields:
            raise ParamError(f"{where}: unknown parameter '{key}' (known: {', '.join(sorted(fields))})")
        default = fields[name].default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ParamError(f"{where}.{key} must be true or false, got {value!r}")
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ParamError(f"{where}.{key} must be a number, got {value!r}")
            value = type(default)(value) if isinstance(default, float) or float(value).is_integer() else value
            if isinstance(default, int) and not float(value).is_integer():
                raise ParamError(f"{where}.{key} must be an integer, got {value!r}")
            if value < 0:
                raise ParamError(f"{where}.{key} must not be negative, got {value!r}")
        elif isinstance(default, str) and not isinstance(value, str):
            raise ParamError(f"{where}.{key} must be a string, got {value!r}")
        out[name] = value
    return out


def parse_params(data: dict[str, Any], known_policies: tuple[str, ...] | None = None) -> FleetParams:
    """Validate a parsed YAML document; raise ParamError naming the offending key."""
    if not isinstance(data, dict):
        raise ParamError("the parameter file must be a YAML mapping with 'planner' and 'robots'")
    unknown = set(data) - {"planner", "robots"}
    if unknown:
        raise ParamError(f"unknown top-level section(s) {sorted(unknown)}: expected 'planner' and 'robots'")
    raw = dict(data.get("planner") or {})
    engine = EngineParams(**_take(raw.pop("engine", {}) or {}, "planner.engine", EngineParams))
    if engine.kind not in ("vllm", "sim"):
        raise ParamError(f"planner.engine.kind must be 'vllm' or 'sim', got {engine.kind!r}")
    if engine.block_size % 32:
        raise ParamError(f"planner.engine.block_size must be a multiple of 32 (vLLM CPU), got {engine.block_size}")
    batching = raw.pop("batching", {}) or {}
    tufs_raw = raw.pop("tuf_presets", None)
    planner_kw = _take(raw, "planner", PlannerParams)
    if not isinstance(batching, dict):
        raise ParamError("planner.batching must be a mapping with 'mode' and 'max_batch'")
    mode = batching.get("mode", "adaptive")
    if mode not in ("adaptive", "fixed"):
        raise ParamError(f"planner.batching.mode must be 'adaptive' or 'fixed', got {mode!r}")
    max_batch = batching.get("max_batch", 8)
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise ParamError(f"planner.batching.max_batch must be an integer >= 1, got {max_batch!r}")
    planner = PlannerParams(engine=engine, batching_mode=mode, max_batch=max_batch, **planner_kw)
    if tufs_raw is not None:
        if not isinstance(tufs_raw, dict) or not tufs_raw:
            raise ParamError("planner.tuf_presets must map class names to {ert_s, alpha, beta}")
        presets = {}
        for name, v in tufs_raw.items():
            where = f"planner.tuf_presets.{name}"
            kw = _take(v, where, TufParams)
            missing = {"ert_s", "alpha", "beta"} - set(kw)
            if missing:
                raise ParamError(f"{where} is missing {sorted(missing)}")
            presets[name] = TufParams(**{k: float(x) for k, x in kw.items()}).check(where)
        planner = PlannerParams(**{**planner.__dict__, "tuf_presets": presets})
    if known_policies is not None and planner.policy not in known_policies:
        raise ParamError(f"planner.policy {planner.policy!r} is not a known policy ({', '.join(known_policies)})")

    robots_raw = data.get("robots") or []
    if not isinstance(robots_raw, list):
        raise ParamError("robots must be a list of {id, kind, skill_set}")
    robots: list[RobotParams] = []
    for i, r in enumerate(robots_raw):
        where = f"robots[{i}]"
        if not isinstance(r, dict) or "id" not in r or "kind" not in r:
            raise ParamError(f"{where} needs at least 'id' and 'kind'")
        extra = set(r) - {"id", "kind", "skill_set", "adapter", "host"}
        if extra:
            raise ParamError(f"{where}: unknown key(s) {sorted(extra)}")
        rid, kind = str(r["id"]), str(r["kind"])
        if not rid.replace("_", "").isalnum():
            raise ParamError(f"{where}.id {rid!r} must be letters, digits and '_' (it names ROS topics)")
        if kind not in ROBOT_KINDS:
            raise ParamError(f"{where}.kind {kind!r} must be one of {', '.join(ROBOT_KINDS)}")
        skill_set = str(r.get("skill_set") or DEFAULT_SKILL_SET_FOR_KIND[kind])
        if skill_set not in DEFAULT_SKILL_SETS:
            raise ParamError(f"{where}.skill_set {skill_set!r} is not registered ({', '.join(DEFAULT_SKILL_SETS)})")
        if any(x.id == rid for x in robots):
            raise ParamError(f"{where}: duplicate robot id {rid!r}")
        adapter = str(r.get("adapter", "sim"))
        if adapter not in ADAPTERS:
            raise ParamError(f"{where}.adapter {adapter!r} must be one of {', '.join(ADAPTERS)}")
        host = str(r.get("host", ""))
        if adapter in ("tello", "indy") and not host:
            raise ParamError(f"{where}: adapter '{adapter}' needs the robot's 'host' address")
        robots.append(RobotParams(rid, kind, skill_set, adapter, host))
    return FleetParams(planner=planner, robots=tuple(robots))


def load_params(path: str | Path = DEFAULT_PARAMS, known_policies: tuple[str, ...] | None = None) -> FleetParams:
    """Read and validate a parameter file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ParamError(f"parameter file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ParamError(f"parameter file {path} is not valid YAML: {e}") from None
    try:
        return parse_params(data, known_policies)
    except ParamError as e:
        raise ParamError(f"{path}: {e}") from None
