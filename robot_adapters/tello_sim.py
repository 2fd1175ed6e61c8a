"""Tello SDK 2.0 UDP simulator (command/response on 8889, state packets to the client's 8890).

Implements what the planner's drone adapter and djitellopy use:

* ``command`` enters SDK mode (anything else before it answers ``error``); after it, state
  packets go to ``(client ip, 8890)`` at ``state_hz`` (10 Hz), SDK 2.0 format
  ``mid:-1;x:0;...;bat:87;baro:..;time:..;agx:..;agy:..;agz:..;\\r\\n``.
* control commands ``takeoff``, ``land``, ``up/down/left/right/forward/back x`` (20-500 cm),
  ``cw/ccw x`` (1-360 degrees), ``go x y z speed``, ``stop``, ``emergency``, ``speed x``
  (10-100 cm/s), ``streamon/streamoff``, ``keepalive``, ``port a b``, ``setfps/setbitrate/
  setresolution``: ``ok`` when done, ``error <reason>`` otherwise (out of range, not flying,
  already flying, motor stop, unknown command). Motions reply ``ok`` only after their duration.
* read commands ``battery?`` ``speed?`` ``time?`` ``height?`` ``temp?`` ``attitude?`` ``baro?``
  ``tof?`` ``wifi?`` ``sdk?`` ``sn?`` ``active?``.
* ``rc a b c d`` is accepted without a reply (as on the real drone).

Durations come from speeds: move = ``TELLO_MOVE_BASE_S + distance / speed`` with the speed set by
``speed x`` (default ``TELLO_SPEED_CM_S``), turn = ``TELLO_TURN_BASE_S + degrees /
TELLO_YAW_DEG_S``, takeoff/land constant; the same constants as the execution-time model's
default Tello profile (``llm_planner_node.core.execution_time``), optional log-normal noise.
``time_scale`` < 1 runs everything faster (0.5 = twice as fast) for tests.

A ``stop`` or ``emergency`` during a motion interrupts it: the motion answers ``error stopped``
(``error motor stop`` for emergency) and ``stop`` answers ``ok``.

Addressing: djitellopy binds 8889 on the wildcard address, so the simulator needs its own
network stack: run it in a namespace (see ``robot_adapters.netns``). ``TelloSim(host=...)``
binds ``(host, 8889)``; construct it inside the namespace (``net.in_sim(lambda: TelloSim(...)
.start())``). Commands are logged in ``sim.log`` as ``(time, command, reply)``.

CLI (manual use, inside a namespace you made): ``python -m robot_adapters.tello_sim --host IP``.
"""

from __future__ import annotations

import argparse
import math
import random
import socket
import threading
import time
from dataclasses import dataclass, field

from llm_planner_node.core.execution_time import (
    TELLO_LAND_S,
    TELLO_MOVE_BASE_S,
    TELLO_SPEED_CM_S,
    TELLO_TAKEOFF_S,
    TELLO_TURN_BASE_S,
    TELLO_YAW_DEG_S,
)

CONTROL_PORT = 8889
STATE_PORT = 8890
MOVES = {"up", "down", "left", "right", "forward", "back"}
READS = {"battery?", "speed?", "time?", "height?", "temp?", "attitude?", "baro?", "tof?",
         "wifi?", "sdk?", "sn?", "active?"}
SETTINGS = {"streamon", "streamoff", "keepalive", "motoron", "motoroff", "port", "setfps",
            "setbitrate", "setresolution", "downvision", "mon", "moff", "mdirection"}


@dataclass
class DroneState:
    sdk: bool = False
    flying: bool = False
    x: float = 0.0  # cm, body frame at takeoff
    y: float = 0.0
    z: float = 0.0  # height cm
    yaw: float = 0.0  # degrees, -180..180
    speed: float = TELLO_SPEED_CM_S
    battery: int = 87
    flight_time: float = 0.0
    motion: str = ""
    log: list = field(default_factory=list)


