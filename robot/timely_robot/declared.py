"""Skills declared in the fleet YAML as a robot's own ROS actions and services (``adapter: ros``),
without ROS: the declaration checked, the skill set it makes, and how each call fills its goal.

A declaration maps each skill name to its arguments (typed, with safe ranges, as a built-in
skill's), its interface (``action:`` or ``service:``, a type such as ``nav2_msgs/action/Spin``,
and the ``server:`` name), how the goal (or request) is filled, what in the result means success
(``success: {field: error_code, equals: 0}``; default: the action SUCCEEDED), which field explains
a failure (``error:``) or is the answer (``answer:``, with ``returns:``), and what the call moves
for the robot's budget (``motion: {translation_cm: ARG, rotation_deg: ARG, scale: K}``).

Each goal field (a dotted path, ``pose.pose.position.x``) takes one value of this vocabulary:

- a literal (text, number, true/false): ``pose.header.frame_id: map``;
- ``{arg: NAME}``: the call's argument, optionally ``radians: true`` (degrees to radians) and then
  ``scale: K`` and ``offset: B`` (units: ``{arg: distance, scale: 0.01}`` for cm to metres);
- ``{yaw_quaternion: NAME}``: a rotation about z of the argument's degrees, as a quaternion
  (a missing optional argument is 0 degrees);
- ``{place_x: NAME}``, ``{place_y: NAME}``, ``{place_yaw_quaternion: NAME}``: the robot's named
  place (``robots[].places``, map frame) the argument names: its x, y (metres) or yaw;
- ``{now: true}``: the current time, as a ``builtin_interfaces/Time`` stamp;
- ``{seconds: S}`` or ``{seconds: {arg: NAME}}``: a ``builtin_interfaces/Duration``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from timely_robot.skills import ArgSpec, SkillCall, SkillSet, SkillSpec

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*/(action|srv)/[A-Z][A-Za-z0-9]*$")
_PATH = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")
_SKILL_KEYS = ("alias", "description", "kind", "args", "returns", "action", "service", "server", "goal",
               "success", "error", "answer", "motion", "max_s")
_ARG_KEYS = ("name", "type", "min", "max", "unit", "optional", "choices")
#: the goal-value forms (module docstring) and their keys
_FORMS = {"arg": ("arg", "radians", "scale", "offset"), "yaw_quaternion": ("yaw_quaternion",), "now": ("now",),
          "seconds": ("seconds",), "place_x": ("place_x",), "place_y": ("place_y",),
          "place_yaw_quaternion": ("place_yaw_quaternion",)}
#: most skills one robot may declare
MAX_SKILLS = 40


class DeclarationError(ValueError):
    """A skill declaration that cannot be used (the message names the key)."""


@dataclass(frozen=True)
class Binding:
    """How one declared skill reaches the robot: its interface, server, goal template and result rules."""

    skill: str
    interface: str                     # "action" or "service"
    type: str                          # e.g. nav2_msgs/action/NavigateToPose
    server: str
    goal: Mapping[str, Any] = field(default_factory=dict)  # field path -> value form
    success_field: str = ""            # "" : an action's SUCCEEDED status (a service: any answer) is success
    success_equals: Any = None
    error_field: str = ""
    answer_field: str = ""


@dataclass(frozen=True)
class DeclaredSkills:
    """A robot's declared skills: the skill set the planner plans with, and their bindings."""

    skill_set: SkillSet
    bindings: Mapping[str, Binding]


def declared_skills(robot_id: str, robot_kind: str, decl: Any, where: str) -> DeclaredSkills:
    """The skill set ``{robot_id}_skills`` and the bindings of a ``skills:`` mapping; raises
    :class:`DeclarationError` naming the first key that is wrong."""
    if not isinstance(decl, Mapping) or not decl:
        raise DeclarationError(f"{where} must be a mapping of skill names to their ROS action or service, e.g. "
                               "{turn: {action: nav2_msgs/action/Spin, server: /base/spin, args: [...], goal: {...}}}")
    if len(decl) > MAX_SKILLS:
        raise DeclarationError(f"{where}: at most {MAX_SKILLS} skills")
    specs, bindings = [], {}
    for name, d in decl.items():
        at = f"{where}.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise DeclarationError(f"{where}: skill name {name!r} must be snake_case letters, digits and '_'")
        if not isinstance(d, Mapping):
            raise DeclarationError(f"{at} must be a mapping (action or service, server, args, goal, ...)")
        for key in d:
            if key not in _SKILL_KEYS:
                raise DeclarationError(f"{at}: unknown key {key!r} (keys: {', '.join(_SKILL_KEYS)})")
        args = tuple(_arg(a, f"{at}.args[{i}]") for i, a in enumerate(d.get("args") or ()))
        names = [a.name for a in args]
        spec = SkillSpec(name, args, kind=_choice(d.get("kind", "action"), ("action", "perception", "control"),
                                                  f"{at}.kind"),
                         alias=_alias(d.get("alias"), f"{at}.alias"), returns=_returns(d, at),
                         description=str(d.get("description", "")),
                         max_s=_number(d["max_s"], f"{at}.max_s") if d.get("max_s") is not None else None,
                         motion=_motion(d.get("motion"), names, f"{at}.motion"))
        specs.append(spec)
        bindings[name] = _binding(name, d, names, at)
    try:
        skill_set = SkillSet(id=f"{robot_id}_skills", robot_kind=robot_kind, skills=tuple(specs),
                             description=f"{robot_id}'s own ROS actions and services (declared in the fleet YAML)")
    except ValueError as e:
        raise DeclarationError(f"{where}: {e}") from None
    return DeclaredSkills(skill_set, bindings)


