"""`timely-fleet sros2`: write SROS2 enclave policies for the fleet and the keystore steps
(:mod:`llm_planner_node.security.sros2_policy` builds them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from llm_planner_node.cli import CommandError
from llm_planner_node.security.sros2_policy import (POLICY_XSD, enclave_paths, fleet_policies, keystore_script,
                                                    normalize_namespace, validation_errors)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=None, help="fleet parameter YAML (default: the shipped config/fleet.yaml)")
    parser.add_argument("--out", required=True, help="directory for the policy files and create_keystore.sh")
    parser.add_argument("--namespace", default="", help="ROS namespace of the fleet's nodes (as `up --namespace`)")


def run(args: argparse.Namespace) -> int:
    from llm_planner_node.config.params import DEFAULT_PARAMS, load_params

    params = load_params(args.params or DEFAULT_PARAMS, check=False)
    ids = [r.id for r in params.robots]
    if not ids:
        raise CommandError("the fleet has no robots: add robots to the parameter file")
    namespace = normalize_namespace(args.namespace)
    files = fleet_policies(ids, namespace)
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise CommandError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    try:  # validate when lxml is available (it is in the project environment)
        bad = {name: validation_errors(text) for name, text in files.items()}
    except ImportError:
        bad = {}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        name, errors = next(iter(bad.items()))
        raise RuntimeError(f"generated {name} does not validate against {POLICY_XSD}: {errors[0]}")
    for name, text in files.items():
        (out / name).write_text(text)
    script = out / "create_keystore.sh"
    script.write_text(keystore_script(ids, namespace))
    script.chmod(0o755)
    for path in enclave_paths(ids, namespace):
        print(f"enclave {path}")
    print(f"wrote {len(files)} policy files and create_keystore.sh to {out}")
    print(f"next, on a ROS 2 install whose DDS has security: sh {script} KEYSTORE, then run the nodes with "
          "ROS_SECURITY_ENABLE=true ROS_SECURITY_STRATEGY=Enforce ROS_SECURITY_KEYSTORE=KEYSTORE and "
          "--ros-args --enclave <enclave> (see README, Security)")
    if not params.security.per_robot_topics:
        print(f"note: {args.params or DEFAULT_PARAMS} has security.per_robot_topics off, so the planner publishes "
              "every robot's segments on the shared robot_segments topic, which these policies do not grant: "
              "set security.per_robot_topics: true for a fleet under SROS2")
    return 0
