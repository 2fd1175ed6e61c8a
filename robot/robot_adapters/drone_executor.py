"""Tello drone skills executed with the real ``djitellopy.Tello`` client.

MiniSpec skills map to Tello SDK 2.0 commands (``takeoff``, ``land``, ``forward x``, ``cw x``
...). Commands go through ``send_control_command(cmd, timeout)`` with a timeout sized from the
execution-time model (3 x predicted + 5 s) instead of djitellopy's fixed 7 s, and the client
is created with ``retry_count=1``: djitellopy re-sends a command whose reply is late or an
error, and a re-sent ``forward 100`` would fly another metre. High-level skills are built
from the primitives: ``scan`` turns 30 degrees at a time until the object is in view
(at most 11 turns), ``orienting`` turns towards it, ``approach`` flies 100 cm forward, ``goto``
is orienting + a flight to about 1 m from it. Perception skills (``is_visible``, ``object_x``
... ``probe``) and the perception inside ``scan``, ``orienting`` and ``goto`` are answered by the
executor's perception port (:mod:`robot_adapters.perception.drone`): on a Tello, its own camera
(``streamon``, djitellopy's frame reader, every frame stamped here) through a detector, from a
frame decoded after the last motion and no older than the port's ``max_age_s``; a stale or
missing stream fails the skill with the reason. The simulated scene answers only for the unit
tests of plan execution that pass one.

What the drone feels comes from its state packets (djitellopy receives them at 10 Hz, each stamped
here on arrival: :func:`stamp_state_packets`): measured height (``h``, cm) and time-of-flight
distance to the floor (``tof``) feed the pose the geofence reads and the distance estimate of
``object_dis``; battery, temperature and the age of the newest packet (the link's health: a
drone out of Wi-Fi range or switched off stops sending them) go to ``/robot_status``
(:meth:`TelloExecutor.measured`). A command refused while the battery is at or below
``low_battery_pct`` (a Tello lands by itself then) fails with that reason.

``client_factory`` builds the Tello client; tests pass one that creates it inside the client
network namespace (see ``robot_adapters.sim.netns``).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.skills import TELLO_MINISPEC, SkillCall

from robot_adapters.executor import (Measured, Pose, SkillCancelled, SkillExecutionError, SkillExecutor,
                                     sleep_cancellable, takeoff_pose)
from robot_adapters.perception.drone import DronePerception, NoPerception, ScenePerception
from robot_adapters.perception.types import PerceptionError

#: key of the arrival time (time.monotonic) added to every state packet djitellopy parses
RECEIVED = "_received_monotonic"


def stamp_state_packets() -> None:
    """Make djitellopy stamp every state packet with its arrival time (``RECEIVED``).

    Its state receiver thread parses each packet into a new dict with ``Tello.parse_state`` and
    keeps only the newest, with no time: a drone that went silent would look as if its last
    packet were current. Idempotent; a packet's other fields are untouched."""
    from djitellopy import Tello

    parse = Tello.parse_state
    if getattr(parse, "stamps_arrival", False):
        return

    def parse_state(state: str) -> dict:
        parsed = parse(state)
        parsed[RECEIVED] = time.monotonic()
        return parsed

    parse_state.stamps_arrival = True  # type: ignore[attr-defined]
    Tello.parse_state = staticmethod(parse_state)  # type: ignore[method-assign]


MOVE_CMD = {"move_forward": "forward", "move_backward": "back", "move_left": "left",
            "move_right": "right", "move_up": "up", "move_down": "down"}
TURN_CMD = {"turn_cw": "cw", "turn_ccw": "ccw"}
PERCEPTION = ("is_visible", "object_x", "object_y", "object_width", "object_height", "object_dis", "probe")


#: Skills that move the drone (auto take-off before the first of them).
MOTION_SKILLS = frozenset({*MOVE_CMD, *TURN_CMD, "scan", "scan_abstract", "orienting", "approach", "goto"})


