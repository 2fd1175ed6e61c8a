"""`make setup` on a system ROS 2 built for Python 3.12 (Jazzy/Kilted on Ubuntu 24.04) and on
the pip wheels with Python 3.12, as far as this machine allows: the interpreter choice of
scripts/python_select.sh runs with a real CPython 3.12 and a stand-in `rclpy` that imports only
under 3.12 (as a system rclpy built for 3.12 does); setup.sh itself runs up to its first
decision with fake interpreters (nothing is downloaded). A real `apt`-installed ROS 2 is not
available here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def _python312() -> str | None:
    for cand in (shutil.which("python3.12"), "/root/.pyenv/versions/3.12.1/bin/python3.12"):
        if cand and os.access(cand, os.X_OK):
            out = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2] == (3, 12))"],
                                 capture_output=True, text=True)
            if out.stdout.strip() == "True":
                return cand
    return None


PY312 = _python312()
needs312 = pytest.mark.skipif(PY312 is None, reason="no CPython 3.12 on this machine")


def _fake_bin(tmp_path: Path, links: dict[str, str]) -> Path:
    """A directory of interpreters: name -> real interpreter path, or 'X.Y' for a script that says it is X.Y."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name, target in links.items():
        if re.fullmatch(r"\d+\.\d+", target):
            # says its version when asked; anything else (import rclpy, -m venv) fails
            (d / name).write_text(f'#!/bin/sh\ncase "$2" in *version_info*) echo {target} ;; *) exit 1 ;; esac\n')
            (d / name).chmod(0o755)
        else:
            (d / name).symlink_to(target)
    return d


def _fake_system_rclpy(tmp_path: Path) -> Path:
    """A stand-in for /opt/ros/<distro>/lib/python3.12/site-packages: its rclpy imports only on 3.12."""
    site = tmp_path / "opt_ros" / "lib" / "python3.12" / "site-packages"
    (site / "rclpy").mkdir(parents=True)
    (site / "rclpy" / "__init__.py").write_text(
        "import sys\nif sys.version_info[:2] != (3, 12):\n"
        "    raise ImportError('rclpy C extension built for CPython 3.12')\n")
    return site


