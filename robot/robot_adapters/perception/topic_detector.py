"""A drone's detections from the team's own detector node, matched to the image by its stamp (ROS-free).

The usual ROS practice: a detector node subscribes to a camera's images and publishes, for each
image, its detections with the image's ``header`` (``vision_msgs`` detectors echo it). Declared
as ``perception: {detector: topic, topic: ..., classes: [...], timeout_s: ...}``, such a node is
this drone's detector: when a perception skill needs detections on a fresh frame,
:meth:`TopicDetector.detect_frame` has the frame published on ``<robot>/camera/image_raw``
(``publish``, wired by :mod:`robot_adapters.robot_topics`, returns the image's header stamp)
and waits up to ``timeout_s`` for the answer whose ``header.stamp`` equals it exactly
(:meth:`TopicDetector.answer`, fed by the same module from the detections topic).

An answer is never taken from another image: answers whose stamp is not the frame's are not
used, and no matching answer in time fails the skill with one sentence naming the topic and what
to check. ``classes`` are declared in the YAML because the plan grammar's objects come from them
before any answer arrives.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Sequence

from robot_adapters.perception.types import Detection, Frame, PerceptionError

#: a ROS time as (sec, nanosec): ``header.stamp`` of an image and of its answer, compared exactly
Stamp = tuple[int, int]

DEFAULT_TIMEOUT_S = 1.0
#: images whose answers are still awaited or kept (the newest ones sent)
KEEP_IMAGES = 32


def class_name(label: str) -> str:
    """A detector label as the drone's class name: lower case, words joined by ``_`` ("Teddy bear"
    -> teddy_bear), the form plan objects and COCO's labels use."""
    return "_".join(str(label).strip().lower().split())


def stamp_text(stamp: Stamp) -> str:
    return f"{stamp[0]}.{stamp[1]:09d}"


class TopicDetector:
    """A detector node on ROS topics, seen from the adapter (the ``Detector`` interface plus
    :meth:`detect_frame`, which :class:`~robot_adapters.perception.camera.CameraPerception` calls
    with the stamped frame).

    ``publish(frame) -> stamp`` is set by the adapter's ROS node: it sends the frame's image
    (once per frame) and returns its header stamp, after calling :meth:`sent`. ``clock`` and
    ``poll_s`` pace the wait (injectable for tests)."""

    def __init__(self, robot_id: str, topic: str, classes: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 image_topic: str | None = None, clock: Callable[[], float] = time.monotonic,
                 poll_s: float = 0.05) -> None:
        self.classes = tuple(dict.fromkeys(c for c in (class_name(x) for x in classes) if c))
        if not self.classes:
            raise ValueError("a detector node needs its classes declared (perception.classes: [cat, person, ...])")
        if not timeout_s > 0:
            raise ValueError(f"perception.timeout_s must be a number > 0 (seconds), got {timeout_s!r}")
        self.robot_id = robot_id
        self.topic = topic
        self.image_topic = image_topic or f"{robot_id}/camera/image_raw"
        self.name = f"detector node on {topic}"
        self.timeout_s = float(timeout_s)
        self.clock = clock
        self.poll_s = float(poll_s)
        self.publish: Callable[[Frame], Stamp] | None = None
        self.received = 0  # answers received on the topic
        self.unmatched = 0  # answers whose stamp is no image this robot sent (recently)
        self._images: OrderedDict[Stamp, tuple[int, int]] = OrderedDict()  # stamp -> (width, height) sent
        self._answers: dict[Stamp, list[Detection]] = {}
        self._cond = threading.Condition()
        self._own_seq = itertools.count(-1, -1)  # frames made by detect(image): never a camera's seq

    # -- the ROS edge's side ----------------------------------------------------------------------

    def sent(self, stamp: Stamp, size: tuple[int, int]) -> None:
        """An image of ``size`` (width, height) goes out with header ``stamp``: its answer will count."""
        with self._cond:
            self._images[stamp] = (int(size[0]), int(size[1]))
            self._images.move_to_end(stamp)
            while len(self._images) > KEEP_IMAGES:
                old, _ = self._images.popitem(last=False)
                self._answers.pop(old, None)

    def image_size(self, stamp: Stamp) -> tuple[int, int] | None:
        """(width, height) of the image sent with ``stamp`` (None: not one of ours)."""
        with self._cond:
            return self._images.get(stamp)

    def answer(self, stamp: Stamp, detections: Sequence[Detection]) -> bool:
        """The detector node's answer for the image stamped ``stamp`` (boxes normalised to it).
        The first answer for an image sent counts; any other is not used. Returns whether it counts."""
        found = [dataclasses.replace(d, label=class_name(d.label)) for d in detections]
        with self._cond:
            self.received += 1
            if stamp not in self._images or stamp in self._answers:
                self.unmatched += stamp not in self._images
                return False
            self._answers[stamp] = found
            self._cond.notify_all()
            return True

    # -- the perception's side --------------------------------------------------------------------

    def detect_frame(self, frame: Frame, cancel: threading.Event | None = None) -> list[Detection]:
        """The detector node's answer for ``frame``: published, then awaited up to ``timeout_s``
        by its stamp; raises :class:`PerceptionError` (one sentence) when none comes."""
        publish = self.publish
        if publish is None:
            raise PerceptionError(f"{self.robot_id}: its detections come from the detector node on {self.topic}, "
                                  "but no adapter node publishes its camera images (run it in `timely-fleet up` "
                                  "or an adapter node)")
        with self._cond:
            before = self.received
        stamp = publish(frame)
        deadline = self.clock() + self.timeout_s
        with self._cond:
            while stamp not in self._answers:
                if cancel is not None and cancel.is_set():
                    raise PerceptionError(f"cancelled while waiting for detections on {self.topic}")
                left = deadline - self.clock()
                if left <= 0:
                    others = self.received - before
                    seen = f" ({others} answer(s) came, none with this image's stamp)" if others else ""
                    raise PerceptionError(
                        f"{self.robot_id}: no detections for its camera image stamped {stamp_text(stamp)} came on "
                        f"{self.topic} within {self.timeout_s:g} s{seen}: check that the detector node is running, "
                        f"subscribes to {self.image_topic} and publishes timely_fleet/DetectionArray on {self.topic} "
                        "with the image's header.stamp")
                self._cond.wait(min(left, self.poll_s))
            return list(self._answers[stamp])

    def detect(self, image: Any) -> list[Detection]:
        """The ``Detector`` interface: ``image`` sent as a new frame stamped now, its answer awaited."""
        return self.detect_frame(Frame(image, time.monotonic(), next(self._own_seq)))


__all__ = ["DEFAULT_TIMEOUT_S", "Stamp", "TopicDetector", "class_name"]
