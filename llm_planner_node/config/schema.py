"""The node's settings as a flat list of ROS-style parameters, generated from :mod:`.params`.

ROS-free (no rclpy): :mod:`.ros_params` declares these on a node; tests and the
``timely-fleet params export`` command use them without ROS.

Every field of the dataclasses in :mod:`.params` (FleetParams / PlannerParams / EngineParams /
TufParams / RobotParams) becomes one parameter, so a new field gets its parameter for free.
Names are relative and dotted, the YAML's ``planner.`` prefix dropped::

    policy, engine.<field>, batching.mode, batching.max_batch, memory.path, memory.max_age_s,
    tuf_presets.<preset>.<field>,
    max_instruction_chars, max_tokens, robot_timeout_s, network_latency_s,
    robots.ids (string array), robots.<id>.<field>

Validation lives in ONE place, :mod:`.params`: :func:`from_flat` rebuilds the YAML document and
goes through :func:`.params.parse_params` and :meth:`.params.FleetParams.check`; the refusal
sentences are params.py's, with the YAML key spelled as the parameter name (``robot_timeout_s
must be > 0 (seconds), got -1.0``).

Settings that can change while the node runs (:data:`RUNTIME_NAMES` and ``tuf_presets.*``) are
checked by :func:`validate_update`; every other one is read-only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from timely_robot.config import ADAPTERS, SECURITY_MODES, ParamError, RobotParams, SecurityParams, suggest
from llm_planner_node.config.params import (
    DTYPES, EngineParams, FleetParams, MemoryParams, PlannerParams, TufParams, _PLANNER_SECTIONS, parse_params)

#: Top-level parameters that can change while the node runs (plus every ``tuf_presets.*``).
RUNTIME_NAMES = ("max_instruction_chars", "max_tokens", "robot_timeout_s", "network_latency_s")

#: The string-array parameter listing the robots; its value decides which ``robots.<id>.*`` exist.
ROBOT_IDS = "robots.ids"

_SIMPLE_TYPES = {"bool": bool, "int": int, "float": float, "str": str}

#: Rules parse_params applies without field metadata (unannotated numbers must not be negative).
_EXTRA_RULES: dict[str, dict[str, Any]] = {"batching.max_batch": {"ge": 1}, "engine.block_size": {"step": 32}}

_DESCRIPTIONS: dict[str, str] = {
    "policy": "scheduling policy (timelyllm, vllm, vllm-stream, seg-fcfs, seg-edf, trail, ltr, hybrid, "
              "lamps and timelyllm-trail on the simulated engine only, timelyllm-lamps)",
    "engine.kind": "LLM engine: vllm (in-process vLLM), remote (vllm serve servers: engine.servers) or sim (calibrated simulated engine, no model needed)",
    "engine.model": "'embedded' (the shipped planner model) or a Hugging Face model directory",
    "engine.dtype": "weights and KV-cache dtype passed to vLLM",
    "engine.max_model_len": "longest sequence (prompt + plan) in tokens",
    "engine.block_size": "KV-cache block size in tokens (vLLM on CPU needs a multiple of 32)",
    "engine.kv_cache_gib": "exact KV-cache size in GiB; must hold one max_model_len sequence",
    "engine.tensor_parallel_size": "vLLM tensor-parallel workers",
    "engine.data_parallel_size": "vLLM data-parallel engines",
    "engine.max_num_seqs": "most sequences vLLM runs in one iteration",
    "engine.enforce_eager": "run vLLM without graph capture",
    "engine.keep_off_worker_cores": "vllm-cpu: keep the planner's threads off the cores vLLM's worker is bound to",
    "engine.colocate_engine_core": "vllm-cpu, worker on one core: run vLLM's engine core on that core too (needs keep_off_worker_cores)",
    "engine.seed": "sampling seed",
    "engine.servers": "kind remote: base URLs of `vllm serve` servers (timely-fleet serve-engine prints one)",
    "batching.mode": "adaptive (latency-guided batch size, TimelyLLM 4.4) or fixed (max_batch)",
    "batching.max_batch": "batch size of fixed batching",
    "max_instruction_chars": "longest instruction a goal may carry, in characters",
    "max_tokens": "most tokens generated for one plan",
    "robot_timeout_s": "seconds a robot may take to report a dispatched segment before the goal fails",
    "network_latency_s": "added to each segment's dispatch time (seconds), for a robot over a network",
    "constrained_decoding": "grammar (vLLM decodes under the skill set's plan grammar) or off (free decoding)",
    "admission": "batch admission of segmented policies (vllm-stream, seg-fcfs, seg-edf, timelyllm): "
                 "literal (TimelyLLM 4.4 as written) or improved (ours: keeps the engine busy under overload, suspends "
                 "a plan at a segment only while the engine is contended)",
    "hopeless": "goals that can no longer earn utility > 0 (segmented policies): keep (policy order), "
                "last (served after the others) or shed (ended at once with status SHED)",
    "scene_in_prompt": "a camera drone's goal prompt carries the scene it last reported (TypeFly's Scene line)",
    "max_replans": "new plans a goal may ask for with re_plan after its first (one more ends it REPLAN_REFUSED)",
    "term": "the planner's term at start, carried by every segment, heartbeat and stop it sends; adapters obey "
            "only the highest term they have seen (a planner that takes over raises it at run time)",
    "standby": "start as a standby planner: follow the active planner's journal and take over its goals when it "
               "falls silent, serving nothing before (up --standby)",
    "takeover_s": "seconds of the active planner's silence after which a standby takes over (0: half of "
                  "security.lease_s)",
    "memory.path": "the fleet memory's SQLite file: default ($XDG_STATE_HOME/timely_fleet/memory_<node name>.sqlite), "
                   "a file path, or off ('' too): no memory",
    "memory.max_age_s": "seconds a sighting is remembered (older ones are forgotten)",
    ROBOT_IDS: "ids of the fleet's robots; each has robots.<id>.kind, skill_set, adapter and host",
    "security.mode": "robot link protection: sign (HMAC-signed segments and statuses, per-robot keys) or off",
    "security.keystore": "directory of the per-robot keys ('' = the per-user default; timely-fleet keys)",
    "security.per_robot_topics": "segments and statuses on robots/<id>/segments and robots/<id>/status (for SROS2 access control) instead of the shared robot_segments and robot_status",
    "security.cancel_operator_keys_sha256": "comma-separated SHA-256 (hex) of operator secrets that may cancel any goal",
    "security.allow_cancel_all": "honour cancel-every-goal requests (all-zero goal id) on the action's cancel service",
}
_TUF_DESCRIPTIONS = {"ert_s": "expected response time of the TUF preset (seconds)",
                     "alpha": "utility slope after the ERT (<= 0)", "beta": "utility before the ERT (> 0)"}
_ROBOT_DESCRIPTIONS = {"kind": "robot kind", "skill_set": "skill set the planner plans with for this robot",
                       "adapter": "how the robot is reached (see README 'Configure')",
                       "host": "address of real hardware (tello, indy adapters)",
                       "budget": "what one goal may make the robot do (YAML mapping: max_calls, max_translation_cm, "
                                 "max_rotation_deg, duration_factor, duration_floor_s, fence_cm, fence_map_m, max_speed_mps); "
                                 "'' = the kind's default",
                       "objects": "objects the robot knows (named in the prompt; the only object arguments its grammar admits)",
                       "approval": "segments an operator must approve before dispatch (YAML mapping: skills, all, "
                                   "timeout_s); '' = none",
                       "perception": "where the robot's perceived objects come from (YAML mapping: source map|topic|"
                                     "scene|camera|none and its keys); '' = not declared",
                       "simulator": "a protocol simulator's world (YAML mapping: scene, battery_pct); '' = defaults",
                       "places": "a base's named places, [x, y, yaw] in the map frame (m, degrees) (YAML mapping); "
                                 "'' = none",
                       "nav2": "a base's Nav2 interfaces (YAML mapping: namespace, cmd_vel_stamped, pose_topic, "
                               "odom_topic); '' = Nav2's defaults",
                       "skills": "adapter ros: the robot's ROS actions and services declared as skills (YAML "
                                 "mapping, timely_robot/declared.py); '' = none",
                       "origin": "where the robot's own frame sits in the fleet frame (YAML mapping: x, y, z in m, "
                                 "yaw_deg); '' = at the fleet frame's origin"}


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its name, Python type (``list`` = array of strings) and default, and the
    limits params.py enforces (``gt``/``ge``/``le``, ``step``, ``choices``) for descriptors."""

    name: str
    type: type
    default: Any
    description: str
    read_only: bool
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    step: int | None = None
    unit: str | None = None
    choices: tuple[str, ...] | None = None

    def constraints(self) -> str:
        """The limits in words (for ``ParameterDescriptor.additional_constraints``); '' if none."""
        parts = []
        if self.choices:
            parts.append("one of: " + ", ".join(self.choices))
        for op, bound in ((">", self.gt), (">=", self.ge), ("<=", self.le)):
            if bound is not None:
                parts.append(f"{op} {bound:g}")
        if self.step:
            parts.append(f"a multiple of {self.step}")
        text = "; ".join(parts)
        if text and self.unit:
            text += f" ({self.unit})"
        if self.read_only:
            text += ("; " if text else "") + "read-only while the node runs"
        return text


