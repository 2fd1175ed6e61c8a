"""The adapter node (rclpy): hosts adapter cores (:class:`~robot_adapters.adapter_core.AdapterCore`)
on ROS.

:class:`AdapterNode` hosts one or many cores (a drone, an arm, or hundreds of
  simulated robots in one process), receives ``SkillSegment`` (reliable + keep-all) where the
  planner publishes them: on the shared ``robot_segments`` topic (the default: one subscription
  for all its robots, dispatched by ``robot_id``, so its wait set does not grow with the robots
  it hosts) or on ``robots/<robot_id>/segments`` per robot (``security.per_robot_topics``: SROS2
  access control), both relative to its namespace, and publishes ``RobotStatus`` on
  ``robot_status`` (reliable).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from timely_robot.link.rules import HEARTBEAT_SEQUENCE, STALE_TERM

from robot_adapters.adapter_core import HOOKS, AdapterCore, StatusEvent

def _node_base():
    try:
        from rclpy.node import Node
    except ImportError:  # ROS-free use of AdapterCore (simulations, unit tests)
        class Node:  # type: ignore[no-redef]
            def __init__(self, *a: Any, **kw: Any) -> None:
                raise RuntimeError("rclpy is not available: run inside the project environment "
                                   "(scripts/run ...) to use AdapterNode")
    return Node


class AdapterNode(_node_base()):  # type: ignore[misc]
    """rclpy node hosting adapter cores; one ``/robot_status`` publisher for all of them."""

    def __init__(self, name: str = "robot_adapter", *, context: Any = None, namespace: str = "",
                 signer: Any = None, verifier: Any = None, per_robot_topics: bool = False,
                 segment_topics: str | None = None) -> None:
        """``signer``/``verifier`` (:mod:`timely_robot.link.signing`, ``security.mode: sign``):
        statuses go out signed with the robot's key, and a segment runs only if the planner
        signed it with that robot's key (anything else is dropped and counted in
        :attr:`link_drops`, as are verified messages of a stale planner term, in every mode).
        ``per_robot_topics``: statuses on ``robots/<id>/status``.
        ``segment_topics``: ``shared`` (one subscription to ``robot_segments`` for every robot
        of the node, dispatched by ``robot_id``), ``per_robot`` (``robots/<id>/segments``, one
        subscription per robot: SROS2 access control) or ``both``; default
        :func:`~timely_robot.link.ros.planner_segment_topics` (what the planner publishes
        on). Either way a segment runs only on the core its ``robot_id`` names, verified with that
        robot's key."""
        super().__init__(name, context=context, namespace=namespace)
        from timely_fleet.msg import RobotStatus, SkillSegment

        self._status_type = RobotStatus
        self._segment_type = SkillSegment
        from timely_robot.link import ros as link  # (imports rclpy: AdapterCore works without it)
        from timely_robot.link.ros import (
            SEGMENTS_TOPIC, STATUS_TOPIC, draining_subscription, planner_segment_topics, segments_topic,
            status_topic)

        self._link = link

        self.segment_topics = segment_topics or planner_segment_topics(per_robot_topics)
        if self.segment_topics not in ("shared", "per_robot", "both"):
            raise ValueError(f"segment_topics must be shared, per_robot or both, not {self.segment_topics!r}")
        self._segments_topic = segments_topic
        self._status_topic = status_topic if per_robot_topics else None
        self.status_pub = (None if per_robot_topics
                           else self.create_publisher(RobotStatus, STATUS_TOPIC, self._link.status_qos()))
        self.signer = signer
        self.verifier = verifier
        self.link_drops: dict[str, int] = {}
        self.not_hosted = 0  # segments on the shared topic for robots of other adapter processes
        self._last_drop_log = 0.0
        self.cores: dict[str, AdapterCore] = {}
        self.topics: dict[str, Any] = {}
        self._status_publishers: dict[str, Callable[[StatusEvent], None]] = {}  # status_publisher, by robot
        self._status_locks: list[threading.Lock] = []
        self._closing = threading.Event()  # set by destroy_node: nothing is published from then on
        self._subs: list[Any] = []
        if self.segment_topics in ("shared", "both"):
            self._subs.append(draining_subscription(self, SkillSegment, SEGMENTS_TOPIC, self._on_shared_segment,
                                                    self._link.segment_qos()))

    def _drop(self, robot_id: str, reason: str, *, logged: bool = False) -> None:
        """Count a dropped message; ``logged``: its core has said why already."""
        self.link_drops[reason] = self.link_drops.get(reason, 0) + 1
        now = time.monotonic()
        if not logged and now - self._last_drop_log >= 5.0:  # a flood must not flood the log too
            self._last_drop_log = now
            self.get_logger().warning(f"segments for {robot_id[:64]!r} dropped, not executed: "
                                      f"{sum(self.link_drops.values())} so far ({self.link_drops})")

    def _deliver(self, msg: Any, core: AdapterCore, topic: str | None = None) -> None:
        if self.verifier is not None:
            reason = self.verifier.check_segment(msg, core.robot_id)
            if reason is not None:
                self._drop(core.robot_id, reason)
                return
        if topic is not None and msg.robot_id and msg.robot_id != core.robot_id:
            self.get_logger().warning(f"segment for '{msg.robot_id[:64]!r}' on {topic}: ignored")
            return
        # the planner's term is checked on verified messages only (a forger must not fence the planner)
        if msg.sequence == HEARTBEAT_SEQUENCE and not msg.cancel:
            obeyed = core.heartbeat(int(msg.term))  # the planner's lease (robot/timely_robot/link/rules.py)
        else:
            obeyed = core.submit(self._link.segment_from_msg(msg))
        if not obeyed:
            self._drop(core.robot_id, STALE_TERM, logged=True)  # the core logs each stale term once

    def _on_shared_segment(self, msg: Any) -> None:
        core = self.cores.get(msg.robot_id)
        if core is None:  # another adapter process's robot (or a made-up id): not ours
            self.not_hosted += 1
            return
        self._deliver(msg, core)

    def status_publisher(self, robot_id: str) -> Callable[[StatusEvent], None]:
        """The function that publishes ``robot_id``'s statuses (signed when this node signs, on
        its own topic with per-robot topics): give it to the robot's :class:`AdapterCore` at
        construction, then host the core with :meth:`add_robot`."""
        if robot_id in self._status_publishers:
            return self._status_publishers[robot_id]
        pub = self.status_pub
        if self._status_topic is not None:
            pub = self.create_publisher(self._status_type, self._status_topic(robot_id), self._link.status_qos())
        signer = self.signer
        order = threading.Lock()  # sign and publish in one step: counters reach the planner in order
        closing = self._closing

        def publish(ev: StatusEvent) -> None:
            msg = self._link.status_to_msg(ev, self._status_type)
            with order:
                if closing.is_set():  # the node is being destroyed: a late status goes nowhere
                    return
                if signer is not None:
                    signer.sign_status(msg, robot_id)
                pub.publish(msg)

        self._status_locks.append(order)
        self._status_publishers[robot_id] = publish
        return publish

    def destroy_node(self) -> None:
        """Stop publishing first, then destroy: a robot's worker or its camera's detector (their
        own threads) may still report while the node goes, and must not find a destroyed
        publisher."""
        self._closing.set()
        for lock in self._status_locks:  # a status being published now goes out first
            with lock:
                pass
        for topics in self.topics.values():
            topics.close()
        super().destroy_node()

    def add_robot(self, core: AdapterCore) -> AdapterCore:
        """Host ``core`` (built with ``publish=self.status_publisher(core.robot_id)``): its
        segments are delivered to it, its camera, detections and battery get their topics, and
        its worker starts."""
        if core.robot_id in self.cores:
            raise ValueError(f"robot '{core.robot_id}' already hosted")
        if core.publish is not self._status_publishers.get(core.robot_id):
            raise ValueError(f"robot '{core.robot_id}': build its AdapterCore with "
                             f"publish=node.status_publisher('{core.robot_id}') so its statuses reach the planner")
        if self.segment_topics in ("per_robot", "both"):
            topic = self._segments_topic(core.robot_id)  # relative: follows the node's namespace

            def on_segment(msg: Any, core: AdapterCore = core) -> None:
                self._deliver(msg, core, topic)

            self._subs.append(self.create_subscription(self._segment_type, topic, on_segment,
                                                       self._link.segment_qos()))
        from robot_adapters.robot_topics import attach

        self.topics[core.robot_id] = attach(self, core)  # camera, detections, battery under its id
        self.cores[core.robot_id] = core.start()
        HOOKS.notify(HOOKS.robot_added, self, core)
        return core

    def shutdown_robots(self) -> None:
        for core in self.cores.values():
            core.shutdown()
        for core in self.cores.values():
            try:
                core.executor.close()
            except Exception:  # noqa: BLE001
                pass


def spin_node(node: Any, context: Any = None, *, seconds: float | None = None) -> None:
    """Spin ``node`` until shutdown (or ``seconds``), then stop its robots."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    # one thread: callbacks only hand segments to the cores (the event loop executes them)
    ex = SingleThreadedExecutor(context=context)
    ex.add_node(node)
    end = None if seconds is None else time.monotonic() + seconds
    try:
        while rclpy.ok(context=context) and (end is None or time.monotonic() < end):
            ex.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        node.shutdown_robots()
        ex.shutdown()
        node.destroy_node()


