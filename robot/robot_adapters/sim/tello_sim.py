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
* ``streamon`` starts the camera: an H.264 elementary stream (Annex-B, SPS/PPS before every IDR,
  one IDR a second, datagrams of at most 1460 bytes) to ``(client ip, video_port)``, 11111 unless
  ``port <state> <video>`` (djitellopy's ``change_vs_udp``) or ``video_port`` says otherwise;
  ``streamoff`` stops it. The frames show the ``scene``'s objects as real photographs where the
  camera model of ``robot_adapters.scene`` puts them, seen from the simulator's own pose (see
  ``robot_adapters.sim.tello_video_sim``). Defaults 480x360 at 10 fps (``frame_size``, ``fps``; a
  real Tello sends 960x720 at 30 fps); ``setfps/setbitrate/setresolution`` answer ``ok`` and
  change nothing.

Like a real Tello's, the state drifts with time (simulated time, ``time_scale`` applies): the
battery drains ``battery_drain_per_s`` percent a second in flight (0.12: 100 % to the 10 % of an
automatic landing in 12.5 min, a Tello flies ~13 min) and ``ground_drain_per_s`` (0.02) on the
ground; ``time`` counts the seconds flown; the temperature (``templ``/``temph``, ``temp?``) rises
``temp_rise_per_s`` (0.02 C/s) in flight and cools back on the ground; ``h`` / ``tof`` (distance
to the floor, at least 10 cm) / ``baro`` / attitude / speeds follow the motion in progress. Reads
(``battery?``, ``tof?``, ``height?``, ``temp?``, ``attitude?``, ``baro?``, ``time?``) and state
packets say the same. Below ``low_battery_pct`` (10 %) a flying drone lands by itself: the motion
in progress answers ``error battery low: auto landing``, motions meanwhile answer the same, and
then the state shows ``flying`` false and ``h:0`` (takeoff answers ``error battery low``).
``set_battery(pct)`` sets the charge (tests).

Durations come from speeds: move = ``TELLO_MOVE_BASE_S + distance / speed`` with the speed set by
``speed x`` (default ``TELLO_SPEED_CM_S``), turn = ``TELLO_TURN_BASE_S + degrees /
TELLO_YAW_DEG_S``, takeoff/land constant; the same constants as the execution-time model's
default Tello profile (``timely_robot.execution_time``), optional log-normal noise.
``time_scale`` < 1 runs everything faster (0.5 = twice as fast) for tests.

A ``stop`` or ``emergency`` during a motion interrupts it: the motion answers ``error stopped``
(``error motor stop`` for emergency) and ``stop`` answers ``ok``; a stopped move or turn leaves
the drone where it got to.

Addressing: djitellopy binds 8889 on the wildcard address, so the simulator needs its own
network stack: run it in a namespace (see ``robot_adapters.sim.netns``). ``TelloSim(host=...)``
binds ``(host, 8889)``; construct it inside the namespace (``net.in_sim(lambda: TelloSim(...)
.start())``). Commands are logged in ``sim.log`` as ``(time, command, reply)``.

CLI (manual use, inside a namespace you made): ``python -m robot_adapters.sim.tello_sim --host IP
[--scene scene.yaml] [--video 960x720@30 | --video off]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from timely_robot.execution_time import (
    TELLO_LAND_S, TELLO_MOVE_BASE_S, TELLO_SPEED_CM_S, TELLO_TAKEOFF_S, TELLO_TURN_BASE_S, TELLO_YAW_DEG_S)
from robot_adapters.scene import Scene
from robot_adapters.sim.tello_video_sim import DEFAULT_FPS, DEFAULT_FRAME_SIZE, SceneRenderer, VideoStreamer

log = logging.getLogger("timely_fleet.tello_sim")

CONTROL_PORT = 8889
STATE_PORT = 8890
VIDEO_PORT = 11111
LOW_BATTERY_ERROR = "battery low: auto landing"
MOVES = {"up", "down", "left", "right", "forward", "back"}
READS = {"battery?", "speed?", "time?", "height?", "temp?", "attitude?", "baro?", "tof?",
         "wifi?", "sdk?", "sn?", "active?"}
