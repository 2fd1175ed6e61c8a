"""A burst over ROS at engine speed: 64 goals for 64 simulated robots at once on vLLM (CPU).

The planner node and the adapters run in this process as ``timely-fleet up`` runs them
(``running_fleet``: one executor thread per node); a GoalClient on its own node sends the 64 goals
at once. Every goal must succeed, every result must reach the client, and the client must
receive one feedback per segment of each result (with rclpy's default feedback depth
only 57-326 of 341 arrived).
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("vllm")

N = 64


@pytest.fixture(scope="module")
def vllm_engine():
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.vllm_engine import VllmEngine
    from llm_planner_node.config.params import EngineParams

    eng = VllmEngine(EngineParams(kind="vllm", model="embedded"), WallClock())
    yield eng
    eng.close()


def test_64_goals_at_once_all_succeed_with_every_result_and_feedback(ros_context, vllm_engine):
    from timely_tools.bench.live_bench import GoalArrivals, burst_goals, burst_params, node_burst
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    params = burst_params(N, "timelyllm")
    assert len(params.robots) == N and {r.kind for r in params.robots} == {"drone", "arm"}
    goals = burst_goals(N)
    with running_fleet(params, time_scale=0.02, context=ros_context, engine=vllm_engine) as fleet:
        assert fleet.adapters is not None  # the adapters run in this process
        client = GoalClient(ros_context)
        arrivals = GoalArrivals(client.node)
        try:
            with spinning(client.node, ros_context):
                assert client.wait_for_server(30), client.wait_problem
                time.sleep(0.3)
                burst = node_burst(client, arrivals, goals, timeout_s=90)
        finally:
            client.destroy()
    assert burst.results == N, f"{N - burst.results} result(s) never reached the client"
    assert burst.succeeded == N, (burst.statuses, burst.messages)
    assert burst.segments >= 2 * N  # every canonical plan has several segments
    assert burst.feedback == burst.segments, f"{burst.feedback} feedbacks for {burst.segments} segments"
    assert burst.feedback_complete == N  # per goal: one feedback per segment of its result, in order
    assert burst.all_generated_s is not None and burst.arrivals_seen == N
