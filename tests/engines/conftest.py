"""Fixtures of the live engine tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def vllm_servers(tmp_path_factory):
    """Two ``vllm serve`` servers for the remote-engine tests (engine_runs.Servers), started once
    for every test of this directory that asks for them (a server takes 30-60 s to start on CPU)
    and stopped after the last; each use starts again any server a previous test stopped."""
    from engine_runs import Servers

    s = Servers(tmp_path_factory.mktemp("vllm-serve"))
    try:
        s.ensure_up()
        yield s
    finally:
        s.stop_all()


@pytest.fixture
def servers(vllm_servers):
    """The shared servers, both up."""
    vllm_servers.ensure_up()
    return vllm_servers