def is_runtime(name: str) -> bool:
    """Whether a parameter can change while the node runs."""
    return name in RUNTIME_NAMES or name.startswith("tuf_presets.")


def _choices(name: str) -> tuple[str, ...] | None:
    from timely_robot.skills import DEFAULT_SKILL_SETS, ROBOT_KINDS

    if name == "policy":
        from llm_planner_node.core.policies import policy_names

        return tuple(policy_names())
    leaf = name.rsplit(".", 1)[-1]
    if name == "engine.kind":
        from llm_planner_node.config.params import ENGINE_KINDS

        return ENGINE_KINDS
    if name == "engine.dtype":
        return DTYPES
    if name == "batching.mode":
        return ("adaptive", "fixed")
    if name == "security.mode":
        return SECURITY_MODES
    if name == "constrained_decoding":
        return ("grammar", "off")
    if name == "admission":
        return ("literal", "improved")
    if name == "hopeless":
        return ("keep", "last", "shed")
    if name.startswith("robots.") and name != ROBOT_IDS:
        return {"kind": ROBOT_KINDS, "skill_set": tuple(DEFAULT_SKILL_SETS), "adapter": ADAPTERS}.get(leaf)
    return None


def _spec(name: str, f: Any, default: Any, description: str) -> ParamSpec:
    typ = _SIMPLE_TYPES.get(f.type) if isinstance(f.type, str) else f.type
    if f.type in ("Budget | None", "Approval | None", "Mapping[str, Any] | None", "Origin | None"):
        # robots.<id>.budget/approval/perception/origin: the YAML mapping in flow style ('' = the kind's
        # default budget, no approval, none declared)
        return ParamSpec(name=name, type=str, default=_budget_text(default), description=description, read_only=True)
    if f.type == "tuple[str, ...]":  # engine.servers: a string array
        return ParamSpec(name=name, type=list, default=list(default), description=description, read_only=True)
    if typ not in (bool, int, float, str):
        raise TypeError(f"param_schema: field {f.name} of type {f.type!r} has no parameter mapping "
                        "(teach param_schema.schema() about it)")
    rules = {k: v for k, v in dict(f.metadata).items() if k in ("gt", "ge", "le", "unit")}
    if typ in (int, float) and not f.metadata:
        rules["ge"] = 0  # timely_robot.config.take_fields: an unannotated number must not be negative
    rules.update(_EXTRA_RULES.get(name, {}))
    if typ is float and default is not None:
        default = float(default)
    return ParamSpec(name=name, type=typ, default=default, description=description, read_only=not is_runtime(name),
                     choices=_choices(name), **rules)


