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


def write_json(path: str | Path, data: object, *, indent: int = 1, say: bool = True) -> None:
    """``data`` written to ``path`` as JSON (values JSON lacks as their ``str``), a newline at the
    end, its folder created; ``say``: print ``wrote PATH``."""
    import json

    with create(path) as f:
        json.dump(data, f, indent=indent, default=str)
        f.write("\n")
    if say:
        print(f"wrote {path}")
