"""`timely-fleet bench fleet` on a tiny fleet (20 drones, 15 s): the planner, a standby and the
adapters run as separate processes over real ROS, the active planner is killed 4 s into the
goals (0.6 s after the workload's first event started 5), every goal sent gets a result, the standby adopts every goal that was in flight (but for
goals sent in the last moments, which the journal may not hold yet), and the JSON holds every
number. The targets at 1,000 robots are the bench's to show (docs/guides/sizing.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from timely_tools.bench.fleet_bench import REQUIRED_KEYS

pytestmark = pytest.mark.ros


def test_tiny_fleet_bench_loses_no_goal_and_reports_every_number(tmp_path):
    out = tmp_path / "fleet.json"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "bench", "fleet", "--sizes", "20",
                        "--duration-s", "15", "--drain-s", "45", "--idle-s", "2", "--wakeup-msgs", "100",
                        "--standby", "--kill-at", "4", "--json", str(out)], capture_output=True, text=True, timeout=240)
    print(p.stdout)
    print(p.stderr[-3000:], file=sys.stderr)
    assert p.returncode == 0, p.stderr[-3000:]
    assert time.monotonic() - t0 < 240
    r = json.loads(out.read_text())
    assert r["wid1_goals_per_robot_s"] == pytest.approx(0.045)
    (size,) = r["sizes"]
    for key in REQUIRED_KEYS:
        assert key in size, key
    assert size["n"] == 20 and size["sent"] > 0
    assert size["lost"] == 0, size
    assert size["succeeded"] + size["timeout"] <= size["sent"]
    assert sum(size["by_status"].values()) == size["sent"]
    assert set(size["processes"]) == {"planner", "standby", "adapters_1"}
    for name in ("standby", "adapters_1"):  # (the planner was killed)
        assert size["processes"][name]["rss_mib"] > 0 and size["processes"][name]["threads_load"] > 0
    journal = size["journal"]
    assert journal["journals_per_s"] > 0 and journal["bytes_per_s"] > 0 and journal["replica_snapshots_applied"] >= 1
    assert journal["unprovoked_takeovers"] == 0
    t = size["takeover"]
    assert t["takeover_s"] is not None and t["takeover_s"] < 3.0  # within the robots' lease
    assert t["in_flight_at_kill"] > 0
    recent = t["in_flight_sent_last_s"]
    assert t["adopted"] >= t["in_flight_at_kill"] - (recent["goals"] - recent["adopted"]), t
    assert t["adopted"] == t["in_flight_at_kill"] - len(t["not_adopted"])
    # no thread per robot in the adapter process (20 robots; rclpy + DDS + the event loop)
    assert size["processes"]["adapters_1"]["threads_load"] < 40
    assert set(size["wakeup"]) == {"per_robot", "shared"}
    assert size["wakeup"]["shared"]["subscriptions"] == 1