def _arg(a: Any, at: str) -> ArgSpec:
    if not isinstance(a, Mapping) or "name" not in a or "type" not in a:
        raise DeclarationError(f"{at} must be a mapping with name and type, e.g. {{name: degrees, type: int, min: 1, "
                               "max: 360}")
    for key in a:
        if key not in _ARG_KEYS:
            raise DeclarationError(f"{at}: unknown key {key!r} (keys: {', '.join(_ARG_KEYS)})")
    name, typ = str(a["name"]), _choice(a["type"], ("int", "float", "str", "bool"), f"{at}.type")
    if not _NAME.match(name):
        raise DeclarationError(f"{at}.name {name!r} must be snake_case")
    lo = _number(a["min"], f"{at}.min") if a.get("min") is not None else None
    hi = _number(a["max"], f"{at}.max") if a.get("max") is not None else None
    if typ in ("int", "float") and (lo is None or hi is None or lo > hi):
        raise DeclarationError(f"{at}: a number needs its safe range, min <= max (what no plan may exceed)")
    choices = a.get("choices")
    if choices is not None and (not isinstance(choices, list) or not all(isinstance(c, str) for c in choices)):
        raise DeclarationError(f"{at}.choices must be a list of words")
    return ArgSpec(name, typ, lo, hi, choices=tuple(choices) if choices else None, optional=bool(a.get("optional")),
                   unit=str(a.get("unit", "")))


def _binding(name: str, d: Mapping[str, Any], args: list[str], at: str) -> Binding:
    if ("action" in d) == ("service" in d):
        raise DeclarationError(f"{at}: give exactly one of action (a ROS action type) or service (a ROS service type)")
    interface = "action" if "action" in d else "service"
    typ = str(d[interface])
    if not _TYPE.match(typ) or typ.split("/")[1] != ("action" if interface == "action" else "srv"):
        raise DeclarationError(f"{at}.{interface} {typ!r} must be a type such as "
                               + ("nav2_msgs/action/NavigateToPose" if interface == "action" else "std_srvs/srv/Trigger"))
    server = str(d.get("server", "")).strip()
    if not server:
        raise DeclarationError(f"{at}: server (the {interface}'s name, e.g. /base_1/spin) is missing")
    goal = d.get("goal") or {}
    if not isinstance(goal, Mapping):
        raise DeclarationError(f"{at}.goal must map field paths to values (module timely_robot.declared)")
    for path, value in goal.items():
        if not isinstance(path, str) or not _PATH.match(path):
            raise DeclarationError(f"{at}.goal: {path!r} is not a field path such as pose.pose.position.x")
        _check_value(value, args, f"{at}.goal.{path}")
    success = d.get("success") or {}
    if not isinstance(success, Mapping) or (success and set(success) != {"field", "equals"}):
        raise DeclarationError(f"{at}.success must be {{field: PATH, equals: VALUE}}")
    for key in ("error", "answer"):
        if d.get(key) is not None and not _PATH.match(str(d[key])):
            raise DeclarationError(f"{at}.{key} must be a result field path")
    if d.get("answer") is not None and d.get("returns") is None:
        raise DeclarationError(f"{at}: an answer needs returns (bool, int, float or str)")
    if success and not _PATH.match(str(success["field"])):
        raise DeclarationError(f"{at}.success.field must be a result field path")
    return Binding(name, interface, typ, server, dict(goal), str(success.get("field", "")), success.get("equals"),
                   str(d.get("error") or ""), str(d.get("answer") or ""))


