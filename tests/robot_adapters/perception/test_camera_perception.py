"""The drone's camera as a perception source: fresh frames only, answers from detections, the
geometry of bearing and distance, and answers reaching the status link."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from timely_robot.skills import TELLO_MINISPEC as T
from robot_adapters.adapter_core import STATE_DONE, STATE_FAILED, SegmentIn
from robot_adapters.adapter_core import AdapterCore
from robot_adapters.drone_executor import TelloExecutor
from robot_adapters.perception.camera import V_FOV_DEG, CameraPerception, bearing_deg, distance_cm
from robot_adapters.perception.drone import CameraDronePerception
from robot_adapters.perception.types import Detection, Frame, PerceptionError

from test_minispec_interpreter import FakeTello  # djitellopy's command interface without a network


class FixedDetector:
    """A detector whose answer the test sets (the logic under test is around the detector)."""

    name = "fixed"
    classes = ("cat", "cup", "person")

    def __init__(self, found=()):
        self.found = list(found)
        self.calls = 0

    def detect(self, image):
        self.calls += 1
        return list(self.found)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


IMG = np.zeros((36, 48, 3), np.uint8)


def test_a_stale_or_missing_frame_fails_with_its_reason():
    clock = Clock()
    frames = {"f": None}
    cam = CameraPerception("tello_1", lambda: frames["f"], FixedDetector(), max_age_s=1.0, clock=clock, poll_s=0.0)
    orig_sleep = time.sleep
    time.sleep = lambda s: setattr(clock, "t", clock.t + 0.25)  # the wait advances the test clock
    try:
        with pytest.raises(PerceptionError, match="no camera frame received"):
            cam.fresh_frame()
        frames["f"] = Frame(IMG, clock.t - 5.0, 1)  # the last frame of a stream that died 5 s ago
        with pytest.raises(PerceptionError, match="no camera frame newer than 1 s"):
            cam.fresh_frame()
        assert cam.stale_refusals == 2
        frames["f"] = Frame(IMG, clock.t - 0.2, 2)
        assert cam.fresh_frame().seq == 2
    finally:
        time.sleep = orig_sleep


def test_after_a_motion_only_a_frame_decoded_after_it_settled_answers():
    clock = Clock()
    frames = {"f": Frame(IMG, clock.t - 0.1, 1)}
    det = FixedDetector([Detection("cat", 0.9, (0.5, 0.5, 0.1, 0.1))])
    cam = CameraPerception("d", lambda: frames["f"], det, max_age_s=1.0, settle_s=0.3, clock=clock, poll_s=0.0)
    cam.motion_ended()  # at t=100: the frame from t=99.9 shows the view before the turn
    seen = []

    def tick(_s):
        clock.t += 0.1
        if clock.t >= 100.45 and frames["f"].seq == 1:
            frames["f"] = Frame(IMG, clock.t, 2)  # a frame after the turn arrives
        seen.append(frames["f"].seq)

    orig_sleep = time.sleep
    time.sleep = tick
    try:
        frame, found = cam.detect()
    finally:
        time.sleep = orig_sleep
    assert frame.seq == 2 and [d.label for d in found] == ["cat"]
    cam.detect()  # same frame: the detector does not run again
    assert det.calls == 1


def test_bearing_and_distance_follow_the_pinhole_camera():
    # centre of the image: straight ahead; right edge: half the horizontal field of view
    assert bearing_deg(Detection("cat", 1, (0.5, 0.5, 0.1, 0.1))) == pytest.approx(0.0)
    assert bearing_deg(Detection("cat", 1, (1.0, 0.5, 0.1, 0.1))) == pytest.approx(35.0)
    assert bearing_deg(Detection("cat", 1, (0.25, 0.5, 0.1, 0.1))) < 0
    # ground plane: camera 100 cm above the floor, box bottom at 0.8 of the image height:
    # angle below the axis = atan(0.6 * tan(27.5 deg)) = 17.35 deg -> 100 / tan(17.35 deg) = 320.7 cm
    d = Detection("cat", 1, (0.5, 0.7, 0.2, 0.2))
    expect = 100.0 / math.tan(math.atan(0.6 * math.tan(math.radians(V_FOV_DEG / 2))))
    assert distance_cm(d, 100.0) == pytest.approx(expect, abs=0.1)
    # no height measured: the class's typical height (cat 30 cm) filling 0.2 of the image
    assert distance_cm(d, None) == pytest.approx(30.0 / (2 * 0.2 * math.tan(math.radians(V_FOV_DEG / 2))), abs=0.1)
    assert distance_cm(Detection("kite", 1, (0.5, 0.3, 0.1, 0.1)), None) == -1.0  # unknown size, above horizon


def _camera_drone(found):
    frames = {"seq": 0}

    def latest():  # a live stream: a new frame every call
        frames["seq"] += 1
        return Frame(IMG, time.monotonic(), frames["seq"])

    det = FixedDetector(found)
    cam = CameraPerception("tello_1", latest, det, max_age_s=1.0, settle_s=0.0)
    ex = TelloExecutor("10.0.0.1", client_factory=FakeTello, name="tello_1",
                       perception=CameraDronePerception(cam, height_cm=lambda: 100.0))
    ex.connect()
    return ex, det


def test_scan_turns_until_the_detector_sees_the_object_and_answers_reach_the_status():
    ex, det = _camera_drone([])
    events = []
    core = AdapterCore("tello_1", ex, events.append).start()
    turned = {"n": 0}
    orig = ex._turn

    def turn(name, deg, cancel):  # the cat comes into view after the second turn
        orig(name, deg, cancel)
        turned["n"] += 1
        if turned["n"] == 2:
            det.found = [Detection("cat", 0.8, (0.7, 0.6, 0.2, 0.2))]

    ex._turn = turn
    try:
        core.submit(SegmentIn("g" * 32, 0, text="_1=s,cat;?_1==True{o,cat};->_1;",
                              skills=[("s", ["cat"]), ("o", ["cat"])], final=True))
        deadline = time.monotonic() + 10
        while not any(e.state in (STATE_DONE, STATE_FAILED) for e in events) and time.monotonic() < deadline:
            time.sleep(0.01)
        done = [e for e in events if e.state == STATE_DONE]
        assert done, [e.error for e in events]
        assert ex.tello.cmds[:3] == ["takeoff", "cw 30", "cw 30"]
        # orienting: box centre at 0.7 -> atan(0.4 * tan 35 deg) = 15.7 deg clockwise
        assert ex.tello.cmds[3] == "cw 16"
        assert done[0].answers == [("scan(cat)", "True"), ("orienting(cat)", "True")]
        assert done[0].return_value == "True"
    finally:
        core.shutdown()


def test_a_drone_without_perception_fails_perception_skills_saying_so():
    ex = TelloExecutor("10.0.0.1", client_factory=FakeTello, name="tello_9")
    ex.connect()
    from timely_robot.skills import SkillCall
    from robot_adapters.executor import SkillExecutionError

    with pytest.raises(SkillExecutionError, match="tello_9 has no perception source"):
        ex.execute(SkillCall("is_visible", ("cat",)), threading.Event())
    assert ex.tello.cmds == []


def test_an_object_the_detector_has_no_class_for_fails_the_skill():
    from timely_robot.skills import SkillCall
    from robot_adapters.executor import SkillExecutionError

    ex, _det = _camera_drone([Detection("cat", 0.8, (0.5, 0.6, 0.2, 0.2))])
    cancel = threading.Event()
    assert ex.execute(SkillCall("is_visible", ("kitty",)), cancel) is True  # a common name of a class
    with pytest.raises(SkillExecutionError, match=r"tello_1 cannot perceive 'cabinet': its detector \(fixed\)"):
        ex.execute(SkillCall("is_visible", ("cabinet",)), cancel)


def test_an_idle_camera_drone_reports_what_it_sees():
    from robot_adapters import adapter_core

    ex, _det = _camera_drone([Detection("cat", 0.8, (0.25, 0.6, 0.2, 0.1)), Detection("cup", 0.9, (0.7, 0.5, 0.1, 0.1))])
    events = []
    old = adapter_core.VITALS_S
    adapter_core.VITALS_S = 0.05
    core = AdapterCore("tello_1", ex, events.append).start()
    try:
        deadline = time.monotonic() + 10
        while not any(e.scene for e in events) and time.monotonic() < deadline:
            time.sleep(0.01)
        idle = [e for e in events if e.scene]
        assert idle and idle[0].goal_id == "" and idle[0].state == 0
        # the highest-scoring first
        assert idle[0].scene == ["cup x:0.70 y:0.50 width:0.10 height:0.10", "cat x:0.25 y:0.60 width:0.20 height:0.10"]
    finally:
        adapter_core.VITALS_S = old
        core.shutdown()
