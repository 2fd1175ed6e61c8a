"""Indy7-class arm skills executed through the real ``neuromeka.IndyDCP3`` gRPC client.

Skills of ``INDY7_ARM`` map to IndyDCP3 calls:

* ``move_to(x, y, z[, yaw])`` -> ``movel([x, y, z, 180, 0, yaw])`` (tool pointing down), then
  poll ``get_motion_data()`` until ``is_target_reached`` (cancellable, with a timeout that comes
  from the distance: 3 x nominal + 5 s);
* ``home`` -> ``move_home()`` (``GetHomePosition`` + ``movej``);
* ``open_gripper`` / ``close_gripper`` -> ``set_do([(GRIP_DO, state)])`` then poll ``get_di()``
  until the gripper sensor agrees;
* ``pick(obj)``: object position from the scene (perception) -> open, above, down, close, up;
* ``place(obj, target)``: must hold ``obj``; above target, down, open, up;
* ``push(obj, distance)``: behind the object, down, push along +x, up;
* ``wipe(area)``: a 3-stroke zig-zag over the named area; ``look(obj)`` -> scene lookup;
* ``wait(s)``: cancellable sleep.

Any ``Response`` with a non-zero ``code`` or a gRPC error becomes :class:`SkillExecutionError`
with the controller's message. ``stop()`` sends ``stop_motion`` (cancellation).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from llm_planner_node.core.execution_time import ARM_MOVE_BASE_S, ARM_TCP_SPEED_MM_S
from llm_planner_node.core.skills import INDY7_ARM, SkillCall

from robot_adapters.executor import SkillCancelled, SkillExecutionError, SkillExecutor, SkillTimeout, sleep_cancellable

GRIP_DO = 0
GRIP_DI = 0
APPROACH_MM = 100.0
GRIP_TIMEOUT_S = 3.0


class IndyArmExecutor(SkillExecutor):
    robot_kind = "arm"
    skill_set = INDY7_ARM

    def __init__(self, robot_ip: str = "127.0.0.1", scene=None, *, vel_ratio: int = 15,
                 time_scale: float = 1.0, poll_s: float = 0.02, release_on_halt: bool = True) -> None:
        self.robot_ip = robot_ip
        self.release_on_halt = release_on_halt
        self._picked_at: dict[str, tuple[float, float, float]] = {}  # held object -> pick position
        self.scene = scene
        self.vel_ratio = vel_ratio
        self.time_scale = time_scale  # only to size timeouts when the fake arm runs faster
        self.poll_s = poll_s
        self.client = None
        self._pose: list[float] | None = None

    # ------------------------------------------------------------------ connection
    def connect(self) -> None:
        import grpc
        from neuromeka import IndyDCP3

        self.client = IndyDCP3(self.robot_ip)
        try:
            data = self.client.get_control_data()
        except grpc.RpcError as e:
            raise SkillExecutionError(f"arm at {self.robot_ip} unreachable: {e.code().name}") from None
        self._pose = [float(v) for v in data.get("p", [])] or None

    def close(self) -> None:
        self.client = None

    def stop(self) -> None:
        if self.client is not None:
            try:
                self.client.stop_motion()
            except Exception:  # noqa: BLE001 - best effort during cancellation
                pass

    def halt(self) -> str:
        """Stop the motion; with ``release_on_halt`` (default), put a held object back where it
        was picked (above it, down, open, up) so the arm's next plan starts with an empty
        gripper. The phrase says what the gripper holds afterwards."""
        self.stop()
        if self.client is None:
            return "stopped (arm not connected)"
        held = self.scene.held if self.scene is not None else None
        if not held:
            self._picked_at.clear()
            return "stopped, gripper empty" if self.scene is not None else "stopped"
        where = self._picked_at.get(held)
        if not self.release_on_halt or where is None:
            return f"stopped, gripper holds '{held}'"
        cancel = threading.Event()
        try:
            x, y, z = where
            self._movel(x, y, z + APPROACH_MM, 0.0, cancel)
            self._movel(x, y, z, 0.0, cancel)
            self._gripper(False, cancel)
            self._movel(x, y, z + APPROACH_MM, 0.0, cancel)
        except SkillExecutionError as e:
            return f"stopped, gripper holds '{held}' (could not put it back: {e})"
        self._picked_at.pop(held, None)
        return f"stopped, put '{held}' back where it was picked, gripper empty"

    # ------------------------------------------------------------------ primitives
    def _rpc(self, fn, *a, **kw) -> dict:
        import grpc

        if self.client is None:
            raise SkillExecutionError("arm not connected")
        try:
            r = fn(*a, **kw)
        except grpc.RpcError as e:
            raise SkillExecutionError(f"IndyDCP3 {getattr(fn, '__name__', 'call')} failed: "
                                      f"{e.code().name} {e.details()}") from None
        if isinstance(r, dict) and int(r.get("code", 0) or 0) != 0:
            raise SkillExecutionError(f"arm refused {getattr(fn, '__name__', 'command')}: {r.get('msg', '')}")
        return r

    def _wait_motion(self, nominal_s: float, cancel: threading.Event) -> None:
        deadline = time.monotonic() + (3.0 * nominal_s + 5.0) * self.time_scale
        while True:
            md = self._rpc(self.client.get_motion_data)
            if cancel.is_set():  # first: a motion the halt stopped also reads 'target reached'
                self.stop()
                raise SkillCancelled("cancelled during arm motion")
            if md.get("is_target_reached") and not md.get("is_in_motion"):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise SkillTimeout(f"arm motion did not finish in {deadline:.0f} s budget")
            time.sleep(self.poll_s)
        data = self._rpc(self.client.get_control_data)
        self._pose = [float(v) for v in data.get("p", [])] or self._pose

    def _movel(self, x: float, y: float, z: float, yaw: float, cancel: threading.Event) -> None:
        if cancel.is_set():
            raise SkillCancelled("cancelled")
        start = self._pose or [x, y, z]
        dist = ((start[0] - x) ** 2 + (start[1] - y) ** 2 + (start[2] - z) ** 2) ** 0.5
        self._rpc(self.client.movel, ttarget=[float(x), float(y), float(z), 180.0, 0.0, float(yaw)],
                  vel_ratio=self.vel_ratio)
        self._wait_motion(ARM_MOVE_BASE_S + dist / ARM_TCP_SPEED_MM_S, cancel)

    def _gripper(self, close: bool, cancel: threading.Event) -> None:
        if cancel.is_set():  # a pick or place cancelled on its way down grips or drops nothing
            raise SkillCancelled("cancelled")
        self._rpc(self.client.set_do, [(GRIP_DO, 1 if close else 0)])  # DigitalState OFF=0, ON=1
        deadline = time.monotonic() + GRIP_TIMEOUT_S * max(self.time_scale, 0.1)
        while True:
            di = self._rpc(self.client.get_di)
            states = {int(s.get("address", 0)): int(s.get("state", 0)) for s in di.get("signals", [])}
            if states.get(GRIP_DI, 0) == (1 if close else 0):
                return
            if cancel.is_set():
                raise SkillCancelled("cancelled during gripper motion")
            if time.monotonic() > deadline:
                raise SkillTimeout("gripper sensor did not confirm")
            time.sleep(self.poll_s)

    def _object(self, name: str) -> list[float]:
        pos = self.scene.position(name) if self.scene is not None else None
        if pos is None:
            raise SkillExecutionError(f"object '{name}' not found in the workspace")
        return pos

    # ------------------------------------------------------------------ skills
    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        n, a = call.name, call.args
        if n == "move_to":
            yaw = a[3] if len(a) > 3 else 0.0
            self._movel(a[0], a[1], a[2], yaw, cancel)
        elif n == "home":
            self._rpc(self.client.move_home)
            self._wait_motion(ARM_MOVE_BASE_S + 800.0 / ARM_TCP_SPEED_MM_S, cancel)
        elif n == "open_gripper":
            self._gripper(False, cancel)
        elif n == "close_gripper":
            self._gripper(True, cancel)
        elif n == "pick":
            x, y, z = self._object(a[0])
            if self.scene is not None and self.scene.held:
                raise SkillExecutionError(f"gripper already holds '{self.scene.held}'")
            self._gripper(False, cancel)
            self._movel(x, y, z + APPROACH_MM, 0.0, cancel)
            self._movel(x, y, z, 0.0, cancel)
            self._picked_at[a[0]] = (x, y, z)  # from the grasp on: a halt puts it back here
            self._gripper(True, cancel)
            self._movel(x, y, z + APPROACH_MM, 0.0, cancel)
            if self.scene is not None and self.scene.held != a[0]:
                self._picked_at.pop(a[0], None)
                raise SkillExecutionError(f"grasp of '{a[0]}' failed (nothing in the gripper)")
        elif n == "place":
            if self.scene is not None and self.scene.held != a[0]:
                raise SkillExecutionError(f"cannot place '{a[0]}': not holding it")
            x, y, z = self._object(a[1])
            self._movel(x, y, z + APPROACH_MM + 30.0, 0.0, cancel)
            self._movel(x, y, z + 30.0, 0.0, cancel)
            self._gripper(False, cancel)
            self._picked_at.pop(a[0], None)  # released here: no longer to be put back
            self._movel(x, y, z + APPROACH_MM + 30.0, 0.0, cancel)
        elif n == "push":
            x, y, z = self._object(a[0])
            self._movel(x - 60.0, y, z + APPROACH_MM, 0.0, cancel)
            self._movel(x - 60.0, y, z, 0.0, cancel)
            self._movel(x - 60.0 + float(a[1]), y, z, 0.0, cancel)
            if self.scene is not None:
                self.scene.move_object(a[0], [x + float(a[1]), y, z])
            self._movel(x - 60.0 + float(a[1]), y, z + APPROACH_MM, 0.0, cancel)
        elif n == "wipe":
            x, y, z = self._object(a[0])
            for dy in (-60.0, 0.0, 60.0):
                self._movel(x - 80.0, y + dy, z + 5.0, 0.0, cancel)
                self._movel(x + 80.0, y + dy, z + 5.0, 0.0, cancel)
            self._movel(x, y, z + APPROACH_MM, 0.0, cancel)
        elif n == "look":
            return self.scene is not None and self.scene.position(a[0]) is not None
        elif n == "wait":
            sleep_cancellable(float(a[0]) * self.time_scale, cancel)
        else:
            raise SkillExecutionError(f"arm cannot execute '{n}'")
        return None
