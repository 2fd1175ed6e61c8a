"""A bench sent SIGTERM (``kill``, a runner's timeout) stops the processes it started
(timely_tools/bench/faults_bench.py ``in_workdir``): they run in their own sessions, so without
it they would go on serving the ROS domain after the bench is gone."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from timely_tools.bench.faults_bench import in_workdir
from timely_tools.bench.procs import start_process, stop_process


def test_a_sigterm_to_the_bench_runs_its_finally_and_the_child_is_stopped():
    children = []
    before = signal.getsignal(signal.SIGTERM)

    def body(workdir):
        child = start_process([sys.executable, "-c", "import time; time.sleep(60)"], workdir / "child.log")
        children.append(child)
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill <bench pid>` would
            raise AssertionError("the SIGTERM did not stop the bench")
        finally:
            stop_process(child)

    with pytest.raises(SystemExit) as e:
        in_workdir("sigterm_test_", body)
    assert e.value.code == 128 + signal.SIGTERM
    assert children and children[0].poll() is not None  # stopped, not left running
    assert signal.getsignal(signal.SIGTERM) == before  # the bench's handler is gone again
