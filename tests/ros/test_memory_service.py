"""The fleet memory over DDS (llm_planner_node/ros/memory_server.py): a planner started on a memory
file that an earlier run left answers ``planner/memory`` from it (a restart), to a plain rclpy
client and to `timely-fleet memory`; a thing it never saw gets one sentence."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[2]


def test_a_restarted_planner_answers_what_its_robots_saw_before(ros_context, tmp_path):
    import rclpy
    from timely_fleet.srv import QueryMemory

    from llm_planner_node.config.params import parse_params
    from llm_planner_node.ros.goal_client import spinning
    from llm_planner_node.service.memory import FleetMemory, Sighting
    from llm_planner_node.up import running_fleet

    path = tmp_path / "memory.sqlite"
    earlier = FleetMemory(path)  # what the planner's last run recorded
    t = time.time() - 180
    earlier.record(Sighting("tello_1", "cat", None, (1.2, 0.4, 1.0), t, "b" * 32))
    earlier.record(Sighting("tello_1", "cat", 0.5, None, t - 60, "c" * 32))
    earlier.close()
    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"},
                                       "memory": {"path": str(path)}},
                           "robots": [{"id": "tello_1", "kind": "drone", "adapter": "sim"}]})
    with running_fleet(params, time_scale=0.05, context=ros_context, adapters=False):
        node = rclpy.create_node("memory_test_client", context=ros_context)
        client = node.create_client(QueryMemory, "planner/memory")
        with spinning(node, ros_context):
            assert client.wait_for_service(timeout_sec=30)

            def ask(label, n=0):
                future = client.call_async(QueryMemory.Request(label=label, max_results=n))
                deadline = time.monotonic() + 10
                while not future.done():
                    assert time.monotonic() < deadline, "planner/memory did not answer"
                    time.sleep(0.02)
                return future.result()

            res = ask("cats")
            assert res.message == "2 sighting(s) of cat, newest first"
            first, second = res.sightings
            assert (first.robot_id, first.label, first.goal_id) == ("tello_1", "cat", "b" * 32)
            assert not first.has_confidence
            assert first.has_position and (first.x, first.y, first.z) == (1.2, 0.4, 1.0)
            assert abs(first.stamp.sec + first.stamp.nanosec * 1e-9 - t) < 1e-6
            assert second.has_confidence and second.confidence == 0.5 and not second.has_position
            assert len(ask("kitty", 1).sightings) == 1
            res = ask("wristwatch")
            assert res.sightings == [] and res.message == 'nothing remembered about "wristwatch"'

            p = subprocess.run([str(ROOT / ".venv" / "bin" / "timely-fleet"), "memory", "cat", "--json"],
                               capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ))
            assert p.returncode == 0, p.stderr
            out = json.loads(p.stdout)
            assert [s["goal_id"] for s in out["sightings"]] == ["b" * 32, "c" * 32]
            assert out["sightings"][0]["position"] == [1.2, 0.4, 1.0]
        node.destroy_node()