class TelloSim:
    """One simulated Tello bound to ``(host, 8889)``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        control_port: int = CONTROL_PORT,
        state_port: int = STATE_PORT,
        *,
        time_scale: float = 1.0,
        noise_cv: float = 0.0,
        state_hz: float = 10.0,
        battery: int = 87,
        seed: int | None = 0,
        max_height_cm: float = 1000.0,
    ) -> None:
        self.host = host
        self.control_port = control_port
        self.state_port = state_port
        self.time_scale = float(time_scale)
        self.noise_cv = float(noise_cv)
        self.state_hz = float(state_hz)
        self.max_height_cm = max_height_cm
        self.state = DroneState(battery=battery)
        self.log: list[tuple[float, str, str | None]] = []  # (t, command, reply)
        self.durations: list[tuple[str, float]] = []  # (command, simulated seconds, unscaled)
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._interrupt = threading.Event()
        self._busy = threading.Lock()
        self._client: tuple[str, int] | None = None
        self._threads: list[threading.Thread] = []
        self.sock: socket.socket | None = None
        self.state_sock: socket.socket | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "TelloSim":
        """Bind the sockets (in the caller's network namespace) and start serving."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((self.host, self.control_port))
        self.sock.settimeout(0.2)
        self.state_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.state_sock.bind((self.host, 0))
        for target, name in ((self._serve, "cmd"), (self._state_loop, "state")):
            t = threading.Thread(target=target, name=f"tello-sim-{name}-{self.host}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._interrupt.set()
        for t in self._threads:
            t.join(timeout=2.0)
        for s in (self.sock, self.state_sock):
            if s is not None:
                s.close()

    def __enter__(self) -> "TelloSim":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def commands(self) -> list[str]:
        return [c for _, c, _ in self.log]

    # ------------------------------------------------------------------ protocol
    def _serve(self) -> None:
        assert self.sock is not None
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(1024)
            except socket.timeout:
                continue
            except OSError:
                break
            try:
                cmd = data.decode("utf-8").strip()
            except UnicodeDecodeError:
                self._reply(addr, "error", "<undecodable>")
                continue
            self._client = (addr[0], addr[1])
            self._dispatch(cmd, addr)

    def _reply(self, addr, text: str, cmd: str) -> None:
        with self._lock:
            self.log.append((time.monotonic(), cmd, text))
        if self.sock is not None and not self._stop.is_set():
            try:
                self.sock.sendto(text.encode("utf-8"), addr)
            except OSError:
                pass

    def _dispatch(self, cmd: str, addr) -> None:
        parts = cmd.split()
        if not parts:
            return self._reply(addr, "error", cmd)
        op, args = parts[0].lower(), parts[1:]
        st = self.state
        if op == "command":
            st.sdk = True
            return self._reply(addr, "ok", cmd)
        if not st.sdk:
            return self._reply(addr, "error Not in SDK mode", cmd)
        if op == "rc":
            with self._lock:
                self.log.append((time.monotonic(), cmd, None))
            return None
        if op in ("stop", "emergency"):
            self._interrupt.set()
            if op == "emergency":
                st.flying, st.z = False, 0.0
                with self._lock:
                    self.log.append((time.monotonic(), cmd, None))
                return None  # no reply to emergency
            return self._reply(addr, "ok", cmd)
        if op in READS and not args:
            return self._reply(addr, self._read(op), cmd)
        if op in SETTINGS:
            return self._reply(addr, "ok", cmd)
        if op == "speed":
            v = self._num(args, 0)
            if v is None or not 10 <= v <= 100:
                return self._reply(addr, "error out of range", cmd)
            st.speed = v
            return self._reply(addr, "ok", cmd)
        if op in ("takeoff", "land") or op in MOVES or op in ("cw", "ccw", "go"):
            err, dur, apply = self._plan_motion(op, args)
            if err:
                return self._reply(addr, f"error {err}", cmd)
            if not self._busy.acquire(blocking=False):
                return self._reply(addr, "error Motor busy", cmd)
            self._interrupt.clear()
            t = threading.Thread(target=self._run_motion, args=(cmd, addr, dur, apply), daemon=True)
            t.start()
            return None
        return self._reply(addr, "error Unknown command", cmd)

    @staticmethod
    def _num(args, i):
        try:
            v = float(args[i])
        except (IndexError, ValueError):
            return None
        return v if math.isfinite(v) else None

    def _plan_motion(self, op: str, args):
        st = self.state
        if op == "takeoff":
            if st.flying:
                return "already flying", 0.0, None
            if st.battery < 10:
                return "battery low", 0.0, None
            return None, TELLO_TAKEOFF_S, lambda: self._set(flying=True, z=80.0)
        if not st.flying:
            return "not flying", 0.0, None
        if op == "land":
            return None, TELLO_LAND_S, lambda: self._set(flying=False, z=0.0)
        if op in MOVES:
            d = self._num(args, 0)
            if d is None or len(args) != 1 or not 20 <= d <= 500 or d != int(d):
                return "out of range", 0.0, None
            dz = {"up": d, "down": -d}.get(op, 0.0)
            if op == "down" and st.z - d < 20:
                return "out of range", 0.0, None
            if op == "up" and st.z + d > self.max_height_cm:
                return "out of range", 0.0, None
            rad = math.radians(st.yaw)
            fwd = {"forward": d, "back": -d}.get(op, 0.0)
            side = {"right": d, "left": -d}.get(op, 0.0)
            dx = fwd * math.cos(rad) - side * math.sin(rad)
            dy = fwd * math.sin(rad) + side * math.cos(rad)
            dur = TELLO_MOVE_BASE_S + d / st.speed
            return None, dur, lambda: self._set(x=st.x + dx, y=st.y + dy, z=st.z + dz)
        if op in ("cw", "ccw"):
            a = self._num(args, 0)
            if a is None or len(args) != 1 or not 1 <= a <= 360 or a != int(a):
                return "out of range", 0.0, None
            yaw = st.yaw + (a if op == "cw" else -a)
            yaw = (yaw + 180.0) % 360.0 - 180.0
            return None, TELLO_TURN_BASE_S + a / TELLO_YAW_DEG_S, lambda: self._set(yaw=yaw)
        if op == "go":
            vals = [self._num(args, i) for i in range(4)]
            if len(args) != 4 or any(v is None for v in vals):
                return "out of range", 0.0, None
            x, y, z, sp = vals  # type: ignore[misc]
            if not (all(-500 <= v <= 500 for v in (x, y, z)) and 10 <= sp <= 100) or all(
                -20 <= v <= 20 for v in (x, y, z)
            ):
                return "out of range", 0.0, None
            d = math.sqrt(x * x + y * y + z * z)
            return None, TELLO_MOVE_BASE_S + d / sp, lambda: self._set(x=st.x + x, y=st.y + y, z=st.z + z)
        return "Unknown command", 0.0, None

    def _set(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self.state, k, v)

    def _run_motion(self, cmd: str, addr, dur: float, apply) -> None:
        try:
            if self.noise_cv > 0:
                dur *= math.exp(self._rng.gauss(-0.5 * self.noise_cv**2, self.noise_cv))
            self.state.motion = cmd
            interrupted = self._interrupt.wait(dur * self.time_scale)
            if self._stop.is_set():
                return
            if interrupted:
                self._reply(addr, "error motor stop" if not self.state.flying else "error stopped", cmd)
                return
            apply()
            with self._lock:
                self.durations.append((cmd, dur))
                self.state.flight_time += dur if self.state.flying else 0.0
            self._reply(addr, "ok", cmd)
        finally:
            self.state.motion = ""
            self._busy.release()

    def _read(self, op: str) -> str:
        st = self.state
        return {
            "battery?": str(st.battery),
            "speed?": str(int(st.speed)),
            "time?": f"{int(st.flight_time)}s",
            "height?": f"{int(st.z // 10)}dm",
            "temp?": "60~62C",
            "attitude?": f"pitch:0;roll:0;yaw:{int(st.yaw)};",
            "baro?": f"{st.z / 100:.2f}",
            "tof?": f"{int(st.z * 10)}mm",
            "wifi?": "90",
            "sdk?": "20",
            "sn?": "0TQZSIMULATED",
            "active?": "ok",
        }[op]

    def state_packet(self) -> str:
        st = self.state
        agz = -1000.0 if not st.motion else -990.0
        return (
            f"mid:-1;x:0;y:0;z:0;mpry:0,0,0;pitch:0;roll:0;yaw:{int(st.yaw)};"
            f"vgx:0;vgy:0;vgz:0;templ:60;temph:62;tof:{int(max(st.z, 10))};h:{int(st.z)};"
            f"bat:{st.battery};baro:{st.z / 100:.2f};time:{int(st.flight_time)};"
            f"agx:0.00;agy:0.00;agz:{agz:.2f};\r\n"
        )

    def _state_loop(self) -> None:
        period = 1.0 / self.state_hz if self.state_hz > 0 else 0.1
        while not self._stop.wait(period):
            if not self.state.sdk or self._client is None or self.state_sock is None:
                continue
            try:
                self.state_sock.sendto(self.state_packet().encode("ascii"), (self._client[0], self.state_port))
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Tello SDK 2.0 UDP simulator")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (own namespace recommended)")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=0.0)
    p.add_argument("--seconds", type=float, default=600.0, help="exit after this long")
    a = p.parse_args(argv)
    with TelloSim(a.host, time_scale=a.time_scale, noise_cv=a.noise):
        print(f"Tello simulator on {a.host}:{CONTROL_PORT}", flush=True)
        try:
            time.sleep(a.seconds)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
