"""Shared pytest fixtures.

ROS tests run inside the project environment (`scripts/run python -m pytest`, which `make test`
uses). Each test session gets its own ROS domain id so parallel runs on one machine do not see
each other's topics; DDS discovery stays on loopback (scripts/env.sh). Each session keeps the
planners' fleet memory files in a temporary XDG_STATE_HOME of its own.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import os
import random
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 100)))
# planners started by tests keep their fleet memory (planner.memory.path: default) in a directory of
# this session, never in the user's ~/.local/state, nor in another session's
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="timely_fleet_test_state_")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], ignore_errors=True)


def _ros_available() -> bool:
    try:
        import rclpy  # noqa: F401
        import timely_fleet.msg  # noqa: F401
    except ImportError:
        return False
    return bool(os.environ.get("TIMELY_FLEET_ENV") or os.environ.get("ROS_DISTRO"))


ROS_AVAILABLE = _ros_available()


def _rclpy_context(domain_id: int | None = None) -> Iterator[Any]:
    """A fresh rclpy context (on ``domain_id``, default ROS_DOMAIN_ID), shut down afterwards."""
    if not ROS_AVAILABLE:
        pytest.fail(
            "ROS 2 environment missing: run the tests with `make test` or `scripts/run python -m pytest`"
        )
    import rclpy
    from rclpy.context import Context

    ctx = Context()
    rclpy.init(context=ctx, domain_id=domain_id)
    try:
        yield ctx
    finally:
        rclpy.try_shutdown(context=ctx)
        # the nodes of a finished test sit in reference cycles that keep their DDS participant
        # (and its threads and discovery traffic) alive until a GC pass; free them now so a long
        # run does not accumulate dozens of live participants on the test's domain
        gc.collect()


@pytest.fixture
def ros_context():
    """A fresh rclpy context for one test, shut down afterwards (nodes must use context=...)."""
    yield from _rclpy_context()


@pytest.fixture(scope="module")
def ros_module_context():
    """One rclpy context for every test of a module (a fleet started once for the module's tests)."""
    yield from _rclpy_context()


_OWN_DOMAINS = itertools.count(1)


@pytest.fixture
def own_ros_domain(monkeypatch):
    """An rclpy context on a ROS domain of this test alone (another of 1-101, the domains whose
    DDS ports stay below Linux's ephemeral range), which every process the test starts inherits.
    For tests that kill a planner and watch what follows: a planner another test left on the
    run's domain would answer in its place."""
    run_domain = int(os.environ["ROS_DOMAIN_ID"])
    domain = random.Random(os.getpid() * 1000 + next(_OWN_DOMAINS)).choice([d for d in range(1, 102) if d != run_domain])
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    yield from _rclpy_context(domain)


@contextmanager
def fleet_with_client(params: Any, ros_context: Any, **fleet_kwargs: Any) -> Iterator[Any]:
    """``up.running_fleet(params, ...)`` with a connected ``GoalClient`` as ``fleet.client``."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    with running_fleet(params, context=ros_context, **fleet_kwargs) as f:
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            f.client = client
            yield f
        client.destroy()


_UP: list = []  # the shared vLLM Servers while their fixture lives


@pytest.fixture(scope="package")
def vllm_servers(tmp_path_factory):
    """Two ``vllm serve`` servers for the remote-engine tests (tests/engines/engine_runs.py's
    ``Servers``: tests/engines/test_remote_engine.py and tests/e2e/test_remote_node.py), started
    once for every test that asks for them (a server takes 30-60 s to start on CPU); stopped as
    soon as the next test does not use them (pytest_runtest_teardown below: the test directories
    are not packages, so "package" scope lasts the whole session and two idle servers would hold
    3 GB and CPU through the rest of the suite); each use starts again any server that is down."""
    from tests.engines.engine_runs import Servers

    s = Servers(tmp_path_factory.mktemp("vllm-serve"))
    _UP.append(s)
    try:
        s.ensure_up()
        yield s
    finally:
        s.stop_all()
        _UP.remove(s)


@pytest.fixture
def servers(vllm_servers):
    """The shared servers, both up."""
    vllm_servers.ensure_up()
    return vllm_servers


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared vLLM servers after the last test in a row that uses them."""
    if _UP and (nextitem is None or "vllm_servers" not in getattr(nextitem, "fixturenames", ())):
        for s in _UP:
            s.stop_all()
