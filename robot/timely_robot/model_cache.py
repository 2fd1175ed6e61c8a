"""The local cache of prepared models and detectors (``$TIMELY_FLEET_MODELS``, else
``~/.cache/timely_fleet/models``): its place, the lock one preparer holds at a time across
processes, and the error of a model or detector that cannot be resolved or prepared. The
planner's models and a robot's detector share it, so both ends import it from here."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


class ModelError(ValueError):
    """A model that cannot be resolved or prepared; the message is one sentence saying what to do."""


def cache_root() -> Path:
    """``$TIMELY_FLEET_MODELS``, else ``~/.cache/timely_fleet/models``."""
    env = os.environ.get("TIMELY_FLEET_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "timely_fleet" / "models"


@contextlib.contextmanager
def cache_lock(name: str, root: Path | None = None) -> Iterator[Path]:
    """Hold the cache's lock for ``name`` (one preparer at a time across processes); yields the
    cache directory (``root``, default :func:`cache_root`)."""
    root = root if root is not None else cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / f".{name}.lock", "w")
    except OSError as e:
        raise ModelError(f"cannot write the model cache {root} ({e.strerror}): set TIMELY_FLEET_MODELS to a "
                         "writable directory") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