def _budget_text(budget: Any) -> str:
    """A robot's budget as one string parameter: its differences from the kind's default as a
    YAML flow mapping (``{max_calls: 20}``), '' for the default."""
    if budget is None:
        return ""
    import yaml

    if isinstance(budget, Mapping):  # robots.<id>.perception: the mapping as written
        return yaml.safe_dump(dict(budget), default_flow_style=True, sort_keys=False).strip()
    def plain(v: Any) -> Any:  # tuples (a fence's corners too) as YAML lists
        return [plain(x) for x in v] if isinstance(v, tuple) else v

    diff = {f.name: plain(getattr(budget, f.name)) for f in fields(budget)}
    return yaml.safe_dump(diff, default_flow_style=True).strip()


def _planner_fields(pp: PlannerParams):
    """(name, dataclass field, value, description) of every planner parameter."""
    for f in fields(PlannerParams):
        if f.name == "engine":
            for ef in fields(EngineParams):
                name = f"engine.{ef.name}"
                yield name, ef, getattr(pp.engine, ef.name), _DESCRIPTIONS.get(name, name)
        elif f.name == "memory":
            for mf in fields(MemoryParams):
                name = f"memory.{mf.name}"
                yield name, mf, getattr(pp.memory, mf.name), _DESCRIPTIONS.get(name, name)
        elif f.name in ("plan_limits", "sampling"):
            for lang, settings in getattr(pp, f.name).items():
                for sf in fields(settings):
                    yield (f"{f.name}.{lang}.{sf.name}", sf, getattr(settings, sf.name),
                           f"{f.name.replace('_', ' ')} of the {lang} plan language: {sf.name}")
        elif f.name == "tuf_presets":
            for preset, tuf in pp.tuf_presets.items():
                for tf in fields(TufParams):
                    yield (f"tuf_presets.{preset}.{tf.name}", tf, getattr(tuf, tf.name),
                           f"{_TUF_DESCRIPTIONS.get(tf.name, tf.name)}, preset '{preset}'")
        else:
            name = _PLANNER_SECTIONS.get(f.name, f.name).removeprefix("planner.")
            yield name, f, getattr(pp, f.name), _DESCRIPTIONS.get(name, f"planner.{name} (see config/fleet.yaml)")


