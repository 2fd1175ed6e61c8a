"""`timely-fleet keys`: create (or rotate) the per-robot keys that sign the robot link.

    timely-fleet keys [--params FLEET.yaml] [--dir DIR] [--rotate ROBOT]

Creates a key for every robot of the fleet YAML that has none in the keystore directory and
keeps existing keys; ``--rotate ROBOT`` replaces that robot's key (the planner and the adapter
pick the new file up on their next message; both must read the same keystore, or copy the new
file to the robot). Prints robot ids, key ids and file paths, never a secret.

Keystore directory: ``--dir``, else the fleet YAML's ``security.keystore`` when set, else
``$TIMELY_FLEET_KEYS``, else ``$XDG_CONFIG_HOME/timely_fleet/keys`` (``~/.config/timely_fleet/keys``).
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import Any

from llm_planner_node.cli import CommandError
from timely_robot.link.signing import Keystore, KeystoreError, check_robot_id, default_keystore_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=None,
                        help="fleet parameter YAML whose robots get keys (default: the shipped config/fleet.yaml)")
    parser.add_argument("--dir", default=None,
                        help=f"keystore directory (default: security.keystore of the YAML, else {default_keystore_dir()})")
    parser.add_argument("--rotate", metavar="ROBOT", action="append", default=[],
                        help="replace this robot's key by a new one (repeatable)")


def keystore_dir(args_dir: str | None, params: Any) -> Path:
    """--dir, else the YAML's security.keystore (when the parameters have one), else the default."""
    if args_dir:
        return Path(args_dir).expanduser()
    configured = getattr(getattr(params, "security", None), "keystore", "") or ""
    return Path(configured).expanduser() if configured else default_keystore_dir()


def run(args: argparse.Namespace) -> int:
    from llm_planner_node.config.params import DEFAULT_PARAMS, load_params

    params = load_params(args.params or DEFAULT_PARAMS, check=False)  # only the robots matter here
    robot_ids = [r.id for r in params.robots]
    try:
        for rid in robot_ids:
            check_robot_id(rid)
    except ValueError as e:
        raise CommandError(str(e)) from None
    store = Keystore(keystore_dir(args.dir, params))
    for rid in args.rotate:
        if rid not in robot_ids:
            close = difflib.get_close_matches(rid, robot_ids, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"robots: {', '.join(robot_ids) or 'none'}"
            raise CommandError(f"--rotate {rid!r} is not a robot of the fleet ({hint})")
    try:
        if store.path.exists() and not store.path.is_dir():
            raise CommandError(f"keystore {store.path} exists but is not a directory: choose another --dir")
        print(f"keystore: {store.path}")
        for rid in args.rotate:
            old = store.key(rid).key_id if store.has(rid) else "none"
            new = store.rotate(rid)
            print(f"rotated {rid}: key id {old} -> {new.key_id} ({store.file_of(rid)})")
        created = set(store.ensure(robot_ids))
        for rid in robot_ids:
            if rid in args.rotate:
                continue
            verb = "created" if rid in created else "kept"
            print(f"{verb} {rid}: key id {store.key(rid).key_id} ({store.file_of(rid)})")
    except KeystoreError as e:
        raise CommandError(str(e)) from None
    except PermissionError as e:
        raise CommandError(f"cannot write the keystore {store.path} ({e.strerror}): choose another --dir") from None
    if args.rotate:
        print("the planner and the rotated robots' adapters must read the new key file "
              "(copy it to robots that keep their own keystore)")
    return 0
