"""A Nav2 base through a planner takeover, as a team runs it: the adapters (the base on the Nav2
protocol simulator), an active planner and a standby as three `timely-fleet up` processes on a
signed link, and `timely-fleet goal base_1 "gt,lab;"` (dock -> lab, about 22 m; scripted engine:
the instruction is the plan). The active planner is SIGKILLed while the base drives: the standby
takes over within the lease, the base's lease does not run out (it is never stopped), the one
Nav2 goal drives on to the end (no second NavigateToPose: the re-sent segment is answered from
the adapter's sequence numbers), and the CLI prints one SUCCEEDED with the base at the lab."""

from __future__ import annotations

import math
import re
import signal
import subprocess
import threading
import time

import pytest
import yaml
from testkit import wait_until

from tests.e2e.test_base_processes import PLACES, SCALE, Watcher
from tests.e2e.test_first_user import ROOT, TF, Up

pytestmark = pytest.mark.ros


def fleet_yaml(path) -> str:
    path.write_text(yaml.safe_dump({
        "planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 30.0},
        "security": {"mode": "sign", "keystore": str(path.parent / "keys"), "lease_s": 3.0, "lease_grace_s": 2.0},
        "robots": [{"id": "base_1", "kind": "base", "adapter": "nav2-sim", "places": PLACES}]}))
    return str(path)


def test_a_bases_navigation_goes_on_through_a_standbys_takeover(tmp_path, own_ros_domain):
    from action_msgs.msg import GoalStatus

    params = fleet_yaml(tmp_path / "fleet.yaml")
    adapters = Up("--params", params, "--only", "adapters", "--time-scale", SCALE)
    active = Up("--params", params, "--only", "planner", "--time-scale", SCALE)
    standby = Up("--params", params, "--standby", "--time-scale", SCALE)
    watch = Watcher(own_ros_domain)
    goal = None
    try:
        for proc in (adapters, active, standby):
            proc.wait_ready(90)
        goal = subprocess.Popen([*TF, "goal", "base_1", "gt,lab;", "--wait", "30", "--timeout", "120"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(ln.rstrip("\n") for ln in goal.stdout), daemon=True)
        reader.start()
        assert wait_until(lambda: watch.speed() > 0.2, 60), ("the base never moved", lines, adapters.lines[-20:])
        time.sleep(1.0)
        at_kill = len(standby.lines)
        active.proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        assert active.proc.wait(timeout=10) == -signal.SIGKILL
        assert goal.wait(timeout=120) == 0, "\n".join([*lines, "--- standby ---", *standby.lines[-20:],
                                                        "--- adapters ---", *adapters.lines[-30:], str(watch.nav),
                                                        f"pose {watch.pose}, moving until "
                                                        f"{max((t - killed_at for t, v, _w in watch.odom if v > 0.01), default=None)} s "
                                                        "after the kill"])
        reader.join(timeout=5)
        out = "\n".join(lines)
        assert len(re.findall(r"^(SUCCEEDED|ROBOT_FAILED|TIMEOUT|CANCELLED|REJECTED|INVALID_PLAN|NOT_ACHIEVED)\b",
                              out, re.M)) == 1, out
        assert re.search(r"^SUCCEEDED: plan of 1 segment\(s\) executed", out, re.M), out
        assert wait_until(lambda: watch.pose is not None and math.dist(watch.pose, PLACES["lab"]) <= 0.3, 5), watch.pose
        # the standby took over only after the kill, in time for the base's lease
        log = "\n".join(standby.lines)
        assert not any("took over" in ln for ln in standby.lines[:at_kill]), log
        assert re.search(r"took over from planner .* at term 2: .*adopted 1 goal\(s\)", log), log
        assert "planner lost" not in "\n".join(adapters.lines), "the base was stopped by its lease"
        assert not [m for t, m in watch.statuses if t > killed_at and "stopped" in m.error], \
            [(m.state, m.error) for _t, m in watch.statuses][-10:]
        # one NavigateToPose goal, driven to its end: the takeover did not start the route again
        assert len(watch.nav) == 1 and list(watch.nav.values())[0][-1] == GoalStatus.STATUS_SUCCEEDED, watch.nav
    finally:
        if goal is not None and goal.poll() is None:
            goal.kill()
        for proc in (standby, active, adapters):
            proc.stop()
        watch.close()