def _check_value(value: Any, args: list[str], at: str) -> None:
    if isinstance(value, (str, int, float, bool)):
        return
    if not isinstance(value, Mapping) or not value:
        raise DeclarationError(f"{at} must be a literal or one of {', '.join('{' + f + ': ...}' for f in _FORMS)}")
    form = next((f for f in _FORMS if f in value), None)
    if form is None or any(k not in _FORMS[form] for k in value):
        raise DeclarationError(f"{at}: {dict(value)} is not a value form ({', '.join(_FORMS)}; module "
                               "timely_robot.declared)")
    if form not in ("now", "seconds") and value[form] not in args:
        raise DeclarationError(f"{at}: {value[form]!r} is not an argument of this skill ({', '.join(args) or 'none'})")
    if form == "seconds" and not isinstance(value["seconds"], (int, float)):
        _check_value(value["seconds"], args, at)
    for k in ("scale", "offset"):
        if k in value:
            _number(value[k], f"{at}.{k}")


def _motion(m: Any, args: list[str], at: str) -> tuple[tuple[str, int, float], ...]:
    if m is None:
        return ()
    if not isinstance(m, Mapping) or any(k not in ("translation_cm", "rotation_deg", "scale") for k in m):
        raise DeclarationError(f"{at} must be {{translation_cm: ARG}} and/or {{rotation_deg: ARG}}, "
                               "with scale: K to convert the argument's unit")
    scale = _number(m.get("scale", 1.0), f"{at}.scale")
    out = []
    for quantity in ("translation_cm", "rotation_deg"):
        if quantity in m:
            if m[quantity] not in args:
                raise DeclarationError(f"{at}.{quantity}: {m[quantity]!r} is not an argument of this skill")
            out.append((quantity, args.index(m[quantity]), scale))
    return tuple(out)


def _alias(a: Any, at: str) -> str | None:
    if a is None:
        return None
    if not isinstance(a, str) or not re.fullmatch(r"[a-z]{1,4}", a):
        raise DeclarationError(f"{at} must be 1-4 lower-case letters (its MiniSpec name)")
    return a


def _returns(d: Mapping[str, Any], at: str) -> Any:
    r = d.get("returns")
    return None if r is None else _choice(r, ("bool", "int", "float", "str"), f"{at}.returns")


def _choice(v: Any, choices: tuple[str, ...], at: str) -> Any:
    if v not in choices:
        raise DeclarationError(f"{at} must be one of {', '.join(choices)}, got {v!r}")
    return v


def _number(v: Any, at: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise DeclarationError(f"{at} must be a number, got {v!r}")
    return float(v)


def fill(binding: Binding, call: SkillCall, spec: SkillSpec, now: Mapping[str, int],
         places: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The goal's field values for ``call`` (field path -> value; a quaternion, a stamp or a
    duration as a mapping of its fields); ``now``: the current time as ``{sec, nanosec}``;
    ``places``: the robot's named places (name -> [x, y, yaw degrees]). A place the robot does not
    know is a :class:`DeclarationError` naming the places it knows."""
    given = {a.name: v for a, v in zip(spec.args, call.args)}
    return {path: _value(form, given, now, places or {}) for path, form in binding.goal.items()}


def _value(form: Any, given: Mapping[str, Any], now: Mapping[str, int], places: Mapping[str, Any]) -> Any:
    if not isinstance(form, Mapping):
        return form
    place_form = next((f for f in ("place_x", "place_y", "place_yaw_quaternion") if f in form), None)
    if place_form is not None:
        name = str(given.get(form[place_form], ""))
        if name not in places:
            raise DeclarationError(f"unknown place {name!r} (places: {', '.join(places) or 'none declared'})")
        x, y, yaw = (list(places[name]) + [0.0, 0.0, 0.0])[:3]
        if place_form == "place_x":
            return float(x)
        if place_form == "place_y":
            return float(y)
        half = math.radians(float(yaw)) / 2.0
        return {"x": 0.0, "y": 0.0, "z": math.sin(half), "w": math.cos(half)}
    if "arg" in form:
        v = given.get(form["arg"])
        if v is None:
            return 0.0
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return v
        x = math.radians(float(v)) if form.get("radians") else float(v)
        return x * float(form.get("scale", 1.0)) + float(form.get("offset", 0.0))
    if "yaw_quaternion" in form:
        half = math.radians(float(given.get(form["yaw_quaternion"]) or 0.0)) / 2.0
        return {"x": 0.0, "y": 0.0, "z": math.sin(half), "w": math.cos(half)}
    if "now" in form:
        return dict(now)
    s = form["seconds"]
    seconds = float(s) if isinstance(s, (int, float)) else float(_value(s, given, now, places))
    whole = math.floor(max(0.0, seconds))
    return {"sec": int(whole), "nanosec": int(round((max(0.0, seconds) - whole) * 1e9)) % 1_000_000_000}
