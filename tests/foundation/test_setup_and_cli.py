"""`make setup` fails with one clear sentence; the `timely-fleet` command works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run_setup(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "TIMELY_VENV": str(tmp_path / "venv"),
                "TIMELY_SETUP_LOG": str(tmp_path / "setup.log"), **env}
    full_env.pop("ROS_DISTRO", None)
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env=full_env,
                          capture_output=True, text=True, timeout=300)


def test_setup_rejects_unsupported_python_with_one_sentence(tmp_path):
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    proc = _run_setup(tmp_path, PYTHON=str(fake))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "Python 3.11, 3.12 or 3.13 is required" in proc.stderr
    assert "make setup PYTHON=" in proc.stderr  # says what to do


def test_setup_without_registry_access_says_what_to_do(tmp_path):
    # A package index nobody listens on (port 9 on loopback), no local wheel caches.
    proc = _run_setup(tmp_path, PIP_CONFIG_FILE="/dev/null", PIP_INDEX_URL="http://127.0.0.1:9/simple",
                      PIP_EXTRA_INDEX_URL="", PIP_FIND_LINKS="", PIP_NO_CACHE_DIR="1",
                      PIP_RETRIES="0", PIP_TIMEOUT="2", PYTHON=sys.executable if sys.version_info[:2] == (3, 11) else "")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "could not download packages" in proc.stderr
    assert "reach the Python package index" in proc.stderr and "make setup" in proc.stderr


def test_cli_version_and_help():
    exe = ROOT / ".venv" / "bin" / "timely-fleet"
    out = subprocess.run([str(exe), "version"], capture_output=True, text=True, timeout=60)
    from llm_planner_node import __version__

    assert out.returncode == 0 and out.stdout.strip() == f"timely-fleet {__version__}"
    helptext = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60).stdout
    for command in ("version", "demo", "bench"):
        assert command in helptext


def test_cli_unknown_command_fails_cleanly():
    exe = ROOT / ".venv" / "bin" / "timely-fleet"
    out = subprocess.run([str(exe), "fly-to-the-moon"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "invalid choice" in out.stderr


@pytest.mark.ros
def test_environment_entry_makes_generated_interfaces_loadable():
    """Without any ROS variables set by hand, scripts/run gives a working rclpy + our types."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AMENT_PREFIX_PATH", "LD_LIBRARY_PATH", "CMAKE_PREFIX_PATH", "TIMELY_FLEET_ENV")}
    code = ("import rclpy; rclpy.init(); from timely_fleet.msg import RobotStatus; "
            "n = rclpy.create_node('envcheck'); n.create_publisher(RobotStatus, 'x', 1); print('ok')")
    out = subprocess.run([str(ROOT / "scripts" / "run"), "python", "-c", code], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
