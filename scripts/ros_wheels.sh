# Sourced by scripts/setup.sh and scripts/setup_robot.sh: what the ROS 2 pip wheels need after pip.
# tf_fix_wheel_cmake VENV: the wheels' CMake export files name the wheel build host's Python
# paths (/opt/python/cp3XY-cp3XY/..., whichever CPython the wheels were built for); point them at
# VENV's Python, so colcon can build the interfaces against them.
tf_fix_wheel_cmake() {
  local venv="$1" py_inc np_inc f
  py_inc="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  np_inc="$("$venv/bin/python" -c 'import numpy; print(numpy.get_include())')"
  for f in $(grep -l '/opt/python/cp3[0-9]*-cp3[0-9]*' "$venv"/share/*/cmake/*.cmake 2>/dev/null || true); do
    sed -i -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/lib/python3\.[0-9]*/site-packages/numpy/_core/include#$np_inc#g" \
           -e "s#/opt/python/cp3[0-9]*-cp3[0-9]*/include/python3\.[0-9]*#$py_inc#g" "$f"
  done
}
