"""Any robot's own ROS actions and services as skills, by declaration (``adapter: ros``).

The fleet YAML declares each skill's interface, server, goal and result rules
(:mod:`timely_robot.declared`); this executor holds one client per declared server on its own
rclpy node (``<robot>_ros_skills``) spun by its own thread. :meth:`RosActionExecutor.connect`
checks that every declared server exists with the declared type before the robot is offered to
the planner, and names what is missing in one sentence. A call fills its goal from the
declaration, sends it, waits for the result (honouring a cancel or :meth:`stop`: the goal is
cancelled) within the skill's ``max_s`` (default :data:`DEFAULT_MAX_S`), and applies the success
rule; a declared ``error`` field explains a failure, a declared ``answer`` field is the skill's
value. Arguments reach it already inside their declared safe ranges and the goal's budget (the
adapter core checks both before the call).
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
import time
from typing import Any, Mapping

from timely_robot.declared import DeclarationError, DeclaredSkills, fill
from timely_robot.skills import SkillCall

from robot_adapters.executor import SkillCancelled, SkillExecutionError, SkillExecutor, SkillTimeout
from robot_adapters.ros_goals import send_goal, wait_future

log = logging.getLogger("robot_adapters.ros")

#: a declared skill without max_s ends within this (real seconds)
DEFAULT_MAX_S = 120.0
#: a goal request, a cancel and a service are answered within this (real seconds)
ANSWER_S = 5.0


def interface_type(name: str) -> Any:
    """The generated class of ``pkg/action/Name`` or ``pkg/srv/Name`` (ImportError or
    AttributeError when it is not installed)."""
    pkg, kind, cls = name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), cls)


def set_fields(msg: Any, values: Mapping[str, Any]) -> None:
    """Set ``msg``'s fields by dotted path (``pose.pose.position.x``); a mapping value sets the
    sub-message's fields (a quaternion, a stamp, a duration)."""
    for path, value in values.items():
        *parents, leaf = path.split(".")
        target = msg
        for p in parents:
            target = getattr(target, p)
        if isinstance(value, Mapping):
            sub = getattr(target, leaf)
            for k, v in value.items():
                setattr(sub, k, type(getattr(sub, k))(v))
        else:
            current = getattr(target, leaf)
            setattr(target, leaf, type(current)(value) if isinstance(current, (int, float, str, bool)) else value)


def field_of(msg: Any, path: str) -> Any:
    for p in path.split("."):
        msg = getattr(msg, p)
    return msg


