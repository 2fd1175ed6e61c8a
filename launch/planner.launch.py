"""Start the planning node and the fleet's adapters as separate ROS 2 processes.

    ros2 launch timely_fleet planner.launch.py params:=/path/to/fleet.yaml [engine:=sim]

The same parameter YAML drives `timely-fleet up`, which composes these nodes in one process on
machines without `ros2 launch` (pip-only installs).
"""

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description() -> LaunchDescription:
    default_params = str(Path(get_package_share_directory("timely_fleet")) / "config" / "fleet.yaml")
    params = LaunchConfiguration("params")
    engine = LaunchConfiguration("engine")
    return LaunchDescription([
        DeclareLaunchArgument("params", default_value=default_params,
                              description="parameter YAML (planner, engine, robots)"),
        DeclareLaunchArgument("engine", default_value="vllm", description="vllm or sim"),
        Node(package="timely_fleet", executable="planner_node", name="llm_planner", output="screen",
             arguments=["--params", params, "--engine", engine]),
        Node(package="timely_fleet", executable="fleet_adapters", name="fleet_adapters", output="screen",
             arguments=["--params", params]),
    ])
