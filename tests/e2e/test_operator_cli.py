"""`timely-fleet stop`, `approve` and `deny` as an operator runs them: `timely-fleet up` in its own
process (scripted engine: the instruction is the plan, signed robot link, an operator secret
listed in the YAML), goals from `timely-fleet goal` processes, and the operator's commands as
further processes. Errors are one sentence on stderr with status 2; the secret comes from a file
(mode 0600) or the environment, never from the command line."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
import time

import pytest
import yaml
from processes import traceback_in
from test_first_user import ROOT, TF, Up

pytestmark = pytest.mark.ros

SECRET = "cli-operator-secret"


class GoalProcess:
    """`timely-fleet goal ...` running in the background; its output lines as they come."""

    def __init__(self, robot: str, plan: str) -> None:
        self.proc = subprocess.Popen([*TF, "goal", robot, plan, "--timeout", "120"], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            time.sleep(0.05)
        pytest.fail(f"no line matching {pattern!r} from `timely-fleet goal`:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        rc = self.proc.wait(timeout)
        time.sleep(0.1)
        return rc, "\n".join(self.lines)


def operator(*args: str, secret_env: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TIMELY_FLEET_OPERATOR_SECRET"}
    if secret_env is not None:
        env["TIMELY_FLEET_OPERATOR_SECRET"] = secret_env
    return subprocess.run([*TF, *args, "--operator", "tester"], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("operator_cli")
    fleet = {"planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 10.0},
             "security": {"mode": "sign", "keystore": str(tmp / "keys"),
                          "cancel_operator_keys_sha256": hashlib.sha256(SECRET.encode()).hexdigest()},
             "robots": [{"id": "d1", "kind": "drone", "approval": {"skills": ["land"], "timeout_s": 60}},
                        {"id": "d2", "kind": "drone"}]}
    params = tmp / "fleet.yaml"
    params.write_text(yaml.safe_dump(fleet))
    secret_file = tmp / "operator.secret"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    u = Up("--params", str(params), "--time-scale", "0.2")
    u.wait_ready(120)
    u.secret_file = str(secret_file)
    u.tmp = tmp
    yield u
    log = u.stop()
    assert not traceback_in(log), traceback_in(log)


def test_stop_ends_a_busy_robots_goal_and_says_so_in_one_line_per_robot(up):
    g = GoalProcess("d2", "d,3000;" * 6)
    g.wait_for(r"robot d2: segment 0 executing")
    p = operator("stop", "d2", "--secret-file", up.secret_file)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "stopped d2", p.stdout
    assert re.fullmatch(r"stopped by operator tester: 1 robot\(s\) stopped, their goals cancelled "
                        r"\(answered in \d+\.\d\d s\)", lines[1]), p.stdout
    rc, out = g.finish()
    assert rc == 1 and "CANCELLED: stopped by operator tester" in out, out
    deadline = time.monotonic() + 10  # the adapter's confirmation, in the planner's log
    while not any(re.search(r"robot d2 stopped: ", line) for line in up.lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(re.search(r"robot d2 stopped: ", line) for line in up.lines), "\n".join(up.lines[-20:])
    # idempotent
    p = operator("stop", "d2", secret_env=SECRET)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("nothing to stop: no goal in flight on the 1 robot(s); each was sent a halt")
    p = operator("stop", "--all", secret_env=SECRET)
    assert p.returncode == 0 and "no goal in flight on the 2 robot(s)" in p.stdout, p.stdout + p.stderr
    assert "operator tester stopped 1 robot(s): 1 goal(s) cancelled: d2" in "\n".join(up.lines)


def test_operator_mistakes_are_one_sentence_with_status_2(up):
    p = operator("stop", "d2", secret_env="wrong")
    assert p.returncode == 2 and p.stderr == ("timely-fleet stop: refused: the secret is not an operator's "
                                              "(security.cancel_operator_keys_sha256)\n"), p.stderr
    p = operator("stop", "d2")  # no secret at all
    assert p.returncode == 2 and "refused: the secret is not an operator's" in p.stderr, p.stderr
    p = operator("stop", "zz9", secret_env=SECRET)
    assert p.returncode == 2 and p.stderr == ("timely-fleet stop: unknown robot 'zz9' (configured robots: d1, d2); "
                                              "nothing was stopped\n"), p.stderr
    p = operator("stop", "d2", "--namespace", "nowhere", "--timeout", "2", secret_env=SECRET)
    assert p.returncode == 2 and p.stderr == ("timely-fleet stop: no planner answers on /nowhere/planner/stop_robots "
                                              "within 2 s: start one with `timely-fleet up`, or give its "
                                              "--namespace\n"), p.stderr
    p = operator("stop", secret_env=SECRET)
    assert p.returncode == 2 and "name the robots to stop" in p.stderr
    loose = up.tmp / "loose.secret"
    loose.write_text(SECRET)
    loose.chmod(0o644)
    p = operator("stop", "d2", "--secret-file", str(loose))
    assert p.returncode == 2 and p.stderr == (f"timely-fleet stop: --secret-file {loose} may be read by other "
                                              f"users: `chmod 600 {loose}` first\n"), p.stderr
    p = operator("approve", "0123456789abcdef", secret_env=SECRET)
    assert p.returncode == 2 and p.stderr == ("timely-fleet approve: no goal waiting for approval is "
                                              "'0123456789abcdef'\n"), p.stderr


def test_goal_prints_the_wait_and_approve_or_deny_decides(up):
    g = GoalProcess("d1", "tc,10;lnd;")
    line = g.wait_for(r"waiting for approval of segment 1: lnd;")
    goal_id = re.search(r"timely-fleet approve ([0-9a-f]{32})", line).group(1)
    p = operator("approve", goal_id[:8], "--secret-file", up.secret_file)
    assert p.returncode == 0 and p.stdout == f"segment 1 of goal {goal_id[:8]} (robot d1) approved by tester\n", \
        p.stdout + p.stderr
    rc, out = g.finish()
    assert rc == 0 and "SUCCEEDED" in out, out

    g = GoalProcess("d1", "tc,10;lnd;")
    line = g.wait_for(r"waiting for approval of segment 1")
    goal_id = re.search(r"timely-fleet deny ([0-9a-f]{32})", line).group(1)
    p = operator("deny", goal_id, secret_env=SECRET)
    assert p.returncode == 0 and p.stdout.endswith("denied by tester\n"), p.stdout + p.stderr
    rc, out = g.finish()
    assert rc == 1 and "CANCELLED: denied by operator tester: segment 1 (lnd;)" in out, out