SETTINGS = {"keepalive", "motoron", "motoroff", "setfps",
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
    battery: int = 87  # percent shown (reads, state packets): the charge rounded up
    charge: float = 87.0  # percent, drains with time
    flight_time: float = 0.0  # seconds flown (simulated)
    temp_c: float = 60.0  # low end of the temperature range (templ); temph = templ + 2
    streaming: bool = False
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
        scene: Scene | None = None,
        video_port: int = VIDEO_PORT,
        fps: float = DEFAULT_FPS,
        frame_size: tuple[int, int] = DEFAULT_FRAME_SIZE,
        video: bool = True,
        battery_drain_per_s: float = 0.12,
        ground_drain_per_s: float = 0.02,
        low_battery_pct: int = 10,
        temperature_c: float = 60.0,
        temp_rise_per_s: float = 0.02,
        max_temperature_c: float = 90.0,
    ) -> None:
        """``scene``: the objects the camera sees (its ``pose`` is ignored: the simulator's own
        ``state`` is the drone's pose). ``video_port``: where ``streamon`` sends the video until a
        ``port`` command moves it. ``video=False``: ``streamon`` answers ``ok`` and sends nothing.
        The battery, temperature and low-battery landing parameters are in the module docstring."""
        self.host = host
        self.control_port = control_port
        self.state_port = state_port
        self.time_scale = float(time_scale)
        self.noise_cv = float(noise_cv)
        self.state_hz = float(state_hz)
        self.max_height_cm = max_height_cm
        self.state = DroneState(battery=int(battery), charge=float(battery), temp_c=float(temperature_c))
        self.scene = scene
        self.video_port = int(video_port)
        self.fps = float(fps)
        self.video_enabled = bool(video)
        self.renderer = SceneRenderer(scene, frame_size)
        self.video: VideoStreamer | None = None
        self.battery_drain_per_s = float(battery_drain_per_s)
        self.ground_drain_per_s = float(ground_drain_per_s)
        self.low_battery_pct = int(low_battery_pct)
        self.temperature_c = float(temperature_c)
        self.temp_rise_per_s = float(temp_rise_per_s)
        self.max_temperature_c = float(max_temperature_c)
        self._span: tuple[float, float, tuple, tuple] | None = None  # motion in progress, see pose()
        self._abort_reason: str | None = None
        self._auto_landing = False
        self._last_tick = time.monotonic()
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
        self.video_sock: socket.socket | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "TelloSim":
        """Bind the sockets (in the caller's network namespace) and start serving."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((self.host, self.control_port))
        self.sock.settimeout(0.2)
        self.state_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.state_sock.bind((self.host, 0))
        self.video_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.video_sock.bind((self.host, 0))
        self._last_tick = time.monotonic()
        for target, name in ((self._serve, "cmd"), (self._state_loop, "state")):
            t = threading.Thread(target=target, name=f"tello-sim-{name}-{self.host}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._interrupt.set()
        if self.video is not None:
            self.video.stop()
        for t in self._threads:
            t.join(timeout=2.0)
        for s in (self.sock, self.state_sock, self.video_sock):
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
        if op == "streamon":
            self._stream(True)
            return self._reply(addr, "ok", cmd)
        if op == "streamoff":
            self._stream(False)  # returns after the last datagram went out
            return self._reply(addr, "ok", cmd)
        if op == "port":
            ports = [self._num(args, i) for i in range(2)]
            if len(args) != 2 or any(p is None or p != int(p) or not 1 <= p <= 65535 for p in ports):
                return self._reply(addr, "error out of range", cmd)
            self.state_port, self.video_port = int(ports[0]), int(ports[1])  # type: ignore[arg-type]
            return self._reply(addr, "ok", cmd)
        if op in SETTINGS:
            return self._reply(addr, "ok", cmd)
        if op == "speed":
            v = self._num(args, 0)
            if v is None or not 10 <= v <= 100:
                return self._reply(addr, "error out of range", cmd)
            st.speed = v
            return self._reply(addr, "ok", cmd)
        if op in ("takeoff", "land") or op in MOVES or op in ("cw", "ccw", "go"):
            err, dur, target = self._plan_motion(op, args)
            if err:
                return self._reply(addr, f"error {err}", cmd)
            if not self._busy.acquire(blocking=False):
                return self._reply(addr, "error Motor busy", cmd)
            self._interrupt.clear()
            t = threading.Thread(target=self._run_motion, args=(cmd, addr, dur, target), daemon=True)
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
        """(error, duration s, target): the target is the state after the motion (``dyaw``: the
        signed turn, for the pose while turning)."""
        st = self.state
        if self._auto_landing:
            return LOW_BATTERY_ERROR, 0.0, None
        if op == "takeoff":
            if st.flying:
                return "already flying", 0.0, None
            if st.battery < self.low_battery_pct:
                return "battery low", 0.0, None
            return None, TELLO_TAKEOFF_S, {"flying": True, "z": 80.0}
        if not st.flying:
            return "not flying", 0.0, None
        if op == "land":
            return None, TELLO_LAND_S, {"flying": False, "z": 0.0}
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
            return None, dur, {"x": st.x + dx, "y": st.y + dy, "z": st.z + dz}
        if op in ("cw", "ccw"):
            a = self._num(args, 0)
            if a is None or len(args) != 1 or not 1 <= a <= 360 or a != int(a):
                return "out of range", 0.0, None
            dyaw = a if op == "cw" else -a
            yaw = (st.yaw + dyaw + 180.0) % 360.0 - 180.0
            return None, TELLO_TURN_BASE_S + a / TELLO_YAW_DEG_S, {"yaw": yaw, "dyaw": dyaw}
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
            return None, TELLO_MOVE_BASE_S + d / sp, {"x": st.x + x, "y": st.y + y, "z": st.z + z}
        return "Unknown command", 0.0, None

    def _set(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self.state, k, v)

    # ------------------------------------------------------------------ pose while moving
    def _begin_span(self, wall_s: float, target: dict) -> None:
        st = self.state
        start = (st.x, st.y, st.z, st.yaw)
        delta = (target.get("x", st.x) - st.x, target.get("y", st.y) - st.y, target.get("z", st.z) - st.z,
                 target.get("dyaw", 0.0))
        self._span = (time.monotonic(), wall_s, start, delta)

    def _progress(self) -> tuple[float, tuple, tuple] | None:
        span = self._span
        if span is None:
            return None
        t0, wall_s, start, delta = span
        f = 1.0 if wall_s <= 0 else min(1.0, max(0.0, (time.monotonic() - t0) / wall_s))
        return f, start, delta

    def pose(self) -> tuple[float, float, float, float]:
        """The drone's pose now (x, y, z cm, yaw degrees): ``state`` at rest, and during a motion
        the way from its start to its end (the video and the state packets show it moving)."""
        p = self._progress()
        st = self.state
        if p is None:
            return (st.x, st.y, st.z, st.yaw)
        f, s, d = p
        yaw = (s[3] + f * d[3] + 180.0) % 360.0 - 180.0
        return (s[0] + f * d[0], s[1] + f * d[1], s[2] + f * d[2], yaw)

    def _velocity(self) -> tuple[float, float, float]:
        """cm/s (simulated) in the take-off frame during a motion, else 0."""
        span = self._span
        if span is None or span[1] <= 0:
            return (0.0, 0.0, 0.0)
        sim_s = span[1] / self.time_scale if self.time_scale > 0 else span[1]
        return tuple(v / sim_s for v in span[3][:3])  # type: ignore[return-value]

    def _attitude(self) -> tuple[int, int, int]:
        """pitch, roll, yaw (degrees): a moving drone leans into its motion (~7 degrees at 60 cm/s)."""
        vx, vy, _vz = self._velocity()
        yaw = self.pose()[3]
        r = math.radians(yaw)
        fwd = vx * math.cos(r) + vy * math.sin(r)
        side = -vx * math.sin(r) + vy * math.cos(r)
        lean = lambda v: int(max(-20.0, min(20.0, round(0.12 * v))))  # noqa: E731
        return -lean(fwd), lean(side), int(yaw)

    # ------------------------------------------------------------------ motions
    def _run_motion(self, cmd: str, addr, dur: float, target: dict) -> None:
        try:
            if self.noise_cv > 0:
                dur *= math.exp(self._rng.gauss(-0.5 * self.noise_cv**2, self.noise_cv))
            self.state.motion = cmd
            self._begin_span(dur * self.time_scale, target)
            interrupted = self._interrupt.wait(dur * self.time_scale)
            if self._stop.is_set():
                return
            if interrupted:
                p = self._progress()
                if self.state.flying and p is not None and "flying" not in target:
                    # a stopped move or turn: the drone stays where it got to
                    x, y, z, yaw = self.pose()
                    self._set(x=x, y=y, z=z, yaw=yaw)
                self._span = None
                if self._abort_reason:
                    self._reply(addr, f"error {self._abort_reason}", cmd)
                else:
                    self._reply(addr, "error motor stop" if not self.state.flying else "error stopped", cmd)
                return
            self._set(**{k: v for k, v in target.items() if k != "dyaw"})
            self._span = None
            with self._lock:
                self.durations.append((cmd, dur))
            self._reply(addr, "ok", cmd)
        finally:
            self._span = None
            self.state.motion = ""
            self._busy.release()

    # ------------------------------------------------------------------ battery, temperature
    def set_battery(self, pct: float) -> None:
        """Set the charge (percent); a flying drone below ``low_battery_pct`` lands by itself."""
        with self._lock:
            self.state.charge = max(0.0, min(100.0, float(pct)))
            self.state.battery = int(math.ceil(self.state.charge))
        self._check_low_battery()

    def _tick(self) -> None:
        """Advance battery, flight time and temperature by the (simulated) time since the last tick."""
        now = time.monotonic()
        dt = max(0.0, now - self._last_tick)
        self._last_tick = now
        if self.time_scale > 0:
            dt /= self.time_scale
        with self._lock:
            st = self.state
            airborne = st.flying or self._span is not None and bool(st.motion)
            if airborne:
                st.charge -= self.battery_drain_per_s * dt
                st.temp_c = min(self.max_temperature_c, st.temp_c + self.temp_rise_per_s * dt)
            else:
                st.charge -= self.ground_drain_per_s * dt
                st.temp_c = max(self.temperature_c, st.temp_c - 0.5 * self.temp_rise_per_s * dt)
            if st.flying:
                st.flight_time += dt
            st.charge = max(0.0, st.charge)
            st.battery = int(math.ceil(st.charge))
        self._check_low_battery()

    def _check_low_battery(self) -> None:
        with self._lock:
            if not (self.state.flying and self.state.battery < self.low_battery_pct) or self._auto_landing:
                return
            self._auto_landing = True
            self._abort_reason = LOW_BATTERY_ERROR
            self.log.append((time.monotonic(), "<auto land: battery low>", None))
        log.warning("tello_sim %s: battery %d%% < %d%%: landing", self.host, self.state.battery,
                    self.low_battery_pct)
        self._interrupt.set()
        threading.Thread(target=self._auto_land, name=f"tello-sim-autoland-{self.host}", daemon=True).start()

    def _auto_land(self) -> None:
        """Land where the drone is, once the motion in progress has answered."""
        while not self._busy.acquire(timeout=0.05):
            if self._stop.is_set():
                return
        try:
            self._interrupt.clear()
            self.state.motion = "<auto land>"
            self._begin_span(TELLO_LAND_S * self.time_scale, {"z": 0.0})
            if self._stop.wait(TELLO_LAND_S * self.time_scale):
                return
            self._set(flying=False, z=0.0)
        finally:
            self._span = None
            self.state.motion = ""
            with self._lock:
                self._auto_landing = False
                self._abort_reason = None
            self._busy.release()

    # ------------------------------------------------------------------ video
    def _stream(self, on: bool) -> None:
        self.state.streaming = on
        if not on:
            if self.video is not None:
                self.video.stop()
            return
        if not self.video_enabled:
            return
        if self.video is None:
            self.video = VideoStreamer(self.renderer, self.pose, self._video_dest, self.video_sock, fps=self.fps)
        self.video.start()

    def _video_dest(self) -> tuple[str, int] | None:
        c = self._client
        return None if c is None else (c[0], self.video_port)

    # ------------------------------------------------------------------ reads and state
    def _readings(self) -> dict[str, Any]:
        st = self.state
        x, y, z, yaw = self.pose()
        pitch, roll, yaw_i = self._attitude()
        vx, vy, vz = self._velocity()
        templ = int(st.temp_c)
        return {
            "h": int(round(z)), "tof": max(int(round(z)), 10), "baro": z / 100, "yaw": yaw_i, "pitch": pitch,
            "roll": roll, "templ": templ, "temph": templ + 2, "bat": st.battery, "time": int(st.flight_time),
            "vgx": int(round(vx / 10)), "vgy": int(round(vy / 10)), "vgz": int(round(vz / 10)),
        }

    def _read(self, op: str) -> str:
        st = self.state
        r = self._readings()
        return {
            "battery?": str(r["bat"]),
            "speed?": str(int(st.speed)),
            "time?": f"{r['time']}s",
            "height?": f"{r['h'] // 10}dm",
            "temp?": f"{r['templ']}~{r['temph']}C",
            "attitude?": f"pitch:{r['pitch']};roll:{r['roll']};yaw:{r['yaw']};",
            "baro?": f"{r['baro']:.2f}",
            "tof?": f"{r['tof'] * 10}mm",
            "wifi?": "90",
            "sdk?": "20",
            "sn?": "0TQZSIMULATED",
            "active?": "ok",
        }[op]

    def state_packet(self) -> str:
        st = self.state
        r = self._readings()
        agz = -1000.0 if not st.motion else -990.0
        return (
            f"mid:-1;x:0;y:0;z:0;mpry:0,0,0;pitch:{r['pitch']};roll:{r['roll']};yaw:{r['yaw']};"
            f"vgx:{r['vgx']};vgy:{r['vgy']};vgz:{r['vgz']};templ:{r['templ']};temph:{r['temph']};"
            f"tof:{r['tof']};h:{r['h']};bat:{r['bat']};baro:{r['baro']:.2f};time:{r['time']};"
            f"agx:0.00;agy:0.00;agz:{agz:.2f};\r\n"
        )

    def _state_loop(self) -> None:
        period = 1.0 / self.state_hz if self.state_hz > 0 else 0.1
        while not self._stop.wait(period):
            self._tick()
            if not self.state.sdk or self._client is None or self.state_sock is None:
                continue
            try:
                self.state_sock.sendto(self.state_packet().encode("ascii"), (self._client[0], self.state_port))
            except OSError:
                pass


def _parse_video(spec: str) -> tuple[tuple[int, int], float] | None:
    """``WxH@FPS`` (``960x720@30``) -> ((W, H), fps); ``off`` -> None."""
    if spec.strip().lower() in ("off", "no", "none", "0"):
        return None
    size, _, fps = spec.lower().partition("@")
    w, _, h = size.partition("x")
    return (int(w), int(h)), float(fps or DEFAULT_FPS)


def load_scene(path: str) -> Scene:
    """A scene file: a YAML or JSON dict as ``Scene.from_dict`` reads it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        d = json.loads(text)
    else:
        import yaml  # noqa: PLC0415

        d = yaml.safe_load(text)
    if not isinstance(d, dict):
        raise ValueError(f"{path}: a scene is a dict with 'objects'")
    return Scene.from_dict(d)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Tello SDK 2.0 UDP simulator")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (own namespace recommended)")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=0.0)
    p.add_argument("--seconds", type=float, default=600.0, help="exit after this long")
    p.add_argument("--scene", help="YAML/JSON scene (Scene.from_dict) the camera sees")
    p.add_argument("--video", default="%dx%d@%g" % (*DEFAULT_FRAME_SIZE, DEFAULT_FPS),
                   help="camera stream after 'streamon': WxH@FPS (a real Tello: 960x720@30), or 'off'")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    video = _parse_video(a.video)
    scene = load_scene(a.scene) if a.scene else None
    kw: dict[str, Any] = {"scene": scene, "video": video is not None}
    if video is not None:
        kw["frame_size"], kw["fps"] = video
    with TelloSim(a.host, time_scale=a.time_scale, noise_cv=a.noise, **kw):
        what = "no video" if video is None else f"video {video[0][0]}x{video[0][1]}@{video[1]:g} after streamon"
        n = len(scene.objects) if scene else 0
        print(f"Tello simulator on {a.host}:{CONTROL_PORT} ({what}, {n} scene objects)", flush=True)
        try:
            time.sleep(a.seconds)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
