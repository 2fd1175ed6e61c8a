"""The ROS environment a command needs: both commands (``timely-fleet``, ``timely-robot``)
re-execute themselves once through their installation's environment script when it is not set
up (``TIMELY_FLEET_ENV`` unset and no system ROS 2 sourced)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def reexec_through(script: Path | None, module: str, argv: list[str]) -> None:
    """Run ``python -m module argv`` again with ``script`` sourced, unless the environment is set
    up already or there is no script (then return and go on as is)."""
    if os.environ.get("TIMELY_FLEET_ENV") == "1" or os.environ.get("ROS_DISTRO"):
        return
    if script is None or not script.is_file():
        return
    os.execv("/bin/bash", ["bash", "-c", 'source "$0" && exec "$@"', str(script), sys.executable, "-m", module, *argv])
