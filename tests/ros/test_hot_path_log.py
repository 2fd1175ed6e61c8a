"""The node's per-goal log lines (hot_path_log.HotPathLog) reach the rcutils logger like any rclpy log
line: the node's logger name, the level filter, one line each."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ros


def test_lines_go_to_the_nodes_logger_and_follow_its_level(ros_context, capfd):
    from rclpy.logging import LoggingSeverity
    from rclpy.node import Node

    from llm_planner_node.ros.hot_path_log import HotPathLog

    node = Node("hot_path_log_test", context=ros_context)
    log = HotPathLog(node.get_logger())
    assert log._emit is not None  # the fast path is in use with the installed rclpy
    node.get_logger().set_level(LoggingSeverity.WARN)
    log("info", "an info line")
    log("debug", "a debug line")
    log("warning", "goal 1234abcd robot r1 REJECTED: busy")
    log("error", "goal 1234abcd robot r1 TIMEOUT: silent")
    node.get_logger().set_level(LoggingSeverity.INFO)
    log("info", "now shown")
    node.destroy_node()
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "[hot_path_log_test]" in ln]
    assert [ln.split("]: ", 1)[1] for ln in lines] == [
        "goal 1234abcd robot r1 REJECTED: busy", "goal 1234abcd robot r1 TIMEOUT: silent", "now shown"]
    assert lines[0].startswith("[WARN]") and lines[1].startswith("[ERROR]") and lines[2].startswith("[INFO]")
