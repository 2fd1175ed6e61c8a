"""Sending a goal to a ROS action server from an executor's thread (the Nav2 and declared-ROS executors).

rclpy's futures complete on the node's own spinning thread; an executor's thread only polls
them, always within a bound: a server that never answers is a :class:`SkillTimeout`, never a
hang. A goal the server accepts after the caller gave up waiting is cancelled the moment it is
accepted, so nothing runs that no one waits for.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from robot_adapters.executor import SkillExecutionError, SkillTimeout

POLL_S = 0.005


def wait_future(fut: Any, timeout_s: float, poll_s: float = POLL_S) -> Any:
    """``fut``'s result, or None if it is not done within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not fut.done() and time.monotonic() < deadline:
        time.sleep(poll_s)
    return fut.result() if fut.done() else None


def send_goal(client: Any, goal: Any, *, server: str, what: str, answer_s: float,
              feedback: Callable[[Any], None] | None = None, rejected_hint: str = "") -> Any:
    """Send ``goal`` with action client ``client`` and return the accepted goal handle.

    Not answered within ``answer_s``: :class:`SkillTimeout` ("``server`` did not answer the
    ``what`` goal within ...") and the goal is cancelled if it is accepted later; rejected:
    :class:`SkillExecutionError` ("``server`` rejected the ``what`` goal", then ``rejected_hint``)."""
    send = client.send_goal_async(goal, feedback_callback=feedback)
    handle = wait_future(send, answer_s)
    if handle is None:
        send.add_done_callback(_cancel_if_accepted)
        raise SkillTimeout(f"{server} did not answer the {what} goal within {answer_s:g} s")
    if not handle.accepted:
        raise SkillExecutionError(f"{server} rejected the {what} goal{rejected_hint}")
    return handle


def _cancel_if_accepted(fut: Any) -> None:
    handle = fut.result()
    if handle is not None and handle.accepted:
        handle.cancel_goal_async()
