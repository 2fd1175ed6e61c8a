"""Indy7-class arm skills executed through the real ``neuromeka.IndyDCP3`` gRPC client.

Skills of ``INDY7_ARM`` map to IndyDCP3 calls:

* ``move_to(x, y, z[, yaw])`` -> ``movel([x, y, z, 180, 0, yaw])`` (tool pointing down), then
  poll ``get_motion_data()`` until ``is_target_reached`` (cancellable, with a timeout that comes
  from the distance: 3 x nominal + 5 s);
* ``home`` -> ``move_home()`` (``GetHomePosition`` + ``movej``);
* ``open_gripper`` / ``close_gripper`` -> ``set_do([(GRIP_DO, state)])`` then poll ``get_di()``
  until the gripper sensor agrees;
* ``pick(obj)``: object position from the robot's :class:`ObjectSource` -> open, above, down,
  close, then the finger sensor (DI ``FINGERS_CLOSED_DI``): fully closed means nothing is held,
  the gripper opens again and the skill fails; else up, holding ``obj``;
* ``place(obj, target)``: must hold ``obj``; above target, down, open, up;
* ``push(obj, distance)``: behind the object, down, push along +x, up;
* ``wipe(area)``: a 3-stroke zig-zag over the named area; ``look(obj)`` -> whether the source
  knows where ``obj`` is now;
* ``wait(s)``: cancellable sleep.

Object positions come from the robot's declared source (``robots[].perception``, see
:mod:`robot_adapters.perception.arm_sources`: a workspace map, a detections topic, or the
simulator's scene). Every pose a skill derives from a perceived position (grasp, approach,
release, push and wipe waypoints) must lie inside the arm's workspace box, the ``move_to`` safe
ranges of ``INDY7_ARM`` (:data:`WORKSPACE_BOX`): otherwise the skill fails before its first
command. The executor keeps what the gripper holds from the finger sensor, not from a simulator.

Any ``Response`` with a non-zero ``code`` or a gRPC error becomes :class:`SkillExecutionError`
with the controller's message. ``stop()`` sends ``stop_motion`` (cancellation).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from timely_robot.execution_time import ARM_MOVE_BASE_S, ARM_TCP_SPEED_MM_S
from timely_robot.skills import INDY7_ARM, SkillCall

from robot_adapters.executor import SkillCancelled, SkillExecutionError, SkillExecutor, SkillTimeout, sleep_cancellable

GRIP_DO = 0
GRIP_DI = 0
#: finger sensor: 1 when the closed gripper's fingers went all the way (nothing between them)
FINGERS_CLOSED_DI = 1
APPROACH_MM = 100.0
PLACE_ABOVE_MM = 30.0  # a placed object is released this far above its target
GRIP_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 3.0
#: the IndyDCP3 services this executor calls, as (the client's channel attribute, port)
_CHANNELS = (("control_channel", 20001), ("device_channel", 20002), ("config_channel", 20003),
             ("rtde_channel", 20004))


def _workspace_box() -> tuple[tuple[float, float], ...]:
    args = {a.name: a for a in INDY7_ARM.spec("move_to").args}
    return tuple((float(args[k].min), float(args[k].max)) for k in ("x", "y", "z"))  # type: ignore[arg-type]


#: The arm's workspace box, ((x_min, x_max), (y_min, y_max), (z_min, z_max)) in mm: the safe
#: ranges of ``move_to`` in ``INDY7_ARM``, which every pose derived from a perceived object
#: must respect too.
WORKSPACE_BOX = _workspace_box()

Pose = tuple[float, float, float]


def _fmt(p: Any) -> str:
    return "(" + ", ".join(f"{float(v):g}" for v in p) + ")"


def box_text(box: tuple[tuple[float, float], ...] = WORKSPACE_BOX) -> str:
    return ", ".join(f"{k} {lo:g}..{hi:g}" for k, (lo, hi) in zip("xyz", box)) + " mm"


class IndyArmExecutor(SkillExecutor):
    """An Indy7-class arm over IndyDCP3.

    ``source``: where the arm's objects are (an :class:`~robot_adapters.perception.arm_sources.ObjectSource`,
    or None: skills that name an object fail). A simulator :class:`~robot_adapters.scene.Scene`,
    given as ``source`` or ``scene=``, is wrapped in a ``SceneSource`` (existing callers of the
    fake arm). ``check_workspace``: refuse derived poses outside :data:`WORKSPACE_BOX` (default:
    on, except for a simulator scene, whose fake arm refuses unreachable targets itself)."""

    robot_kind = "arm"
    skill_set = INDY7_ARM

    def __init__(self, robot_ip: str = "127.0.0.1", source: Any = None, *, scene: Any = None, vel_ratio: int = 15,
                 time_scale: float = 1.0, poll_s: float = 0.02, release_on_halt: bool = True,
                 check_workspace: bool | None = None, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        from robot_adapters.perception.arm_sources import DetectionsSource, SceneSource
        from robot_adapters.scene import Scene

        if isinstance(source, Scene):  # IndyArmExecutor(host, scene): the fake arm's existing callers
            source, scene = None, source
        if source is None and scene is not None:
            source = SceneSource(scene)
        self.robot_ip = robot_ip
        self.source = source
        self.scene = scene  # the simulator's scene, if any (read by tests; never by the skills)
        #: the source the adapter's ROS node feeds from its ``topic`` (None: nothing to subscribe)
        self.detections_source = source if isinstance(source, DetectionsSource) else None
        self.check_workspace = (not isinstance(source, SceneSource)) if check_workspace is None else check_workspace
        self.release_on_halt = release_on_halt
        self.vel_ratio = vel_ratio
        self.time_scale = time_scale  # only to size timeouts when the fake arm runs faster
        self.poll_s = poll_s
        self.connect_timeout_s = connect_timeout_s
        self.client = None
        self._pose: list[float] | None = None
        #: what the gripper holds, from the finger sensor, and where it was picked (a halt puts it back)
        self.held: str | None = None
        self._picked_at: Pose | None = None
        #: a grasp under way (object, pick position) and whether the close command went out: if
        #: it is interrupted, the halt treats the object as held and puts it back
        self._grasping: tuple[str, Pose] | None = None
        self._grip_closed = False

    # ------------------------------------------------------------------ connection
    def connect(self) -> None:
        """Open the IndyDCP3 channels and read the pose. An arm that does not answer within
        ``connect_timeout_s`` (or refuses the connection) is one SkillExecutionError sentence."""
        import grpc
        from neuromeka import IndyDCP3

        client = IndyDCP3(self.robot_ip)
        deadline = time.monotonic() + self.connect_timeout_s
        try:
            for attr, port in _CHANNELS:
                why = self._wait_ready(getattr(client, attr), deadline)
                if why is not None:
                    raise SkillExecutionError(self._unreachable(port, why))
            try:
                data = client.get_control_data()
            except grpc.RpcError as e:
                raise SkillExecutionError(self._unreachable(_CHANNELS[3][1], e.code().name)) from None
        except BaseException:
            client.__del__()  # IndyDCP3 closes its channels there
            raise
        self.client = client
        self._pose = [float(v) for v in data.get("p", [])] or None

    def _unreachable(self, port: int, why: str) -> str:
        return (f"arm at {self.robot_ip} does not answer IndyDCP3 on port {port} ({why}): check that it is "
                "powered, on this network, and that `host:` in the fleet YAML is its address")

    def _wait_ready(self, channel: Any, deadline: float) -> str | None:
        """None once ``channel`` is READY; else why not: UNAVAILABLE as soon as the connection
        fails (refused, no route), or 'no answer in N s' at ``deadline`` (nothing answers)."""
        import grpc

        done = (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                grpc.ChannelConnectivity.SHUTDOWN)
        settled = threading.Event()
        last: list[Any] = []

        def on_state(state: Any) -> None:
            last.append(state)
            if state in done:
                settled.set()

        channel.subscribe(on_state, try_to_connect=True)
        try:
            settled.wait(max(0.0, deadline - time.monotonic()))
        finally:
            channel.unsubscribe(on_state)
        state = last[-1] if last else None
        if state == grpc.ChannelConnectivity.READY:
            return None
        if state in done:
            return "UNAVAILABLE"
        return f"no answer in {self.connect_timeout_s:g} s"

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
        gripper. The phrase says what the gripper holds afterwards. A grasp interrupted after
        the close command counts as held (opening where it was picked is harmless if it missed)."""
        self.stop()
        if self.client is None:
            return "stopped (arm not connected)"
        held, where = self.held, self._picked_at
        if held is None and self._grasping is not None and self._grip_closed:
            held, where = self._grasping
        self._grasping = None
        if not held:
            return "stopped, gripper empty"
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
            self.held, self._picked_at = held, where
            return f"stopped, gripper holds '{held}' (could not put it back: {e})"
        self.held, self._picked_at = None, None
        self._follow(held, where)
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

    def _gripper(self, close: bool, cancel: threading.Event) -> dict[int, int]:
        """Command the gripper and wait until its sensor agrees; returns the digital inputs read then."""
        if cancel.is_set():  # a pick or place cancelled on its way down grips or drops nothing
            raise SkillCancelled("cancelled")
        self._rpc(self.client.set_do, [(GRIP_DO, 1 if close else 0)])  # DigitalState OFF=0, ON=1
        self._grip_closed = close
        deadline = time.monotonic() + GRIP_TIMEOUT_S * max(self.time_scale, 0.1)
        while True:
            di = self._rpc(self.client.get_di)
            states = {int(s.get("address", 0)): int(s.get("state", 0)) for s in di.get("signals", [])}
            if states.get(GRIP_DI, 0) == (1 if close else 0):
                return states
            if cancel.is_set():
                raise SkillCancelled("cancelled during gripper motion")
            if time.monotonic() > deadline:
                raise SkillTimeout("gripper sensor did not confirm")
            time.sleep(self.poll_s)

    def _locate(self, name: str) -> Pose:
        """The object's position from the source; a source that cannot answer fails the skill."""
        from robot_adapters.perception.types import PerceptionError

        if self.source is None:
            raise SkillExecutionError(f"cannot locate '{name}': this arm has no perception source "
                                      "(robots[].perception in the fleet YAML)")
        try:
            x, y, z = self.source.position(name)
        except PerceptionError as e:
            raise SkillExecutionError(str(e)) from None
        return (float(x), float(y), float(z))

    def _check(self, name: str, pos: Pose, waypoints: list[Pose]) -> list[Pose]:
        """``waypoints`` if every one lies in :data:`WORKSPACE_BOX`; else SkillExecutionError
        naming the object, its position and the box (before any command is sent)."""
        if not self.check_workspace:
            return waypoints
        for w in sorted(waypoints, key=lambda w: w != pos):  # the object's own position first
            if any(not lo <= v <= hi for v, (lo, hi) in zip(w, WORKSPACE_BOX)):
                what = "is" if w == pos else f"needs the waypoint {_fmt(w)},"
                raise SkillExecutionError(f"'{name}' at {_fmt(pos)} mm {what} outside the arm's workspace box "
                                          f"{box_text()}: refused before any motion")
        return waypoints

    def _follow(self, name: str, position: Pose | None) -> None:
        follow = getattr(self.source, "follow", None)
        if follow is not None:
            follow(name, position)

    # ------------------------------------------------------------------ skills
    def execute(self, call: SkillCall, cancel: threading.Event) -> Any:
        n, a = call.name, call.args
        self._grasping = None  # an interrupted grasp is the business of the halt that followed it
        if n == "move_to":
            yaw = a[3] if len(a) > 3 else 0.0
            self._movel(a[0], a[1], a[2], yaw, cancel)
        elif n == "home":
            self._rpc(self.client.move_home)
            self._wait_motion(ARM_MOVE_BASE_S + 800.0 / ARM_TCP_SPEED_MM_S, cancel)
        elif n == "open_gripper":
            self._gripper(False, cancel)
            if self.held is not None:  # released where the tool is
                released, self.held, self._picked_at = self.held, None, None
                if self._pose:
                    self._follow(released, (self._pose[0], self._pose[1], self._pose[2]))
        elif n == "close_gripper":
            self._gripper(True, cancel)
        elif n == "pick":
            self._pick(a[0], cancel)
        elif n == "place":
            obj, target = a[0], a[1]
            if self.held != obj:
                raise SkillExecutionError(f"cannot place '{obj}': not holding it"
                                          + (f" (the gripper holds '{self.held}')" if self.held else ""))
            pos = self._locate(target)
            x, y, z = pos
            above, release = (x, y, z + APPROACH_MM + PLACE_ABOVE_MM), (x, y, z + PLACE_ABOVE_MM)
            self._check(target, pos, [above, release])
            self._movel(*above, 0.0, cancel)
            self._movel(*release, 0.0, cancel)
            self._gripper(False, cancel)
            self.held, self._picked_at = None, None  # released here: no longer to be put back
            self._follow(obj, release)
            self._movel(*above, 0.0, cancel)
        elif n == "push":
            pos = self._locate(a[0])
            x, y, z = pos
            d = float(a[1])
            path = self._check(a[0], pos, [(x - 60.0, y, z + APPROACH_MM), (x - 60.0, y, z), (x - 60.0 + d, y, z),
                                           (x - 60.0 + d, y, z + APPROACH_MM)])
            for w in path[:3]:
                self._movel(*w, 0.0, cancel)
            self._follow(a[0], (x + d, y, z))
            self._movel(*path[3], 0.0, cancel)
        elif n == "wipe":
            pos = self._locate(a[0])
            x, y, z = pos
            strokes = [(x + sx, y + dy, z + 5.0) for dy in (-60.0, 0.0, 60.0) for sx in (-80.0, 80.0)]
            for w in self._check(a[0], pos, strokes + [(x, y, z + APPROACH_MM)]):
                self._movel(*w, 0.0, cancel)
        elif n == "look":
            return self._look(a[0])
        elif n == "wait":
            sleep_cancellable(float(a[0]) * self.time_scale, cancel)
        else:
            raise SkillExecutionError(f"arm cannot execute '{n}'")
        return None

    def _pick(self, name: str, cancel: threading.Event) -> None:
        if self.held is not None:
            raise SkillExecutionError(f"gripper already holds '{self.held}'")
        pos = self._locate(name)
        x, y, z = pos
        above = (x, y, z + APPROACH_MM)
        self._check(name, pos, [above, pos])
        self._gripper(False, cancel)
        self._movel(*above, 0.0, cancel)
        self._movel(*pos, 0.0, cancel)
        if cancel.is_set():  # cancelled on the way down: nothing grasped
            raise SkillCancelled("cancelled")
        # from the close command on, until the finger sensor answers, a halt (after a cancel, a
        # timeout, an error) treats the object as held and puts it back here
        self._grasping = (name, pos)
        fingers = self._gripper(True, cancel)
        if fingers.get(FINGERS_CLOSED_DI, 0) == 1:  # the fingers closed on nothing
            self._grasping = None
            self._gripper(False, cancel)
            self._movel(*above, 0.0, cancel)
            raise SkillExecutionError(f"grasp of '{name}' missed: the gripper closed fully, nothing held")
        self._grasping = None
        self.held, self._picked_at = name, pos
        self._follow(name, None)
        self._movel(*above, 0.0, cancel)

    def _look(self, name: str) -> bool:
        """Whether the source knows where ``name`` is now (the held object: True)."""
        from robot_adapters.perception.arm_sources import SourceSilent
        from robot_adapters.perception.types import PerceptionError

        if name == self.held:
            return True
        if self.source is None:
            raise SkillExecutionError(f"cannot look for '{name}': this arm has no perception source "
                                      "(robots[].perception in the fleet YAML)")
        try:
            self.source.position(name)
        except SourceSilent as e:  # a silent camera topic is no answer, not 'not seen'
            raise SkillExecutionError(str(e)) from None
        except PerceptionError:
            return False
        return True