def _select(tmp_path: Path, path_dirs: list[Path], script: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("ROS_DISTRO", "PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    base["PATH"] = ":".join([*map(str, path_dirs), "/usr/bin", "/bin"])
    base.update(env)
    return subprocess.run(["bash", "-c", f"set -u; source {SCRIPTS / 'python_select.sh'}; {script}"],
                          env=base, capture_output=True, text=True, timeout=120)


def test_scripts_parse_and_have_no_hard_coded_python_version():
    for name in ("setup.sh", "env.sh", "python_select.sh", "run"):
        proc = subprocess.run(["bash", "-n", str(SCRIPTS / name)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        code = "\n".join(line for line in (SCRIPTS / name).read_text().splitlines()
                         if not line.lstrip().startswith("#"))
        assert not re.search(r"python3\.\d+/", code), f"{name} hard-codes a pythonX.Y path"
        assert "cp311" not in code, f"{name} hard-codes the cp311 wheel tag"


@needs312
def test_system_ros_picks_the_python_its_rclpy_is_built_for(tmp_path):
    site = _fake_system_rclpy(tmp_path)
    # python3.11 (this machine's default) comes first on PATH but cannot import the 3.12 rclpy.
    py311 = shutil.which("python3.11") or "3.11"
    fake = _fake_bin(tmp_path, {"python3": py311, "python3.11": py311, "python3.12": PY312})
    proc = _select(tmp_path, [fake], 'tf_select_python && echo "$TF_PYTHON" && tf_py_version "$TF_PYTHON" '
                   '&& tf_install_site /srv/proj "$TF_PYTHON"', ROS_DISTRO="kilted", PYTHONPATH=str(site))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    chosen, version, install_site = proc.stdout.split()
    assert Path(chosen).resolve() == Path(PY312).resolve() and version == "3.12"
    assert install_site == "/srv/proj/ros2_ws/install/timely_fleet/lib/python3.12/site-packages"


@needs312
def test_system_ros_venv_sees_the_system_rclpy_and_uses_312_paths(tmp_path):
    """The venv setup.sh creates under a system ROS (--system-site-packages) passes its check and
    gives 3.12 site-packages paths; a venv made without system site packages is refused."""
    site = _fake_system_rclpy(tmp_path)
    for name, flags in (("venv_ros", ["--system-site-packages"]), ("venv_wheels", [])):
        subprocess.run([PY312, "-m", "venv", "--without-pip", *flags, str(tmp_path / name)], check=True, timeout=120)
    ok = _select(tmp_path, [], f'tf_check_venv {tmp_path / "venv_ros"} && tf_site_packages {tmp_path / "venv_ros"}/bin/python',
                 ROS_DISTRO="jazzy", PYTHONPATH=str(site))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip() == str(tmp_path / "venv_ros" / "lib" / "python3.12" / "site-packages")
    bad = _select(tmp_path, [], f'tf_check_venv {tmp_path / "venv_wheels"} || echo "$TF_PYTHON_ERROR"',
                  ROS_DISTRO="jazzy", PYTHONPATH=str(site))
    assert "cannot see the system ROS 2 'jazzy' rclpy" in bad.stdout and "make setup" in bad.stdout


@needs312
def test_pip_wheels_accept_python312(tmp_path):
    fake = _fake_bin(tmp_path, {"python3": PY312})
    proc = _select(tmp_path, [fake], 'tf_select_python && tf_py_version "$TF_PYTHON" && tf_check_venv '
                   f'{Path(PY312).parent.parent} && echo venv-ok')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["3.12", "venv-ok"]


def test_system_ros_without_a_matching_python_says_what_to_do(tmp_path):
    fake = _fake_bin(tmp_path, {"python3": "3.12", "python3.11": "3.11"})  # neither imports rclpy
    proc = _select(tmp_path, [fake], 'tf_select_python || echo "$TF_PYTHON_ERROR"', ROS_DISTRO="kilted")
    msg = proc.stdout.strip()
    assert msg.count("\n") == 0 and "can import rclpy" in msg
    assert "source /opt/ros/kilted/setup.bash" in msg and "python3 is 3.12" in msg


def test_wrong_python_for_the_wheels_is_one_sentence_from_setup(tmp_path):
    """setup.sh itself (not only the function) stops at step 1 with the sentence, exit 1, nothing installed."""
    fake = _fake_bin(tmp_path, {"python3": "3.9", "python3.11": "3.10"})
    env = {k: v for k, v in os.environ.items() if k not in ("ROS_DISTRO", "PYTHON", "VIRTUAL_ENV")}
    env.update(PATH=f"{fake}:/usr/bin:/bin", TIMELY_VENV=str(tmp_path / "venv"),
               TIMELY_SETUP_LOG=str(tmp_path / "setup.log"))
    proc = subprocess.run(["bash", str(SCRIPTS / "setup.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and not (tmp_path / "venv").exists()
    assert "Python 3.11, 3.12 or 3.13 is required for the ROS 2 Kilted pip wheels" in proc.stderr
    assert "python3 is 3.9, python3.11 is 3.10" in proc.stderr and "Traceback" not in proc.stderr


def test_system_ros_setup_stops_with_one_sentence_when_rclpy_does_not_import(tmp_path):
    fake = _fake_bin(tmp_path, {"python3": "3.12"})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=f"{fake}:/usr/bin:/bin", ROS_DISTRO="kilted", TIMELY_VENV=str(tmp_path / "venv"),
               TIMELY_SETUP_LOG=str(tmp_path / "setup.log"))
    proc = subprocess.run(["bash", str(SCRIPTS / "setup.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and not (tmp_path / "venv").exists()
    assert "ROS 2 'kilted' is sourced" in proc.stderr and "can import rclpy" in proc.stderr


def test_package_xml_is_complete_format_3():
    """package.xml parses and validates with catkin_pkg (what colcon-ros, rosdep and bloom read;
    the ament_package wheel here has no parse_package) and lists what the node imports."""
    catkin_pkg = pytest.importorskip("catkin_pkg.package")
    warnings: list[str] = []
    pkg = catkin_pkg.parse_package(str(ROOT / "package.xml"), warnings=warnings)
    pkg.validate(warnings=warnings)
    assert pkg.package_format == 3 and not warnings, warnings
    exec_deps = {d.name for d in pkg.exec_depends}
    assert {"rclpy", "rosidl_default_runtime", "rcl_interfaces", "diagnostic_msgs", "lifecycle_msgs",
            "ament_index_python", "launch", "launch_ros", "python3-numpy", "python3-yaml",
            "python3-matplotlib", "python3-tqdm"} <= exec_deps
    text = (ROOT / "package.xml").read_text()
    for pip_only in ("vllm", "rosbags", "highspy", "djitellopy", "neuromeka"):
        assert pip_only in text  # named in the comment on pip-only dependencies
