"""Keeping the planner's process off vLLM's CPU worker cores and vLLM's engine core on them
(engines/cpu_placement.py), on real processes and threads: child processes named like vLLM's
worker (bound to one core) and engine core (with a second thread), and threads of this process
before and after the move."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from llm_planner_node.engines.cpu_placement import colocate_engine_core, engine_core_pids, keep_off, worker_cores

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux and at least 2 allowed cores")

#: a child that names itself like vLLM's worker (its comm), binds itself to the given cores, waits
WORKER = ("import os, sys, time\n"
          "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
          "os.sched_setaffinity(0, {int(c) for c in sys.argv[2].split(',')})\n"
          "import threading; threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
          "print('ready', flush=True)\n"
          "time.sleep(60)\n")


def _child(comm: str, cores: set[int]) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", WORKER, comm, ",".join(map(str, sorted(cores)))],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _thread_cores() -> list[set[int]]:
    return [os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")]


def test_worker_cores_are_the_bound_workers_cores():
    allowed = os.sched_getaffinity(0)
    first = min(allowed)
    assert worker_cores() == frozenset()  # no worker below this process
    procs = [_child("VLLM::Worker_TP0", {first}), _child("VLLM::EngineCore", allowed)]
    try:
        assert worker_cores() == frozenset({first})  # the engine core's cores do not count
    finally:
        for p in procs:
            p.kill()
            p.wait()
    free = _child("VLLM::Worker", allowed)  # a worker that may run anywhere: nothing to keep off
    try:
        assert worker_cores() == frozenset()
    finally:
        free.kill()
        free.wait()


def test_keep_off_moves_every_thread_and_restore_puts_them_back():
    allowed = os.sched_getaffinity(0)
    first = min(allowed)
    stop = threading.Event()
    before = threading.Thread(target=stop.wait, daemon=True)
    before.start()
    restore = keep_off(frozenset({first}))
    try:
        after = threading.Thread(target=stop.wait, daemon=True)  # started later: inherits the move
        after.start()
        time.sleep(0.05)
        assert all(c == allowed - {first} for c in _thread_cores())
        assert os.sched_getaffinity(before.native_id) == os.sched_getaffinity(after.native_id) == allowed - {first}
    finally:
        restore()
    assert all(c == allowed for c in _thread_cores())
    stop.set()
    # keeping off every allowed core would leave none: nothing moves
    keep_off(frozenset(allowed))()
    assert os.sched_getaffinity(0) == allowed


def _process_cores(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")]


def test_the_engine_core_joins_a_worker_bound_to_one_core_with_every_thread():
    allowed = os.sched_getaffinity(0)
    first = min(allowed)
    worker, core = _child("VLLM::Worker", {first}), _child("VLLM::EngineCore", allowed)
    try:
        assert engine_core_pids() == [core.pid]  # by its name, cut to 15 characters by the kernel
        assert len(_process_cores(core.pid)) == 2  # the child's main thread and its second thread
        moved = colocate_engine_core(worker_cores())
        assert moved == [core.pid]
        assert _process_cores(core.pid) == [{first}, {first}]
        assert os.sched_getaffinity(worker.pid) == {first}  # the worker is not touched
    finally:
        for p in (worker, core):
            p.kill()
            p.wait()


def test_the_engine_core_stays_free_when_the_worker_computes_on_several_cores_or_none():
    allowed = os.sched_getaffinity(0)
    core = _child("VLLM::EngineCore", allowed)
    try:
        assert colocate_engine_core(frozenset(allowed)) == []  # several cores: an OpenMP team
        assert colocate_engine_core(frozenset()) == []          # not bound (a GPU host)
        assert _process_cores(core.pid) == [allowed, allowed]
    finally:
        core.kill()
        core.wait()
