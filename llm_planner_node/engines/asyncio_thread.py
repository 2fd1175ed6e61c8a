"""The live engines' asyncio event loop, run in a daemon thread of its own."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Coroutine

log = logging.getLogger(__name__)


def start_loop(name: str) -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """A new event loop running forever in a daemon thread called ``name``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
    thread.start()
    return loop, thread


def stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread,
              shutdown: Callable[[], Coroutine[Any, Any, None]], timeout_s: float, what: str) -> None:
    """Run ``shutdown()`` on the loop (at most ``timeout_s``), then stop and close it."""
    if loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=timeout_s)
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("%s shutdown failed", what)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
    loop.close()


async def cancel_other_tasks() -> bool:
    """Cancel every other task of the running loop and wait for them; False if there was none."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return bool(tasks)
