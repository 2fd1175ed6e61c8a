"""Tello drone skills executed with the real ``djitellopy.Tello`` client.

MiniSpec skills map to Tello SDK 2.0 commands (``takeoff``, ``land``, ``forward x``, ``cw x``
...). Commands go through ``send_control_command(cmd, timeout)`` with a timeout sized from the
execution-time model (3 x predicted + 5 s) instead of djitellopy's fixed 7 s, and the client
is created with ``retry_count=1``: djitellopy re-sends a command whose reply is late or an
error, and a re-sent ``forward 100`` would fly another metre. High-level skills are built
from the primitives: ``scan`` turns 30 degrees at a time until the scene shows the object
(at most 11 turns), ``orienting`` turns towards it, ``approach`` flies 100 cm forward, ``goto``
is orienting + approach. Perception skills (``is_visible``, ``object_x`` ... ``probe``) are
answered by the scene model, whose drone pose this executor updates after every motion.

``client_factory`` builds the Tello client; tests pass one that creates it inside the client
network namespace (see ``robot_adapters.netns``).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

from llm_planner_node.core.execution_time import ExecutionTimeModel
from llm_planner_node.core.skills import TELLO_MINISPEC, SkillCall

from robot_adapters.executor import SkillCancelled, SkillExecutionError, SkillExecutor, sleep_cancellable
from robot_adapters.scene import Scene

MOVE_CMD = {"move_forward": "forward", "move_backward": "back", "move_left": "left",
            "move_right": "right", "move_up": "up", "move_down": "down"}
TURN_CMD = {"turn_cw": "cw", "turn_ccw": "ccw"}
PERCEPTION = ("is_visible", "object_x", "object_y", "object_width", "object_height", "object_dis", "probe")


#: Skills that move the drone (auto take-off before the first of them).
MOTION_SKILLS = frozenset({*MOVE_CMD, *TURN_CMD, "scan", "scan_abstract", "orienting", "approach", "goto"})


class TelloExecutor(SkillExecutor):
    robot_kind = "drone"
    skill_set = TELLO_MINISPEC
    #: the scene pose follows every motion it executed (the adapter's geofence reads it)
    tracks_pose = True

    def __init__(self, host: str, scene: Scene | None = None, *,
                 client_factory: Callable[[], Any] | None = None,
                 model: ExecutionTimeModel | None = None, time_scale: float = 1.0,
                 auto_takeoff: bool = True) -> None:
        self.host = host
        # TypeFly-style plans assume an airborne drone: take off before the first motion.
        self.auto_takeoff = auto_takeoff
        self.flying = False
        self.scene = scene or Scene()
        self.client_factory = client_factory
        self.model = model or ExecutionTimeModel()
        self.time_scale = time_scale
        self.tello = None
        self.sent: list[str] = []
        self._lock = threading.Lock()

    def connect(self) -> None:
        from llm_planner_node.logging_setup import quiet_djitellopy

        if self.client_factory is not None:
            quiet_djitellopy()
            self.tello = self.client_factory()
        else:
            from djitellopy import Tello

            quiet_djitellopy()  # its import sets INFO: one log line per command sent
            self.tello = Tello(host=self.host, retry_count=1)
        try:
            self.tello.connect()
        except Exception as e:  # noqa: BLE001 - djitellopy raises TelloException / OSError
            raise SkillExecutionError(f"Tello at {self.host} not reachable: {e}") from None

    def close(self) -> None:
        if self.tello is not None:
            try:
                self.tello.end()
            except Exception:  # noqa: BLE001
                pass

    def stop(self) -> None:
        """Hover now: ``stop`` interrupts the current motion (its reply becomes an error)."""
        if self.tello is not None:
            try:
                self.tello.send_command_without_return("stop")
            except Exception:  # noqa: BLE001
                pass

    def halt(self) -> str:
        """Stop and hover (Tello SDK ``stop``); a drone on the ground stays there."""
        self.stop()
        return "stopped, hovering" if self.flying else "stopped, on the ground"

    # ------------------------------------------------------------------ primitives
    def _drop_replies(self) -> None:
        self.tello.get_own_udp_object()["responses"].clear()

    def _send(self, cmd: str, call: SkillCall, cancel: threading.Event) -> None:
        if cancel.is_set():
            raise SkillCancelled("cancelled")
        if self.tello is None:
            raise SkillExecutionError("drone not connected")
        worst = self.model.worst_case_calls("tello", "drone", [call])[0]  # a budget, not an estimate
        timeout = int(math.ceil((2.0 * worst + 5.0) * max(self.time_scale, 0.2)))
        self.sent.append(cmd)
        # djitellopy answers a command with the oldest reply waiting: one still there belongs to
        # an earlier command (a halt's 'stop' answers 'ok'), and would answer this one before the
        # drone moved
        self._drop_replies()
        resp = self.tello.send_command_with_return(cmd, timeout=timeout)
        if cancel.is_set():
            self._drop_replies()  # the 'ok' of the stop that interrupted us, if it came already
            raise SkillCancelled(f"cancelled during '{cmd}'")
        if "ok" not in str(resp).lower():
            raise SkillExecutionError(f"Tello refused '{cmd}': {resp}")

    def _move(self, name: str, d: int, cancel: threading.Event) -> None:
        call = SkillCall(name, (d,))
        self._send(f"{MOVE_CMD[name]} {d}", call, cancel)
        x, y, z, yaw = self.scene.pose
        rad = math.radians(yaw)
        fwd = {"move_forward": d, "move_backward": -d}.get(name, 0)
        side = {"move_right": d, "move_left": -d}.get(name, 0)
        dz = {"move_up": d, "move_down": -d}.get(name, 0)
        self.scene.set_pose(x + fwd * math.cos(rad) - side * math.sin(rad),
                            y + fwd * math.sin(rad) + side * math.cos(rad), z + dz, yaw)

    def _turn(self, name: str, deg: int, cancel: threading.Event) -> None:
        self._send(f"{TURN_CMD[name]} {deg}", SkillCall(name, (deg,)), cancel)
        x, y, z, yaw = self.scene.pose
        yaw = yaw + (deg if name == "turn_cw" else -deg)
        self.scene.set_pose(x, y, z, (yaw + 180.0) % 360.0 - 180.0)

    def _orient(self, obj: str, cancel: threading.Event) -> bool:
        b = self.scene.bearing_to(obj)
        if b is None:
            return False
        deg = int(round(abs(b)))
        if deg >= 5:
            self._turn("turn_cw" if b > 0 else "turn_ccw", min(deg, 360), cancel)
        return True

    # ------------------------------------------------------------------ skills
    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        n, a = call.name, call.args
        if self.auto_takeoff and not self.flying and n in MOTION_SKILLS:
            self.execute(SkillCall("takeoff"), cancel)
        if n in MOVE_CMD:
            self._move(n, int(a[0]), cancel)
        elif n in TURN_CMD:
            self._turn(n, int(a[0]), cancel)
        elif n == "takeoff":
            self._send("takeoff", call, cancel)
            self.flying = True
            x, y, _z, yaw = self.scene.pose
            self.scene.set_pose(x, y, 80.0, yaw)
        elif n == "land":
            self._send("land", call, cancel)
            self.flying = False
            x, y, _z, yaw = self.scene.pose
            self.scene.set_pose(x, y, 0.0, yaw)
        elif n in PERCEPTION:
            return getattr(self.scene, n)(*a)
        elif n == "scan":
            for i in range(12):
                if self.scene.is_visible(a[0]):
                    return True
                if i < 11:
                    self._turn("turn_cw", 30, cancel)
            return False
        elif n == "scan_abstract":
            for i in range(12):
                ans = self.scene.probe(a[0])
                if ans != "unknown":
                    return ans
                if i < 11:
                    self._turn("turn_cw", 30, cancel)
            return "unknown"
        elif n == "orienting":
            return self._orient(a[0], cancel)
        elif n == "approach":
            self._move("move_forward", 100, cancel)
        elif n == "goto":
            if not self._orient(a[0], cancel):
                return False
            dist = self.scene.object_dis(a[0])
            step = int(min(500, max(20, (dist if dist > 0 else 150) - 100)))  # stop ~1 m away
            self._move("move_forward", step, cancel)
            return True
        elif n == "delay":
            sleep_cancellable(a[0] / 1000.0 * self.time_scale, cancel)
        elif n == "take_picture":
            sleep_cancellable(0.5 * self.time_scale, cancel)
        elif n in ("log", "re_plan"):
            return a[0] if a else None
        else:
            raise SkillExecutionError(f"drone cannot execute '{n}'")
        return None


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    v = fn()
    return v, time.monotonic() - t0