class RosActionExecutor(SkillExecutor):
    """The declared skills of robot ``robot_id`` over its ROS servers (module docstring);
    ``places``: its named places (map frame) for the ``place_*`` goal values."""

    def __init__(self, robot_id: str, declared: DeclaredSkills, *, context: Any,
                 places: Mapping[str, Any] | None = None, connect_timeout_s: float = 10.0) -> None:
        self.robot_id, self.declared, self.context = robot_id, declared, context
        self.skill_set = declared.skill_set
        self.robot_kind = declared.skill_set.robot_kind
        self.places = dict(places or {})
        self.connect_timeout_s = connect_timeout_s
        self.node: Any = None
        self._clients: dict[str, Any] = {}
        self._types: dict[str, Any] = {}
        self._spinner: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running: dict[int, Any] = {}  # accepted goal handles not yet ended
        self._stops = 0

    def connect(self) -> None:
        """Create the node, its clients and its thread; every declared server must answer with its
        declared type within ``connect_timeout_s``, else a SkillExecutionError naming the first
        that does not."""
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node

        if self.node is not None:
            return
        who = f"robot {self.robot_id}"
        for name, b in self.declared.bindings.items():
            try:
                self._types[name] = interface_type(b.type)
            except (ImportError, AttributeError, ValueError):
                raise SkillExecutionError(f"{who}: skill {name}: the interface {b.type} is not installed here "
                                          "(build or install its package)") from None
        node_name = re.sub(r"[^A-Za-z0-9_]", "_", self.robot_id) + "_ros_skills"
        n = self.node = Node(node_name, context=self.context)
        for name, b in self.declared.bindings.items():
            t = self._types[name]
            self._clients[name] = ActionClient(n, t, b.server) if b.interface == "action" else n.create_client(t, b.server)
        self._spinner = SingleThreadedExecutor(context=self.context)
        self._spinner.add_node(n)
        self._thread = threading.Thread(target=self._spinner.spin, daemon=True, name=f"{node_name}-spin")
        self._thread.start()
        try:
            self._check_servers(who, time.monotonic() + self.connect_timeout_s)
        except BaseException:
            self.close()
            raise

    def _check_servers(self, who: str, deadline: float) -> None:
        from rclpy.action import get_action_names_and_types

        for name, b in self.declared.bindings.items():
            client = self._clients[name]
            left = max(0.0, deadline - time.monotonic())
            up = client.wait_for_server(timeout_sec=left) if b.interface == "action" else client.wait_for_service(
                timeout_sec=left)
            graph = dict(get_action_names_and_types(self.node) if b.interface == "action"
                         else self.node.get_service_names_and_types())
            server = self.node.resolve_service_name(b.server) if b.interface == "service" else b.server
            types = graph.get(server, graph.get("/" + server.lstrip("/"), []))
            if not up:
                raise SkillExecutionError(f"{who}: skill {name}: no {b.interface} server {b.server} "
                                          f"({b.type}) answers within {self.connect_timeout_s:g} s")
            if types and b.type not in types:
                raise SkillExecutionError(f"{who}: skill {name}: {b.server} is a {', '.join(types)}, not the "
                                          f"declared {b.type}")

    def close(self) -> None:
        if self.node is None:
            return
        self.stop()
        self._spinner.shutdown(timeout_sec=2.0)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.node.destroy_node()
        self.node = self._spinner = self._thread = None

    def stop(self) -> None:
        """Cancel every running goal (any thread)."""
        self._stops += 1
        with self._lock:
            running = list(self._running.values())
        for h in running:
            try:
                h.cancel_goal_async()
            except Exception as e:  # noqa: BLE001 - best effort while the node goes away
                log.warning("%s: cancelling a goal failed: %s", self.robot_id, e)

    def halt(self) -> str:
        self.stop()
        return "stopped"

    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        if self.node is None:
            raise SkillExecutionError(f"robot {self.robot_id}: not connected")
        b = self.declared.bindings[call.name]
        spec = self.skill_set.spec(call.name)
        t = self._types[call.name]
        stamp = self.node.get_clock().now().to_msg()
        try:
            values = fill(b, call, spec, {"sec": stamp.sec, "nanosec": stamp.nanosec}, self.places)
        except DeclarationError as e:
            raise SkillExecutionError(str(e)) from None
        request = t.Goal() if b.interface == "action" else t.Request()
        try:
            set_fields(request, values)
        except (AttributeError, TypeError, ValueError) as e:
            raise SkillExecutionError(f"{call.name}: the declared goal does not fit {b.type}: {e}") from None
        bound = spec.max_s or DEFAULT_MAX_S
        stops = self._stops
        if b.interface == "service":
            result = wait_future(self._clients[call.name].call_async(request), min(bound, ANSWER_S * 4))
            if result is None:
                raise SkillTimeout(f"{b.server} did not answer {call.name} in time")
            return self._judge(b, spec, call, result)
        handle = send_goal(self._clients[call.name], request, server=b.server, what=call.name, answer_s=ANSWER_S)
        with self._lock:
            self._running[id(handle)] = handle
        try:
            fut = handle.get_result_async()
            deadline = time.monotonic() + bound
            while not fut.done():
                if cancel.is_set() or self._stops != stops:
                    handle.cancel_goal_async()
                    raise SkillCancelled(f"{call.name} cancelled")
                if time.monotonic() > deadline:
                    handle.cancel_goal_async()
                    raise SkillTimeout(f"{call.name} did not end within {bound:g} s")
                time.sleep(0.005)
        finally:
            with self._lock:
                self._running.pop(id(handle), None)
        return self._judge(b, spec, call, fut.result().result, fut.result().status)

    def _judge(self, b: Any, spec: Any, call: SkillCall, result: Any, status: int | None = None) -> Any:
        """The call's value, or the SkillExecutionError its result means."""
        from action_msgs.msg import GoalStatus

        why = field_of(result, b.error_field) if b.error_field else ""
        why = f": {why}" if why else ""
        if status is not None and status != GoalStatus.STATUS_SUCCEEDED:
            name = {GoalStatus.STATUS_ABORTED: "aborted", GoalStatus.STATUS_CANCELED: "cancelled"}.get(status, str(status))
            raise SkillExecutionError(f"{b.server} {name} {call}{why}")
        if b.success_field:
            got = field_of(result, b.success_field)
            if got != type(got)(b.success_equals):
                raise SkillExecutionError(f"{b.server}: {call} failed ({b.success_field} = {got}){why}")
        if b.answer_field:
            value = field_of(result, b.answer_field)
            return {"bool": bool, "int": int, "float": float, "str": str}[spec.returns](value)
        return None