def _check_ids(ids: list[str]) -> None:
    if "ids" in ids:
        raise ParamError("robot id 'ids' cannot be a ROS parameter name (robots.ids lists the robots): rename it")


def schema(params: FleetParams) -> list[ParamSpec]:
    """Every parameter, with ``params``' values as defaults (``robots.ids`` before the robots')."""
    specs = [_spec(name, f, value, desc) for name, f, value, desc in _planner_fields(params.planner)]
    for f in fields(SecurityParams):
        name = f"security.{f.name}"
        specs.append(_spec(name, f, getattr(params.security, f.name), _DESCRIPTIONS.get(name, name)))
    ids = [r.id for r in params.robots]
    _check_ids(ids)
    specs.append(ParamSpec(ROBOT_IDS, list, ids, _DESCRIPTIONS[ROBOT_IDS], read_only=True))
    for robot in params.robots:
        for f in fields(RobotParams):
            if f.name == "id":
                continue
            name = f"robots.{robot.id}.{f.name}"
            desc = f"{_ROBOT_DESCRIPTIONS.get(f.name, f.name)}, robot '{robot.id}'"
            specs.append(_spec(name, f, getattr(robot, f.name), desc))
    return specs


def spec_map(params: FleetParams) -> dict[str, ParamSpec]:
    return {s.name: s for s in schema(params)}


def to_flat(params: FleetParams) -> dict[str, Any]:
    """``{parameter name: value}`` for every parameter of :func:`schema`."""
    return {s.name: (list(s.default) if s.type is list else s.default) for s in schema(params)}


def placeholder_robot(robot_id: str) -> RobotParams:
    """A robot named only by ``robots.ids`` (its kind must then come from ``robots.<id>.kind``)."""
    return RobotParams(id=robot_id, kind="", skill_set="", adapter="sim", host="")


def with_robot_ids(params: FleetParams, ids: list[str]) -> FleetParams:
    """``params`` with exactly these robots: known ones kept, new ones as :func:`placeholder_robot`."""
    return replace(params, robots=tuple(params.robot(i) or placeholder_robot(i) for i in ids))


