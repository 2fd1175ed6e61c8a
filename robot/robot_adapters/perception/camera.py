"""A robot's camera as a perception source: stamped frames, detections on demand.

djitellopy's ``BackgroundFrameRead`` decodes the Tello's H.264 stream (PyAV) in a thread and keeps
the last frame forever, with no time: a stream that died an hour ago still "shows" its last
image. :class:`StampedFrameReader` is that reader with a stamp and a sequence number on every
decoded frame, so :class:`CameraPerception` can refuse a frame older than ``max_age_s`` and, after
a motion, wait for a frame decoded after the robot stopped (the view before the turn is not the
view after it).

:class:`CameraPerception` runs the detector only when a perception skill needs an answer (never on
every frame: this machine shares two cores with the LLM engine) and caches the detections of a
frame by its sequence number. Listeners (the ROS adapter node) see every frame it looked at and
its detections, to publish them on ``<robot>/camera/image_raw`` and ``<robot>/detections``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Callable, Sequence

import numpy as np

from robot_adapters.perception.types import Detection, Detector, Frame, PerceptionError

log = logging.getLogger("timely_fleet.perception")

#: the Tello camera's field of view as the simulator and the geometry here use it (degrees)
H_FOV_DEG = 70.0
V_FOV_DEG = 55.0

#: typical heights (cm) of COCO classes a drone looks for, for a monocular distance estimate when
#: the object is not on the floor in view (the ground-plane estimate needs the box's bottom edge)
TYPICAL_HEIGHT_CM = {"person": 170.0, "cat": 30.0, "dog": 50.0, "cup": 10.0, "bottle": 25.0, "chair": 90.0,
                     "book": 22.0, "laptop": 25.0, "backpack": 45.0, "umbrella": 90.0, "teddy_bear": 30.0,
                     "potted_plant": 50.0, "tv": 60.0, "bicycle": 100.0, "couch": 85.0, "bed": 60.0,
                     "dining_table": 75.0, "keyboard": 4.0, "cell_phone": 14.0, "scissors": 18.0,
                     "remote": 18.0, "vase": 30.0, "clock": 30.0, "apple": 8.0, "banana": 18.0,
                     "orange": 8.0, "bowl": 8.0, "bird": 20.0, "horse": 160.0, "sports_ball": 22.0}


#: PyAV (FFmpeg) input options of the Tello's H.264 stream: decode once a keyframe gives the
#: stream's parameters instead of probing 5 s of it (a Tello sends SPS and PPS before each keyframe)
PROBE_OPTIONS = {"probesize": "65536", "analyzeduration": "1000000", "fflags": "nobuffer"}


def make_stamped_reader(tello: Any, clock: Callable[[], float] = time.monotonic) -> Any:
    """Start djitellopy's frame reader on ``tello``'s video address with every decoded frame
    stamped (call after ``streamon``; in the network namespace the client lives in). The reader
    becomes ``tello.background_frame_read``, so djitellopy's own ``streamoff``/``end`` stop it."""
    from djitellopy.tello import BackgroundFrameRead

    class StampedFrameRead(BackgroundFrameRead):
        """djitellopy's reader; each frame the decoder sets is stamped and numbered here."""

        def __init__(self, tello: Any, address: str) -> None:
            # djitellopy 2.5.0's constructor, with PyAV told to start decoding as soon as it has
            # the stream's parameters (a keyframe with SPS and PPS): its defaults probe 5 s of
            # video first, so the first frame came 5 s after streamon
            import av
            from djitellopy.tello import Tello, TelloException

            self._stamped: Frame | None = None
            self._seq = 0
            self._live = False  # the placeholder frame is not a camera image
            self.address = address
            self.lock = threading.Lock()
            self.frame = np.zeros([300, 400, 3], dtype=np.uint8)
            self.frames = deque([], 32)
            self.with_queue = False
            try:
                self.container = av.open(self.address, timeout=(Tello.FRAME_GRAB_TIMEOUT, None),
                                         options=PROBE_OPTIONS)
            except av.error.ExitError:
                raise TelloException("Failed to grab video frames from video stream") from None
            self.stopped = False
            self.worker = threading.Thread(target=self.update_frame, args=(), daemon=True)
            self._live = True

        @property  # type: ignore[override]
        def frame(self) -> Any:
            with self.lock:
                return self._frame

        @frame.setter
        def frame(self, value: Any) -> None:
            with self.lock:
                self._frame = value
                if self._live:
                    self._seq += 1
                    self._stamped = Frame(value, clock(), self._seq)

        def latest(self) -> Frame | None:
            with self.lock:
                return self._stamped

    reader = StampedFrameRead(tello, tello.get_udp_video_address() + "?overrun_nonfatal=1&fifo_size=50000")
    reader.start()
    tello.background_frame_read = reader
    return reader


