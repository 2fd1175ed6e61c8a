"""The team's detector node as a drone's detector (ROS-free): the answer stamped with the frame's
image answers, any other answer never does, silence fails the skill with what to check, and the
declared classes are what the drone and its plans can name."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from robot_adapters.perception.camera import CameraPerception
from robot_adapters.perception.drone import CameraDronePerception
from robot_adapters.perception.topic_detector import TopicDetector
from robot_adapters.perception.types import Detection, Frame, PerceptionError

TOPIC = "tello_1/detections_in"
IMG = np.zeros((36, 48, 3), np.uint8)
CAT = Detection("Cat", 0.9, (0.75, 0.5, 0.2, 0.3))
DOG = Detection("dog", 0.8, (0.25, 0.5, 0.2, 0.3))


class Edge:
    """The ROS edge without ROS: each frame goes out with its own stamp (sec = its seq); what the
    detector node answers is scripted per test."""

    def __init__(self, det: TopicDetector, reply=None):
        self.det, self.reply, self.sent = det, reply, []
        det.publish = self.publish

    def publish(self, frame: Frame) -> tuple[int, int]:
        stamp = (frame.seq, 500)
        if stamp not in self.sent:
            self.det.sent(stamp, (48, 36))
            self.sent.append(stamp)
            if self.reply is not None:
                self.reply(stamp)
        return stamp


def _camera(det: TopicDetector) -> tuple[CameraDronePerception, dict]:
    frames = {"f": Frame(IMG, time.monotonic(), 1)}
    cam = CameraPerception("tello_1", lambda: frames["f"], det, max_age_s=5.0, settle_s=0.0)
    return CameraDronePerception(cam), frames


def test_the_answer_stamped_with_the_frames_image_answers_the_skill():
    det = TopicDetector("tello_1", TOPIC, ["cat", "dog"], timeout_s=2.0, poll_s=0.01)

    def reply(stamp):  # a late answer for an image never sent, then the frame's own, from another thread
        def later():
            time.sleep(0.05)
            det.answer((stamp[0] + 100, 0), [DOG])
            time.sleep(0.05)
            det.answer(stamp, [CAT])
            det.answer(stamp, [DOG])  # a second answer for the same image changes nothing
        threading.Thread(target=later, daemon=True).start()

    edge = Edge(det, reply)
    drone, _frames = _camera(det)
    assert drone.object_x("cat") == 0.75  # the label "Cat" is the class cat
    assert drone.is_visible("dog") is False
    assert edge.sent == [(1, 500)]  # one image for the frame, whatever was asked of it
    assert det.unmatched == 1


def test_an_answer_for_another_image_never_answers():
    det = TopicDetector("tello_1", TOPIC, ["cat", "dog"], timeout_s=0.3, poll_s=0.01)
    first: list = []

    def reply(stamp):  # the node answers the first image, then only repeats that answer
        first.append(first[0] if first else stamp)
        det.answer(first[0], [CAT])

    Edge(det, reply)
    drone, frames = _camera(det)
    assert drone.is_visible("cat") is True
    frames["f"] = Frame(IMG, time.monotonic(), 2)  # a new frame: the old answer is not its answer
    with pytest.raises(PerceptionError, match=r"stamped 2\.000000500 came on tello_1/detections_in within 0\.3 s "
                                              r"\(1 answer\(s\) came, none with this image's stamp\)"):
        drone.is_visible("cat")


def test_no_answer_in_time_fails_the_skill_saying_what_to_check():
    t = {"now": 0.0}

    def clock():  # each look at the clock is 0.25 s later: the wait ends without sleeping 1 s
        t["now"] += 0.25
        return t["now"]

    det = TopicDetector("tello_1", TOPIC, ["cat"], timeout_s=1.0, clock=clock, poll_s=0.001)
    with pytest.raises(PerceptionError) as e:
        det.detect(IMG)
    assert str(e.value) == "tello_1: its detections come from the detector node on tello_1/detections_in, but no " \
                           "adapter node publishes its camera images (run it in `timely-fleet up` or an adapter node)"
    Edge(det)
    with pytest.raises(PerceptionError) as e:
        det.detect_frame(Frame(IMG, 0.0, 7))
    assert str(e.value) == (
        "tello_1: no detections for its camera image stamped 7.000000500 came on tello_1/detections_in within 1 s: "
        "check that the detector node is running, subscribes to tello_1/camera/image_raw and publishes "
        "timely_fleet/DetectionArray on tello_1/detections_in with the image's header.stamp")
    assert t["now"] <= 2.0


def test_the_declared_classes_are_what_the_drone_and_its_plans_can_name():
    from timely_robot.config import ParamError
    from llm_planner_node.config.params import parse_params, perceivable_objects, plan_objects

    det = TopicDetector("tello_1", TOPIC, ["cat", "Teddy bear", "red ball"])
    assert det.classes == ("cat", "teddy_bear", "red_ball")
    drone, _frames = _camera(det)
    Edge(det, lambda stamp: det.answer(stamp, [CAT]))
    assert drone.is_visible("kitty") is True  # a common name of a declared class
    with pytest.raises(PerceptionError, match=r"cannot perceive 'cup': its detector \(detector node on "
                                              r"tello_1/detections_in\) has no such class"):
        drone.is_visible("cup")

    def fleet(perception):
        return {"planner": {}, "robots": [{"id": "tello_1", "kind": "drone", "skill_set": "tello_minispec",
                                          "adapter": "tello", "host": "192.168.10.1", "perception": perception}]}

    robot = parse_params(fleet({"source": "camera", "detector": "topic", "topic": TOPIC,
                                "classes": ["cat", "Teddy bear"], "timeout_s": 0.5})).robots[0]
    assert perceivable_objects(robot) == ("cat", "teddy_bear")
    assert plan_objects(robot) == ()  # any name: the check before dispatch holds plans to these classes
    with pytest.raises(ParamError, match="detector topic needs classes"):
        parse_params(fleet({"source": "camera", "detector": "topic", "topic": TOPIC}))
    with pytest.raises(ParamError, match=r"timeout_s is for a detector node \(detector: topic\)"):
        parse_params(fleet({"source": "camera", "detector": "default", "timeout_s": 1.0}))
    for own in ("tello_1/detections", "/tello_1/camera/image_raw"):  # the adapter's own outputs
        with pytest.raises(ParamError, match=r"is where the adapter itself publishes"):
            parse_params(fleet({"source": "camera", "detector": "topic", "topic": own, "classes": ["cat"]}))
