"""`timely-fleet`: the project's command line.

Subcommands register themselves in :data:`COMMANDS` as ``name -> (help, module)``; a module
provides ``add_arguments(parser)`` and ``run(args) -> int`` and is imported only when its
command runs, so ``timely-fleet --help`` stays fast and never loads vLLM or rclpy.

Commands that use ROS need the project's environment (ROS library paths). When started from a
source checkout without it, the command re-executes itself through ``scripts/env.sh``, so users
never set AMENT_PREFIX_PATH or LD_LIBRARY_PATH by hand.

Errors: a mistake the user can fix (:class:`CommandError`, a parameter file's ``ParamError``, a
workload's ``SpecError``) ends the command with one sentence on stderr,
``timely-fleet <command>: <what is wrong and what to do>``, and exit status 2; output cut short
by a closed pipe (``timely-fleet report X | head``) ends quietly with status 141 (as if killed by
SIGPIPE). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from pathlib import Path

from llm_planner_node import __version__
from timely_robot.environment import reexec_through
from timely_robot.errors import CommandError
from llm_planner_node.errors import is_user_error

__all__ = ["CommandError", "is_user_error", "main"]


#: Exit status after a closed output pipe: 128 + SIGPIPE, what a shell reports for a killed writer.
EXIT_BROKEN_PIPE = 141


#: name -> (one-line help, module with add_arguments/run). Nested groups use "group name".
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("start the planner node and the fleet's adapters from the parameter YAML", "llm_planner_node.up"),
    "goal": ("send one planning goal to a running planner and watch its segments", "llm_planner_node.cli.goal"),
    "mission": ("give the fleet an instruction: the planner chooses the robot that can do it and is free", "llm_planner_node.cli.mission"),
    "memory": ("what the fleet remembers seeing of a thing: which robot saw it, when and where", "llm_planner_node.cli.memory"),
    "stop": ("stop robots now (an operator's signed command): their goals end CANCELLED, the robots halt", "llm_planner_node.cli.operator"),
    "approve": ("approve the segment a goal waits with (robot `approval` in the fleet YAML)", "llm_planner_node.cli.operator"),
    "deny": ("deny the segment a goal waits with: the goal ends CANCELLED and the robot stops", "llm_planner_node.cli.operator"),
    "mcp": ("serve the fleet to AI agents over the Model Context Protocol (stdio, or HTTP with bearer tokens); `mcp token add NAME`", "llm_planner_node.agents_mcp.command"),
    "demo": ("run the planner with a simulated fleet and send goals end to end", "llm_planner_node.cli.demo"),
    "bench scheduler": ("cost of one scheduling decision vs TimelyLLM Table 5", "timely_tools.bench.scheduler_bench"),
    "bench segmentation": ("segmenter cost per token vs TimelyLLM Table 4", "timely_tools.bench.segmentation_bench"),
    "bench goal-latency": ("time to the answer of a rejected goal through `timely-fleet goal`", "timely_tools.bench.goal_latency_bench"),
    "bench faults": ("fault campaign: bursts, cancels, malformed goals, a status flood, forgeries, an adapter kill", "timely_tools.bench.faults_bench"),
    "bench fleet": ("N = 100, 300, 1,000 simulated drones over ROS at the WID1 per-agent rate: TIMEOUTs, inflation vs the simulator, CPU/RSS/threads", "timely_tools.bench.fleet_bench"),
    "bench live": ("the live path at engine speed: a burst of goals raw on AsyncLLM vs through the node (vllm, timelyllm)", "timely_tools.bench.live_bench"),
    "bench overload": ("graceful degradation: utility and throughput vs load, 25 to 5,000 agents (simulator)", "timely_tools.bench.overload_bench"),
    "bench grammar": ("grammar-safe generation vs free decoding on held-out instructions: INVALID_PLAN, exact plans, cost", "timely_tools.bench.grammar_bench"),
    "bench plans": ("plan quality of any model on held-out instructions: valid, semantic match, executed on simulated robots, unsafe", "timely_tools.bench.plans_bench"),
    "bench missions": ("fleet instructions held apart from training as missions on the default fleet (random ids and order), real model: allocation, success, impossible refused, faults re-allocated", "timely_tools.bench.missions_bench"),
    "bench substitution": ("plans about things outside a camera drone's classes and inside them: refused naming the thing, or substitutes dispatched (`--calibrate` fits the object check)", "timely_tools.bench.substitution_bench"),
    "bench engines": ("in-process vLLM vs remote vLLM servers: per-token overhead, time to first segment, 1 vs 2 servers", "timely_tools.bench.engines_bench"),
    "bench safety": ("adversarial plans, a planner killed mid-plan and an emergency stop against planner and adapters as separate processes", "timely_tools.bench.safety_bench"),
    "bench failover": ("planner failover under load: the active planner SIGKILLed K times (and once SIGSTOPped) while goals run, a standby taking over each time: lost goals, duplicate segments, stale commands, takeover time", "timely_tools.bench.failover_bench"),
    "bench perception": ("the Tello adapter looking for objects on real decoded video from the simulator: found, false finds, detection time, stale-frame refusals", "timely_tools.bench.perception_bench"),
    "bench exec-model": ("execution-time model error and online convergence", "timely_tools.bench.exec_model_bench"),
    "eval": ("run policies on a workload (simulated or live) and report metrics", "timely_tools.evaluation.eval_cmd"),
    "report": ("recompute evaluation metrics from a rosbag2 recording or an eval JSON", "timely_tools.evaluation.report_cmd"),
    "record": ("record planner goals, results, segments and robot status to a rosbag2", "timely_tools.evaluation.record_cmd"),
    "replay": ("re-send a recording's goals with their original timing to a running node", "timely_tools.evaluation.replay_cmd"),
    "paper": ("reproduce TimelyLLM's evaluation in the simulator (markdown report + figures)", "timely_tools.evaluation.paper"),
    "compare": ("Trail, LTR, LAMPS and hybrid headline effects vs their papers + WID1-3 table", "timely_tools.evaluation.compare"),
    "params export": ("write the fleet YAML as a standard ROS 2 parameters file (for --params-file)", "llm_planner_node.cli.params_export"),
    "models": ("list the models the planner can run (embedded, SmolLM2 instruct, ...); `models prepare NAME` prepares one", "llm_planner_node.cli.models"),
    "serve-engine": ("start a vLLM server (vllm serve) for engine.kind remote and print its URL", "llm_planner_node.cli.serve_engine"),
    "calibrate": ("measure the real engine and fit the simulator's iteration-time model", "timely_tools.bench.calibrate"),
    "keys": ("create (or --rotate) the per-robot keys that sign the robot link, never printing them", "llm_planner_node.cli.keys"),
    "sros2": ("write SROS2 enclave policies for the fleet (planner, one enclave per robot) and keystore steps", "llm_planner_node.cli.sros2"),
}

_SOURCE_ROOT = Path(__file__).resolve().parents[2]
_ENV_SH = _SOURCE_ROOT / "scripts" / "env.sh"


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
    """Run a command; user mistakes and a closed output pipe end it without a traceback."""
    if argv is None:  # the program itself: `kill -USR1 PID` prints every thread's stack and goes on
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    try:
        status = _main(argv, command)
        sys.stdout.flush()  # a closed pipe shows up here at the latest, not at interpreter exit
        return status
    except BrokenPipeError:
        # Python docs (signal, "Note on SIGPIPE"): point stdout at devnull so the interpreter's
        # final flush does not fail again, and exit as a SIGPIPE-killed writer would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 - only user mistakes are caught, the rest is re-raised
        if not is_user_error(e):
            raise
        print(f"timely-fleet {command or 'error'}: {e}", file=sys.stderr)
        return 2


def _main(argv: list[str], command: str | None) -> int:
    if command is not None:
        reexec_through(_ENV_SH, "llm_planner_node.cli", argv)
    ros_args: list[str] = []
    if "--ros-args" in argv:  # ROS arguments (-p, --params-file, -r ...) go to the node, not argparse
        i = argv.index("--ros-args")
        argv, ros_args = argv[:i], argv[i + 1:]
    args = build_parser(command).parse_args(argv)
    args.ros_args = ros_args
    if args.command is None:
        build_parser().print_help()
        return 0
    if args.command == "version":
        print(f"timely-fleet {__version__}")
        return 0
    if command is not None and (command.startswith("bench") or command == "calibrate"):
        # benchmarks and calibration load vLLM/torch too: same quiet defaults as `up`
        from timely_robot.logging_setup import configure_logging

        configure_logging(os.environ.get("TIMELY_FLEET_LOG_LEVEL", "info"), ros=False)
    return int(args._run(args) or 0)

