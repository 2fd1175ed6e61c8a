"""Hosting a fleet's adapters in one process: which robots of the YAML it hosts
(:func:`select_robots`), the link's keys (:func:`adapter_keystore`) and the adapter node with one
core per robot (:func:`start_adapters`). ``timely-fleet up`` and the robot computer's
``timely-robot up`` both build their adapters here."""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import re
from typing import Any, Callable, Iterable

from timely_robot.config import ParamError, RobotParams, SecurityParams

log = logging.getLogger("robot_adapters.host")


def select_robots(robots: Iterable[RobotParams], spec: str | None) -> set[str]:
    """The robot ids an adapter process hosts: every robot of the YAML (``spec`` None or empty),
    else those matching ``spec``: comma-separated ids or shell patterns (``drone_1*``), or
    ``k/n`` (the k-th of n equal groups, 1-based, in YAML order: ``1/4`` ... ``4/4``)."""
    ids = [r.id for r in robots]
    if not spec:
        return set(ids)
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
    if m:
        k, n = int(m.group(1)), int(m.group(2))
        if not 1 <= k <= n:
            raise ParamError(f"--robots {spec}: the group k/n needs 1 <= k <= n")
        return {rid for i, rid in enumerate(ids) if i * n // len(ids) == k - 1} if ids else set()
    out: set[str] = set()
    for pat in (p.strip() for p in spec.split(",")):
        if not pat:
            continue
        hit = fnmatch.filter(ids, pat)
        if not hit:
            raise ParamError(f"--robots: no robot of the YAML matches {pat!r}")
        out.update(hit)
    return out


def adapter_keystore(security: SecurityParams, robot_ids: Iterable[str], *, create: bool) -> Any:
    """The keystore of ``security.keystore``; with ``create``, a key is made for every robot that
    has none (a planner and its adapters started together share them); without, a robot whose
    key is missing is refused when its first segment is checked (the message names
    ``timely-robot key install``)."""
    from timely_robot.link.signing import Keystore

    keystore = Keystore(security.keystore or None)
    if create:
        created = keystore.ensure(list(robot_ids))
        if created:
            log.info(f"security: created keys for {len(created)} robot(s) in {keystore.path} (first run)")
    return keystore


def start_adapters(robots: tuple[RobotParams, ...], security: SecurityParams, *, context: Any,
                   stack: contextlib.ExitStack, keystore: Any = None, time_scale: float = 1.0,
                   namespace: str = "", hosted: set[str] | None = None,
                   desk: Callable[[tuple[str, ...]], Any] | None = None) -> Any:
    """The adapter node of the ``hosted`` robots (default: all but ``external`` ones), each with
    its executor and its simulator started; everything stops when ``stack`` closes (the robots
    are halted first). ``desk``: the simulated desk of an ``indy-sim`` arm without a scene."""
    from timely_robot.link.signing import LinkSigner, LinkVerifier
    from timely_robot.skills import DEFAULT_SKILL_SETS

    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_node import AdapterNode
    from robot_adapters.executors import make_executor
    from robot_adapters.sim.simulators import TelloNetworks

    hosted = {r.id for r in robots} if hosted is None else hosted
    node = AdapterNode("fleet_adapters", context=context, namespace=namespace,
                       signer=LinkSigner(keystore, security.mode) if keystore else None,
                       verifier=LinkVerifier(keystore, security.mode) if keystore else None,
                       per_robot_topics=security.per_robot_topics)
    stack.callback(node.destroy_node)
    stack.callback(node.shutdown_robots)
    tellos = TelloNetworks(sum(1 for r in robots if r.adapter == "tello-sim" and r.id in hosted), stack)
    for i, robot in enumerate(robots):
        if robot.adapter == "external" or robot.id not in hosted:
            continue
        ex = make_executor(robot, i, time_scale, stack, tellos, desk=desk, context=context)
        node.add_robot(AdapterCore(robot.id, ex, node.status_publisher(robot.id),
                                   skill_set=DEFAULT_SKILL_SETS[robot.skill_set], time_scale=time_scale,
                                   budget=robot.effective_budget, lease_s=security.lease_s,
                                   lease_grace_s=security.lease_grace_s))
    return node
