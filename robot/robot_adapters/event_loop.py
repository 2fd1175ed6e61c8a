"""One event loop per adapter process: every robot's state machine, skill timers and time budgets.

:class:`EventLoop` is one thread with a heap of due callbacks (``call_later``) and a queue of
ready ones (``call_soon``); ``cancel`` forgets a timer. One such thread serves every robot of the
process, its simulated skills and their watchdogs, instead of a thread per robot or per skill:
an idle fleet of any size costs nothing (the thread waits on one condition with the earliest
deadline as its timeout) and a busy one costs one heap operation per skill start and end.

Callbacks must not block: simulated skills are timers on the loop. Real robot clients that can
only block (djitellopy's UDP request/response, neuromeka's gRPC calls) run their ``execute`` on
:func:`blocking_pool`, a small bounded thread pool, and hand their result back to the loop with
``call_soon``: those libraries offer no non-blocking API, and a real robot per adapter process is
the deployment anyway (djitellopy keeps one control socket per process), so the pool holds a
handful of threads, never one per robot of a simulated fleet.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

log = logging.getLogger("timely_fleet.adapter")


class EventLoop:
    """A single-thread scheduler of callbacks (thread-safe to call from any thread)."""

    def __init__(self, name: str = "adapter-loop", clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._ready: deque[Callable[[], None]] = deque()
        self._cv = threading.Condition()
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._ident: int | None = None
        self.callbacks_run = 0  # counters (bench, tests)
        self.wakeups = 0

    # -- scheduling (any thread) ---------------------------------------------------------------
    def call_soon(self, callback: Callable[[], None]) -> None:
        with self._cv:
            self._ready.append(callback)
            self._ensure_thread()
            self._cv.notify()

    def call_later(self, seconds: float, callback: Callable[[], None]) -> int:
        """Run ``callback`` on the loop after ``seconds``; returns a token for :meth:`cancel`."""
        with self._cv:
            self._seq += 1
            heapq.heappush(self._heap, (self.clock() + max(0.0, seconds), self._seq, callback))
            self._ensure_thread()
            if self._heap[0][1] == self._seq:  # a new earliest deadline: wake the loop to re-time
                self._cv.notify()
            return self._seq

    def cancel(self, token: int | None) -> None:
        if token is not None:
            with self._cv:
                self._cancelled.add(token)

    def in_loop(self) -> bool:
        return threading.get_ident() == self._ident

    def pending(self) -> int:
        with self._cv:
            return len(self._heap) - len(self._cancelled) + len(self._ready)

    # -- the loop ------------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        self._ident = threading.get_ident()
        heap, cancelled = self._heap, self._cancelled
        while True:
            with self._cv:
                while True:
                    while heap and heap[0][1] in cancelled:
                        cancelled.discard(heapq.heappop(heap)[1])
                    if self._ready:
                        break
                    if heap:
                        delay = heap[0][0] - self.clock()
                        if delay <= 0:
                            self._ready.append(heapq.heappop(heap)[2])
                            break
                        self._cv.wait(delay)
                    else:
                        self._cv.wait()
                    self.wakeups += 1
                # take every due timer too, in deadline order, after the ready callbacks
                now = self.clock()
                while heap and heap[0][0] <= now:
                    _, token, cb = heapq.heappop(heap)
                    if token in cancelled:
                        cancelled.discard(token)
                    else:
                        self._ready.append(cb)
                batch = list(self._ready)
                self._ready.clear()
            for cb in batch:
                self.callbacks_run += 1
                try:
                    cb()
                except Exception:  # noqa: BLE001 - one robot's error must not stop the others
                    log.exception("adapter event loop: callback failed")


class Watchdog:
    """Skill time budgets on an :class:`EventLoop`: ``arm`` a budget when a skill starts, ``disarm``
    it when the skill ends."""

    def __init__(self, loop: EventLoop | None = None) -> None:
        self.loop = loop or default_loop()

    def arm(self, seconds: float, callback: Callable[[], None]) -> int:
        return self.loop.call_later(seconds, callback)

    def disarm(self, token: int) -> None:
        self.loop.cancel(token)


_default: EventLoop | None = None
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
#: Worker threads for real robots' blocking clients (djitellopy, neuromeka): a bounded pool.
BLOCKING_WORKERS = int(os.environ.get("TIMELY_FLEET_ADAPTER_WORKERS", "4"))


def default_loop() -> EventLoop:
    """The process's adapter event loop (created on first use; its thread on first callback)."""
    global _default
    with _lock:
        if _default is None:
            _default = EventLoop()
        return _default


def blocking_pool() -> ThreadPoolExecutor:
    """The bounded pool on which blocking robot clients run (see the module docstring)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, BLOCKING_WORKERS), thread_name_prefix="adapter-blocking")
        return _pool


def run_blocking(loop: EventLoop, fn: Callable[[], Any], done: Callable[[Any, BaseException | None], None]) -> None:
    """Run ``fn()`` on the blocking pool; ``done(value, error)`` then runs on ``loop``."""

    def work() -> None:
        try:
            value = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the loop
            loop.call_soon(lambda e=e: done(None, e))
            return
        loop.call_soon(lambda: done(value, None))

    blocking_pool().submit(work)
