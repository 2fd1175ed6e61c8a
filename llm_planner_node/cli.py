"""`timely-fleet`: the project's command line.

Subcommands register themselves in :data:`COMMANDS` as ``name -> (help, module)``; a module
provides ``add_arguments(parser)`` and ``run(args) -> int`` and is imported only when its
command runs, so ``timely-fleet --help`` stays fast and never loads vLLM or rclpy.

Commands that use ROS need the project's environment (ROS library paths). When started from a
source checkout without it, the command re-executes itself through ``scripts/env.sh``, so users
never set AMENT_PREFIX_PATH or LD_LIBRARY_PATH by hand.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from . import __version__

#: name -> (one-line help, module with add_arguments/run). Nested groups use "group name".
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("start the planner node and the fleet's adapters from the parameter YAML", "llm_planner_node.up"),
    "goal": ("send one planning goal to a running planner and watch its segments", "llm_planner_node.client"),
    "demo": ("run the planner with a simulated fleet and send goals end to end", "llm_planner_node.demo"),
    "bench scheduler": ("cost of one scheduling decision vs TimelyLLM Table 5", "llm_planner_node.bench.scheduler_bench"),
    "bench segmentation": ("segmenter cost per token vs TimelyLLM Table 4", "llm_planner_node.bench.segmentation_bench"),
    "bench exec-model": ("execution-time model error and online convergence", "llm_planner_node.bench.exec_model_bench"),
    "eval": ("run policies on a workload (simulated or live) and report metrics", "llm_planner_node.evaluation.eval_cmd"),
    "report": ("recompute evaluation metrics from a rosbag2 recording or an eval JSON", "llm_planner_node.evaluation.report_cmd"),
    "record": ("record planner goals, results, segments and robot status to a rosbag2", "llm_planner_node.evaluation.record_cmd"),
    "replay": ("re-send a recording's goals with their original timing to a running node", "llm_planner_node.evaluation.replay_cmd"),
    "paper": ("reproduce TimelyLLM's evaluation in the simulator (markdown report + figures)", "llm_planner_node.evaluation.paper"),
    "compare": ("Trail, LTR, LAMPS and hybrid headline effects vs their papers + WID1-3 table", "llm_planner_node.evaluation.compare"),
    "calibrate": ("measure the real engine and fit the simulator's iteration-time model", "llm_planner_node.bench.calibrate"),
}

_SOURCE_ROOT = Path(__file__).resolve().parents[1]
_ENV_SH = _SOURCE_ROOT / "scripts" / "env.sh"


def _ensure_environment(argv: list[str]) -> None:
    """Re-exec through scripts/env.sh once if the ROS environment is not set up."""
    if os.environ.get("TIMELY_FLEET_ENV") == "1" or os.environ.get("ROS_DISTRO"):
        return
    if not _ENV_SH.is_file():
        return
    os.execv(
        "/bin/bash",
        ["bash", "-c", 'source "$0" && exec "$@"', str(_ENV_SH), sys.executable, "-m", "llm_planner_node.cli", *argv],
    )


def _command_of(argv: list[str]) -> str | None:
    """The COMMANDS key that the leading words of argv name (e.g. "bench scheduler")."""
    words = []
    for token in argv:
        if token.startswith("-"):
            break
        words.append(token)
        if " ".join(words) in COMMANDS:
            return " ".join(words)
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser; only ``command``'s module is imported to add its own arguments."""
    parser = argparse.ArgumentParser(
        prog="timely-fleet",
        description="Time-sensitive LLM planning for ROS 2 robot fleets (TimelyLLM).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("version", help="print the version")
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, (help_text, module_name) in COMMANDS.items():
        if " " in name:
            group, leaf = name.split(" ", 1)
            if group not in groups:
                gp = sub.add_parser(group, help=f"{group} commands")
                groups[group] = gp.add_subparsers(dest=f"{group}_command", metavar="WHAT", required=True)
            p = groups[group].add_parser(leaf, help=help_text, description=help_text)
        else:
            p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    if command is not None:
        _ensure_environment(argv)
    args = build_parser(command).parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 0
    if args.command == "version":
        print(f"timely-fleet {__version__}")
        return 0
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
