"""The node's settings as declared ROS 2 parameters (rclpy side of :mod:`.param_schema`).

ONE path for settings: the fleet YAML (``config/fleet.yaml`` unless the read-only ``params_file``
parameter or the CLI ``--params`` names another) is read first and its values become the
parameters' defaults; ROS overrides (``--ros-args -p name:=value``, ``--params-file file.yaml``,
launch ``parameters=[...]``) win over them. ``timely-fleet params export`` writes the YAML as a
standard ROS 2 parameters file (:func:`fleet_yaml_to_ros_params`).

Usage in a node::

    params = declare_parameters(node, params_file=args.params)   # effective FleetParams
    add_validation_callback(node, lambda: service.params, service.apply_params)

Every value, from the YAML or from ROS, is validated by params.py (through
:func:`.param_schema.from_flat`); an invalid override stops the node with params.py's sentence
(:class:`ParamError`). While running, only :data:`.param_schema.RUNTIME_NAMES` and
``tuf_presets.*`` can change (``ros2 param set /llm_planner robot_timeout_s 10``); the others
are read-only. A whole number given for a floating-point parameter (``robot_timeout_s:=10``) is
taken as that number.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from llm_planner_node.config.schema import (ROBOT_IDS, ParamSpec, _check_ids, _parameter_names, from_flat, schema, to_flat,
                           validate_update, with_robot_ids)
from llm_planner_node.config.params import DEFAULT_PARAMS, FleetParams, TufParams, load_params, parse_params
from timely_robot.config import ParamError, suggest

#: The read-only parameter naming the fleet YAML whose values are the other parameters' defaults.
PARAMS_FILE = "params_file"

#: Parameters rclpy itself may declare or accept on any node (not typos of ours).
_ROS_OWN = ("use_sim_time", "start_type_description_service", "start_parameter_services")

_INT64_MAX = 2**63 - 1
_FLOAT_MAX = sys.float_info.max


def descriptor_for(spec: ParamSpec):
    """The ParameterDescriptor of one parameter: description, read_only, range, constraints."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

    d = ParameterDescriptor(description=spec.description, read_only=spec.read_only,
                            additional_constraints=spec.constraints())
    if spec.type is int and (spec.ge is not None or spec.le is not None):
        low = int(spec.ge) if spec.ge is not None else -_INT64_MAX - 1
        high = int(spec.le) if spec.le is not None else _INT64_MAX
        step = int(spec.step or 0)
        if step:
            high = low + (high - low) // step * step
        d.integer_range = [IntegerRange(from_value=low, to_value=high, step=step)]
    elif spec.type is float and (spec.ge is not None or spec.le is not None):
        # ROS ranges are inclusive; a strict bound (gt) is left to the validation callback
        low = float(spec.ge) if spec.ge is not None else -_FLOAT_MAX
        high = float(spec.le) if spec.le is not None else _FLOAT_MAX
        d.floating_point_range = [FloatingPointRange(from_value=low, to_value=high, step=0.0)]
    return d


def _overrides(node) -> dict[str, Any] | None:
    """The node's parameter overrides (``-p``, ``--params-file``, ``parameter_overrides=``) by
    name, or None if this rclpy does not expose them (then rclpy applies them at declare time)."""
    raw = getattr(node, "_parameter_overrides", None)
    if not isinstance(raw, dict):
        return None
    from rclpy.parameter import Parameter

    return {name: p.value for name, p in raw.items() if p.type_ != Parameter.Type.NOT_SET}


def _declare(node, name: str, value: Any, descriptor, ignore_override: bool) -> Any:
    from rclpy.exceptions import (InvalidParameterException, InvalidParameterTypeException,
                                  InvalidParameterValueException)
    from rclpy.parameter import Parameter

    try:
        if isinstance(value, list) and not value:
            # ROS cannot infer an array's type from []: declare it typed and unset
            p = node.declare_parameter(name, Parameter.Type.STRING_ARRAY, descriptor, ignore_override)
        else:
            p = node.declare_parameter(name, value, descriptor, ignore_override)
    except InvalidParameterException:
        raise ParamError(f"'{name}' is not a valid ROS parameter name (each part must start with a letter "
                         "or '_'): rename the robot") from None
    except (InvalidParameterTypeException, InvalidParameterValueException) as e:
        raise ParamError(f"parameter '{name}': {e}") from None
    return p.value


def _value(node, name: str) -> Any:
    """A declared parameter's value; [] for an array declared typed but unset (see _declare)."""
    from rclpy.exceptions import ParameterUninitializedException

    try:
        return node.get_parameter(name).value
    except ParameterUninitializedException:
        return []


def _robot_ids(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, str) for i in value):
        raise ParamError(f"{ROBOT_IDS} must be a list of robot ids, e.g. -p 'robots.ids:=[tello_1, chat_1]', "
                         f"got {value!r}")
    ids = list(value)
    _check_ids(ids)
    try:  # params.py's rules for ids (letters, digits and '_'; no duplicates), before they name parameters
        parse_params({"robots": [{"id": i, "kind": "sim"} for i in ids]})
    except ParamError as e:
        raise ParamError(_parameter_names(str(e), ids)) from None
    return ids


