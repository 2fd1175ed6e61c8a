"""Start the planning node and the fleet's adapters as two ROS 2 processes.

    ros2 launch timely_fleet planner.launch.py [params:=FLEET.yaml] [namespace:=NS]
        [engine:=vllm|sim] [ros_params:=ROS_PARAMS.yaml] [use_sim_time:=true|false]
        [role:=active|standby|pair]

- ``params``: the fleet YAML (planner, engine, robots), given to both nodes as ``--params``;
  default: the installed ``share/timely_fleet/config/fleet.yaml``.
- ``namespace``: ROS namespace of both nodes (relative names are also prefixed by an enclosing
  ``PushRosNamespace``); empty: the root namespace.
- ``engine``: overrides ``planner.engine.kind`` of the YAML when given; empty (the default)
  keeps the YAML's choice.
- ``ros_params``: an optional standard ROS 2 parameters file for the planner node.
- ``use_sim_time``: ROS parameter of both nodes (default false).
- ``role``: ``active`` (default: the planner and the adapters), ``standby`` (only a standby
  planner, ``llm_planner_standby``, e.g. on a second host: it follows the active planner of the
  namespace and takes its goals over when it falls silent), or ``pair`` (the adapters, the active
  planner and a standby on this host: a planner process's crash loses no goal).

The nodes are named ``llm_planner`` and ``fleet_adapters``; launch_ros turns ``name=`` and
``namespace=`` into the ``__node``/``__ns`` remaps itself, and remaps or parameters that an
including launch file adds (``SetRemap``, ``SetParameter``) reach the nodes the same way.
``timely-fleet up`` composes the same two nodes in one process from the same YAML on machines
without ``ros2 launch`` (pip-only installs).
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PLANNER_NAME = "llm_planner"
STANDBY_NAME = "llm_planner_standby"
ROLES = ("active", "standby", "pair")
ADAPTERS_NAME = "fleet_adapters"


def _is_true(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise ValueError(f"use_sim_time must be true or false, not {text!r}")
    return value in ("true", "1", "yes", "on")


def _nodes(context, *args, **kwargs):
    """Build both Node actions from the resolved launch arguments (so optional ones can be left out)."""
    params = LaunchConfiguration("params").perform(context).strip()
    namespace = LaunchConfiguration("namespace").perform(context).strip()
    engine = LaunchConfiguration("engine").perform(context).strip()
    ros_params = LaunchConfiguration("ros_params").perform(context).strip()
    sim_time = {"use_sim_time": _is_true(LaunchConfiguration("use_sim_time").perform(context))}

    planner_args = ["--params", params] + (["--engine", engine] if engine else [])
    planner_params = [sim_time] + ([ros_params] if ros_params else [])  # the file wins: it comes last
    role = LaunchConfiguration("role").perform(context).strip()
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    ns = namespace or None  # None: no __ns remap (an enclosing PushRosNamespace still applies)
    active = Node(package="timely_fleet", executable="planner_node", name=PLANNER_NAME, namespace=ns,
                  parameters=planner_params, arguments=planner_args, output="screen")
    standby = Node(package="timely_fleet", executable="planner_node", name=STANDBY_NAME, namespace=ns,
                   parameters=planner_params, arguments=[*planner_args, "--standby"], output="screen")
    adapters = Node(package="timely_fleet", executable="fleet_adapters", name=ADAPTERS_NAME, namespace=ns,
                    parameters=[sim_time], arguments=["--params", params], output="screen")
    return {"active": [active, adapters], "standby": [standby], "pair": [active, standby, adapters]}[role]


def generate_launch_description() -> LaunchDescription:
    default_params = str(Path(get_package_share_directory("timely_fleet")) / "config" / "fleet.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("params", default_value=default_params,
                              description="fleet parameter YAML (planner, engine, robots)"),
        DeclareLaunchArgument("namespace", default_value="", description="ROS namespace of both nodes"),
        DeclareLaunchArgument("engine", default_value="",
                              description="vllm or sim: overrides planner.engine.kind; empty keeps the YAML's"),
        DeclareLaunchArgument("ros_params", default_value="",
                              description="optional ROS 2 parameters file for the planner node"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="use the /clock topic"),
        DeclareLaunchArgument("role", default_value="active",
                              description="active (planner and adapters), standby (a standby planner only) "
                                          "or pair (adapters, active and standby planners)"),
        OpaqueFunction(function=_nodes),
    ])