class TelloExecutor(SkillExecutor):
    robot_kind = "drone"
    skill_set = TELLO_MINISPEC
    #: the adapter's geofence reads :attr:`pose` after every motion this executor ran
    tracks_pose = True
    #: state packets older than this are not a measurement (the drone or its link went silent)
    STATE_MAX_AGE_S = 1.0

    def __init__(self, host: str, scene: Any = None, *,
                 client_factory: Callable[[], Any] | None = None,
                 model: ExecutionTimeModel | None = None, time_scale: float = 1.0,
                 auto_takeoff: bool = True, name: str = "",
                 perception: DronePerception | None = None,
                 perception_factory: Callable[["TelloExecutor"], DronePerception] | None = None,
                 low_battery_pct: float = 10.0) -> None:
        """``perception``: the drone's perception port; ``perception_factory``: builds it once
        the client is connected (the camera needs the client: :func:`camera_perception`);
        ``scene``: a simulated scene instead (unit tests of plan execution only); none of them:
        every perception skill fails, saying the drone has no perception source."""
        self.host = host
        self.name = name or f"Tello at {host}"
        # TypeFly-style plans assume an airborne drone: take off before the first motion.
        self.auto_takeoff = auto_takeoff
        self.flying = False
        self.scene = scene
        self._perception_factory = perception_factory
        self.perception: DronePerception = (ScenePerception(scene) if scene is not None
                                            else perception if perception is not None else NoPerception(self.name))
        self.client_factory = client_factory
        self.model = model or ExecutionTimeModel()
        self.time_scale = time_scale
        self.low_battery_pct = float(low_battery_pct)
        self.tello = None
        self.sent: list[str] = []
        #: x, y (dead-reckoned from commanded motions), z (measured height when the drone reports
        #: it), yaw (measured when reported): cm and degrees from the take-off point
        self.pose: list[float] = list(scene.pose) if scene is not None else [0.0, 0.0, 0.0, 0.0]
        self._state_seen: tuple[int, float] = (0, 0.0)  # (id of the last state dict, when it changed)
        self._lock = threading.Lock()

    def connect(self) -> None:
        from timely_robot.logging_setup import quiet_djitellopy

        stamp_state_packets()
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
            raise SkillExecutionError(f"{self.name} does not answer the Tello SDK on UDP 8889 ({e}): check "
                                      "that it is on, that this machine is on its Wi-Fi, and `host:` in the "
                                      "fleet YAML") from None
        if self._perception_factory is not None:
            try:
                self.perception = self._perception_factory(self)
            except Exception as e:  # noqa: BLE001 - no stream: one sentence, the robot is not used
                raise SkillExecutionError(f"{self.name}: its camera stream did not start ({e})") from None

    # ------------------------------------------------------------------ measured state
    def _newest_state(self) -> tuple[dict, float] | None:
        """The newest state packet and its age in seconds (None: none has come yet)."""
        if self.tello is None:
            return None
        try:
            st = self.tello.get_current_state()
        except Exception:  # noqa: BLE001 - no state receiver (a fake client)
            return None
        if not isinstance(st, dict) or not st:
            return None
        now = time.monotonic()
        received = st.get(RECEIVED)
        if not isinstance(received, float):  # a client that does not stamp: when it was first seen
            if id(st) != self._state_seen[0]:  # djitellopy parses every packet into a new dict
                self._state_seen = (id(st), now)
            received = self._state_seen[1]
        return st, max(0.0, now - received)

    def _state(self) -> dict | None:
        """The last state packet, None when none came in the last ``STATE_MAX_AGE_S``."""
        newest = self._newest_state()
        return newest[0] if newest is not None and newest[1] <= self.STATE_MAX_AGE_S else None

    def measured(self) -> Measured:
        newest = self._newest_state()
        if newest is None:
            return Measured()
        st, age = newest
        if age > self.STATE_MAX_AGE_S:  # silent: only how long, nothing it said is current
            return Measured(link_age_s=age)

        def num(key: str) -> float:
            try:
                return float(st[key])
            except (KeyError, TypeError, ValueError):
                return -1.0

        lo, hi = num("templ"), num("temph")
        return Measured(battery_pct=num("bat"), temperature_c=(lo + hi) / 2 if lo >= 0 and hi >= 0 else -1.0,
                        height_cm=num("h") if self.flying else 0.0, link_age_s=age)

    def measured_pose(self) -> Pose | None:
        """Where the drone is relative to its take-off point: the pose its geofence reads
        (commanded x and y, measured height and yaw where the drone reports them)."""
        return takeoff_pose(list(self.pose))

    def scene_view(self) -> list[str] | None:
        """The objects on the newest camera frame (the detector runs once per frame), or None."""
        camera = getattr(self.perception, "camera", None)
        if camera is None:
            return None
        from timely_robot.perceivable import scene_entry

        try:
            _frame, found = camera.detect()
        except PerceptionError:
            return None
        return [scene_entry(d.label, d.box) for d in sorted(found, key=lambda d: -d.score)]

    def measured_height_cm(self) -> float | None:
        """Height above the floor: time-of-flight (cm) when the drone reports it, else ``h``."""
        st = self._state()
        if st is None:
            return None
        for key in ("tof", "h"):
            try:
                v = float(st[key])
            except (KeyError, TypeError, ValueError):
                continue
            if v > 0:
                return v
        return None

    def _settle_pose(self) -> None:
        """After a motion: measured height and yaw where the drone reports them; the perception
        port learns that the view changed."""
        st = self._state()
        if st is not None:
            try:
                if self.flying:
                    self.pose[2] = float(st["h"])
                self.pose[3] = float(st["yaw"])
            except (KeyError, TypeError, ValueError):
                pass
        self.perception.moved(list(self.pose))

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
            bat = self.measured().battery_pct
            if "battery" in str(resp).lower() or 0 <= bat <= self.low_battery_pct:
                self.flying = self.flying and "land" not in str(resp).lower() and not 0 <= bat <= self.low_battery_pct
                raise SkillExecutionError(f"{self.name}: low battery ({bat:.0f}%): the drone landed or refused "
                                          f"'{cmd}' ({resp})")
            raise SkillExecutionError(f"Tello refused '{cmd}': {resp}")

    def _move(self, name: str, d: int, cancel: threading.Event) -> None:
        call = SkillCall(name, (d,))
        self._send(f"{MOVE_CMD[name]} {d}", call, cancel)
        x, y, z, yaw = self.pose
        rad = math.radians(yaw)
        fwd = {"move_forward": d, "move_backward": -d}.get(name, 0)
        side = {"move_right": d, "move_left": -d}.get(name, 0)
        dz = {"move_up": d, "move_down": -d}.get(name, 0)
        self.pose[:] = [x + fwd * math.cos(rad) - side * math.sin(rad),
                        y + fwd * math.sin(rad) + side * math.cos(rad), z + dz, yaw]
        self._settle_pose()

    def _turn(self, name: str, deg: int, cancel: threading.Event) -> None:
        self._send(f"{TURN_CMD[name]} {deg}", SkillCall(name, (deg,)), cancel)
        yaw = self.pose[3] + (deg if name == "turn_cw" else -deg)
        self.pose[3] = (yaw + 180.0) % 360.0 - 180.0
        self._settle_pose()

    def _orient(self, obj: str, cancel: threading.Event) -> bool:
        b = self.perception.bearing_to(obj, cancel)
        if b is None:
            return False
        deg = int(round(abs(b)))
        if deg >= 5:
            self._turn("turn_cw" if b > 0 else "turn_ccw", min(deg, 360), cancel)
        return True

    # ------------------------------------------------------------------ skills
    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        try:
            return self._execute(call, cancel)
        except PerceptionError as e:  # a stale or missing source fails the skill, with its reason
            raise SkillExecutionError(f"{call}: {e}") from None

    def _execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        n, a = call.name, call.args
        p = self.perception
        if self.auto_takeoff and not self.flying and n in MOTION_SKILLS:
            self.execute(SkillCall("takeoff"), cancel)
        if n in MOVE_CMD:
            self._move(n, int(a[0]), cancel)
        elif n in TURN_CMD:
            self._turn(n, int(a[0]), cancel)
        elif n == "takeoff":
            self._send("takeoff", call, cancel)
            self.flying = True
            self.pose[2] = 80.0
            self._settle_pose()
        elif n == "land":
            self._send("land", call, cancel)
            self.flying = False
            self.pose[2] = 0.0
            self._settle_pose()
        elif n in PERCEPTION:
            return getattr(p, n)(*a, cancel=cancel)
        elif n == "scan":
            for i in range(12):
                if p.is_visible(a[0], cancel):
                    return True
                if i < 11:
                    self._turn("turn_cw", 30, cancel)
            return False
        elif n == "scan_abstract":
            for i in range(12):
                ans = p.probe(a[0], cancel)
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
            dist = p.object_dis(a[0], cancel)
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


