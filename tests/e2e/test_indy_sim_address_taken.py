"""A second `timely-fleet up` (or `demo`) of the same fleet on one machine: its fake arm cannot
bind the address the first one holds. The command ends with one sentence naming the robot, the
address and what to do, not a traceback."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("neuromeka")

from robot_adapters.sim.indy_sim import FakeIndy  # noqa: E402
from robot_adapters.scene import Scene  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_up_with_its_fake_arm_address_taken_says_so_in_one_sentence(tmp_path):
    host = f"127.{random.randint(20, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"
    params = tmp_path / "fleet.yaml"
    params.write_text(yaml.safe_dump({"robots": [{"id": "arm_a", "kind": "arm", "adapter": "indy-sim", "host": host}]}))
    held = FakeIndy(host, scene=Scene()).start()  # the first fleet's fake arm
    try:
        p = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "up", "--params", str(params),
                            "--only", "adapters", "--seconds", "1"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    finally:
        held.stop()
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("timely-fleet up:")]
    assert f"robot arm_a: cannot bind {host}:" in line
    assert "stop the other `timely-fleet up` or `demo`" in line
