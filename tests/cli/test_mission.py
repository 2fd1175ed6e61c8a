"""`timely-fleet mission` (llm_planner_node/cli/mission.py): its selector, and its one sentence when
no planner answers (the action itself: tests/ros/test_mission_server.py, tests/e2e/test_first_user.py)."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from llm_planner_node.cli.mission import selector

ROOT = Path(__file__).resolve().parents[2]


def test_robots_names_kinds_and_ids():
    assert selector("") == ([], [])
    assert selector("tello_1, base_1") == (["tello_1", "base_1"], [])
    assert selector("drone,base_1,arm") == (["base_1"], ["drone", "arm"])


def test_no_planner_is_one_sentence_naming_up():
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.randint(150, 230))}
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "timely-fleet"), "mission", "find the cat", "--wait", "1"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == ("timely-fleet mission: no planner answers on the 'plan_mission' "
                                                 "action; start one with `timely-fleet up`")
