"""Scene model that answers perception skills in simulation.

A scene holds named objects with positions (drone scenes in cm, x forward / y right / z up from
the take-off point; arm scenes in mm in the robot base frame) and the robot's pose. The drone
perception skills of MiniSpec (``is_visible``, ``object_x/y/width/height/dis``, ``probe``) are
answered geometrically from the drone's pose and a pinhole camera with the Tello's field of view
(82.6 degrees diagonal; ~70 degrees horizontal used here); the arm adapter reads object poses
for ``pick``/``place``/``look`` from the same model and moves objects it carries.

Scenes load from plain dicts (``Scene.from_dict``), so tests and demos describe them inline or
in YAML/JSON: ``{"objects": {"cat": {"pos": [300, 50, 30], "size": [40, 30]}}, "answers": {...}}``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

H_FOV_DEG = 70.0
V_FOV_DEG = 55.0
MAX_RANGE_CM = 600.0


@dataclass
class SceneObject:
    name: str
    pos: list[float]  # x, y, z
    size: tuple[float, float] = (30.0, 30.0)  # width, height (scene units)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scene:
    objects: dict[str, SceneObject] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)  # probe question -> answer
    pose: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # x, y, z, yaw(deg)
    held: str | None = None  # object held by an arm gripper
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Scene":
        objs = {}
        for name, o in (d.get("objects") or {}).items():
            objs[name] = SceneObject(name, [float(v) for v in o["pos"]],
                                     tuple(float(v) for v in o.get("size", (30.0, 30.0))),  # type: ignore[arg-type]
                                     dict(o.get("attrs", {})))
        pose = [float(v) for v in d.get("pose", (0.0, 0.0, 0.0, 0.0))]
        return cls(objs, dict(d.get("answers") or {}), pose)

    # --------------------------------------------------------------------- drone perception
    def set_pose(self, x: float, y: float, z: float, yaw: float) -> None:
        with self._lock:
            self.pose = [float(x), float(y), float(z), float(yaw)]

    def _rel(self, name: str):
        o = self.objects.get(name)
        if o is None:
            return None
        x, y, z, yaw = self.pose
        dx, dy, dz = o.pos[0] - x, o.pos[1] - y, o.pos[2] - z
        dist = math.sqrt(dx * dx + dy * dy + dz * dz)
        bearing = math.degrees(math.atan2(dy, dx)) - yaw  # positive = to the right
        bearing = (bearing + 180.0) % 360.0 - 180.0
        elev = math.degrees(math.atan2(dz, max(math.hypot(dx, dy), 1e-6)))
        return o, dist, bearing, elev

    def is_visible(self, name: str) -> bool:
        with self._lock:
            r = self._rel(name)
            if r is None:
                return False
            _o, dist, bearing, elev = r
            return dist <= MAX_RANGE_CM and abs(bearing) <= H_FOV_DEG / 2 and abs(elev) <= V_FOV_DEG / 2

    def object_x(self, name: str) -> float:
        """Horizontal image position of the object's centre, 0 (left) .. 1 (right); -1 if not visible."""
        with self._lock:
            if not self.is_visible(name):
                return -1.0
            return round(0.5 + self._rel(name)[2] / H_FOV_DEG, 3)  # type: ignore[index]

    def object_y(self, name: str) -> float:
        with self._lock:
            if not self.is_visible(name):
                return -1.0
            return round(0.5 - self._rel(name)[3] / V_FOV_DEG, 3)  # type: ignore[index]

    def _apparent(self, name: str, i: int, fov: float) -> float:
        with self._lock:
            if not self.is_visible(name):
                return -1.0
            o, dist, _b, _e = self._rel(name)  # type: ignore[misc]
            return round(min(1.0, math.degrees(2 * math.atan2(o.size[i] / 2, max(dist, 1.0))) / fov), 3)

    def object_width(self, name: str) -> float:
        return self._apparent(name, 0, H_FOV_DEG)

    def object_height(self, name: str) -> float:
        return self._apparent(name, 1, V_FOV_DEG)

    def object_dis(self, name: str) -> float:
        with self._lock:
            if not self.is_visible(name):
                return -1.0
            return round(self._rel(name)[1], 1)  # type: ignore[index]

    def probe(self, question: str) -> str:
        q = question.strip().lower()
        for k, v in self.answers.items():
            if k.lower() in q:
                return v
        return "unknown"

    def bearing_to(self, name: str) -> float | None:
        """Degrees the drone must turn clockwise to face the object (None if unknown)."""
        with self._lock:
            r = self._rel(name)
            return None if r is None else r[2]

    # ----------------------------------------------------------------------- arm helpers
    def position(self, name: str) -> list[float] | None:
        with self._lock:
            o = self.objects.get(name)
            return None if o is None else list(o.pos)

    def move_object(self, name: str, pos: list[float]) -> None:
        with self._lock:
            if name in self.objects:
                self.objects[name].pos = [float(v) for v in pos]
