"""The README's first goals with a real instruct model, as a user runs them: `timely-fleet up
--model smollm2-135m-instruct` in one process (the default fleet: drones on the Tello SDK
simulator and the simulated adapter, the arm on the neuromeka client + fake IndyDCP3, a chat
robot), `timely-fleet goal` from others, robots in real time.

On main these goals wrote `1000{1000{...`, `->1;`, `->2;`, ... as segments, `pick(object)` and a
sentence repeated 13 times. Now each ends with its status and one sentence, none by the grammar's
failure modes (INVALID_PLAN, TRUNCATED), and no robot outlives its goal."""

from __future__ import annotations

import re

import pytest

from test_first_user import Up, goal, run_per_robot  # the first-user test's process helpers

pytestmark = [pytest.mark.ros, pytest.mark.vllm, pytest.mark.slow]

GOALS = [
    ("tello_1", "take off and move forward two meters", []),
    ("tello_2", "fly up one meter, turn around and land", []),
    ("indy_1", "put the apple in the basket", []),
    ("chat_1", "tell me a joke about robots", []),
]
STATUS = re.compile(r"^(SUCCEEDED|REJECTED|CANCELLED|INVALID_PLAN|ROBOT_FAILED|ENGINE_FAILED|TIMEOUT|TRUNCATED|SHED): (.*)$",
                    re.M)


def test_real_model_goals_over_ros_end_with_a_status_and_a_sentence():
    from llm_planner_node import models

    if not models.is_prepared("smollm2-135m-instruct"):
        pytest.fail("smollm2-135m-instruct is not prepared: `make setup` prepares it")
    up = Up("--model", "smollm2-135m-instruct")
    try:
        up.wait_ready(420)
        results = run_per_robot(GOALS)
    finally:
        log = up.stop()
    assert "Traceback" not in log, log[-3000:]
    by_robot = {}
    for robot, instruction, p in results:
        m = STATUS.search(p.stdout)
        assert m, (robot, instruction, p.stdout[-800:], p.stderr[-800:])
        status, message = m.group(1), m.group(2)
        by_robot[robot] = (status, message, p.stdout)
        # never the failure modes the bounded grammar removes, and always one sentence
        assert status not in ("INVALID_PLAN", "TRUNCATED", "ENGINE_FAILED", "TIMEOUT"), (robot, p.stdout[-1500:])
        assert message.strip() and "\n" not in message
    # plans the robots ran: skill calls of their skill sets, segment by segment
    for robot in ("tello_1", "tello_2", "indy_1"):
        segments = re.findall(r"segment \d+: '([^']*)'", by_robot[robot][2])
        assert segments, by_robot[robot][2][-1500:]
        assert not any(s.startswith("->") for s in segments[:-1])  # a return ends the plan
    # the arm names only objects of its workspace (config/fleet.yaml lists them): no `pick(object)`
    assert "pick(object)" not in by_robot["indy_1"][2]
    # the chat answer: a few sentences, none repeated
    chat = re.findall(r"segment \d+: '([^']*)'", by_robot["chat_1"][2])
    assert by_robot["chat_1"][0] == "SUCCEEDED" and 1 <= len(chat) <= 6
    assert len(set(chat)) == len(chat), chat
