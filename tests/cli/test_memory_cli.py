"""`timely-fleet memory LABEL` (llm_planner_node/cli/memory.py): a sighting as one line a person
reads, the answer as JSON, and one sentence when no planner answers (the service over DDS with
the command against it: tests/ros/test_memory_service.py)."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from types import SimpleNamespace

from llm_planner_node.cli.memory import ago, as_json, line

ROOT = Path(__file__).resolve().parents[2]
T = 1_796_590_990.0  # 2026-12-06 21:03:10 UTC


def sighting(**kw):
    fields = dict(robot_id="tello_1", label="cat", has_confidence=True, confidence=0.87, has_position=True,
                  x=1.2, y=0.4, z=1.0, stamp=SimpleNamespace(sec=int(T), nanosec=0), goal_id="a" * 32)
    return SimpleNamespace(**{**fields, **kw})


def test_a_sighting_reads_as_who_when_where_and_how_sure():
    assert line(sighting(), T + 190) == ("cat: seen by tello_1 3 min ago (2026-12-06 21:03:10 UTC) at (1.20, 0.40, "
                                         "1.00) m in the fleet frame, confidence 0.87")
    assert line(sighting(has_position=False, has_confidence=False), T + 5) == (
        "cat: seen by tello_1 5 s ago (2026-12-06 21:03:10 UTC) position unknown")
    assert [ago(s) for s in (0.2, 59, 61, 7300)] == ["just now", "59 s ago", "1 min ago", "2 h ago"]


def test_json_carries_every_field_and_null_for_what_is_unknown():
    res = SimpleNamespace(message="1 sighting(s) of cat, newest first", sightings=[sighting(has_position=False)])
    out = json.loads(as_json("cats", res, T + 10))
    assert out["label"] == "cats" and out["message"].startswith("1 sighting")
    [s] = out["sightings"]
    assert s == {"robot_id": "tello_1", "label": "cat", "time": T, "time_utc": "2026-12-06T21:03:10+00:00",
                 "age_s": 10.0, "position": None, "confidence": 0.87, "goal_id": "a" * 32}


def test_no_planner_is_one_sentence_naming_up():
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.randint(150, 230))}
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "timely-fleet"), "memory", "cat", "--timeout", "1"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == ("timely-fleet memory: no planner answers on /planner/memory within "
                                                 "1 s: start one with `timely-fleet up`, or give its --namespace")
