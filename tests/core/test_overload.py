"""Overload control in the planner: shedding ends a goal with EndKind.SHED and its reason, a
bounded queue refuses new goals beyond its limit at once, and goals that start late or while
the engine is saturated are generated without suspending."""

import pytest

from llm_planner_node.core.batching import make_admission
from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.exec_table import TableExecutionTime
from llm_planner_node.core.planner import Planner, PlannerConfig, QueueFull
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.task_model import EndKind, GenState
from llm_planner_node.engines.sim_engine import SimEngine
from llm_planner_node.sim.simulation import simulate
from llm_planner_node.sim.workload import Arrival, goal_for


class Sink:
    def __init__(self):
        self.ended = []

    def dispatch(self, request, segment):
        pass

    def done(self, request):
        self.ended.append(request)


def _planner(admission, config=PlannerConfig()):
    clock = VirtualClock()
    engine = SimEngine(clock)
    sink = Sink()
    policy = get_policy("timelyllm", admission=admission)
    return clock, Planner(engine, policy, clock, TableExecutionTime(), sink, config), sink


def test_shedding_ends_a_hopeless_goal_with_end_kind_shed():
    clock, planner, sink = _planner(make_admission("improved", hopeless="shed"))
    urgent = planner.submit(goal_for(6, "drone0"))   # urgent: utility 0 at ~0.5 s
    normal = planner.submit(goal_for(1, "drone1"))   # normal: utility 0 at 1.5 s
    clock.advance_to(0.6)  # the urgent goal waited: even an immediate start is past its zero
    planner.tick()
    req = planner.requests[urgent]
    assert req.end is EndKind.SHED and req.state is GenState.FAILED
    assert "shed under overload" in req.end_reason and "0.50 s" in req.end_reason
    assert sink.ended == [req]
    assert planner.requests[normal].state is GenState.RUNNING  # still worth serving
    assert EndKind.SHED.state is GenState.FAILED


@pytest.mark.parametrize("hopeless", ["keep", "last"])
def test_without_shedding_a_hopeless_goal_is_still_served(hopeless):
    clock, planner, sink = _planner(make_admission("improved", hopeless=hopeless))
    rid = planner.submit(goal_for(6, "drone0"))
    clock.advance_to(0.6)
    planner.tick()
    assert planner.requests[rid].state is GenState.RUNNING and not sink.ended


def test_bounded_queue_refuses_beyond_the_limit_at_once():
    clock, planner, _ = _planner("improved", PlannerConfig(max_queue=3))
    ids = [planner.submit(goal_for(1, f"drone{i}")) for i in range(3)]
    with pytest.raises(QueueFull, match=r"max_queue=3.*refused"):
        planner.submit(goal_for(1, "drone9"))
    assert isinstance(QueueFull("x"), ValueError)  # the node's existing refusal path
    assert planner.queued() == 3 and len(planner.requests) == 3
    planner.tick()  # admitted -> the queue has room again
    assert planner.queued() == 0
    planner.submit(goal_for(1, "drone9"))
    assert ids == [0, 1, 2]
    with pytest.raises(ValueError):
        PlannerConfig(max_queue=0)


def test_simulation_reports_refused_goals():
    arr = [Arrival(0.0, goal_for(1, f"drone{i}")) for i in range(5)]
    res = simulate(arr, "timelyllm", planner_config=PlannerConfig(max_queue=2))
    assert res.refused == [2, 3, 4] and len(res.requests) == 2
    assert all(r.state is GenState.FINISHED for r in res.requests)


def test_late_goal_streams_its_plan_and_on_time_goal_suspends():
    on_time = simulate([Arrival(0.0, goal_for(1, "drone0"))], "timelyllm")
    assert on_time.engine.resume_hits + on_time.engine.resume_misses == 3  # suspended per segment
    clock, planner, _ = _planner("improved")
    rid = planner.submit(goal_for(6, "drone0"))
    clock.advance_to(0.3)  # urgent ERT 0.2 s: starts late
    planner.tick()
    assert not planner._suspends(planner.requests[rid], clock.now())
    clock2, planner2, _ = _planner("literal")  # the literal rule always suspends
    rid2 = planner2.submit(goal_for(6, "drone0"))
    clock2.advance_to(0.3)
    assert planner2._suspends(planner2.requests[rid2], clock2.now())
