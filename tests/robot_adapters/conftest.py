"""Shared fixtures of the robot-side tests (execution-time model, simulators, adapters)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tello_net():
    """Client and simulator namespaces joined by a veth pair (see robot_adapters.sim.netns).

    Session-scoped: djitellopy keeps one process-wide control socket, created in the client
    namespace by the first ``Tello()``; every later Tello of the session reuses it."""
    from robot_adapters.sim import netns

    if not netns.available():
        pytest.skip("network namespaces unavailable (need root and iproute2)")
    net = netns.TestNetwork(n_sims=4)
    net.open()
    try:
        yield net
    finally:
        net.close()
