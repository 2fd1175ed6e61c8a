"""The operator secret a command sends with its requests (``timely-fleet stop``/``approve``/``deny``,
``timely-fleet mcp``): from a file only its owner may read, or from the environment, never from
the command line (where ``ps`` would show it). The planner keeps only its SHA-256
(``security.cancel_operator_keys_sha256``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from timely_robot.errors import CommandError

SECRET_ENV = "TIMELY_FLEET_OPERATOR_SECRET"


def read_secret(path: str | None) -> str:
    """The operator secret: the first line of ``path`` (refused if others may read it), else
    ``$TIMELY_FLEET_OPERATOR_SECRET``, else "" (enough with ``security.mode: off``)."""
    if path is None:
        return os.environ.get(SECRET_ENV, "").strip()
    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode
        text = p.read_text()
    except FileNotFoundError:
        raise CommandError(f"--secret-file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"--secret-file {p} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CommandError(f"--secret-file {p} may be read by other users: `chmod 600 {p}` first")
    lines = text.splitlines()
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise CommandError(f"--secret-file {p} is empty: write the operator secret on its first line")
    return secret