def camera_perception(robot_id: str, detector: Any, *, max_age_s: float = 1.0, settle_s: float = 0.3,
                      min_score: float = 0.0, vlm: Any = None,
                      in_client: Callable[[Callable[[], Any]], Any] | None = None
                      ) -> Callable[[TelloExecutor], DronePerception]:
    """A ``perception_factory`` for a Tello's own camera: ``streamon`` (and ``port`` when the
    client listens for video elsewhere than 11111), djitellopy's frame reader with every frame
    stamped, the detector on demand. ``in_client`` runs the reader's socket creation in the
    client's network namespace (the simulator's tests and ``tello-sim``)."""
    from robot_adapters.perception.camera import CameraPerception, make_stamped_reader
    from robot_adapters.perception.drone import CameraDronePerception

    def build(ex: TelloExecutor) -> DronePerception:
        tello = ex.tello
        port = int(getattr(tello, "vs_udp_port", 11111))
        if port != 11111:
            tello.change_vs_udp(port)
        tello.streamon()
        reader = (in_client or (lambda f: f()))(lambda: make_stamped_reader(tello))
        cam = CameraPerception(robot_id, reader.latest, detector, max_age_s=max_age_s, settle_s=settle_s,
                               min_score=min_score)
        return CameraDronePerception(cam, height_cm=ex.measured_height_cm, vlm=vlm)

    return build


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    v = fn()
    return v, time.monotonic() - t0
