"""Property tests over random workloads, policies and memory sizes (hypothesis)."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_planner_node.core.metrics import request_outcome, segment_timeline
from llm_planner_node.core.task_model import GenState
from llm_planner_node.core.tuf import tuf1
from llm_planner_node.engines.sim_engine import SimEngineConfig
from timely_tools.sim.simulation import simulate
from llm_planner_node.engines.sim_traces import TRACES
from timely_tools.sim.workload import Arrival, generate, goal_for, WorkloadSpec

NET = 0.008
POLICIES = ["vllm", "vllm-stream", "seg-fcfs", "seg-edf", "timelyllm", "trail", "ltr", "lamps", "hybrid",
            "timelyllm-lamps", "timelyllm-trail"]

arrival_st = st.tuples(st.floats(0, 3, allow_nan=False), st.sampled_from(sorted(TRACES)))
workload_st = st.lists(arrival_st, min_size=1, max_size=14)
# KV capacity: generous, or tight: 4,600 tokens hold two arm generations (1,742 each) or three
# drone ones (1,364), 6,500 three arm ones (skill-set prefixes not in use are evictable cache)
capacity_st = st.sampled_from([45_000, 6_500, 4_600])


def _arrivals(items):
    return [Arrival(t, goal_for(tid, f"r{i}")) for i, (t, tid) in enumerate(items)]


def _check(result, arrivals, cancelled=frozenset()):
    reqs = result.requests
    assert len(reqs) == len(arrivals)
    log = {}
    for t, rid, k in result.dispatch_log:
        log.setdefault(rid, []).append((t, k))
    for r in reqs:
        # every request ends in a terminal state; only cancelled ones do not finish
        assert r.state.terminal
        if r.id not in cancelled:
            assert r.state is GenState.FINISHED, (r.id, r.state, r.end_reason)
        # segments are generated, dispatched and executed in order
        assert [s.index for s in r.segments] == list(range(len(r.segments)))
        sent = log.get(r.id, [])
        assert [k for _, k in sent] == list(range(len(sent)))
        assert all(a[0] <= b[0] for a, b in zip(sent[:-1], sent[1:], strict=True))
        for k in range(len(sent)):
            if r.exec_start[k] is not None:
                assert r.exec_start[k] >= r.dispatched_at[k] + NET - 1e-9
            if k and r.exec_start[k] is not None:
                assert r.exec_end[k - 1] is not None and r.exec_start[k] >= r.exec_end[k - 1] - 1e-9
        o = request_outcome(r, NET)
        if o is not None:
            # utility never exceeds beta, for the goal and for every segment
            assert o.time_utility <= r.goal.tuf.beta
            assert all(tuf1(w, r.goal.tuf) <= r.goal.tuf.beta for w in o.segment_waits[1:])
            assert o.segment_utility <= len(r.segments) * r.goal.tuf.beta + 1e-9
            assert math.isclose(o.waiting_s, sum(o.segment_waits), abs_tol=1e-6)
            durations = [e - s for s, e in zip(r.exec_start, r.exec_end, strict=True)]
            starts, _ = segment_timeline(r.dispatched_at, durations, NET)
            assert starts == [s for s in r.exec_start]
    # no generation ever ran without its KV reservation (SimEngine raises otherwise)
    assert result.engine.peak_reserved_tokens <= result.engine_capacity


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload_st, st.sampled_from(POLICIES), st.sampled_from([None, 1, 3]), capacity_st,
       st.integers(0, 2**16))
def test_random_workloads(items, policy, max_batch, capacity, seed):
    arrivals = _arrivals(items)
    params = {} if max_batch is None else {"max_batch": max_batch}
    result = simulate(arrivals, policy, seed=seed,
                      engine_config=SimEngineConfig(kv_capacity_tokens=capacity), **params)
    _check(result, arrivals)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload_st, st.sampled_from(POLICIES),
       st.lists(st.tuples(st.floats(0, 4, allow_nan=False), st.integers(0, 13)), max_size=5))
def test_random_cancellations(items, policy, cancels):
    arrivals = _arrivals(items)
    cancels = [(t, i) for t, i in cancels if i < len(arrivals)]
    result = simulate(arrivals, policy, cancels=cancels)
    cancelled = {r.id for r in result.requests if r.state is GenState.CANCELLED}
    assert cancelled <= {result.request_of_arrival[i] for _, i in cancels}
    _check(result, arrivals, cancelled)


def test_deterministic_under_seed():
    arrivals = generate(WorkloadSpec(0.5, 8, tuple(range(1, 12)), 20, 30.0), seed=3)
    a = simulate(arrivals, "timelyllm", seed=7)
    b = simulate(arrivals, "timelyllm", seed=7)
    assert a.dispatch_log == b.dispatch_log and a.summary == b.summary
    c = simulate(arrivals, "timelyllm", seed=8)
    assert [r.exec_end for r in a.requests] != [r.exec_end for r in c.requests]
