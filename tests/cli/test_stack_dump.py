"""`kill -USR1 PID` on any `timely-fleet` command prints every thread's stack to its standard
error and the command goes on: how an operator (or a test) sees where a stuck command waits."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / ".venv" / "bin" / "timely-fleet"


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler installed for ``sig`` (SigCgt of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def test_sigusr1_dumps_every_threads_stack_and_the_command_goes_on(tmp_path):
    # a domain of its own (the suite's processes use 1-100): the goal waits for a planner that never comes
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.randint(150, 230))}
    proc = subprocess.Popen([str(EXE), "goal", "tello_1", "look for the cat", "--wait", "6"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 30
    while proc.poll() is None and not _catches(proc.pid, signal.SIGUSR1) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # into its wait for the planner
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=60)
    # the stacks of the waiting main thread and of the thread spinning its ROS node
    assert "in wait_for_server" in err and "in spin" in err, err[-3000:]
    assert len(re.findall(r"^(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", err, re.M)) >= 2, err[-3000:]
    # and the command went on to its own end: the planner was never seen
    assert proc.returncode == 1 and err.rstrip().endswith("start one with `timely-fleet up`"), err[-1000:]
