"""Stops a Nav2 base whose adapter died: Nav2 keeps driving a goal whose client is gone.

Runs on the base's own computer beside Nav2, in its own process. It listens to the heartbeat the
adapter's :class:`~robot_adapters.base_executor.Nav2Executor` publishes (std_msgs/Header on
``timely_watchdog/heartbeat``, 5 Hz); once one was heard and none arrives for ``timeout_s``, it
cancels every NavigateToPose, DriveOnHeading, BackUp and Spin goal (each action's
``_action/cancel_goal`` service with a zero goal id and zero stamp: "cancel all goals") and
publishes a zero ``cmd_vel`` a few times, logs one line, and re-arms when heartbeats come back.

CLI: ``python -m robot_adapters.nav2_watchdog --namespace base1 --timeout-s 1.0 [--twist]``.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any, Callable

#: the actions that move the base, as Nav2 names them
ACTIONS = ("navigate_to_pose", "drive_on_heading", "backup", "spin")
HEARTBEAT_TOPIC = "timely_watchdog/heartbeat"
ZERO_REPEATS = 5  # zero cmd_vel messages per trip, one per check (period: timeout / 10)


class Nav2Watchdog:
    """The watchdog's node (``timely_nav2_watchdog`` in ``namespace``); spin it with any executor.
    ``trips``: how many times it stopped the base; ``stamped``: cmd_vel is TwistStamped."""

    def __init__(self, context: Any = None, namespace: str = "", *, timeout_s: float = 1.0, stamped: bool = True,
                 clock: Callable[[], float] = time.monotonic, node_name: str = "timely_nav2_watchdog") -> None:
        from action_msgs.srv import CancelGoal
        from geometry_msgs.msg import Twist, TwistStamped
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Header

        self.timeout_s, self.clock, self.trips = timeout_s, clock, 0
        self.node = n = Node(node_name, namespace=namespace, context=context)
        self._twist = TwistStamped if stamped else Twist
        self._cmd_vel = n.create_publisher(self._twist, "cmd_vel", 10)
        self._cancel = {a: n.create_client(CancelGoal, f"{a}/_action/cancel_goal") for a in ACTIONS}
        self._request = CancelGoal.Request  # zero goal id, zero stamp: every goal of the server
        # best effort accepts a reliable or a best-effort heartbeat publisher
        n.create_subscription(Header, HEARTBEAT_TOPIC, self._on_heartbeat,
                              QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        self._lock = threading.Lock()
        self._last: float | None = None  # when the latest heartbeat came (None: none since the last trip)
        self._sender = ""
        self._zeros_left = 0
        n.create_timer(max(0.01, timeout_s / 10.0), self.check)

    def _on_heartbeat(self, msg: Any) -> None:
        with self._lock:
            if self._last is None and self.trips:
                self.node.get_logger().info(f"heartbeat from '{msg.frame_id}' again: watchdog re-armed")
            self._last, self._sender = self.clock(), msg.frame_id

    def check(self) -> None:
        """Trip if the heartbeat went silent; send the pending zero velocities."""
        with self._lock:
            silent = self._last is not None and self.clock() - self._last > self.timeout_s
            if silent:
                silent_s, self._last = self.clock() - self._last, None
        if silent:
            self.trip(silent_s)
        if self._zeros_left > 0:
            self._zeros_left -= 1
            self._cmd_vel.publish(self._twist())

    def trip(self, silent_s: float = 0.0) -> None:
        """Cancel every goal of the motion actions and publish zero velocities."""
        self.trips += 1
        missing = []
        for action, client in self._cancel.items():
            if not client.service_is_ready():
                missing.append(action)
            client.call_async(self._request())
        self._cmd_vel.publish(self._twist())
        self._zeros_left = ZERO_REPEATS - 1
        self.node.get_logger().warning(
            f"no heartbeat from '{self._sender}' for {silent_s:.1f} s: cancelled all {', '.join(ACTIONS)} goals and "
            "sent zero cmd_vel" + (f" (no cancel service for {', '.join(missing)})" if missing else ""))

    def destroy(self) -> None:
        self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Stop a Nav2 base when its adapter's heartbeat "
                                f"({HEARTBEAT_TOPIC}) goes silent: cancel all goals, zero cmd_vel")
    p.add_argument("--namespace", default="", help="the Nav2 stack's ROS namespace (default: none)")
    p.add_argument("--timeout-s", type=float, default=1.0, help="silence that trips the watchdog (s)")
    p.add_argument("--twist", action="store_true", help="cmd_vel is geometry_msgs/Twist (default TwistStamped)")
    a = p.parse_args(argv)
    if a.timeout_s <= 0:
        p.error("--timeout-s must be > 0")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    dog = Nav2Watchdog(namespace=a.namespace, timeout_s=a.timeout_s, stamped=not a.twist)
    ex = SingleThreadedExecutor()
    ex.add_node(dog.node)
    dog.node.get_logger().info(f"watching {dog.node.resolve_topic_name(HEARTBEAT_TOPIC)} (timeout {a.timeout_s:g} s)")
    try:
        ex.spin()
    except KeyboardInterrupt:
        pass
    finally:
        ex.shutdown()
        dog.destroy()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
