"""`timely-fleet goal` (llm_planner_node/cli/goal.py): what it prints of a result and its exit code."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from llm_planner_node.cli.goal import _send_and_watch

pytestmark = pytest.mark.ros  # the result messages are the generated timely_fleet types


class _Client:
    """A GoalClient whose goal has ended with ``result``."""

    def __init__(self, result):
        self.result = result

    def wait_for_server(self, timeout_s):
        return True

    def watch_status(self, callback):
        pass

    def send(self, robot_id, instruction, **kw):
        return SimpleNamespace(goal_id="a" * 32, done=True, result=lambda timeout: self.result)


def _run(result, capsys):
    args = argparse.Namespace(robot_id="tello_1", instruction="go to the person", task_type="", timeout=5.0, wait=1.0)
    code = _send_and_watch(_Client(result), args, (1.0, -1.0, 1.0))
    return code, capsys.readouterr().out


def test_not_achieved_prints_the_calls_that_did_not_do_their_action_and_exits_non_zero(capsys):
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import SkillAnswer

    goto = SkillAnswer(segment=2, skill="goto(person)", value="False")
    res = PlanTask.Result(status=PlanTask.Result.STATUS_NOT_ACHIEVED, reason="not_achieved", answers=[goto],
                          unachieved=[goto], message="plan executed, but goto(person) answered False: did not "
                                                     "reach it (not in view)")
    code, out = _run(res, capsys)
    assert code == 1
    assert out.splitlines() == ["NOT_ACHIEVED: plan executed, but goto(person) answered False: did not reach it "
                                "(not in view)", "  segment 2: goto(person) -> False",
                                "  not achieved: segment 2: goto(person) -> False"]
    found_nothing = PlanTask.Result(status=PlanTask.Result.STATUS_SUCCEEDED, reason="succeeded", message="plan executed",
                                    answers=[SkillAnswer(segment=0, skill="scan(cat)", value="False")],
                                    has_return_value=True, return_value="False")
    code, out = _run(found_nothing, capsys)
    assert code == 0 and "not achieved" not in out and "the plan returned False" in out
