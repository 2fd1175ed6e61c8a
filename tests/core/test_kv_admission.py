"""The core's KV admission with shared skill-set prefixes: a generation is admitted only when its
worst case fits in the engine's free KV memory, else it waits queued; prefixes no running
generation uses are cache that gives way, so a fleet whose prefixes exceed the KV still runs."""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_planner_node.core.task_model import EndKind
from llm_planner_node.engines.sim_engine import SimEngineConfig, SimSegment
from timely_robot.skills import CHAT
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for

PREFIX, TASK, MAX_TOKENS = 1000, 50, 200  # each goal's worst case: 1,250 KV tokens


def _goal(kind: str, robot_id: str, prefix: int = PREFIX, max_tokens: int = MAX_TOKENS):
    """A goal of ``kind`` whose prompt starts with its skill set's prefix of ``prefix`` tokens."""
    if kind == "chat":  # a two-sentence answer in the chat skill set
        g = goal_for(1, robot_id)
        segs = (SimSegment("Robots never sleep.", 6, ()), SimSegment("They charge.", 5, ()))
        return replace(g, robot_kind="chat", task_type="chat", skill_set_id=CHAT.id, max_tokens=max_tokens,
                       prompt=replace(g.prompt, shared_prefix_tokens=prefix, task_tokens=TASK,
                                      segments=segs, prefix_key=CHAT.id))
    g = goal_for({"drone": 1, "arm": 9, "base": 12}[kind], robot_id)
    return replace(g, max_tokens=max_tokens, prompt=replace(g.prompt, shared_prefix_tokens=prefix, task_tokens=TASK))


KINDS = ("drone", "arm", "base", "chat")


@pytest.mark.parametrize("policy", ["vllm", "seg-fcfs", "timelyllm"])
def test_four_prefixes_beyond_the_kv_capacity_every_goal_succeeds(policy):
    # 2,600 KV tokens: two 1,250-token generations at a time, a third waits; the four skill-set
    # prefixes (4 x 1,000) do not fit together, so those not in use are evicted and reloaded
    arrivals = [Arrival(0.01 * i, _goal(kind, f"{kind}{i}")) for i, kind in enumerate(KINDS * 2)]
    res = simulate(arrivals, policy, engine_config=SimEngineConfig(kv_capacity_tokens=2_600))
    assert [r.end for r in res.requests] == [EndKind.SUCCEEDED] * 8, [r.end_reason for r in res.requests]
    assert res.engine.peak_reserved_tokens <= 2_500 and res.engine.peak_batch <= 2
    # every goal's first prefill paid its prefix at least once: none was pinned for good
    assert res.engine.prefill_tokens >= 4 * PREFIX


def test_a_generation_waits_while_another_holds_the_room_and_starts_when_it_finishes():
    # room for one 1,250-token generation: the base's goal stays queued while the drone's plan
    # is generated (vllm: the whole plan, no suspension), then runs on its own prefix
    arrivals = [Arrival(0.0, _goal("drone", "d0")), Arrival(0.001, _goal("base", "b0"))]
    res = simulate(arrivals, "vllm", engine_config=SimEngineConfig(kv_capacity_tokens=1_300))
    drone, base = res.requests
    assert drone.end is EndKind.SUCCEEDED and base.end is EndKind.SUCCEEDED
    assert base.gen_start[0] >= drone.gen_end[-1]
    assert res.engine.peak_batch == 1 and res.engine.peak_reserved_tokens == 1_250


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0, 2, allow_nan=False), st.sampled_from(KINDS),
                          st.integers(16, 1500), st.integers(16, 300)), min_size=1, max_size=10),
       st.sampled_from(["vllm", "seg-fcfs", "timelyllm", "lamps"]), st.floats(1.0, 3.0), st.integers(0, 2**16))
def test_every_goal_finishes_when_each_alone_fits(items, policy, room, seed):
    # the skill sets' prefix sizes are those of the first goal of each kind (one prefix per key)
    size = {}
    for _, kind, prefix, _ in items:
        size.setdefault(kind, prefix)
    arrivals = [Arrival(t, _goal(kind, f"r{i}", size[kind], mt)) for i, (t, kind, _, mt) in enumerate(items)]
    largest = max(a.goal.prompt.prompt_tokens + a.goal.max_tokens for a in arrivals)
    capacity = int(largest * room)
    res = simulate(arrivals, policy, seed=seed, engine_config=SimEngineConfig(kv_capacity_tokens=capacity))
    assert all(r.end in (EndKind.SUCCEEDED, EndKind.TRUNCATED) for r in res.requests), \
        [(r.end, r.end_reason) for r in res.requests]
    assert res.engine.peak_reserved_tokens <= capacity
