"""Where an arm's objects are: declared object sources (ROS-free).

An arm skill that names an object (``pick``, ``place``, ``push``, ``wipe``, ``look``) asks the
robot's :class:`ObjectSource` for its position, in mm in the robot's base frame. The source is
declared per robot in the fleet YAML (``robots[].perception``) and built by
:func:`object_source`:

* ``{source: map, objects: {apple: [400, 0, 60], bowl: [300, -200, 40]}}``: a
  :class:`WorkspaceMap`, a fixed cell whose objects sit at known places. It follows what the arm
  does (``follow``): a picked object is in the gripper, a placed or pushed one is where the arm
  left it.
* ``{source: topic, topic: indy_1/detections_3d, camera_to_base: [x, y, z, roll, pitch, yaw],
  max_age_s: 2.0}``: a :class:`DetectionsSource`, fed with 3D detections by the adapter's ROS
  node (:meth:`DetectionsSource.update`); positions arrive in the camera frame and are moved to
  the base frame with the fixed ``camera_to_base`` transform; a position older than
  ``max_age_s`` is not answered.
* ``{source: scene}``: a :class:`SceneSource` over the simulator's
  :class:`~robot_adapters.scene.Scene` (simulated arms only).

A source that cannot answer raises :class:`~robot_adapters.perception.types.PerceptionError`
with one sentence saying why; it never guesses.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from robot_adapters.perception.types import Detection, PerceptionError

Position = tuple[float, float, float]

#: values of ``perception.source`` an arm can use (``none``: the arm perceives nothing)
ARM_SOURCES = ("map", "topic", "scene", "none")
DEFAULT_MAX_AGE_S = 2.0
_KEYS = {"map": ("source", "objects"), "topic": ("source", "topic", "camera_to_base", "max_age_s"),
         "scene": ("source",)}


class SourceSilent(PerceptionError):
    """The source as a whole has nothing recent (e.g. no message on its topic in ``max_age_s``):
    no object's absence can be concluded from it."""


@runtime_checkable
class ObjectSource(Protocol):
    """Positions of named objects, mm in the robot's base frame.

    ``position`` raises :class:`PerceptionError` (one sentence) when the object is unknown or its
    last observation is too old. A source may also have ``follow(name, position)``, told what the
    arm did to an object (``position`` None: it is in the gripper now); sources that observe the
    world do not need it."""

    def position(self, name: str) -> Position: ...

    def names(self) -> tuple[str, ...]: ...

    def describe(self) -> str: ...


def _xyz(value: Any, what: str) -> Position:
    """Three finite numbers as a float triple, else ValueError naming ``what``."""
    ok = isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    if not ok:
        raise ValueError(f"{what} must be 3 numbers [x, y, z] in mm, got {value!r}")
    return (float(value[0]), float(value[1]), float(value[2]))


def _fmt(p: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:g}" for v in p) + ")"


