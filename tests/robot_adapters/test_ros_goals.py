"""Sending a goal from an executor's thread (robot_adapters/ros_goals.py): every wait bounded, a
goal accepted after the caller gave up is cancelled, a rejection is one sentence. The futures
are concurrent.futures ones, whose done/result/add_done_callback rclpy's futures share; the
executors' own tests over ROS (test_nav2_executor, e2e test_declared_skills_over_ros) send
real goals through it."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from robot_adapters.executor import SkillExecutionError, SkillTimeout
from robot_adapters.ros_goals import send_goal, wait_future


class Handle:
    def __init__(self, accepted: bool) -> None:
        self.accepted, self.cancelled = accepted, 0

    def cancel_goal_async(self) -> None:
        self.cancelled += 1


class Client:
    """An action client whose server answers when the test says."""

    def __init__(self) -> None:
        self.sent: list[tuple[object, object]] = []
        self.future: Future = Future()

    def send_goal_async(self, goal, feedback_callback=None) -> Future:
        self.sent.append((goal, feedback_callback))
        return self.future


def test_wait_future_returns_the_result_or_none_after_the_bound():
    f: Future = Future()
    assert wait_future(f, 0.02) is None
    threading.Timer(0.01, f.set_result, ("done",)).start()
    assert wait_future(f, 2.0) == "done"


def test_an_accepted_goal_is_returned_with_its_feedback_callback_passed_on():
    c, fb = Client(), (lambda m: None)
    c.future.set_result(h := Handle(True))
    assert send_goal(c, "goal", server="Nav2", what="navigation", answer_s=1.0, feedback=fb) is h
    assert c.sent == [("goal", fb)]


def test_a_rejected_goal_is_one_sentence_naming_the_server_and_the_goal():
    c = Client()
    c.future.set_result(Handle(False))
    with pytest.raises(SkillExecutionError, match=r"^Nav2 rejected the spin goal: is it active\?$"):
        send_goal(c, "goal", server="Nav2", what="spin", answer_s=1.0, rejected_hint=": is it active?")


def test_a_goal_not_answered_in_time_times_out_and_is_cancelled_when_accepted_later():
    c = Client()
    with pytest.raises(SkillTimeout, match=r"^/arm/move did not answer the pick goal within 0.05 s$"):
        send_goal(c, "goal", server="/arm/move", what="pick", answer_s=0.05)
    late = Handle(True)
    c.future.set_result(late)  # the server accepts it after all: nothing waits for it, so it is cancelled
    assert late.cancelled == 1
    c2 = Client()
    with pytest.raises(SkillTimeout):
        send_goal(c2, "goal", server="s", what="w", answer_s=0.01)
    refused = Handle(False)
    c2.future.set_result(refused)
    assert refused.cancelled == 0