_PLANNER_KEY = re.compile(r"(?<![\w.\[])planner\.")
_ROBOT_INDEX = re.compile(r"robots\[(\d+)\]")


def _parameter_names(message: str, ids: list[str]) -> str:
    """A params.py sentence with its YAML keys spelled as parameter names."""
    message = _PLANNER_KEY.sub("", message)
    return _ROBOT_INDEX.sub(lambda m: f"robots.{ids[int(m.group(1))]}" if int(m.group(1)) < len(ids)
                            else m.group(0), message)


def from_flat(flat: Mapping[str, Any]) -> FleetParams:
    """The FleetParams these parameter values describe, validated by params.py (parse + check).
    Raises :class:`ParamError` with params.py's sentence, keys spelled as parameter names."""
    from llm_planner_node.core.policies import policy_names

    planner: dict[str, Any] = {}
    security: dict[str, Any] = {}
    robots: dict[str, dict[str, Any]] = {}
    ids_value = flat.get(ROBOT_IDS, [])
    if ids_value is None:
        ids_value = []
    if isinstance(ids_value, str) or not all(isinstance(i, str) for i in ids_value):
        raise ParamError(f"{ROBOT_IDS} must be a list of robot ids, e.g. [tello_1, chat_1], got {ids_value!r}")
    ids = list(ids_value)
    _check_ids(ids)
    for rid in ids:
        robots.setdefault(rid, {"id": rid})
    for name, value in flat.items():
        if name == ROBOT_IDS:
            continue
        parts = name.split(".")
        if parts[0] == "robots" and len(parts) == 3:
            if parts[1] not in robots:
                raise ParamError(f"{name}: robot '{parts[1]}' is not in {ROBOT_IDS} {ids}: add it there first")
            if parts[2] in ("budget", "approval", "perception", "simulator", "places", "nav2", "skills", "origin"):
                import yaml

                value = (yaml.safe_load(value) or None) if isinstance(value, str) else value
            robots[parts[1]][parts[2]] = value
        elif parts[0] == "security" and len(parts) == 2:
            security[parts[1]] = value
        elif parts[0] in ("engine", "batching", "memory") and len(parts) == 2:
            planner.setdefault(parts[0], {})[parts[1]] = value
        elif parts[0] in ("tuf_presets", "plan_limits", "sampling") and len(parts) == 3:
            planner.setdefault(parts[0], {}).setdefault(parts[1], {})[parts[2]] = value
        elif len(parts) == 1 and name not in ("engine", "batching", "memory", "tuf_presets", "plan_limits",
                                              "sampling"):
            planner[name] = value
        else:
            raise ParamError(f"'{name}' is not a parameter")
    robot_list = []
    for rid in ids:
        entry = dict(robots[rid])
        if not entry.get("kind"):
            raise ParamError(f"robots.{rid}.kind is not set: give robots.{rid}.kind "
                             "(drone, arm, chat or sim) for the robot in robots.ids")
        robot_list.append(entry)
    try:
        return parse_params({"planner": planner, "robots": robot_list, "security": security},
                            tuple(policy_names())).check()
    except ParamError as e:
        raise ParamError(_parameter_names(str(e), ids)) from None


def read_only_reason(name: str) -> str:
    return f"'{name}' is read-only while the node runs; change it in the parameter file and restart"


def validate_update(current: FleetParams, changes: Mapping[str, Any]) -> tuple[FleetParams | None, str]:
    """Apply parameter ``changes`` to ``current``: ``(new params, "")`` or ``(None, reason)`` with
    the one sentence that says why they are refused (read-only, unknown, or params.py's rule)."""
    flat = to_flat(current)
    for name in changes:
        if name not in flat:
            return None, f"'{name}' is not a parameter ({suggest(name, list(flat))})"
        if not is_runtime(name):
            return None, read_only_reason(name)
    flat.update(changes)
    try:
        return from_flat(flat), ""
    except ParamError as e:
        return None, str(e)
