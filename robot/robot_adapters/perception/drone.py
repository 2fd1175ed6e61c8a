"""A drone's perception port: what MiniSpec's perception skills ask, answered by one source.

``TelloExecutor`` asks its port ``is_visible``, ``object_x/y/width/height/dis``, ``bearing_to``
and ``probe``; the port is one of

* :class:`CameraDronePerception`: the drone's own camera through a detector (a real Tello, and
  the Tello SDK simulator, which streams rendered H.264 video as a real one does);
* :class:`ScenePerception`: the simulated scene, only for simulated drones (``adapter: sim``) and
  unit tests of plan execution;
* :class:`NoPerception`: nothing declared: every perception skill fails with that reason.

A port that cannot answer now (stale frame, no stream, no vision-language endpoint) raises
:class:`~robot_adapters.perception.types.PerceptionError`, which fails the skill: an answer is
never made up.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from robot_adapters.perception.camera import CameraPerception, bearing_deg, distance_cm
from robot_adapters.perception.types import PerceptionError


class DronePerception(Protocol):
    source: str  # what answers, for logs and results ("camera (coco-ssd)", "simulated scene")

    def is_visible(self, obj: str, cancel: threading.Event | None = None) -> bool: ...
    def object_x(self, obj: str, cancel: threading.Event | None = None) -> float: ...
    def object_y(self, obj: str, cancel: threading.Event | None = None) -> float: ...
    def object_width(self, obj: str, cancel: threading.Event | None = None) -> float: ...
    def object_height(self, obj: str, cancel: threading.Event | None = None) -> float: ...
    def object_dis(self, obj: str, cancel: threading.Event | None = None) -> float: ...
    def bearing_to(self, obj: str, cancel: threading.Event | None = None) -> float | None: ...
    def probe(self, question: str, cancel: threading.Event | None = None) -> str: ...
    def moved(self, pose: list[float]) -> None: ...


class NoPerception:
    """A drone with no perception source: every perception skill fails, saying so."""

    source = "none"

    def __init__(self, robot: str) -> None:
        self.robot = robot

    def _fail(self, *_a: Any, **_kw: Any) -> Any:
        raise PerceptionError(f"{self.robot} has no perception source (set perception.source: camera "
                              "in the fleet YAML)")

    is_visible = object_x = object_y = object_width = object_height = object_dis = bearing_to = probe = _fail

    def moved(self, pose: list[float]) -> None:
        pass


class ScenePerception:
    """The simulated scene answers (simulators and unit tests only); the scene follows the pose."""

    source = "simulated scene"

    def __init__(self, scene: Any) -> None:
        self.scene = scene

    def is_visible(self, obj: str, cancel: threading.Event | None = None) -> bool:
        return self.scene.is_visible(obj)

    def object_x(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self.scene.object_x(obj)

    def object_y(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self.scene.object_y(obj)

    def object_width(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self.scene.object_width(obj)

    def object_height(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self.scene.object_height(obj)

    def object_dis(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self.scene.object_dis(obj)

    def bearing_to(self, obj: str, cancel: threading.Event | None = None) -> float | None:
        return self.scene.bearing_to(obj)

    def probe(self, question: str, cancel: threading.Event | None = None) -> str:
        return self.scene.probe(question)

    def moved(self, pose: list[float]) -> None:
        self.scene.set_pose(*pose)


class CameraDronePerception:
    """Answers from detections on the drone's newest camera frame.

    Boxes are normalised (0..1): ``object_x/y`` are the box centre, ``object_width/height`` its
    size, -1 when the object is not in view (MiniSpec's convention); ``object_dis`` is a monocular
    estimate from the measured height (:func:`~robot_adapters.perception.camera.distance_cm`);
    ``bearing_to`` is None when the object is not in view (the drone cannot know where it is).
    ``probe`` asks the vision-language endpoint about the frame, if one is configured."""

    def __init__(self, camera: CameraPerception, *, height_cm: Callable[[], float | None] = lambda: None,
                 vlm: Any = None) -> None:
        self.camera = camera
        self.height_cm = height_cm
        self.vlm = vlm
        self.source = f"camera ({camera.detector.name})"

    def _label(self, obj: str) -> str:
        """The detector's class for a plan's object name ("kitty" -> cat); an object the detector
        has no class for fails the skill: "not in view" would be a guess, not an observation."""
        from timely_robot.perceivable import SYNONYMS

        classes = self.camera.classes
        name = obj.strip().lower().replace(" ", "_")
        for cand in (name, SYNONYMS.get(name, ""), name[:-1] if name.endswith("s") else ""):
            if cand and cand in classes:
                return cand
        raise PerceptionError(f"{self.camera.robot_id} cannot perceive '{obj[:64]}': its detector "
                              f"({self.camera.detector.name}) has no such class")

    def _best(self, obj: str, cancel: threading.Event | None) -> Any:
        return self.camera.best(self._label(obj), cancel)

    def _box(self, obj: str, i: int, cancel: threading.Event | None) -> float:
        d = self._best(obj, cancel)
        return -1.0 if d is None else round(float(d.box[i]), 3)

    def is_visible(self, obj: str, cancel: threading.Event | None = None) -> bool:
        return self._best(obj, cancel) is not None

    def object_x(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self._box(obj, 0, cancel)

    def object_y(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self._box(obj, 1, cancel)

    def object_width(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self._box(obj, 2, cancel)

    def object_height(self, obj: str, cancel: threading.Event | None = None) -> float:
        return self._box(obj, 3, cancel)

    def object_dis(self, obj: str, cancel: threading.Event | None = None) -> float:
        d = self._best(obj, cancel)
        return -1.0 if d is None else distance_cm(d, self.height_cm())

    def bearing_to(self, obj: str, cancel: threading.Event | None = None) -> float | None:
        d = self._best(obj, cancel)
        return None if d is None else bearing_deg(d)

    def probe(self, question: str, cancel: threading.Event | None = None) -> str:
        if self.vlm is None:
            raise PerceptionError(f"{self.camera.robot_id}: probe needs a vision-language endpoint (set "
                                  "perception.vlm: {url: ..., model: ...} in the fleet YAML)")
        frame = self.camera.fresh_frame(cancel)
        return self.vlm.ask(frame.image, question)

    def moved(self, pose: list[float]) -> None:
        self.camera.motion_ended()
