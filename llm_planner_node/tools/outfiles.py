"""Output files of the tools' commands (``--json``, ``--plot``): their folder is created on first use,
so ``--json out/overload/overload.json`` works on a fresh clone."""

from __future__ import annotations

from pathlib import Path
from typing import IO


def ready(path: str | Path) -> str:
    """``path``, once its parent folder exists (for writers that open the file themselves)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def create(path: str | Path) -> IO[str]:
    """``path`` opened for writing text (UTF-8), its parent folder created."""
    return open(ready(path), "w", encoding="utf-8")
