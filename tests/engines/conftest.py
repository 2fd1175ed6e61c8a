"""Fixtures of the live engine tests."""

from __future__ import annotations

import pytest

_UP: list = []  # the shared Servers while the fixture lives


@pytest.fixture(scope="package")
def vllm_servers(tmp_path_factory):
    """Two ``vllm serve`` servers for the remote-engine tests (engine_runs.Servers), started once
    for every test of this directory that asks for them (a server takes 30-60 s to start on CPU);
    stopped as soon as the next test does not use them (pytest_runtest_teardown below: without
    this directory being a package, "package" scope lasts the whole session and two idle servers
    would hold 3 GB and CPU through the rest of the suite); each use starts again any server
    that is down."""
    from engine_runs import Servers

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
    """Stop the shared servers after the last test in a row that uses them."""
    if _UP and (nextitem is None or "vllm_servers" not in getattr(nextitem, "fixturenames", ())):
        for s in _UP:
            s.stop_all()
