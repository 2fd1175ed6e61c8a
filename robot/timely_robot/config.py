"""The robot side of the fleet YAML: a robot's entry (``robots:``) and the link's protection
(``security:``), parsed and checked without the planner's settings, so a robot computer reads the
same file the planner does (:func:`load_robot_side`); mistakes are a :class:`ParamError` of one
sentence naming the key. The planner's loader (``llm_planner_node.config.params``) parses these
two sections with the same functions and adds the ``planner:`` section.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from timely_robot.approval import Approval, approval_from
from timely_robot.budgets import Budget, budget_for
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, ROBOT_KINDS


class ParamError(ValueError):
    """A parameter file mistake, phrased so the user knows what to change."""


def rule(default: Any, **limits: Any) -> Any:
    """A dataclass field with validation limits (``gt``/``ge``/``le``: bounds; ``unit``: for the sentence)."""
    return field(default=default, metadata=limits)


def suggest(key: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known: {', '.join(sorted(known))}"


def unknown_key(where: str, key: Any, known: tuple[str, ...] | list[str]) -> ParamError:
    return ParamError(f"{where}: unknown parameter '{key}' ({suggest(key, known)})")


def bound(where: str, value: float, meta: dict[str, Any]) -> None:
    unit = f" ({meta['unit']})" if "unit" in meta else ""
    if "gt" in meta and not value > meta["gt"]:
        raise ParamError(f"{where} must be > {meta['gt']:g}{unit}, got {value!r}")
    if "ge" in meta and not value >= meta["ge"]:
        raise ParamError(f"{where} must be >= {meta['ge']:g}{unit}, got {value!r}")
    if "le" in meta and not value <= meta["le"]:
        raise ParamError(f"{where} must be <= {meta['le']:g}{unit}, got {value!r}")


def take_fields(section: Any, where: str, cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check a YAML mapping's keys against a dataclass's simple fields and convert the values."""
    if not isinstance(section, dict):
        raise ParamError(f"{where} must be a mapping, got {type(section).__name__}")
    types = {"bool": bool, "int": int, "float": float, "str": str}
    known = {f.name: f for f in fields(cls) if f.name not in skip and f.type in types}
    out: dict[str, Any] = {}
    for key, value in section.items():
        f = known.get(key)
        if f is None:
            raise unknown_key(where, key, tuple(known))
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
            bound(name, value, dict(f.metadata))
            value = want(value)
        elif not isinstance(value, str):
            raise ParamError(f"{name} must be a string, got {value!r}")
        out[key] = value
    return out


