"""`timely-fleet bench safety` end to end, as a user runs it (its own process, which starts the
planner and adapters as processes of their own): every adversarial plan is refused before or
while it would pass its robot's budget or fence, every robot with an open goal stops when the
planner is killed, and an emergency stop halts every robot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def test_bench_safety_reports_no_plan_beyond_its_envelope(tmp_path):
    out = tmp_path / "safety.json"
    p = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "bench", "safety", "--robots", "20",
                        "--kill-robots", "8", "--time-scale", "0.1", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.is_file(), (p.stdout[-2000:], p.stderr[-3000:])
    r = json.loads(out.read_text())
    assert r["adversarial_plans"] >= 50
    assert r["dispatched_beyond_budget"] == 0 and r["executed_beyond_budget"] == 0 and r["fence_violations"] == 0
    # the adversarial plan never reached its robot
    row = next(x for x in r["plans"] if x["plan"].startswith("the real model's loop"))
    assert row["status"] == "INVALID_PLAN" and row["dispatched_segments"] == 0
    assert "exceeds budget: 362000 skills > 50" in row["message"]
    # budgets bound: refusals by the planner (static worst case) and by the adapter (fence)
    assert r["by_status"].get("INVALID_PLAN", 0) >= 20 and r["by_status"].get("ROBOT_FAILED", 0) >= 5
    k = r["planner_kill"]
    assert k["robots_moving"] >= 1 and k["stopped"] == k["robots_moving"], k
    assert k["stop_s_max"] <= k["lease_s"] + 1.0, k
    e = r["estop"]
    assert e["stopped"] == e["robots"] == 20 and e["goals_cancelled"] == 20, e
    assert e["second_stop_cli"]["status"] == 0, e
    assert p.returncode == 0, p.stdout[-1500:]