class CameraPerception:
    """Answers perception questions from the newest camera frame through a detector.

    ``frames()`` returns the newest stamped frame (or None); ``clock`` is the frames' clock.
    ``max_age_s``: the oldest frame an answer may come from; ``settle_s``: after a motion, only
    frames decoded this long after it ended count (the stream's latency: encoder, network,
    decoder)."""

    def __init__(self, robot_id: str, frames: Callable[[], Frame | None], detector: Detector, *,
                 max_age_s: float = 1.0, settle_s: float = 0.3, min_score: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.02) -> None:
        self.robot_id = robot_id
        self.frames = frames
        self.detector = detector
        self.max_age_s = float(max_age_s)
        self.settle_s = float(settle_s)
        self.min_score = float(min_score)
        self.clock = clock
        self.poll_s = poll_s
        self.moved_at = -math.inf  # when the robot last stopped moving (clock time)
        self.listeners: list[Callable[[Frame, Sequence[Detection]], None]] = []
        self.stale_refusals = 0  # answers refused for a stale or missing frame
        self.detect_ms: list[float] = []  # detector time of each frame it looked at (bounded)
        self._cache: tuple[int, list[Detection]] | None = None
        self._lock = threading.Lock()

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.detector.classes)

    def motion_ended(self) -> None:
        """The robot just stopped moving: answers wait for a frame decoded after it settled."""
        self.moved_at = self.clock()

    def fresh_frame(self, cancel: threading.Event | None = None) -> Frame:
        """The newest frame decoded after the last motion settled and at most ``max_age_s`` old;
        waits up to ``max_age_s`` for one, else raises :class:`PerceptionError` with the reason."""
        start = self.clock()
        not_before = self.moved_at + self.settle_s
        while True:
            now = self.clock()
            f = self.frames()
            if f is not None and f.stamp >= not_before and now - f.stamp <= self.max_age_s:
                return f
            if cancel is not None and cancel.is_set():
                raise PerceptionError("cancelled while waiting for a camera frame")
            if now - start > self.max_age_s + max(0.0, not_before - start):
                self.stale_refusals += 1
                if f is None:
                    raise PerceptionError(f"{self.robot_id}: no camera frame received: the video stream "
                                          "is not running")
                raise PerceptionError(f"{self.robot_id}: no camera frame newer than {self.max_age_s:g} s "
                                      f"(last one {now - f.stamp:.1f} s old): the video stream stopped")
            time.sleep(self.poll_s)

    def detect(self, cancel: threading.Event | None = None) -> tuple[Frame, list[Detection]]:
        """Detections on a fresh frame (the detector runs once per frame)."""
        frame = self.fresh_frame(cancel)
        with self._lock:
            if self._cache is not None and self._cache[0] == frame.seq:
                return frame, self._cache[1]
        t0 = time.perf_counter()
        by_frame = getattr(self.detector, "detect_frame", None)  # a FrameDetector answers for the stamped frame
        raw = by_frame(frame, cancel) if by_frame is not None else self.detector.detect(frame.image)
        found = [d for d in raw if d.score >= self.min_score]
        ms = (time.perf_counter() - t0) * 1000.0
        with self._lock:
            self._cache = (frame.seq, found)
            self.detect_ms.append(ms)
            del self.detect_ms[:-2000]
        for listener in list(self.listeners):
            try:
                listener(frame, found)
            except Exception:  # noqa: BLE001 - a broken publisher must not fail the skill
                log.exception("%s: perception listener failed", self.robot_id)
        return frame, found

    def best(self, label: str, cancel: threading.Event | None = None) -> Detection | None:
        """The highest-scoring detection of ``label`` on a fresh frame (None: not in view)."""
        _f, found = self.detect(cancel)
        hits = [d for d in found if d.label == label]
        return max(hits, key=lambda d: d.score) if hits else None


def bearing_deg(det: Detection) -> float:
    """Degrees to turn clockwise to face a detection (pinhole camera, horizontal field of view)."""
    x = det.box[0] - 0.5
    return math.degrees(math.atan(2.0 * x * math.tan(math.radians(H_FOV_DEG / 2))))


def distance_cm(det: Detection, height_cm: float | None) -> float:
    """Monocular distance to a detected object (cm), -1 when it cannot be estimated.

    Ground plane first: with the camera level at a measured ``height_cm`` above the floor and the
    box's bottom edge ``a`` degrees below the optical axis, an object standing on the floor is
    ``height / tan(a)`` away (horizontally). Else the class's typical height: an object that fills
    ``h`` of the image's height is ``H / (2 tan(h * V_FOV / 2))`` away."""
    cx, cy, w, h = det.box
    bottom = cy + h / 2
    if height_cm is not None and height_cm > 0 and bottom < 0.995:  # a box cut by the edge: no bottom
        below = math.atan((2.0 * bottom - 1.0) * math.tan(math.radians(V_FOV_DEG / 2)))
        if below > math.radians(2.0):
            return round(height_cm / math.tan(below), 1)
    typical = TYPICAL_HEIGHT_CM.get(det.label)
    if typical is not None and h > 0:
        half = math.atan(h * math.tan(math.radians(V_FOV_DEG / 2)))
        return round(typical / (2.0 * math.tan(half)), 1)
    return -1.0