def mapping_of(value: Any, where: str, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping ({what}), got {type(value).__name__}")
    return value


def numbers(value: Any, n: int) -> bool:
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
    if kind == "base":
        return _base_perception(value, where, source)
    if kind != "arm":
        return dict(value)
    known = _ARM_PERCEPTION_KEYS.get(source)
    if known is None:
        raise ParamError(f"{where}: source {source} gives no 3D positions, which an arm needs: "
                         "use map or topic")
    for key in value:
        if key not in known:
            raise unknown_key(where, key, known)
    if source == "map":
        objects = value.get("objects")
        if not isinstance(objects, dict) or not objects:
            raise ParamError(f"{where}: source map needs objects, a mapping of names to [x, y, z] in mm "
                             f"in the robot's base frame, e.g. {example}")
        for name, pos in objects.items():
            if not isinstance(name, str) or not name.strip() or not numbers(pos, 3):
                raise ParamError(f"{where}.objects.{name} must be 3 numbers [x, y, z] in mm, got {pos!r}")
        return {"source": "map", "objects": {n: [float(v) for v in p] for n, p in objects.items()}}
    if source == "topic":
        topic = value.get("topic")
        if not isinstance(topic, str) or not topic.strip():
            raise ParamError(f"{where}: source topic needs topic, the name of the 3D detections topic "
                             f"(e.g. indy_1/detections_3d), got {topic!r}")
        if "camera_to_base" in value and not numbers(value["camera_to_base"], 6):
            raise ParamError(f"{where}.camera_to_base must be 6 numbers [x, y, z, roll, pitch, yaw] "
                             f"(mm, degrees), got {value['camera_to_base']!r}")
        _seconds(value, "max_age_s", 2.0, where)
    return dict(value)


def _base_perception(value: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """A base's perception: ``topic`` (a detector node's DetectionArray on ``topic``, reporting
    the declared ``classes``; answers at most ``max_age_s`` old) or ``none``."""
    if source not in _BASE_PERCEPTION_KEYS:
        raise ParamError(f"{where}: a base's source is topic (a detections topic) or none, not {source!r}")
    known = _BASE_PERCEPTION_KEYS[source]
    for key in value:
        if key not in known:
            raise unknown_key(where, key, known)
    if source == "none":
        return {"source": "none"}
    topic = _topic(value, where, "source topic", "the DetectionArray topic of the base's detector "
                                                 "(e.g. base_1/detections)")
    classes = _classes(value, where, "source topic", "the labels the detector reports (e.g. [person, chair])")
    return {"source": "topic", "topic": topic, "max_age_s": _seconds(value, "max_age_s", 1.0, where),
            "classes": classes}


def _topic(value: dict[str, Any], where: str, needs: str, what: str) -> str:
    """``value``'s ``topic``, stripped; a ParamError saying that ``needs`` it and ``what`` it is."""
    topic = value.get("topic")
    if not isinstance(topic, str) or not topic.strip():
        raise ParamError(f"{where}: {needs} needs topic, {what}, got {topic!r}")
    return topic.strip()


def _classes(value: dict[str, Any], where: str, needs: str, what: str) -> list[str]:
    """``value``'s ``classes`` (a non-empty list of labels of at most 64 characters) in snake_case,
    each once; a ParamError saying that ``needs`` them and ``what`` they are."""
    classes = value.get("classes")
    if (not isinstance(classes, list) or not classes
            or not all(isinstance(c, str) and c.strip() and len(c) <= 64 for c in classes)):
        raise ParamError(f"{where}: {needs} needs classes, {what}, got {classes!r}")
    return list(dict.fromkeys("_".join(c.strip().lower().split()) for c in classes))


def _seconds(value: dict[str, Any], key: str, default: float, where: str) -> float:
    """``value[key]`` (default ``default``): a finite number of seconds > 0, else a ParamError."""
    v = value.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ParamError(f"{where}.{key} must be a number > 0 (seconds), got {v!r}")
    return float(v)


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
            raise unknown_key(where, key, known)
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
        topic = _topic(value, where, "detector topic", "the DetectionArray topic your detector node publishes on "
                                                       "(e.g. tello_1/detections_in)")
        if topic.strip("/").split("/")[-1] in ("detections", "image_raw"):
            raise ParamError(f"{where}.topic {topic!r} is where the adapter itself publishes (its detections "
                             "and camera images): give your detector node's own topic, e.g. tello_1/detections_in")
        out["classes"] = _classes(value, where, "detector topic", "the labels your detector node reports "
                                                                 "(e.g. [cat, person])")
        _seconds(value, "timeout_s", 1.0, where)
        out["topic"] = topic
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
    where the objects really are, whatever the arm's perception says; nav2-sim: [x, y] m in map,
    what the base's camera shows on its detections topic) and ``battery_pct`` (tello-sim: its
    charge at start)."""
    if value is None:
        return None
    if adapter not in ("tello-sim", "indy-sim", "nav2-sim"):
        raise ParamError(f"{where} describes a protocol simulator's world: for adapters tello-sim, indy-sim and "
                         f"nav2-sim only, not {adapter!r}")
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping such as {{scene: {{objects: {{cat: {{pos: [200, 0, 20]}}}}}}}}, "
                         f"got {value!r}")
    known = ("scene", "battery_pct", "battery_drain_per_s") if adapter == "tello-sim" else ("scene",)
    for key in value:
        if key not in known:
            raise unknown_key(where, key, known)
    scene = value.get("scene")
    if scene is not None:
        objs = scene.get("objects") if isinstance(scene, dict) else None
        n = 2 if adapter == "nav2-sim" else 3
        if not isinstance(objs, dict) or any(not isinstance(o, dict) or not numbers(o.get("pos"), n)
                                              or ("size" in o and not numbers(o["size"], 2)) for o in objs.values()):
            raise ParamError(f"{where}.scene must be {{objects: {{NAME: {{pos: [{'x, y' if n == 2 else 'x, y, z'}]"
                             f"{'' if n == 2 else ', size: [w, h]'}}}}}}}}}, got {scene!r}")
    bat = value.get("battery_pct")
    if bat is not None and (isinstance(bat, bool) or not isinstance(bat, (int, float)) or not 0 <= bat <= 100):
        raise ParamError(f"{where}.battery_pct must be a number in [0, 100], got {bat!r}")
    drain = value.get("battery_drain_per_s")
    if drain is not None and (isinstance(drain, bool) or not isinstance(drain, (int, float)) or not 0 <= drain <= 100):
        raise ParamError(f"{where}.battery_drain_per_s must be a number of percent a second in [0, 100], got {drain!r}")
    return dict(value)


@dataclass(frozen=True)
class Origin:
    """Where a robot's own frame sits in the fleet frame: its origin's position (metres) and the
    frame's rotation about z (degrees, counter-clockwise seen from above). A robot reports its
    pose in its own frame; the planner places it in the fleet frame with this."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    yaw_deg: float = 0.0


ADAPTERS = ("sim", "tello", "tello-sim", "indy", "indy-sim", "nav2", "nav2-sim", "ros", "external")


@dataclass(frozen=True)
class RobotParams:
    """One robot: its adapter (robot_adapters/executors.py builds it) and, for real hardware, its address."""

    id: str
    kind: str
    skill_set: str
    adapter: str = "sim"
    host: str = ""
    #: objects the robot knows about (its scene, an arm's workspace): named in the prompt of an
    #: instruct model, and the only names its plan grammar admits as object arguments
    objects: tuple[str, ...] = ()
    #: what one goal may make the robot do (timely_robot/budgets.py; None: the robot kind's default)
    budget: Budget | None = None
    #: segments that wait for an operator's approval before dispatch (timely_robot/approval.py; None: none)
    approval: Approval | None = None
    #: the YAML ``perception:`` mapping: where the robot's perceived objects come from
    #: (:data:`PERCEPTION_SOURCES`; arms: robot/robot_adapters/perception/arm_sources.py). None: not
    #: declared (a simulated robot uses its simulator's scene; a real arm refuses to start)
    perception: Mapping[str, Any] | None = field(default=None, hash=False)
    #: the YAML ``simulator:`` mapping of a simulated robot (tello-sim, indy-sim): the world its
    #: simulator holds (``scene``) and, for the Tello simulator, its ``battery_pct``. None: defaults
    simulator: Mapping[str, Any] | None = field(default=None, hash=False)
    #: a base's named places: name -> [x, y, yaw] in the ``map`` frame (metres, degrees); the
    #: planner names them in the prompt and its grammar admits them as ``go_to`` places
    places: Mapping[str, Any] | None = field(default=None, hash=False)
    #: a base's Nav2 interfaces (:data:`NAV2_KEYS`): the namespace of its Nav2 stack, whether
    #: ``cmd_vel`` is TwistStamped (Kilted's default) or Twist, the pose and odometry topics
    nav2: Mapping[str, Any] | None = field(default=None, hash=False)
    #: ``adapter: ros``: the robot's own ROS actions and services, declared as skills
    #: (:mod:`timely_robot.declared`); its skill set is ``<id>_skills``
    skills: Mapping[str, Any] | None = field(default=None, hash=False)
    #: where the robot's own frame (a drone's take-off point, a base's Nav2 ``map``, an arm's
    #: base) sits in the fleet frame; None: the YAML declares no ``origin:`` (the robot's frame
    #: is the fleet frame, all zero)
    origin: Origin | None = None

    @property
    def effective_budget(self) -> Budget:
        return self.budget if self.budget is not None else budget_for(self.kind)


_ROBOT_KEYS = ("id", "kind", "skill_set", "adapter", "host", "objects", "budget", "approval", "perception",
               "simulator", "places", "nav2", "skills", "origin")
#: the keys of a robot's ``origin:`` (metres, degrees), each 0 when absent
ORIGIN_KEYS = ("x", "y", "z", "yaw_deg")
#: a base's ``nav2:`` keys and their defaults (Nav2 Kilted's own names)
NAV2_KEYS: dict[str, Any] = {"namespace": "", "cmd_vel_stamped": True, "pose_topic": "amcl_pose", "odom_topic": "odom"}
#: the adapters of a mobile base (``kind: base``)
BASE_ADAPTERS = ("nav2", "nav2-sim", "ros", "sim", "external")
#: values of a robot's ``perception.source``; ``scene`` only on the simulated adapters
PERCEPTION_SOURCES = ("map", "topic", "scene", "camera", "none")
_SCENE_ADAPTERS = ("indy-sim", "tello-sim", "sim")
#: keys of an arm's perception mapping per source (robot/robot_adapters/perception/arm_sources.py)
_ARM_PERCEPTION_KEYS = {"map": ("source", "objects"), "topic": ("source", "topic", "camera_to_base", "max_age_s"),
                        "scene": ("source",), "none": ("source",)}
#: keys of a drone's perception mapping per source (robot/robot_adapters/perception/drone.py); ``topic``,
#: ``classes`` and ``timeout_s`` only with ``detector: topic`` (robot/robot_adapters/perception/topic_detector.py)
_DRONE_PERCEPTION_KEYS = {"camera": ("source", "detector", "max_age_s", "settle_s", "min_score", "vlm", "topic",
                                     "classes", "timeout_s"),
                          "scene": ("source",), "none": ("source",)}
#: keys of a base's perception mapping per source (robot/robot_adapters/base_executor.py)
_BASE_PERCEPTION_KEYS = {"topic": ("source", "topic", "classes", "max_age_s"), "none": ("source",)}
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
    #: the planner's lease (timely_robot/link/rules.py): an adapter whose robot is executing and that heard
    #: nothing from its planner for this long stops the robot ("stopped: planner lost"); 0 = off
    lease_s: float = rule(3.0, ge=0, unit="seconds")
    #: with a standby planner: how long a robot whose lease expired is held, its goal paused,
    #: waiting for a planner of a higher term before the goal ends (0 = the goal ends at once)
    lease_grace_s: float = rule(0.0, ge=0, unit="seconds")


#: the fleet YAML's top-level sections
SECTIONS = ("planner", "robots", "security")


def check_sections(data: Any, not_a_mapping: str) -> None:
    """``data`` is a mapping of known top-level sections (ParamError ``not_a_mapping`` if it is
    no mapping; one naming the unknown section otherwise)."""
    if not isinstance(data, dict):
        raise ParamError(not_a_mapping)
    for key in data:
        if key not in SECTIONS:
            raise ParamError(f"unknown top-level section '{key}' ({suggest(key, SECTIONS)})")


def parse_security(value: Any) -> SecurityParams:
    """The ``security:`` section (absent: the defaults)."""
    security = SecurityParams(**take_fields(mapping_of(value, "security", "mode, keystore, per_robot_topics"),
                                            "security", SecurityParams))
    for h in filter(None, (x.strip() for x in security.cancel_operator_keys_sha256.split(","))):
        if len(h) != 64 or any(c not in "0123456789abcdef" for c in h.lower()):
            raise ParamError(f"security.cancel_operator_keys_sha256: {h[:70]!r} is not a SHA-256 in hex (64 digits)")
    if security.mode not in SECURITY_MODES:
        raise ParamError(f"security.mode must be one of {', '.join(SECURITY_MODES)}, got {security.mode!r}")
    return security


def _places(value: Any, where: str, kind: str) -> dict[str, list[float]] | None:
    """A base's ``places:``: name -> [x, y] or [x, y, yaw] (map frame, metres, degrees)."""
    if value is None:
        return None
    example = "{kitchen: [16.0, 3.0, 90], dock: [2.0, 2.0]}"
    if kind != "base":
        raise ParamError(f"{where}: named places are a mobile base's (kind: base), not a {kind}'s")
    if not isinstance(value, dict) or not value:
        raise ParamError(f"{where} must be a mapping of place names to [x, y, yaw] in the map frame, e.g. {example}")
    if len(value) > 100:
        raise ParamError(f"{where}: at most 100 places")
    out: dict[str, list[float]] = {}
    for name, pose in value.items():
        if not isinstance(name, str) or not name.strip() or len(name) > 64 or not name.replace("_", "").isalnum():
            raise ParamError(f"{where}: place name {name!r} must be letters, digits and '_' (at most 64)")
        if not (numbers(pose, 2) or numbers(pose, 3)):
            raise ParamError(f"{where}.{name} must be [x, y] or [x, y, yaw] (metres, degrees), got {pose!r}")
        x, y, *yaw = (float(v) for v in pose)
        out[name] = [x, y, yaw[0] if yaw else 0.0]
    return out


def _origin(value: Any, where: str, kind: str) -> Origin | None:
    """A robot's ``origin:`` ({x, y, z} metres, ``yaw_deg`` degrees; absent keys 0), or None."""
    if value is None:
        return None
    if kind == "chat":
        raise ParamError(f"{where}: a chat robot has no position, so no origin")
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping such as {{x: 2.0, y: -1.5, z: 0.0, yaw_deg: 90}} "
                         f"(metres, degrees), got {value!r}")
    for key, v in value.items():
        if key not in ORIGIN_KEYS:
            raise unknown_key(where, key, ORIGIN_KEYS)
        if not numbers([v], 1):
            raise ParamError(f"{where}.{key} must be a finite number ({'degrees' if key == 'yaw_deg' else 'metres'}), "
                             f"got {v!r}")
    return Origin(**{k: float(value.get(k, 0.0)) for k in ORIGIN_KEYS})


