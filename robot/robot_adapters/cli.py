"""`timely-robot`: the robot computer's command (installed by ``make setup-robot``, without the
planner): ``up`` starts the adapters of the fleet YAML's robots in one process, ``key install``
installs a robot's link key copied from the planner's computer, ``key list`` lists the installed
keys (their ids, never the keys), ``version`` prints the robot side's version.

Commands that use ROS need the robot environment's library paths; started without them, the
command re-executes itself through the environment script ``make setup-robot`` wrote beside its
venv (``timely_robot_env.sh``) or, in a source checkout, ``scripts/env.sh``. A mistake the user can
fix ends the command with one sentence on stderr and exit status 2."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from timely_robot import __version__
from timely_robot.environment import reexec_through

ENV_SCRIPT = "timely_robot_env.sh"


def _environment_script() -> Path | None:
    """The script that sets up this installation's ROS environment, if any."""
    for path in (Path(sys.prefix) / ENV_SCRIPT, Path(__file__).resolve().parents[2] / "scripts" / "env.sh"):
        if path.is_file():
            return path
    return None


def _parser() -> argparse.ArgumentParser:
    from timely_robot.logging_setup import add_log_level_argument

    p = argparse.ArgumentParser(prog="timely-robot", description="The robot side of timely_fleet: a robot "
                                "computer's adapters and its link keys.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = sub.add_parser("up", help="start the adapters of the YAML's robots (or of --robots) and serve them "
                        "to the planner over ROS until Ctrl-C")
    up.add_argument("--params", required=True, help="the fleet YAML (the planner's file: its robots: and "
                    "security: sections are read, its planner: section is not)")
    up.add_argument("--robots", default=None, help="host only these robots: comma-separated ids or patterns "
                    "(tello_*), or k/n (the k-th of n equal groups)")
    up.add_argument("--namespace", default="", help="ROS namespace of the adapter node (the planner's own)")
    up.add_argument("--time-scale", type=float, default=1.0, help="simulated robots run this many times faster "
                    "(default: %(default)s, real time)")
    up.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (default: run "
                    "until Ctrl-C)")
    add_log_level_argument(up)
    key = sub.add_parser("key", help="the robot link's keys on this computer")
    ksub = key.add_subparsers(dest="key_command", required=True, metavar="ACTION")
    inst = ksub.add_parser("install", help="install ROBOT_ID's key file, copied from the planner's keystore "
                           "(timely-fleet keys prints where it is)")
    inst.add_argument("robot_id")
    inst.add_argument("file", help="the key file (<robot_id>.key of the planner's keystore)")
    lst = ksub.add_parser("list", help="the robots whose keys are installed, with their key ids")
    for k in (inst, lst):
        k.add_argument("--keystore", default=None, help="key directory (default: the YAML's security.keystore "
                       "with --params, else $TIMELY_FLEET_KEYS or ~/.config/timely_fleet/keys)")
        k.add_argument("--params", default=None, help="the fleet YAML, for its security.keystore")
    sub.add_parser("version", help="print the version of the robot side")
    return p


def _keystore(args: argparse.Namespace):
    from timely_robot.config import load_robot_side
    from timely_robot.link.signing import Keystore

    directory = args.keystore
    if directory is None and args.params:
        _robots, security = load_robot_side(args.params)
        directory = security.keystore or None
    return Keystore(directory)


def _key(args: argparse.Namespace) -> int:
    from timely_robot.errors import CommandError
    from timely_robot.link.signing import check_robot_id

    keystore = _keystore(args)
    if args.key_command == "install":
        try:
            check_robot_id(args.robot_id)
        except ValueError as e:
            raise CommandError(str(e)) from None
        key = keystore.install(args.robot_id, args.file)
        print(f"installed the key of robot {key.robot_id} (key id {key.key_id}) in {keystore.file_of(key.robot_id)}")
        return 0
    ids = keystore.robot_ids() if keystore.path.is_dir() else []
    if not ids:
        print(f"no keys in {keystore.path}")
    for rid in ids:
        print(f"{rid}\t{keystore.key(rid).key_id}")
    return 0


def _up(args: argparse.Namespace) -> int:
    import contextlib
    import logging

    from timely_robot.config import load_robot_side
    from timely_robot.errors import CommandError
    from timely_robot.logging_setup import configure_logging

    from robot_adapters.host import adapter_keystore, select_robots, start_adapters

    configure_logging(args.log_level)
    log = logging.getLogger("robot_adapters.cli")
    robots, security = load_robot_side(args.params)
    hosted = select_robots(robots, args.robots)
    hosted -= {r.id for r in robots if r.adapter == "external"}
    if not hosted:
        raise CommandError(f"{args.params} has no robot for this computer to host (every robot is external, "
                           "or --robots matched none)")
    keystore = None
    if security.mode == "sign":
        keystore = adapter_keystore(security, hosted, create=False)
        missing = sorted(r for r in hosted if not keystore.has(r))
        if missing:
            raise CommandError(f"robot {missing[0]} has no link key in {keystore.path}: copy its key file from the "
                               f"planner's keystore and run 'timely-robot key install {missing[0]} <file>'")
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    context = Context()
    rclpy.init(context=context)
    with contextlib.ExitStack() as stack:
        stack.callback(rclpy.try_shutdown, context=context)
        node = start_adapters(robots, security, context=context, stack=stack, keystore=keystore,
                              time_scale=args.time_scale, namespace=args.namespace, hosted=hosted)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, name="ros-spin", daemon=True)
        spinner.start()

        def stop_spinning() -> None:
            executor.shutdown(timeout_sec=2.0)
            spinner.join(timeout=5)

        stack.callback(stop_spinning)
        names = ", ".join(sorted(hosted))
        log.info(f"ready: the adapters of {len(hosted)} robot(s) ({names}), link {security.mode}; Ctrl-C to stop")
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.2)
        log.info("stopping: the robots are halted")
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(f"timely-robot {__version__}")
        return 0
    if args.command == "up":
        reexec_through(_environment_script(), "robot_adapters.cli", argv)
    from timely_robot.config import ParamError
    from timely_robot.errors import CommandError
    from timely_robot.link.signing import KeystoreError

    try:
        return _up(args) if args.command == "up" else _key(args)
    except (CommandError, ParamError, KeystoreError) as e:
        print(f"timely-robot {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
