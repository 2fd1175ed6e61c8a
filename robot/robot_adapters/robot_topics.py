"""What a robot sees and feels, on standard ROS topics under its id (the adapter node's side).

For each robot the adapter node hosts:

* ``<robot>/camera/image_raw`` (``sensor_msgs/Image``, rgb8): every frame its perception looked
  at, and otherwise the newest frame at most ``image_hz`` times a second (a throttled view for
  rviz, rqt_image_view, Foxglove and rosbag2; the detector does not run on these);
* ``<robot>/detections`` (``timely_fleet/DetectionArray``, laid out as
  ``vision_msgs/Detection2DArray``): the detections of every frame the perception looked at,
  stamped with the frame's time;
* ``<robot>/battery`` (``sensor_msgs/BatteryState``) once a second, for robots that measure it;
* subscribed, for arms whose objects come from the team's own camera node
  (``perception: {source: topic, topic: ...}``): ``DetectionArray`` with 3D positions, fed to
  the arm's object source;
* subscribed, for drones whose detector is the team's own detector node (``perception:
  {detector: topic, topic: ...}``, :mod:`robot_adapters.perception.topic_detector`): its
  ``DetectionArray`` answers, matched to the images sent on ``<robot>/camera/image_raw`` by
  their ``header.stamp``. An image keeps one stamp however often it is used, and its detections
  on ``<robot>/detections`` carry the same stamp.

Everything here only converts and publishes; the robot's logic stays in its executor.
"""

from __future__ import annotations

import array
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Sequence

from robot_adapters.executor import SkillExecutor
from robot_adapters.perception.topic_detector import TopicDetector
from robot_adapters.perception.types import Detection, Frame

log = logging.getLogger("timely_fleet.adapter")

IMAGE_HZ = 1.0
BATTERY_HZ = 1.0
STAMPS_KEPT = 8  # frames whose image stamp is remembered (a frame published again keeps its stamp)


def _stamp(node: Any, mono: float) -> Any:
    """A monotonic stamp as ROS time (the node's clock now minus the frame's age)."""
    from rclpy.duration import Duration

    age = max(0.0, time.monotonic() - mono)
    return (node.get_clock().now() - Duration(nanoseconds=int(age * 1e9))).to_msg()


def image_msg(node: Any, frame: Frame, frame_id: str, stamp: Any = None) -> Any:
    """``frame`` as a ``sensor_msgs/Image`` stamped ``stamp`` (default: the frame's time)."""
    from sensor_msgs.msg import Image

    img = frame.image
    h, w = int(img.shape[0]), int(img.shape[1])
    m = Image(height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3)
    m.header.stamp = stamp if stamp is not None else _stamp(node, frame.stamp)
    m.header.frame_id = frame_id
    m.data = array.array("B", img.tobytes())  # the fast path of rclpy's uint8[] setter
    return m


def detections_msg(node: Any, robot_id: str, source: str, frame: Frame | None, found: Sequence[Detection],
                   frame_id: str, stamp: Any = None) -> Any:
    from timely_fleet.msg import Detection as DetectionMsg
    from timely_fleet.msg import DetectionArray

    w = h = 0
    if frame is not None:
        h, w = int(frame.image.shape[0]), int(frame.image.shape[1])
    out = DetectionArray(robot_id=robot_id, source=source[:200], image_width=w, image_height=h)
    if stamp is not None:
        out.header.stamp = stamp
    else:
        out.header.stamp = _stamp(node, frame.stamp) if frame is not None else node.get_clock().now().to_msg()
    out.header.frame_id = frame_id
    for d in found:
        cx, cy, bw, bh = d.box
        m = DetectionMsg(class_id=d.label[:64], score=float(d.score), center_x=cx * w, center_y=cy * h,
                         size_x=bw * w, size_y=bh * h, has_position=d.position is not None)
        if d.position is not None:
            m.position = [float(v) for v in d.position]
        out.detections.append(m)
    return out


def detections_from_msg(msg: Any, size: tuple[int, int] | None = None) -> list[Detection]:
    """A received ``DetectionArray`` as detections (boxes normalised when the image size is known:
    the message's ``image_width``/``image_height``, else ``size``, the (width, height) of the image
    its stamp names; a ``vision_msgs``-style detector does not say it)."""
    w, h = int(msg.image_width), int(msg.image_height)
    if (w <= 0 or h <= 0) and size is not None:
        w, h = size
    w, h = max(w, 1), max(h, 1)
    out = []
    for m in msg.detections:
        pos = tuple(float(v) for v in m.position) if m.has_position else None
        out.append(Detection(str(m.class_id)[:64], float(m.score),
                             (m.center_x / w, m.center_y / h, m.size_x / w, m.size_y / h), pos))  # type: ignore[arg-type]
    return out


