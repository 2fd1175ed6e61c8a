"""The node's per-goal log lines without rclpy's per-call cost."""

from __future__ import annotations

from typing import Any

from rclpy.logging import LoggingSeverity

from llm_planner_node.ros.action_server import rcutils_log_emitter


class HotPathLog:
    """The node's per-goal log lines (one per goal end or refusal, ``ports.log``) without rclpy's
    per-call cost: ``RcutilsLogger.log`` finds its caller with ``inspect`` (file system calls)
    on every call, 12% of the goal thread's CPU in a 200-goal burst. Lines go to the same rcutils
    logger (same name, severity filter and output) with this class as their location."""

    _SEVERITY = {"debug": LoggingSeverity.DEBUG, "info": LoggingSeverity.INFO,
                 "warning": LoggingSeverity.WARN, "error": LoggingSeverity.ERROR}

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self._emit = rcutils_log_emitter()  # None on another rclpy: its own (slower) path

    def __call__(self, level: str, text: str) -> None:
        severity = self._SEVERITY.get(level, LoggingSeverity.INFO)
        if self._emit is None:
            self.logger.log(text, severity)
        elif self.logger.is_enabled_for(severity):
            self._emit(severity, self.logger.name, text, "log", __file__, 0)
