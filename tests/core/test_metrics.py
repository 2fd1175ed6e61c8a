"""Metrics per DESIGN.md, hand-computed."""

import math

import pytest

from llm_planner_node.core.metrics import outcome, segment_timeline
from llm_planner_node.core.tuf import NORMAL, URGENT


def test_timeline_and_outcome():
    # dispatched at 0.1, 0.2, 3.5; executions 2.0, 1.0, 0.5; network 8 ms
    # S0 = 0.108, F0 = 2.108; S1 = max(0.208, 2.108) = 2.108, F1 = 3.108;
    # S2 = max(3.508, 3.108) = 3.508, F2 = 4.008
    starts, ends = segment_timeline([0.1, 0.2, 3.5], [2.0, 1.0, 0.5], 0.008)
    assert starts == pytest.approx([0.108, 2.108, 3.508])
    assert ends == pytest.approx([2.108, 3.108, 4.008])
    o = outcome(0.0, NORMAL, [0.1, 0.2, 3.5], [2.0, 1.0, 0.5], 0.008)
    assert o.segment_waits == pytest.approx((0.108, 0.0, 0.4))
    assert o.response_s == pytest.approx(0.108)
    assert o.time_utility == 1.0
    # TUF0(0.108) + TUF1(0) + TUF1(0.4) = 1 + 1 + (1 - 2 * 0.4) = 2.2
    assert o.segment_utility == pytest.approx(2.2)
    # completion 4.008 - execution 3.5 = 0.508 = sum of waits
    assert o.waiting_s == pytest.approx(0.508) and o.completion_s == pytest.approx(4.008)


def test_urgent_late_response():
    # arrival 1.0, dispatched 1.392 -> response 0.4: TUF0 = -6.67 * 0.2 + 2 = 0.666
    o = outcome(1.0, URGENT, [1.392], [1.0], 0.008)
    assert o.response_s == pytest.approx(0.4)
    assert o.time_utility == pytest.approx(0.666)
    assert o.segment_utility == pytest.approx(0.666)


def test_outcome_needs_segments():
    with pytest.raises(ValueError):
        outcome(0.0, NORMAL, [], [], 0.008)
    assert math.isclose(outcome(0.0, NORMAL, [0.0], [1.0], 0.0).waiting_s, 0.0, abs_tol=1e-12)


def test_a_truncated_plan_is_not_a_completed_goal_in_the_simulator_or_the_live_report():
    """A plan cut at max_tokens executes only its first segments (end TRUNCATED). The simulator's
    summary and the live/rosbag report (GoalResult messages) agree: not completed, no utility."""
    import dataclasses

    from llm_planner_node.core.metrics import request_outcome
    from llm_planner_node.core.task_model import EndKind
    from timely_tools.evaluation.bag import outcome_from_result
    from llm_planner_node.ros.messages import build_result
    from timely_tools.sim.simulation import simulate
    from timely_tools.sim.workload import Arrival, goal_for

    full = goal_for(7, "drone3")  # mu(80); tc(90); mf(50): three segments
    cut = dataclasses.replace(full, max_tokens=full.prompt.segments[0].n_tokens + 1)
    res = simulate([Arrival(0.0, cut), Arrival(0.0, dataclasses.replace(full, robot_id="drone4"))], "timelyllm")
    truncated, whole = res.requests
    assert truncated.end is EndKind.TRUNCATED and len(truncated.segments) < len(whole.segments)
    assert whole.end is EndKind.SUCCEEDED
    from timely_fleet.msg import GoalResult

    def recorded(req):  # the node's planner/results record of the goal (planner_ports.RosPorts.result)
        r, g = build_result(req), req.goal
        return GoalResult(status=r.status, task_type=g.task_type, ert_s=g.tuf.ert, alpha=g.tuf.alpha,
                          beta=g.tuf.beta, segments=r.segments)

    assert request_outcome(truncated, 0.008) is None and outcome_from_result(recorded(truncated)) is None
    assert request_outcome(whole, 0.008) is not None and outcome_from_result(recorded(whole)) is not None
    assert res.by_type("all").completed == 1 and res.by_type("all").goals == 2
