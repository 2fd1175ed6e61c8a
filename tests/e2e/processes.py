"""`timely-fleet ...` commands as a user runs them, each its own process (its own session, so a
stop reaches every process it started); their output lines collected by a thread.

Every child process inherits the test session's ROS_DOMAIN_ID (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TF = [sys.executable, "-m", "llm_planner_node.cli"]


class Proc:
    """A `timely-fleet ...` process (``program``: another command, such as ``python -m module``)
    whose output lines a thread collects."""

    def __init__(self, *args: str, ready: str, env: dict[str, str] | None = None,
                 program: list[str] = TF) -> None:
        self.proc = subprocess.Popen([*program, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, env=env)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._pattern = re.compile(ready)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self._pattern.search(line):
                self.ready.set()

    def wait_ready(self, timeout: float) -> None:
        """Until the process says it is ready; fails at once if it exits first."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.2) and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.ready.wait(1.0)  # its last lines may still be on their way
                break
        if not self.ready.is_set():
            self.stop()
            pytest.fail(f"`{' '.join(self.proc.args[3:])}` never became ready:\n" + "\n".join(self.lines[-40:]))

    def stop(self) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return "\n".join(self.lines)


def stop_all(procs: list[subprocess.Popen], timeout: float = 20.0) -> None:
    """SIGINT to each process's session (as Ctrl-C would), then SIGKILL to any still running after
    ``timeout`` s: none outlives its test."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def traceback_in(log: str) -> str:
    """The first traceback in a process's output with the lines around it ('' if none), so a
    failed "no traceback" assertion shows what raised."""
    at = log.find("Traceback")
    return "" if at < 0 else log[max(0, at - 1500):at + 3000]
