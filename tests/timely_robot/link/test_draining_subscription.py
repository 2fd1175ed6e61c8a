"""The status path's draining subscription (ros_messages.draining_subscription) over real ROS:
every message a publisher sends arrives once and in order, however many wait in the reader when
the callback runs, and one flooded topic does not hold back another."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros


def test_every_message_arrives_once_in_order_and_a_flood_does_not_hold_back_another_topic(ros_context):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import STATUS_QOS, STATUS_READER_QOS, draining_subscription

    pub_node = Node("drain_pub", context=ros_context)
    sub_node = Node("drain_sub", context=ros_context)
    got: dict[str, list[int]] = {"flood": [], "quiet": []}
    quiet_at: list[int] = []  # how many flood messages had been handled when the quiet one came
    draining_subscription(sub_node, RobotStatus, "drain/flood", lambda m: got["flood"].append(m.sequence),
                          STATUS_READER_QOS, budget=16)
    draining_subscription(sub_node, RobotStatus, "drain/quiet",
                          lambda m: (got["quiet"].append(m.sequence), quiet_at.append(len(got["flood"]))),
                          STATUS_READER_QOS, budget=16)
    flood = pub_node.create_publisher(RobotStatus, "drain/flood", STATUS_QOS)
    quiet = pub_node.create_publisher(RobotStatus, "drain/quiet", STATUS_QOS)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(sub_node)
    deadline = time.monotonic() + 20
    while (flood.get_subscription_count() < 1 or quiet.get_subscription_count() < 1) and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
    n = 900
    for i in range(n):  # all waiting in the reader before the executor runs once
        flood.publish(RobotStatus(robot_id="f", sequence=i))
    quiet.publish(RobotStatus(robot_id="q", sequence=7))
    time.sleep(0.5)
    while (len(got["flood"]) < n or not got["quiet"]) and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
    ex.shutdown()
    assert got["flood"] == list(range(n))
    assert got["quiet"] == [7]
    # the quiet topic is served within the first rounds (each round takes <= 1 + 16 flood
    # messages), not after the 900 flood messages ahead of it in time
    assert quiet_at[0] <= 2 * 17
    sub_node.destroy_node()
    pub_node.destroy_node()