class WorkspaceMap:
    """Named positions of a fixed cell (mm, base frame) that follow what the arm did.

    Bookkeeping, all of it: ``follow(name, None)`` when the arm grasped ``name`` (it is in the
    gripper: :meth:`position` refuses it, the executor knows it holds it), ``follow(name, pos)``
    when the arm released or pushed it at ``pos``."""

    def __init__(self, objects: Mapping[str, Sequence[float]]) -> None:
        self._pos: dict[str, Position] = {str(n): _xyz(p, f"the position of '{n}'") for n, p in objects.items()}
        self._in_gripper: str | None = None
        self._lock = threading.Lock()

    def position(self, name: str) -> Position:
        with self._lock:
            if name == self._in_gripper:
                raise PerceptionError(f"'{name}' is in the gripper, not in the workspace")
            p = self._pos.get(name)
            if p is None:
                known = ", ".join(sorted(self._pos)) or "none"
                raise PerceptionError(f"'{name}' not found in the workspace map (known: {known})")
            return p

    def names(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(sorted(self._pos))

    def describe(self) -> str:
        return f"workspace map ({len(self._pos)} objects)"

    def follow(self, name: str, position: Sequence[float] | None) -> None:
        with self._lock:
            if position is None:
                self._in_gripper = name
            else:
                self._pos[name] = _xyz(list(position), f"the new position of '{name}'")
                if self._in_gripper == name:
                    self._in_gripper = None


def camera_to_base_matrix(pose: Sequence[float]) -> np.ndarray:
    """The 4x4 homogeneous transform T with ``p_base = T @ [p_camera, 1]``.

    ``pose`` = [x, y, z, roll, pitch, yaw]: the camera frame's origin in the base frame (mm) and
    its orientation as fixed-axis roll about x, then pitch about y, then yaw about z (degrees),
    the URDF ``<origin xyz rpy>`` / ROS RPY convention: ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``.
    (``ros2 run tf2_ros static_transform_publisher`` takes the same angles in the order yaw pitch
    roll.) T = [[R, t], [0 0 0 1]], so ``p_base = R @ p_camera + t``."""
    if len(pose) != 6:
        raise ValueError(f"camera_to_base must be 6 numbers [x, y, z, roll, pitch, yaw], got {list(pose)!r}")
    x, y, z = (float(v) for v in pose[:3])
    r, p, w = (math.radians(float(v)) for v in pose[3:])
    rx = np.array([[1, 0, 0], [0, math.cos(r), -math.sin(r)], [0, math.sin(r), math.cos(r)]])
    ry = np.array([[math.cos(p), 0, math.sin(p)], [0, 1, 0], [-math.sin(p), 0, math.cos(p)]])
    rz = np.array([[math.cos(w), -math.sin(w), 0], [math.sin(w), math.cos(w), 0], [0, 0, 1]])
    t = np.eye(4)
    t[:3, :3] = rz @ ry @ rx
    t[:3, 3] = (x, y, z)
    return t


class DetectionsSource:
    """3D detections of a topic, moved from the camera frame to the base frame.

    The adapter's ROS node subscribes to ``topic`` and calls :meth:`update` with each message's
    detections and the time it received them (``time.monotonic()``, the clock of ``clock``; not
    the message header's ROS time). Each detection's ``position`` is in the camera frame (mm);
    detections without one are ignored. :meth:`position` answers from the newest detection of
    the name (highest score within a message) if it is at most ``max_age_s`` old."""

    def __init__(self, topic: str, camera_to_base: Sequence[float] = (0, 0, 0, 0, 0, 0), *,
                 max_age_s: float = DEFAULT_MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not (isinstance(max_age_s, (int, float)) and max_age_s > 0):
            raise ValueError(f"max_age_s must be a number > 0 (seconds), got {max_age_s!r}")
        self.topic = topic
        self.max_age_s = float(max_age_s)
        self.transform = camera_to_base_matrix(camera_to_base)
        self._clock = clock
        self._seen: dict[str, tuple[Position, float]] = {}  # label -> (base-frame position, stamp)
        self._labels: dict[str, float] = {}  # label -> stamp of the newest message detecting it, with or without a position
        self._last_message: float | None = None
        self._lock = threading.Lock()

    def to_base(self, p_camera: Sequence[float]) -> Position:
        v = self.transform @ np.array([float(p_camera[0]), float(p_camera[1]), float(p_camera[2]), 1.0])
        return (float(v[0]), float(v[1]), float(v[2]))

    def update(self, detections: Sequence[Detection], stamp: float) -> None:
        best: dict[str, Detection] = {}
        for d in detections:
            if d.position is not None and (d.label not in best or d.score > best[d.label].score):
                best[d.label] = d
        moved = {label: (self.to_base(d.position), float(stamp)) for label, d in best.items()}  # type: ignore[arg-type]
        with self._lock:
            if self._last_message is None or stamp >= self._last_message:
                self._last_message = float(stamp)
            for label in {d.label for d in detections}:
                if stamp >= self._labels.get(label, -math.inf):
                    self._labels[label] = float(stamp)
            for label, (pos, t) in moved.items():
                if label not in self._seen or t >= self._seen[label][1]:
                    self._seen[label] = (pos, t)

    def position(self, name: str) -> Position:
        now = self._clock()
        with self._lock:
            seen, last = self._seen.get(name), self._last_message
        if seen is not None and now - seen[1] <= self.max_age_s:
            return seen[0]
        why = f"no detection of '{name}' in the last {self.max_age_s} s on {self.topic}"
        silence = self._silence(now, last)
        if silence:
            raise SourceSilent(f"{why} {silence}")
        raise PerceptionError(why)

    def _silence(self, now: float, last: float | None) -> str:
        """Why nothing can be concluded from the topic (no message in ``max_age_s``), or ""."""
        if last is None:
            return "(no message on it yet: is the detector running?)"
        if now - last > self.max_age_s:
            return f"(its last message is {now - last:.1f} s old: is the detector running?)"
        return ""

    def sees(self, name: str) -> bool:
        """Whether the newest message detected ``name``, with a position or without (a base's
        ``is_visible``: in view now); :class:`SourceSilent` when no message came in the last
        ``max_age_s`` (nothing can be concluded)."""
        now = self._clock()
        with self._lock:
            seen, last = self._labels.get(name), self._last_message
        silence = self._silence(now, last)
        if silence:
            raise SourceSilent(f"no detections on {self.topic} in the last {self.max_age_s} s {silence}")
        return seen is not None and seen >= last  # type: ignore[operator]

    def wait_newer(self, after: float, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) for a message received after ``after`` (this source's
        clock): what is seen once a motion has ended."""
        deadline = self._clock() + timeout_s
        while True:
            with self._lock:
                last = self._last_message
            if last is not None and last > after:
                return True
            if self._clock() >= deadline:
                return False
            time.sleep(0.02)

    def names(self) -> tuple[str, ...]:
        now = self._clock()
        with self._lock:
            return tuple(sorted(n for n, (_p, t) in self._seen.items() if now - t <= self.max_age_s))

    def describe(self) -> str:
        return f"detections on {self.topic} ({len(self.names())} objects seen in the last {self.max_age_s} s)"


class SceneSource:
    """The simulator's scene (:class:`robot_adapters.scene.Scene`), for simulated arms only.

    The fake arm (``FakeIndy``) carries what its gripper holds in the same scene, so only a push,
    which the fake arm does not model, is written back here."""

    def __init__(self, scene: Any) -> None:
        self.scene = scene

    def position(self, name: str) -> Position:
        p = self.scene.position(name)
        if p is None:
            raise PerceptionError(f"'{name}' not found in the simulated scene")
        return (float(p[0]), float(p[1]), float(p[2]))

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.scene.objects))

    def describe(self) -> str:
        return f"simulated scene ({len(self.scene.objects)} objects)"

    def follow(self, name: str, position: Sequence[float] | None) -> None:
        if position is not None and self.scene.held != name:
            self.scene.move_object(name, [float(v) for v in position])


def object_source(spec: Mapping[str, Any], *, scene: Any = None) -> ObjectSource:
    """The object source a robot's YAML ``perception:`` mapping declares (see the module doc).

    ``scene``: the simulator's scene, required by ``source: scene``. Raises ValueError (one
    sentence) for a spec it cannot build."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"perception must be a mapping such as {{source: map, objects: {{...}}}}, got {spec!r}")
    source = spec.get("source")
    if source not in _KEYS:
        hint = " (an arm needs 3D positions: use map or topic)" if source == "camera" else ""
        raise ValueError(f"perception.source must be one of map, topic, scene for an arm, got {source!r}{hint}")
    for key in spec:
        if key not in _KEYS[source]:
            raise ValueError(f"perception: unknown key '{key}' for source {source} "
                             f"(known: {', '.join(_KEYS[source])})")
    if source == "map":
        objects = spec.get("objects")
        if not isinstance(objects, Mapping) or not objects:
            raise ValueError("perception source map needs 'objects': a mapping of names to [x, y, z] in mm, "
                             f"e.g. {{apple: [400, 0, 60]}}, got {objects!r}")
        return WorkspaceMap({n: _xyz(p, f"perception.objects.{n}") for n, p in objects.items()})
    if source == "topic":
        topic = spec.get("topic")
        if not isinstance(topic, str) or not topic.strip():
            raise ValueError(f"perception source topic needs 'topic': the detections topic name, got {topic!r}")
        pose = spec.get("camera_to_base", (0, 0, 0, 0, 0, 0))
        if not (isinstance(pose, (list, tuple)) and len(pose) == 6 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in pose)):
            raise ValueError("perception.camera_to_base must be 6 numbers [x, y, z, roll, pitch, yaw] "
                             f"(mm, degrees), got {pose!r}")
        age = spec.get("max_age_s", DEFAULT_MAX_AGE_S)
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not age > 0 or not math.isfinite(age):
            raise ValueError(f"perception.max_age_s must be a number > 0 (seconds), got {age!r}")
        return DetectionsSource(topic.strip(), pose, max_age_s=float(age))
    if scene is None:
        raise ValueError("perception source scene is for simulated arms only (adapter indy-sim): "
                         "a real arm needs source map or topic")
    return SceneSource(scene)


__all__ = ["ARM_SOURCES", "DetectionsSource", "ObjectSource", "SceneSource", "SourceSilent", "WorkspaceMap",
           "camera_to_base_matrix", "object_source"]
