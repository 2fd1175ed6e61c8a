"""What the drone adapter feels through djitellopy's state packets, against the Tello simulator:
measured battery, temperature and height on the status link, the pose the geofence reads, a
landing on low battery that ends the skill with that reason, and the link's age: a drone that
goes silent is reported as silent, with nothing it said before passed off as current."""

from __future__ import annotations

import threading
import time

import pytest

djitellopy = pytest.importorskip("djitellopy")

from timely_robot.skills import SkillCall  # noqa: E402
from robot_adapters.drone_executor import TelloExecutor  # noqa: E402
from robot_adapters.executor import SkillExecutionError  # noqa: E402
from robot_adapters.sim.tello_sim import TelloSim  # noqa: E402

SCALE = 0.2


def test_measured_state_and_a_low_battery_landing(tello_net):
    ip = tello_net.sim_ips[0]
    sim = tello_net.in_sim(lambda: TelloSim(ip, time_scale=SCALE, battery=50, video=False).start())
    ex = TelloExecutor(ip, name="tello_9", time_scale=SCALE,
                       client_factory=lambda: tello_net.in_client(lambda: djitellopy.Tello(host=ip, retry_count=1)))
    try:
        ex.connect()
        cancel = threading.Event()
        ex.execute(SkillCall("move_up", (50,)), cancel)  # takes off first (auto take-off), then climbs
        # the height the geofence reads is the drone's own measurement (80 cm take-off + 50 cm), from
        # its state packets (10 per second): the one sent after the climb ended may be a moment away
        deadline = time.monotonic() + 2.0
        while True:
            m = ex.measured()
            if abs(m.height_cm - 130) <= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert 45 <= m.battery_pct <= 50 and m.temperature_c >= 60
        assert m.height_cm == pytest.approx(130, abs=2) and ex.pose[2] == pytest.approx(130, abs=2)
        assert 0 <= m.link_age_s <= 0.5  # packets at 10 Hz, each stamped on arrival
        sim.set_battery(9)  # below the Tello's 10 %: it lands by itself during the next motion
        with pytest.raises(SkillExecutionError, match=r"tello_9: low battery \(\d+%\)"):
            ex.execute(SkillCall("move_forward", (200,)), cancel)
        assert not ex.flying
        sim.stop()  # the drone goes silent (switched off, out of Wi-Fi range)
        time.sleep(1.5)
        m = ex.measured()
        assert m.link_age_s >= 1.4 and (m.battery_pct, m.temperature_c, m.height_cm) == (-1, -1, -1), m
    finally:
        ex.close()
        sim.stop()
