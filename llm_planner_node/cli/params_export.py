"""`timely-fleet params export`: the fleet YAML as a standard ROS 2 parameters file.

    timely-fleet params export [--params config/fleet.yaml] [--node-name llm_planner] > ros_params.yaml
    ros2 run timely_fleet planner_node --ros-args --params-file ros_params.yaml

The file holds every parameter the planner node declares (see README 'Configure'), so
``--params-file`` and launch ``parameters=[...]`` users edit one standard file; its values
override the fleet YAML's.
"""

from __future__ import annotations

import argparse

import yaml

from llm_planner_node.config.params import DEFAULT_PARAMS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), metavar="FILE",
                        help="fleet parameter YAML to export (default: config/fleet.yaml)")
    parser.add_argument("--node-name", default="llm_planner", metavar="NAME",
                        help="node the parameters are for (default: llm_planner; '/**' for any node)")


def export_text(params_path: str, node_name: str = "llm_planner") -> str:
    """The ROS 2 parameters file for the fleet YAML at ``params_path`` (validated first)."""
    from llm_planner_node.core.policies import policy_names
    from llm_planner_node.config.schema import from_flat, to_flat
    from llm_planner_node.config.params import load_params
    from llm_planner_node.ros.params import fleet_yaml_to_ros_params

    fleet = from_flat(to_flat(load_params(params_path, tuple(policy_names()))))
    header = (f"# ROS 2 parameters of the planner node, exported from {params_path} by `timely-fleet params export`.\n"
              "# Use with: --ros-args --params-file <this file>, or launch Node(parameters=[<this file>]).\n")
    return header + yaml.safe_dump(fleet_yaml_to_ros_params(fleet, node_name), sort_keys=False,
                                   default_flow_style=False, width=120)


def run(args: argparse.Namespace) -> int:
    print(export_text(args.params, args.node_name), end="")
    return 0
