"""Real djitellopy against the Tello SDK 2.0 simulator, in a private network namespace pair."""

from __future__ import annotations

import math
import socket
import time

import pytest

djitellopy = pytest.importorskip("djitellopy")

from timely_robot.execution_time import ExecutionTimeModel  # noqa: E402
from timely_robot.skills import TELLO_MINISPEC as T  # noqa: E402
from robot_adapters.sim.tello_sim import TelloSim  # noqa: E402

SCALE = 0.5  # simulator runs twice as fast; measured durations are divided by it


@pytest.fixture()
def sim(tello_net, request):
    ip = tello_net.sim_ips[getattr(request, "param", 0)]
    s = tello_net.in_sim(lambda: TelloSim(ip, time_scale=SCALE).start())
    try:
        yield s
    finally:
        s.stop()


def _tello(net, ip):
    def make():
        t = djitellopy.Tello(host=ip, retry_count=1)
        return t

    return net.in_client(make)


def test_djitellopy_takeoff_move_rotate_land(tello_net, sim):
    model = ExecutionTimeModel()
    tello = _tello(tello_net, sim.host)
    tello.connect()  # "command", then waits for a state packet on 8890
    assert tello.get_battery() == 87  # from the state packet
    assert tello.query_battery() == 87  # "battery?" read command
    plan = [
        (T.validate("to", []), lambda: tello.takeoff()),
        (T.validate("mf", [100]), lambda: tello.move_forward(100)),
        (T.validate("tc", [90]), lambda: tello.rotate_clockwise(90)),
        (T.validate("lnd", []), lambda: tello.land()),
    ]
    measured = []
    for call, do in plan:
        t0 = time.monotonic()
        do()
        measured.append((time.monotonic() - t0) / SCALE)
    cmds = [c for c in sim.commands() if c not in ("battery?",)]
    assert cmds == ["command", "takeoff", "forward 100", "cw 90", "land"]
    assert all(r == "ok" for _, c, r in sim.log if c != "battery?")
    for (call, _), m in zip(plan, measured):
        want = model.predict("tello", "drone", [call])
        # djitellopy polls its response list every 0.1 s: add that to the model's band
        assert abs(m - want) <= model.tolerance("drone", call) + 0.1 / SCALE, (call, m, want)
    time.sleep(0.3)
    assert tello.get_yaw() == 90 and tello.get_height() == 0
    tello.end()


@pytest.mark.parametrize("sim", [1], indirect=True)
def test_errors_and_ranges(tello_net, sim):
    tello = _tello(tello_net, sim.host)
    tello.connect()
    with pytest.raises(djitellopy.TelloException, match="not flying"):
        tello.move_forward(100)
    tello.send_control_command("speed 100")
    tello.takeoff()
    with pytest.raises(djitellopy.TelloException, match="out of range"):
        tello.move_forward(10)
    with pytest.raises(djitellopy.TelloException, match="out of range"):
        tello.rotate_clockwise(400)
    assert tello.query_speed() == 100
    assert tello.send_command_with_return("flip x") .startswith("error")
    tello.land()
    assert "error" not in sim.log[-1][2]
    tello.end()


def test_simulator_not_reachable_outside_namespaces(tello_net):
    # The host network stack has no route to the simulator's private address.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ip_cmd = __import__("subprocess").run(["ip", "-4", "addr"], capture_output=True, text=True)
        assert tello_net.sim_ips[0] not in ip_cmd.stdout
        assert tello_net.client_ip not in ip_cmd.stdout
    finally:
        s.close()


@pytest.mark.parametrize("sim", [2], indirect=True)
def test_minispec_segment_through_executor(tello_net, sim):
    """A MiniSpec segment, interpreted and executed with djitellopy against the simulator."""
    import threading

    from robot_adapters.drone_executor import TelloExecutor
    from timely_robot.minispec_interpreter import MiniSpecInterpreter

    model = ExecutionTimeModel()
    ex = TelloExecutor(sim.host, client_factory=lambda: _tello(tello_net, sim.host),
                       time_scale=SCALE)
    ex.connect()
    timings = []

    def call_skill(call):
        t0 = time.monotonic()
        v = ex.execute(call, threading.Event())
        timings.append((call, (time.monotonic() - t0) / SCALE))
        return v

    MiniSpecInterpreter(T, call_skill).run_text("to;mf,100;tc,90;lnd;")
    assert [c for c in sim.commands() if not c.endswith("?")] == [
        "command", "takeoff", "forward 100", "cw 90", "land"]
    # landed 1 m ahead of its take-off point (the pose its geofence reads), in the status link's axes
    x, y, z, yaw = ex.measured_pose()
    assert (x, y, z) == pytest.approx((1.0, 0.0, 0.0)) and yaw == pytest.approx(-math.radians(ex.pose[3]))
    for call, m in timings:
        want = model.predict("tello", "drone", [call])
        assert abs(m - want) <= model.tolerance("drone", call) + 0.1 / SCALE, (call, m, want)
    ex.close()


@pytest.mark.parametrize("sim", [1], indirect=True)
def test_plan_without_takeoff_takes_off_once_before_the_first_motion(tello_net, sim):
    """TypeFly-style plans assume an airborne drone: the executor takes off by itself, once."""
    import threading

    from robot_adapters.drone_executor import TelloExecutor
    from timely_robot.minispec_interpreter import MiniSpecInterpreter

    ex = TelloExecutor(sim.host, client_factory=lambda: _tello(tello_net, sim.host), time_scale=SCALE)
    ex.connect()
    try:
        MiniSpecInterpreter(T, lambda call: ex.execute(call, threading.Event())).run_text("tc,30;mf,50;tu,30;")
        assert [c for c in sim.commands() if not c.endswith("?")] == [
            "command", "takeoff", "cw 30", "forward 50", "ccw 30"]
    finally:
        ex.close()


@pytest.mark.parametrize("sim", [3], indirect=True)
@pytest.mark.parametrize("moving", [False, True])
def test_a_halt_leaves_no_reply_for_the_next_command(tello_net, sim, moving):
    """A stop (a goal that ended early) is answered ``ok`` by the drone, and an interrupted
    motion ``error stopped``. djitellopy hands a command the oldest reply waiting, so a reply
    left over from the halt would answer the next goal's first command at once, before the
    drone moved: the next motion must take its own time and move the drone."""
    import threading

    from robot_adapters.drone_executor import TelloExecutor
    from robot_adapters.executor import SkillCancelled

    model = ExecutionTimeModel()
    ex = TelloExecutor(sim.host, client_factory=lambda: _tello(tello_net, sim.host), time_scale=SCALE)
    ex.connect()
    try:
        ex.execute(T.validate("to", []), threading.Event())
        if moving:  # halted during a motion: the motion is cancelled, then the drone stops
            cancel = threading.Event()
            t = threading.Thread(target=lambda: pytest.raises(SkillCancelled, ex.execute,
                                                              T.validate("mf", [200]), cancel))
            t.start()
            time.sleep(0.4)
            cancel.set()
            ex.halt()
            t.join(10)
        else:  # halted between segments
            ex.halt()
        time.sleep(0.5)  # every reply of the halt has arrived
        x0 = sim.state.x
        call = T.validate("mf", [100])
        t0 = time.monotonic()
        ex.execute(call, threading.Event())
        took = (time.monotonic() - t0) / SCALE
        want = model.predict("tello", "drone", [call])
        assert abs(took - want) <= model.tolerance("drone", call) + 0.1 / SCALE, (took, want)
        assert sim.state.x != x0
    finally:
        ex.close()
