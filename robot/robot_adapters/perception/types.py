"""What a robot perceives: frames, detections and the ports that produce them.

Perception is a port of the robot, never a guess: every answer of a perception skill comes from
a declared source (the robot's camera through a :class:`Detector`, a ROS topic of detections, a
workspace map) and carries the time it was observed, so a stale or missing source fails the skill
instead of answering from an old or made-up scene.

Coordinates follow ``vision_msgs`` where they can: a 2D box is its centre and size, here
normalised to the image (0..1, x to the right, y down), so answers do not depend on the camera's
resolution; a 3D position is in the robot's base frame (arms: mm).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable


class PerceptionError(RuntimeError):
    """A perception source cannot answer now (stale or missing frame, no source, no endpoint)."""


@dataclass(frozen=True)
class Detection:
    """One detected object (``vision_msgs/Detection2D``-shaped: class, score, box; a 3D
    ``position`` when the source knows it)."""

    label: str
    score: float
    #: box centre x, centre y, width, height, normalised to the image (0..1)
    box: tuple[float, float, float, float] = (0.5, 0.5, 0.0, 0.0)
    #: position in the robot's base frame (arms: mm), or None for image-only detections
    position: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Frame:
    """A decoded camera image, stamped when this process received it."""

    image: Any  # numpy uint8 array, H x W x 3, RGB
    stamp: float  # time.monotonic() when the frame was decoded here
    seq: int  # increases by one per decoded frame


@runtime_checkable
class Detector(Protocol):
    """An object detector: an RGB image in, detections out (normalised boxes).

    ``classes`` are the labels it can ever report (the plan grammar's objects come from them);
    ``name`` says which model and weights it is (reported by ``bench perception``)."""

    name: str
    classes: tuple[str, ...]

    def detect(self, image: Any) -> Sequence[Detection]: ...


@runtime_checkable
class FrameDetector(Detector, Protocol):
    """A detector that answers for a stamped frame, not only its pixels (a detector node on ROS
    topics answers an image by its stamp); it may wait, and stops waiting when ``cancel`` is set.
    :class:`~robot_adapters.perception.camera.CameraPerception` calls ``detect_frame`` when a
    detector has it, ``detect(frame.image)`` otherwise."""

    def detect_frame(self, frame: Frame, cancel: threading.Event | None = None) -> Sequence[Detection]: ...
