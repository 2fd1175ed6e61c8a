"""`timely-fleet bench faults --short`: the CI form of the fault campaign runs, ends by itself and
writes every number. It asserts the JSON's shape and the bookkeeping, never the targets (0 lost,
0 false timeouts, p99s < 1 s, 0 forged accepted): those are the planner's to meet; the numbers
are printed (pytest -s) for the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from timely_tools.bench.faults_bench import KINDS, REQUIRED_KEYS


def test_short_fault_campaign_runs_bounded_and_reports_every_number(tmp_path):
    out = tmp_path / "faults.json"
    env = dict(os.environ)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "llm_planner_node.cli", "bench", "faults", "--short", "--json", str(out)],
                       capture_output=True, text=True, timeout=150, env=env)  # a hang guard, not a speed check
    took = time.monotonic() - t0
    print(p.stdout)
    print(p.stderr[-3000:], file=sys.stderr)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    for key in REQUIRED_KEYS:
        assert key in r, key
    for key in ("goals_sent", "terminal", "lost", "false_timeouts", "forged_accepted", "busy_rejections",
                "timeouts_robot_silent", "flood_ended_healthy_goals"):
        assert isinstance(r[key], int) and r[key] >= 0, (key, r[key])
    for key in ("status_delay_p50_s", "status_delay_p99_s", "reject_p50_s", "reject_p99_s"):
        assert r[key] is None or isinstance(r[key], float), (key, r[key])
    assert r["reject_p99_s"] is not None and r["reject_samples"] > 0  # malformed goals were answered
    assert r["goals_sent"] > 0 and r["terminal"] + r["lost"] == r["goals_sent"]
    assert sum(r["by_status"].values()) == r["terminal"]
    assert set(r["forged_accepted_by_kind"]) == set(KINDS)
    assert r["forged_accepted"] == sum(r["forged_accepted_by_kind"].values())
    assert r["flood"].get("flood_sent", 0) > 0 and r["adapter_restart_s"] is not None
    # the independent status recorder heard the adapters and the flood (else every judgement
    # above that needs the adapters' statuses would be made blind)
    assert r["status_delay_samples"] > 0
    assert r["recorder"]["flood_seen_fraction"] >= 0.5, r["recorder"]
    assert r["processes"]["planner"]["cpu_s"] >= 0
    assert "goals sent / terminal / lost" in p.stdout
    print(f"short campaign: {took:.0f} s; sent {r['goals_sent']}, terminal {r['terminal']}, lost {r['lost']}, "
          f"false timeouts {r['false_timeouts']}, status delay p99 {r['status_delay_p99_s']}, "
          f"reject p99 {r['reject_p99_s']}, forged accepted {r['forged_accepted']} {r['forged_accepted_by_kind']}")
