# Sourced by scripts/setup.sh and scripts/setup_robot.sh: whether to build the repository's copy of
# Nav2's interfaces (interfaces/nav2_msgs, a verbatim subset of upstream nav2_msgs).
#
# tf_system_nav2_msgs OWN_DIR... -> prints the prefix of the nav2_msgs a sourced system ROS 2 (or a
# workspace sourced over it) already provides, and succeeds; fails when there is none, and then
# the setup builds the copy. A nav2_msgs under one of OWN_DIR (the setup's own builds: the
# repository, the robot venv) does not count. Without ROS_DISTRO (the pip wheels, which have no
# nav2_msgs) it always fails.
tf_system_nav2_msgs() {
  local prefix="" own
  [ -n "${ROS_DISTRO:-}" ] || return 1
  command -v ros2 >/dev/null 2>&1 || return 1
  prefix="$(ros2 pkg prefix nav2_msgs 2>/dev/null)" || return 1
  [ -n "$prefix" ] || return 1
  for own in "$@"; do
    case "$prefix/" in "$own"/*) return 1 ;; esac
  done
  printf '%s\n' "$prefix"
}
