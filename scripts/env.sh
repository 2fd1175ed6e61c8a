# Source this file to work inside the project's built environment:
#     source scripts/env.sh
# It activates .venv and points ROS 2 at the wheels' prefix and at this package's install space
# (AMENT_PREFIX_PATH, LD_LIBRARY_PATH), so nobody sets those by hand. `scripts/run CMD` and the
# `.venv/bin/timely-fleet` command do the same for a single command.
# With a system ROS 2 (ROS_DISTRO set) its own setup is kept and the install space is overlaid.
_tf_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_tf_venv="$_tf_root/.venv"
_tf_install="$_tf_root/ros2_ws/install/timely_fleet"
_tf_nav2="$_tf_root/ros2_ws/install/nav2_msgs"  # Nav2's interfaces, built here unless a system ROS 2 has them

export VIRTUAL_ENV="$_tf_venv"
case ":$PATH:" in *":$_tf_venv/bin:"*) ;; *) export PATH="$_tf_venv/bin:$PATH" ;; esac

_tf_prefix() {  # _tf_prefix VAR DIR: prepend DIR to the path list VAR once
  local cur="${!1:-}"
  case ":$cur:" in *":$2:"*) ;; *) export "$1"="$2${cur:+:$cur}" ;; esac
}
if [ -z "${ROS_DISTRO:-}" ]; then
  _tf_prefix AMENT_PREFIX_PATH "$_tf_venv"
  _tf_prefix CMAKE_PREFIX_PATH "$_tf_venv"
  _tf_prefix LD_LIBRARY_PATH "$_tf_venv/lib"
  # The ROS wheels keep their shared libraries in site-packages/ros_*.libs; their bootstrap .pth
  # re-executes Python to add them unless this guard is set, so set both once here.
  for _tf_libs in "$_tf_venv"/lib/python3*/site-packages/ros_*.libs; do
    [ -d "$_tf_libs" ] && _tf_prefix LD_LIBRARY_PATH "$_tf_libs"
  done
  export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1
fi
if [ "${1:-}" != "--no-install-space" ]; then
  for _tf_space in "$_tf_nav2" "$_tf_install"; do
    [ -d "$_tf_space" ] || continue
    _tf_prefix AMENT_PREFIX_PATH "$_tf_space"
    _tf_prefix CMAKE_PREFIX_PATH "$_tf_space"
    _tf_prefix LD_LIBRARY_PATH "$_tf_space/lib"
  done
fi
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
# Keep DDS discovery on this host (loopback) unless the user chose otherwise.
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
# Faster Fast DDS participant discovery (config/fastdds.xml explains) unless a profile is set.
if [ -z "${FASTDDS_DEFAULT_PROFILES_FILE:-}${FASTRTPS_DEFAULT_PROFILES_FILE:-}" ] && [ -f "$_tf_root/config/fastdds.xml" ]; then
  export FASTDDS_DEFAULT_PROFILES_FILE="$_tf_root/config/fastdds.xml"
fi
export TIMELY_FLEET_ENV=1
unset -f _tf_prefix
unset _tf_root _tf_venv _tf_install _tf_nav2 _tf_space _tf_libs
