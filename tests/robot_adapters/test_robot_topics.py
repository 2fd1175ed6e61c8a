"""A drone's detector as the team's own ROS node, over real rclpy: the adapter sends the frame on
``<robot>/camera/image_raw``, an independent detector node answers with the image's stamp, and the
perception skill is answered from that answer; with the node silent, the skill fails saying why."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.ros

ANSWERS = "tello_1/detections_in"


class TeamDetector:
    """The team's detector node: subscribes to the drone's images and answers each with a cat at
    three quarters of the image's width, in pixels, echoing the image's header (as vision_msgs
    detectors do; no image size, as Detection2DArray has none). ``silent``: it answers nothing."""

    def __init__(self, ctx):
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from sensor_msgs.msg import Image
        from timely_fleet.msg import DetectionArray

        self.node = Node("team_detector", context=ctx)
        self.silent = False
        self.images: list = []  # header stamps of the images received
        self.adapter_detections: list = []  # what the adapter published on tello_1/detections
        self.pub = self.node.create_publisher(DetectionArray, ANSWERS, 10)
        self.node.create_subscription(Image, "tello_1/camera/image_raw", self._on_image, 10)
        self.node.create_subscription(DetectionArray, "tello_1/detections", self.adapter_detections.append, 10)
        self.ex = SingleThreadedExecutor(context=ctx)
        self.ex.add_node(self.node)
        self.thread = threading.Thread(target=self.ex.spin, daemon=True)
        self.thread.start()

    def _on_image(self, img):
        from timely_fleet.msg import Detection, DetectionArray

        self.images.append((img.header.stamp.sec, img.header.stamp.nanosec))
        if self.silent:
            return
        out = DetectionArray(header=img.header)
        out.detections.append(Detection(class_id="cat", score=0.9, center_x=0.75 * img.width,
                                        center_y=0.5 * img.height, size_x=0.25 * img.width, size_y=0.5 * img.height))
        self.pub.publish(out)

    def close(self):
        self.ex.shutdown()
        self.node.destroy_node()


def test_a_drone_perceives_through_the_teams_detector_node(ros_context):
    from rclpy.executors import SingleThreadedExecutor
    from test_minispec_interpreter import FakeTello

    from timely_robot.skills import SkillCall
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_node import AdapterNode
    from robot_adapters.drone_executor import TelloExecutor
    from robot_adapters.executor import SkillExecutionError
    from robot_adapters.perception.camera import CameraPerception
    from robot_adapters.perception.drone import CameraDronePerception
    from robot_adapters.perception.topic_detector import TopicDetector
    from robot_adapters.perception.types import Frame

    seq = {"n": 0}

    def latest():  # a live 64x48 stream: a new frame at every look
        seq["n"] += 1
        return Frame(np.full((48, 64, 3), 90, np.uint8), time.monotonic(), seq["n"])

    det = TopicDetector("tello_1", ANSWERS, ["cat", "person"], timeout_s=1.5)
    cam = CameraPerception("tello_1", latest, det, max_age_s=1.0, settle_s=0.0)
    ex = TelloExecutor("10.0.0.1", client_factory=FakeTello, name="tello_1", perception=CameraDronePerception(cam))
    ex.connect()
    adapter = AdapterNode("topics_adapter", context=ros_context)
    spin = SingleThreadedExecutor(context=ros_context)  # one thread, as `timely-fleet up` spins its adapter node
    spin.add_node(adapter)
    spinner = threading.Thread(target=spin.spin, daemon=True)
    spinner.start()
    team = TeamDetector(ros_context)
    try:
        adapter.add_robot(AdapterCore("tello_1", ex, adapter.status_publisher("tello_1")))  # wires its topics
        deadline = time.monotonic() + 10
        while (team.pub.get_subscription_count() == 0
               or team.node.count_publishers("/tello_1/camera/image_raw") == 0) and time.monotonic() < deadline:
            time.sleep(0.02)
        cancel = threading.Event()
        assert ex.execute(SkillCall("object_x", ("cat",)), cancel) == 0.75  # the node's box, in its pixels
        assert ex.execute(SkillCall("is_visible", ("person",)), cancel) is False
        # the adapter's detections of that frame carry its image's stamp and say where they came from
        time.sleep(0.2)
        sent = [(m.header.stamp.sec, m.header.stamp.nanosec) for m in team.adapter_detections
                if m.source == f"detector node on {ANSWERS}" and m.detections]
        assert sent and sent[-1] in team.images

        team.silent = True
        with pytest.raises(SkillExecutionError) as e:
            ex.execute(SkillCall("is_visible", ("cat",)), cancel)
        assert "tello_1: no detections for its camera image stamped" in str(e.value)
        assert (f"came on {ANSWERS} within 1.5 s: check that the detector node is running, subscribes to "
                f"tello_1/camera/image_raw and publishes timely_fleet/DetectionArray on {ANSWERS} with the image's "
                "header.stamp") in str(e.value)
    finally:
        team.close()
        adapter.shutdown_robots()
        spin.shutdown()
        adapter.destroy_node()


class _OneCat:
    """A detector that sees one cat in every frame."""

    name = "one cat"
    classes = ("cat",)

    def detect(self, image):
        from robot_adapters.perception.types import Detection

        return [Detection("cat", 0.9, (0.5, 0.5, 0.2, 0.2))]


def test_a_perception_after_the_node_is_destroyed_publishes_nothing_and_fails_nothing(ros_context, caplog):
    """`timely-fleet up` stops its robots, then destroys the adapter node; a drone's perception
    still running on a skill's thread (or a last status) must find the node closed, not a
    destroyed publisher (which would log "perception listener failed ... InvalidHandle")."""
    from test_minispec_interpreter import FakeTello

    from timely_robot.outcomes import RobotState
    from robot_adapters.adapter_core import AdapterCore, StatusEvent
    from robot_adapters.adapter_node import AdapterNode
    from robot_adapters.drone_executor import TelloExecutor
    from robot_adapters.perception.camera import CameraPerception
    from robot_adapters.perception.drone import CameraDronePerception
    from robot_adapters.perception.types import Frame

    frame = Frame(np.full((48, 64, 3), 90, np.uint8), time.monotonic(), 1)
    cam = CameraPerception("tello_1", lambda: Frame(frame.image, time.monotonic(), frame.seq + 1), _OneCat(),
                           settle_s=0.0)
    ex = TelloExecutor("10.0.0.1", client_factory=FakeTello, name="tello_1", perception=CameraDronePerception(cam))
    ex.connect()
    adapter = AdapterNode("closing_adapter", context=ros_context)
    publish = adapter.status_publisher("tello_1")
    adapter.add_robot(AdapterCore("tello_1", ex, publish))
    assert len(cam.listeners) == 1  # the topics publish what the perception sees
    adapter.shutdown_robots()
    adapter.destroy_node()
    with caplog.at_level("ERROR"):
        _frame, found = cam.detect()  # a skill's perception after the node went
        publish(StatusEvent("tello_1", "", 0, RobotState.IDLE))
    assert [d.label for d in found] == ["cat"]  # the skill still gets its answer
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert cam.listeners == []  # the closed topics let go of the camera
