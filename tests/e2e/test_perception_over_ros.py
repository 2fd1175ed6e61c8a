"""Robots that see and feel, over ROS, as a user runs them: `timely-fleet up` as its own process
(the simulated engine; two Tello simulators streaming H.264 decoded by djitellopy and read by the
detector; fake IndyDCP3 arms through the neuromeka client), `timely-fleet goal` from others, and
an independent rclpy client on the robots' own topics.

- two streaming drones at once: "look for the cat" finds the cat on real frames and ends facing
  it; "look for the dog" where there is none ends SUCCEEDED saying the plan returned False (the
  simulated engine plans no umbrella: the README test looks for one with the real model);
- a drone whose battery cannot see a goal through is refused, with its reason;
- a workspace-map arm stacks the blocks; a map target outside the workspace box is refused
  before the arm moves to it; a map that is wrong about where a block is makes the grasp miss;
- a real arm with no perception source is refused by `up` in one sentence.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time

import pytest
import yaml

from processes import traceback_in
from test_first_user import ROOT, TF, Up, goal

pytestmark = [pytest.mark.ros]

TIME_SCALE = "0.3"
CAT_AHEAD_AFTER_A_QUARTER_TURN = {"pos": [-40, 230, 20], "size": [50, 40]}  # the plan turns 90 degrees first
BLOCKS = {"red_block": [320, -150, 60], "blue_block": [280, 120, 60], "green_block": [410, 60, 60],
          "table_center": [450, -50, 40], "tower": [450, -50, 60]}


def _fleet(tmp_path):
    data = yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())
    drone = {"kind": "drone", "skill_set": "tello_minispec", "adapter": "tello-sim",
             "budget": {"fence_cm": [-500, 500, -500, 500, -200, 300]}}
    arm = {"kind": "arm", "skill_set": "indy7_arm", "adapter": "indy-sim"}
    far = dict(BLOCKS, red_block=[900, -150, 60])  # x 900 mm: outside move_to's box (|x| <= 700)
    data["robots"] = [
        dict(drone, id="d_cat", simulator={"scene": {"objects": {"cat": CAT_AHEAD_AFTER_A_QUARTER_TURN}}}),
        dict(drone, id="d_dog", simulator={"scene": {"objects": {
            "cat": {"pos": [230, -40, 20], "size": [50, 40]}, "person": {"pos": [-250, 60, 85], "size": [60, 170]}}}}),
        dict(drone, id="d_low", perception={"source": "none"}, simulator={"battery_pct": 18}),
        dict(arm, id="arm_map", perception={"source": "map", "objects": BLOCKS}),
        dict(arm, id="arm_far", perception={"source": "map", "objects": far}),
        dict(arm, id="arm_miss", perception={"source": "map", "objects": BLOCKS},  # the red block moved away
             simulator={"scene": {"objects": {n: {"pos": p} for n, p in dict(BLOCKS, red_block=[500, 300, 60]).items()}}}),
    ]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Watcher:
    """An independent rclpy client on the robots' topics (the generated interfaces only)."""

    def __init__(self, robots):
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import BatteryState, Image
        from timely_fleet.msg import DetectionArray, RobotStatus

        from timely_robot.link.ros import STATUS_QOS

        self.ctx = Context()
        rclpy.init(context=self.ctx)
        self.node = rclpy.create_node("perception_watcher", context=self.ctx)
        self.images, self.detections, self.battery, self.link_age = {}, {}, {}, {}
        self.node.create_subscription(RobotStatus, "/robot_status", lambda m: self.link_age.setdefault(
            m.robot_id, []).append(m.link_age_s) if not m.goal_id else None, STATUS_QOS)  # idle reports
        for r in robots:
            self.node.create_subscription(Image, f"/{r}/camera/image_raw",
                                          lambda m, r=r: self.images.setdefault(r, []).append((m.width, m.height, m.encoding)), 5)
            self.node.create_subscription(DetectionArray, f"/{r}/detections",
                                          lambda m, r=r: self.detections.setdefault(r, []).append(m), 50)
            self.node.create_subscription(BatteryState, f"/{r}/battery",
                                          lambda m, r=r: self.battery.setdefault(r, []).append(m.percentage), 5)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.thread = threading.Thread(target=self.ex.spin, daemon=True)
        self.thread.start()

    def close(self):
        import rclpy

        self.ex.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


def _status(out: str) -> str:
    m = re.search(r"^(SUCCEEDED|REJECTED|CANCELLED|INVALID_PLAN|ROBOT_FAILED|ENGINE_FAILED|TIMEOUT|TRUNCATED|SHED): .*$",
                  out, re.M)
    return m.group(0) if m else ""


