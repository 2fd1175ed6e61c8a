"""rclpy's private names that the ROS edge relies on (ros/action_server.py, ros/goal_client.py):
fails loudly, naming what changed, on an rclpy version they were not checked against or that
lacks one of them. Update RCLPY_CHECKED only after re-reading each override against the new
rclpy's source."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re

import pytest

from llm_planner_node.ros.action_server import RCLPY_CHECKED

pytestmark = pytest.mark.ros

#: (class, private attribute) used by the project's ROS edge
SERVER_NAMES = ["_execute_goal", "_execute_goal_request", "_execute_get_result_request", "_execute_cancel_request",
                "_goal_handles", "_result_futures", "_handle", "_lock", "_node", "_logger", "_action_type",
                "_goal_callback", "_handle_accepted_callback", "_is_goal_request_ready", "_is_result_request_ready",
                "_send_result_response"]
SERVER_HANDLE_NAMES = ["_update_state", "_goal_handle", "_lock", "_action_server"]
CLIENT_NAMES = ["_feedback_callbacks", "_action_type", "_action_name", "_remove_pending_result_request"]


def test_the_installed_rclpy_is_one_the_ros_edge_was_checked_against():
    version = importlib.metadata.version("rclpy")
    assert version in RCLPY_CHECKED, (
        f"rclpy {version} is not one of {RCLPY_CHECKED}, against which ros/action_server.py and "
        "ros/goal_client.py were checked: re-read their overrides of rclpy's private methods against this rclpy's "
        "source, then add it to RCLPY_CHECKED")


def _names_of(cls: type) -> set[str]:
    """The class's attributes plus every ``self.<name>`` its methods (and its bases') use."""
    names = set(dir(cls))
    for klass in cls.__mro__:
        if klass is object:
            continue
        try:
            src = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names |= set(re.findall(r"self\.(_[A-Za-z0-9_]+)", src))
    return names


@pytest.mark.parametrize("cls_path, names", [
    ("rclpy.action.server.ActionServer", SERVER_NAMES),
    ("rclpy.action.server.ServerGoalHandle", SERVER_HANDLE_NAMES),
    ("rclpy.action.client.ActionClient", CLIENT_NAMES),
])
def test_every_private_name_the_ros_edge_uses_exists(cls_path, names):
    module, name = cls_path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    have = _names_of(cls)
    missing = [n for n in names if n not in have]
    assert not missing, f"{cls_path} has no {', '.join(missing)} in this rclpy: ros/action_server.py and " \
                        "ros/goal_client.py use them"


def test_rclpy_goal_events_and_the_rcutils_log_call_are_there():
    from rclpy.action.server import GoalEvent

    from llm_planner_node.ros.action_server import rcutils_log_emitter

    assert {"EXECUTE", "CANCEL_GOAL"} <= set(GoalEvent.__members__)
    assert callable(rcutils_log_emitter()), "rclpy_logging_rcutils_log is gone: the planner's log lines take " \
                                            "rclpy's slow path"