class RobotTopics:
    """The topics of one robot (created by :func:`attach`)."""

    def __init__(self, node: Any, core: Any) -> None:
        self.node = node
        self.robot_id = core.robot_id
        self.executor = core.executor
        self.image_pub = self.det_pub = self.battery_pub = None
        self.topic_detector: TopicDetector | None = None
        self._stamps: OrderedDict[tuple[int, float], Any] = OrderedDict()  # frame -> its image's header stamp
        self._lock = threading.Lock()
        self._publishing = threading.Lock()  # held while publishing; close() waits for it
        self._closed = False
        self.camera = None
        camera = getattr(getattr(self.executor, "perception", None), "camera", None)
        if camera is not None:
            from sensor_msgs.msg import Image
            from timely_fleet.msg import DetectionArray

            self.camera = camera
            self.frame_id = f"{self.robot_id}/camera"
            self.image_pub = node.create_publisher(Image, f"{self.robot_id}/camera/image_raw", 2)
            self.det_pub = node.create_publisher(DetectionArray, f"{self.robot_id}/detections", 10)
            camera.listeners.append(self._on_detections)
            self._image_timer = node.create_timer(1.0 / IMAGE_HZ, self._throttled_image)
            if isinstance(camera.detector, TopicDetector):  # the team's detector node answers the images
                from rclpy.qos import QoSProfile, ReliabilityPolicy

                self.topic_detector = camera.detector
                # best effort matches the node's publisher whether it is reliable or sensor-data QoS
                qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
                node.create_subscription(DetectionArray, camera.detector.topic, self._on_answer, qos)
                camera.detector.publish = self._request
        if type(self.executor).measured is not SkillExecutor.measured:  # the robot measures itself
            from sensor_msgs.msg import BatteryState

            self.battery_pub = node.create_publisher(BatteryState, f"{self.robot_id}/battery", 5)
            self._battery_timer = node.create_timer(1.0 / BATTERY_HZ, self._battery)
        source = getattr(self.executor, "detections_source", None)
        if source is not None:  # an arm fed by the team's camera node
            from timely_fleet.msg import DetectionArray

            self.source = source
            node.create_subscription(DetectionArray, source.topic, self._on_source, 10)

    def _publish_image(self, frame: Frame) -> Any:
        """Publish ``frame``'s image once (a frame already sent is not sent again); its header stamp."""
        key = (frame.seq, frame.stamp)
        with self._lock:
            stamp = self._stamps.get(key)
            if stamp is not None:
                return stamp
            stamp = self._stamps[key] = _stamp(self.node, frame.stamp)
            while len(self._stamps) > STAMPS_KEPT:
                self._stamps.popitem(last=False)
        if self.topic_detector is not None:  # before it goes out: the answer may come at once
            h, w = int(frame.image.shape[0]), int(frame.image.shape[1])
            self.topic_detector.sent((stamp.sec, stamp.nanosec), (w, h))
        self._publish(self.image_pub, image_msg(self.node, frame, self.frame_id, stamp))
        return stamp

    def _publish(self, pub: Any, msg: Any) -> None:
        """Publish ``msg`` unless :meth:`close` was called (the node is going away)."""
        with self._publishing:
            if not self._closed:
                pub.publish(msg)

    def close(self) -> None:
        """Publish nothing more: called before the node's publishers are destroyed, while a
        perception may still run on a skill's thread (its answer still reaches the skill)."""
        with self._publishing:  # a publish under way ends first
            self._closed = True
        if self.camera is not None and self._on_detections in self.camera.listeners:
            self.camera.listeners.remove(self._on_detections)

    def _request(self, frame: Frame) -> tuple[int, int]:
        """The topic detector's ``publish``: the frame's image sent (once), its stamp as (sec, nanosec)."""
        stamp = self._publish_image(frame)
        return (stamp.sec, stamp.nanosec)

    def _on_answer(self, msg: Any) -> None:
        det = self.topic_detector
        stamp = (int(msg.header.stamp.sec), int(msg.header.stamp.nanosec))
        try:
            det.answer(stamp, detections_from_msg(msg, det.image_size(stamp)))  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - a malformed message must not stop the node
            log.warning("%s: detections on %s not usable", self.robot_id, det.topic, exc_info=True)  # type: ignore[union-attr]

    def _on_detections(self, frame: Frame, found: Sequence[Detection]) -> None:
        if self._closed:
            return
        stamp = self._publish_image(frame)
        self._publish(self.det_pub, detections_msg(self.node, self.robot_id, self.camera.detector.name,  # type: ignore[union-attr]
                                                   frame, found, self.frame_id, stamp))

    def _throttled_image(self) -> None:
        if self._closed:
            return
        frame = self.camera.frames()
        if frame is not None and time.monotonic() - frame.stamp <= self.camera.max_age_s:
            self._publish_image(frame)

    def _battery(self) -> None:
        from sensor_msgs.msg import BatteryState

        m = self.executor.measured()
        if m.battery_pct < 0:
            return
        msg = BatteryState(percentage=float(m.battery_pct) / 100.0, present=True,
                           voltage=float("nan"), current=float("nan"), charge=float("nan"),
                           capacity=float("nan"), design_capacity=float("nan"),
                           temperature=float(m.temperature_c) if m.temperature_c >= 0 else float("nan"),
                           power_supply_status=BatteryState.POWER_SUPPLY_STATUS_DISCHARGING,
                           power_supply_technology=BatteryState.POWER_SUPPLY_TECHNOLOGY_LIPO)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.header.frame_id = self.robot_id
        self._publish(self.battery_pub, msg)

    def _on_source(self, msg: Any) -> None:
        try:
            self.source.update(detections_from_msg(msg), time.monotonic())
        except Exception:  # noqa: BLE001 - a malformed message must not stop the node
            log.warning("%s: detections on %s not usable", self.robot_id, self.source.topic, exc_info=True)


def attach(node: Any, core: Any) -> RobotTopics:
    """Create the robot's topics on ``node`` (the adapter node that hosts ``core``)."""
    return RobotTopics(node, core)
