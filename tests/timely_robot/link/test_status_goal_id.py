"""ros_messages.status_goal_id reads a serialized RobotStatus's goal id without deserializing
it (the planner drops a flood's statuses about unknown goals this way): property test against
rclpy's own serialization."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

pytestmark = pytest.mark.ros

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)


@settings(max_examples=300, deadline=None)
@given(robot_id=TEXT, goal_id=st.one_of(st.text(alphabet="0123456789abcdef", min_size=32, max_size=32), TEXT),
       sequence=st.integers(0, 2**32 - 1), error=TEXT)
def test_the_goal_id_read_from_the_bytes_is_the_messages(robot_id, goal_id, sequence, error):
    from rclpy.serialization import serialize_message
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import status_goal_id

    raw = serialize_message(RobotStatus(robot_id=robot_id, goal_id=goal_id, sequence=sequence, error=error))
    got = status_goal_id(raw)
    goal_id = goal_id.split("\x00", 1)[0]  # ROS strings are C strings: a NUL ends them on the wire
    if goal_id and len(goal_id) <= 64 and goal_id.isascii():
        assert got == goal_id
    else:  # empty, longer than any goal id, or not ASCII: never taken for a goal in flight
        assert got in (None, "")


def test_garbage_bytes_are_no_goal_id():
    from timely_robot.link.ros import status_goal_id

    for raw in (b"", b"\x00\x01", b"\x00\x01\x00\x00\xff\xff\xff\xff", b"\x00\x01\x00\x00" + b"\x05\x00\x00\x00ab"):
        assert status_goal_id(raw) is None
