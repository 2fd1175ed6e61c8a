"""One plan per robot: a task for a busy robot goes to a free robot of the same kind, or waits
(hand-built tiny traces; the same AgentPool drives the simulator and live evaluation)."""

from __future__ import annotations

from timely_tools.sim.agents import AgentPool
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for


def test_pool_free_then_same_kind_then_wait():
    pool = AgentPool({"drone": ["drone0", "drone1"], "arm": ["arm0"]})
    a = pool.arrive(0, goal_for(1, "drone0"), 0.0)
    assert a.goal.robot_id == "drone0" and a.waited_s == 0
    b = pool.arrive(1, goal_for(2, "drone0"), 1.0)  # drone0 busy -> the free drone
    assert b.goal.robot_id == "drone1" and pool.reassigned == [1]
    assert pool.arrive(2, goal_for(9, "arm0"), 1.0).goal.robot_id == "arm0"  # never a drone
    assert pool.arrive(3, goal_for(6, "drone1"), 2.0) is None  # every drone busy: waits
    assert pool.arrive(4, goal_for(7, "drone0"), 2.5) is None
    assert pool.waiting("drone") == 2
    assert pool.release("arm0", 3.0) is None  # an arm's release serves no drone task
    c = pool.release("drone1", 4.0)  # first waiting task (FIFO) takes the freed drone
    assert (c.index, c.goal.robot_id, c.t, c.arrived) == (3, "drone1", 4.0, 2.0) and c.waited_s == 2.0
    d = pool.release("drone0", 5.0)
    assert (d.index, d.goal.robot_id) == (4, "drone0")
    assert pool.waiting() == 0


def test_simulator_never_runs_two_plans_on_one_robot():
    # three tasks for drone0 at once, two drones: one moves to drone1, one waits for a free drone
    arr = [Arrival(0.0, goal_for(1, "drone0")), Arrival(0.0, goal_for(2, "drone0")),
           Arrival(0.0, goal_for(6, "drone0"))]
    pool = AgentPool.for_fleet(["drone"], 2)
    res = simulate(arr, "timelyllm", agents=pool)
    reqs = {r.id: r for r in res.requests}
    by_arrival = {i: reqs[rid] for i, rid in res.request_of_arrival.items()}
    assert {by_arrival[0].goal.robot_id, by_arrival[1].goal.robot_id} == {"drone0", "drone1"}
    assert 1 in res.reassigned
    third = by_arrival[2]
    assert res.agent_wait_s[2] > 0
    # the waiting task starts when the first robot's plan has ended, on that robot
    first_done = min(max(e for e in r.exec_end) for r in (by_arrival[0], by_arrival[1]))
    assert third.arrival >= first_done
    freed = next(r for r in (by_arrival[0], by_arrival[1]) if max(r.exec_end) == first_done)
    assert third.goal.robot_id == freed.goal.robot_id
    # no two plans overlap on one robot: [arrival, last execution end] intervals are disjoint
    spans: dict[str, list[tuple[float, float]]] = {}
    for r in res.requests:
        spans.setdefault(r.goal.robot_id, []).append((r.arrival, max(r.exec_end)))
    for s in spans.values():
        s.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(s, s[1:]))


def test_without_a_pool_the_simulator_keeps_goals_as_given():
    arr = [Arrival(0.0, goal_for(1, "drone0")), Arrival(0.0, goal_for(2, "drone0"))]
    res = simulate(arr, "vllm")
    assert all(r.goal.robot_id == "drone0" for r in res.requests) and res.reassigned == []


def test_eval_reports_what_the_rule_did():
    from timely_tools.evaluation.eval_cmd import run_sim
    from timely_tools.evaluation.workload_spec import load_spec

    spec = load_spec("WID1").with_(duration_s=40.0, agents=3)
    (r,) = run_sim(spec, ["vllm"])
    a = r["agents"]
    assert a["robots_per_kind"] == 3 and a["reassigned"] > 0 and a["waited"] > 0
    assert r["task_types"]["all"]["goals"] == r["task_types"]["all"]["completed"]