def test_robots_see_and_feel_over_ros(tmp_path):
    from robot_adapters.sim import netns

    if not netns.available():
        pytest.skip("the Tello simulators need network namespaces (root and iproute2)")
    up = Up("--engine", "sim", "--params", str(_fleet(tmp_path)), "--time-scale", TIME_SCALE)
    watcher = Watcher(["d_cat", "d_dog", "d_low"])
    try:
        up.wait_ready(180)
        time.sleep(3.0)  # the drones' first idle reports (battery) reach the planner every 2 s
        goals = [("d_cat", "look for the cat"), ("d_dog", "look for the dog"), ("d_low", "look for the cat"),
                 ("arm_map", "stack the red, blue and green boxes"),
                 ("arm_far", "stack the red, blue and green boxes"),
                 ("arm_miss", "stack the red, blue and green boxes")]
        results: dict[str, subprocess.CompletedProcess] = {}
        threads = [threading.Thread(target=lambda r=r, i=i: results.__setitem__(r, goal(r, i, timeout=300)))
                   for r, i in goals]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(1.0)  # the last detections and images in flight reach the watcher
    finally:
        log = up.stop()
        watcher.close()
    out = {r: p.stdout + p.stderr for r, p in results.items()}
    # two streaming drones at once: the cat found on real frames, the drone facing it
    assert _status(out["d_cat"]).startswith("SUCCEEDED"), out["d_cat"][-2000:] + log[-2000:]
    assert "scan(cat) -> True" in out["d_cat"] and "goto(cat) -> True" in out["d_cat"], out["d_cat"][-1500:]
    cats = [(d.center_x, m.image_width) for m in watcher.detections.get("d_cat", []) for d in m.detections
            if d.class_id == "cat"]
    assert cats, watcher.detections.get("d_cat")
    cx, width = cats[-1]  # the last frame the drone looked at the cat in: after turning to it
    assert abs(cx / width - 0.5) < 0.12, cats
    assert ("d_cat" in watcher.images and watcher.images["d_cat"][0] == (480, 360, "rgb8")), watcher.images.keys()
    # no dog: the plan ran as written and says so
    assert _status(out["d_dog"]).startswith("SUCCEEDED") and "returned False" in out["d_dog"], out["d_dog"][-1500:]
    assert "scan(dog) -> False" in out["d_dog"]
    assert not any(d.class_id == "dog" for m in watcher.detections.get("d_dog", []) for d in m.detections)
    # what the drone feels: a battery of 18% cannot see a goal through
    assert _status(out["d_low"]).startswith("REJECTED: d_low's battery is at 18%"), out["d_low"][-800:]
    assert watcher.battery.get("d_low") and abs(watcher.battery["d_low"][-1] - 0.18) < 0.01
    # and its link: the age of its newest state packet (10 a second) on its idle reports
    assert watcher.link_age.get("d_low") and all(0 <= a < 1.0 for a in watcher.link_age["d_low"]), watcher.link_age
    # arms: the map arm stacks; a target outside the box and a missed grasp fail with their reasons
    assert _status(out["arm_map"]).startswith("SUCCEEDED"), out["arm_map"][-1500:] + log[-2000:]
    assert "look(tower) -> True" in out["arm_map"]
    far = _status(out["arm_far"])
    assert far.startswith("ROBOT_FAILED") and "red_block" in far and "workspace" in far, out["arm_far"][-1500:]
    # refused before the arm moved to it: the pick's segment failed with no skill finished in it
    assert re.search(r"segment 1 failed: .*red_block.*refused before any motion", out["arm_far"]), out["arm_far"][-1500:]
    assert "segment 1 finished" not in out["arm_far"]
    miss = _status(out["arm_miss"])
    assert miss.startswith("ROBOT_FAILED") and "grasp of 'red_block' missed" in miss, out["arm_miss"][-1500:]
    assert not traceback_in(log), traceback_in(log)


def test_a_real_arm_without_perception_is_refused_in_one_sentence(tmp_path):
    data = yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())
    data["robots"] = [{"id": "indy_real", "kind": "arm", "skill_set": "indy7_arm", "adapter": "indy",
                       "host": "127.0.0.1"}]
    path = tmp_path / "real_arm.yaml"
    path.write_text(yaml.safe_dump(data))
    p = subprocess.run([*TF, "up", "--engine", "sim", "--params", str(path), "--seconds", "5"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if "perception source" in ln]
    assert len(lines) == 1 and "robot indy_real: a real arm needs a perception source: set " \
                               "robots[indy_real].perception to" in lines[0], p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