def _nav2(value: Any, where: str, adapter: str) -> dict[str, Any] | None:
    """A base's ``nav2:`` mapping (:data:`NAV2_KEYS`), checked and completed with the defaults."""
    if value is None:
        return None
    if adapter not in ("nav2", "nav2-sim"):
        raise ParamError(f"{where}: Nav2 settings are for adapters nav2 and nav2-sim, not {adapter!r}")
    if not isinstance(value, dict):
        raise ParamError(f"{where} must be a mapping such as {{namespace: base1, cmd_vel_stamped: true}}, got {value!r}")
    out = dict(NAV2_KEYS)
    for key, v in value.items():
        if key not in NAV2_KEYS:
            raise unknown_key(where, key, tuple(NAV2_KEYS))
        if not isinstance(v, type(NAV2_KEYS[key])):
            raise ParamError(f"{where}.{key} must be a {type(NAV2_KEYS[key]).__name__}, got {v!r}")
        out[key] = v
    return out


def _declared(r: Mapping[str, Any], where: str, rid: str, kind: str) -> Any:
    """The declared skills of an ``adapter: ros`` robot (registered as its skill set), else None."""
    from timely_robot.declared import DeclarationError, declared_skills
    from timely_robot.skills import register_skill_set

    adapter = str(r.get("adapter", "sim"))
    if r.get("skills") is None:
        if adapter == "ros":
            raise ParamError(f"{where}: adapter 'ros' needs skills, the robot's ROS actions and services declared as "
                             "skills (docs/guides/mobile_bases.md#any-robots-ros-actions)")
        return None
    if adapter != "ros":
        raise ParamError(f"{where}.skills: declared skills are for adapter 'ros', not {adapter!r}")
    if kind == "chat":
        raise ParamError(f"{where}: a chat robot has no ROS actions to declare")
    try:
        declared = declared_skills(rid, kind, r["skills"], f"{where}.skills")
        register_skill_set(declared.skill_set)
    except (DeclarationError, ValueError) as e:
        raise ParamError(str(e)) from None
    if r.get("skill_set") not in (None, "", declared.skill_set.id):
        raise ParamError(f"{where}.skill_set: a robot with declared skills plans with {declared.skill_set.id!r}")
    return declared


