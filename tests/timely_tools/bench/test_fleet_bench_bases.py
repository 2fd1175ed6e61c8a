"""`bench fleet --bases SHARE`: the share of the fleet that are mobile bases gets the base traces at
the drones' per-agent rate, on robots of its own kind, declared as the bench's YAML says (places,
a detections topic); the simulated engine plans those traces (no ROS here: the bench's run over
ROS is measured in docs/reports/)."""

from __future__ import annotations

import yaml

from llm_planner_node.engines.sim_prompts import sim_prompt_builder
from llm_planner_node.engines.sim_traces import BASE_TRACES, TRACES
from timely_tools.bench.fleet_bench import WID1_GOALS_PER_AGENT_S, Config, fleet_yaml, split, workload


def test_a_share_of_bases_splits_the_fleet_and_gets_base_traces_on_bases_only():
    assert split(1000, 0.1) == (900, 100) and split(20, 0.0) == (20, 0) and split(3, 1.0) == (0, 3)
    arr = workload(400, 600.0, seed=1, bases=0.25)
    drones = [a.goal for a in arr if a.goal.robot_kind == "drone"]
    bases = [a.goal for a in arr if a.goal.robot_kind == "base"]
    assert [a.t for a in arr] == sorted(a.t for a in arr)
    assert {g.robot_id.rstrip("0123456789") for g in bases} == {"base"}
    assert all(int(g.robot_id[4:]) < 100 for g in bases) and all(int(g.robot_id[5:]) < 300 for g in drones)
    assert {g.instruction for g in bases} == {t.description for t in BASE_TRACES.values()}
    assert {g.instruction for g in drones} <= {TRACES[i].description for i in range(1, 9)}
    # the same per-agent rate (0.045 goals/s) for both kinds, within the Poisson noise of 600 s
    for goals, agents in ((drones, 300), (bases, 100)):
        rate = len(goals) / agents / 600.0
        assert 0.8 * WID1_GOALS_PER_AGENT_S < rate < 1.2 * WID1_GOALS_PER_AGENT_S, rate
    # no share: exactly the WID1 workload of the drones, as the bench sent before it had bases
    from timely_tools.bench.fleet_bench import WID1_EPS_PER_AGENT
    from timely_tools.sim.workload import WorkloadSpec, generate

    assert workload(40, 60.0, seed=2) == generate(WorkloadSpec(WID1_EPS_PER_AGENT * 40, 8, tuple(range(1, 9)), 40, 60.0), 2)


def test_the_bench_declares_its_bases_and_the_simulated_engine_plans_their_traces(tmp_path):
    robots = yaml.safe_load(fleet_yaml(Config(bases=0.5), 4, tmp_path).read_text())["robots"]
    assert [r["id"] for r in robots] == ["drone0", "drone1", "base0", "base1"]
    b = robots[2]
    assert (b["kind"], b["adapter"], b["perception"]["topic"]) == ("base", "sim", "base0/detections")
    assert set(b["places"]) >= {"kitchen", "dock", "hall", "office", "lab"}
    for t in BASE_TRACES.values():
        p = sim_prompt_builder(t.description.upper(), "base", "nav2_base")
        assert p is t.prompt and p.segments[0].calls[0].name == "go_to"
        assert all(c.args[0] in b["places"] for s in p.segments for c in s.calls if c.name == "go_to")