def declare_parameters(node, params: FleetParams | None = None, *,
                       params_file: str | Path | None = None) -> FleetParams:
    """Declare ``params_file`` and every parameter of :func:`.param_schema.schema` on ``node``
    and return the effective FleetParams (YAML defaults, ROS overrides applied, validated).

    ``params``: the defaults (e.g. what ``--params`` loaded; pass its path as ``params_file``
    too, so the parameter names it); if None, or if ``params_file`` is overridden, the YAML named
    by the ``params_file`` parameter (default: the ``params_file`` argument, else
    config/fleet.yaml) is loaded. ``robots.ids`` is read first: its value decides which ``robots.<id>.*`` exist; a
    TUF preset given only by overrides (all of ``tuf_presets.<name>.ert_s|alpha|beta``) is added.
    Raises :class:`ParamError` with one sentence if the YAML or an override is invalid.
    """
    from rcl_interfaces.msg import ParameterDescriptor

    overrides = _overrides(node)
    ignore = overrides is not None  # we apply overrides ourselves, after validating them
    ov = overrides or {}
    default_file = str(params_file) if params_file is not None else str(DEFAULT_PARAMS)
    file_value = ov.get(PARAMS_FILE, default_file)
    if not isinstance(file_value, str):
        raise ParamError(f"{PARAMS_FILE} must be a path, got {file_value!r}")
    file_value = _declare(node, PARAMS_FILE, file_value, ParameterDescriptor(
        description="fleet YAML whose values are these parameters' defaults (ROS overrides win)",
        read_only=True, additional_constraints="read-only while the node runs"), ignore)
    if params is None or PARAMS_FILE in ov:  # an overridden params_file wins over given params
        params = load_params(file_value, check=False)

    specs = schema(params)
    ids_spec = next(s for s in specs if s.name == ROBOT_IDS)
    ids = _robot_ids(ov.get(ROBOT_IDS, ids_spec.default))
    # a TUF preset named only by overrides (tuf_presets.<new>.ert_s|alpha|beta) is added
    new_presets = {n.split(".")[1] for n in ov if n.startswith("tuf_presets.") and n.count(".") == 2}
    new_presets -= set(params.planner.tuf_presets)
    if new_presets:
        unset = TufParams(math.nan, math.nan, math.nan)
        presets = {**params.planner.tuf_presets, **{n: unset for n in sorted(new_presets)}}
        params = replace(params, planner=replace(params.planner, tuf_presets=presets))
    specs = schema(with_robot_ids(params, ids))

    # validate defaults + overrides as a whole (params.py's sentences), then declare the result
    values = {s.name: ov.get(s.name, s.default) for s in specs
              if s.name in ov or s.name.split(".")[:2] not in [["tuf_presets", n] for n in new_presets]}
    values[ROBOT_IDS] = ids
    effective_flat = to_flat(from_flat(values)) if ignore else values
    for spec in specs:
        _declare(node, spec.name, effective_flat[spec.name], descriptor_for(spec), ignore)
    read_back = {s.name: _value(node, s.name) for s in specs}
    effective = from_flat(read_back)

    _register_number_coercion(node, specs)
    known = {s.name for s in specs} | {PARAMS_FILE}
    for name in sorted(set(ov) - known):
        if name in _ROS_OWN or name.startswith("qos_overrides."):
            continue
        node.get_logger().warning(f"parameter override '{name}' is not a parameter of {node.get_name()} and "
                                  f"is ignored ({suggest(name, sorted(known))})")
    return effective


def _register_number_coercion(node, specs: list[ParamSpec]) -> None:
    """``ros2 param set /llm_planner robot_timeout_s 10`` sends an integer: take it as 10.0."""
    floats = {s.name for s in specs if s.type is float}
    if not hasattr(node, "add_pre_set_parameters_callback"):
        return
    from rclpy.parameter import Parameter

    def coerce(parameters: list) -> list:
        return [Parameter(p.name, Parameter.Type.DOUBLE, float(p.value))
                if p.name in floats and p.type_ == Parameter.Type.INTEGER else p for p in parameters]

    node.add_pre_set_parameters_callback(coerce)


def add_validation_callback(node, get_current: Callable[[], FleetParams],
                            apply: Callable[[FleetParams], None]) -> Callable:
    """Validate run-time parameter changes (:func:`.param_schema.validate_update`): a refused
    change returns ``SetParametersResult(successful=False, reason=<one sentence>)``; an accepted
    one calls ``apply(new_params)`` before ROS stores the values. Parameters outside the schema
    (e.g. ``use_sim_time``) are left to ROS. Returns the registered callback."""
    from rcl_interfaces.msg import SetParametersResult

    def on_set(parameters: list) -> SetParametersResult:
        current = get_current()
        names = set(to_flat(current))
        changes = {p.name: p.value for p in parameters if p.name in names}
        if not changes:
            return SetParametersResult(successful=True)
        new, reason = validate_update(current, changes)
        if new is None:
            return SetParametersResult(successful=False, reason=reason)
        try:
            apply(new)
        except ParamError as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)
    return on_set


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in flat.items():
        *path, leaf = name.split(".")
        d = out
        for part in path:
            d = d.setdefault(part, {})
        d[leaf] = value
    return out


def fleet_yaml_to_ros_params(fleet: FleetParams, node_name: str = "llm_planner") -> dict[str, Any]:
    """A standard ROS 2 parameters file's document for ``fleet``:
    ``{node_name: {"ros__parameters": {...}}}`` with dotted names nested. ROS-free."""
    flat = to_flat(fleet)
    if not flat[ROBOT_IDS]:
        del flat[ROBOT_IDS]  # ROS parameter files cannot hold an empty array
    return {node_name: {"ros__parameters": _nest(flat)}}


__all__ = ["PARAMS_FILE", "add_validation_callback", "declare_parameters", "descriptor_for",
           "fleet_yaml_to_ros_params"]