def parse_robots(value: Any) -> tuple[RobotParams, ...]:
    """The ``robots:`` list, each entry checked (its id, kind, skill set, adapter, budget,
    approval, perception and simulator)."""
    robots_raw = value or []
    if not isinstance(robots_raw, list):
        raise ParamError("robots must be a list of {id, kind, skill_set}")
    robots: list[RobotParams] = []
    for i, r in enumerate(robots_raw):
        where = f"robots[{i}]"
        if not isinstance(r, dict) or "id" not in r or "kind" not in r:
            raise ParamError(f"{where} needs at least 'id' and 'kind'")
        for key in r:
            if key not in _ROBOT_KEYS:
                raise unknown_key(where, key, _ROBOT_KEYS)
        rid, kind = str(r["id"]), str(r["kind"])
        if not rid.replace("_", "").isalnum():
            raise ParamError(f"{where}.id {rid!r} must be letters, digits and '_' (it names ROS topics)")
        if kind not in ROBOT_KINDS:
            raise ParamError(f"{where}.kind {kind!r} must be one of {', '.join(ROBOT_KINDS)}")
        skills = _declared(r, where, rid, kind)
        skill_set = skills.skill_set.id if skills is not None else str(r.get("skill_set") or DEFAULT_SKILL_SET_FOR_KIND[kind])
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
                budget = budget_for(kind).merged(mapping_of(r["budget"], f"{where}.budget", "max_calls, fence_cm, ..."))
            except (TypeError, ValueError) as e:
                raise ParamError(f"{where}.budget: {e}") from None
        approval = None
        if r.get("approval") is not None:
            try:
                approval = approval_from(r["approval"], DEFAULT_SKILL_SETS[skill_set])
            except ValueError as e:
                raise ParamError(f"{where}.approval: {e}") from None
        if (kind == "base") != (adapter in ("nav2", "nav2-sim")) and adapter not in ("sim", "external", "ros"):
            raise ParamError(f"{where}: adapter '{adapter}' is for " + ("mobile bases (kind: base)" if kind != "base"
                             else f"another kind; a base's adapter is one of {', '.join(BASE_ADAPTERS)}"))
        perception = _perception(r.get("perception"), f"{where}.perception", kind, adapter)
        simulator = _simulator(r.get("simulator"), f"{where}.simulator", adapter)
        places = _places(r.get("places"), f"{where}.places", kind)
        nav2 = _nav2(r.get("nav2"), f"{where}.nav2", adapter)
        origin = _origin(r.get("origin"), f"{where}.origin", kind)
        # a base's places, and the classes its detections topic reports, are things it knows by
        # name: the prompt's and the grammar's, as objects are
        seen = (perception or {}).get("classes", []) if kind == "base" else []
        known = tuple(dict.fromkeys([*(o.strip() for o in objects), *(places or {}), *seen]))
        robots.append(RobotParams(rid, kind, skill_set, adapter, host, known, budget,
                                  approval, perception, simulator, places, nav2,
                                  dict(r["skills"]) if skills is not None else None, origin))
    return tuple(robots)


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


def load_robot_side(path: str | Path) -> tuple[tuple[RobotParams, ...], SecurityParams]:
    """The robots and the security settings of the fleet YAML at ``path``; its ``planner:``
    section is the planner's and is not read here."""
    data = read_yaml(path)
    try:
        check_sections(data, "the parameter file must be a YAML mapping with 'robots'")
        return parse_robots(data.get("robots")), parse_security(data.get("security"))
    except ParamError as e:
        raise ParamError(f"{path}: {e}") from None
