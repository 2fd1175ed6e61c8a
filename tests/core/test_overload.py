"""Overload control in the planner: shedding ends a goal with EndKind.SHED and its reason, a
bounded queue refuses new goals beyond its limit at once, and goals that start late or while
the engine is saturated are generated without suspending."""

import pytest

from llm_planner_node.core.batching import make_admission
from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.exec_table import TableExecutionTime
from llm_planner_node.core.planner import Planner, PlannerConfig, QueueFull
from llm_planner_node.core.policies import get_policy
from timely_robot.skills import SkillCall
from llm_planner_node.core.task_model import EndKind, GenState
from llm_planner_node.engines.sim_engine import SimEngine
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for


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
    on_time = simulate([Arrival(0.0, goal_for(1, "drone0"))], "timelyllm", admission="literal")
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


def _resumes(result):
    return result.engine.resume_hits + result.engine.resume_misses


def test_contended_rule_suspends_only_while_work_waits():
    """``suspend="contended"`` (improved): a lone goal streams its 4 segments (nothing waits
    for the engine, so a suspension would only cost a resume); ``always`` suspends it 3 times."""
    lone = [Arrival(0.0, goal_for(1, "drone0"))]
    assert _resumes(simulate(lone, "timelyllm")) == 0
    assert _resumes(simulate(lone, "timelyllm", admission=make_admission("improved", suspend="always"))) == 3
    assert _resumes(simulate(lone, "timelyllm", admission="literal")) == 3


def test_contended_rule_suspends_while_ready_goals_wait():
    """A batch of one: while a second goal waits, the running goal suspends at its first
    boundary and the waiting goal starts; once nothing waits, generations stream on."""
    adm = make_admission("improved", fill_batch=1, per_step=1, max_batch=1)
    clock, planner, sink = _planner(adm)
    a = planner.submit(goal_for(1, "drone0"))
    planner.tick()
    assert not planner._backlog  # a started with nothing waiting (not streamed as backlog)
    b = planner.submit(goal_for(1, "drone1"))
    planner.tick()
    assert planner._running.keys() == {a} and planner._backlog and planner._waiting_row["gen_id"] == b  # b waits
    engine = planner.engine
    suspended = []
    for _ in range(2000):
        engine.start_iteration()
        end = engine.in_flight_end()
        if end is None:
            break
        clock.advance_to(end)
        for ev in engine.step():
            if getattr(ev, "suspended", False):
                suspended.append((ev.gen_id, ev.index))
            planner._handle(ev)
        planner._schedule()
    assert suspended[0] == (a, 0)  # a gave the engine to b at its first boundary
    assert planner.requests[b].state is not GenState.QUEUED
    assert not planner._backlog and planner._waiting_row is None
    with pytest.raises(ValueError, match="suspend must be one of"):
        make_admission("improved", suspend="never")


def _waiting_goal_setup(g0: float):
    """A batch of one: goal a (drone0) runs, goal b (drone1) waits for its first segment; the
    drone's G(s_0) estimate is ``g0`` at the decision that left b waiting."""
    adm = make_admission("improved", fill_batch=1, per_step=1, max_batch=1)
    clock, planner, _ = _planner(adm)
    for _ in range(200):
        planner.segment_time.observe("drone", 0, g0)
    a = planner.submit(goal_for(1, "drone0"))
    planner.tick()
    b = planner.submit(goal_for(1, "drone1"))
    planner.tick()
    assert planner._waiting_row["gen_id"] == b and planner._waiting_row["g"] == pytest.approx(g0)
    return planner, a


ROTATE = (SkillCall("rotate_cw", (90,)),)      # predicted 1.0 s on a drone
FORWARD = (SkillCall("move_forward", (100,)),)  # predicted 3.0 s


@pytest.mark.parametrize("g0, calls, suspends", [
    # Eq. 4 with ERT 1 s, net 8 ms, G(s_1) 90 ms, continuation slack L = e - G(s_1):
    # waiting goal 1 / (0.09 x (1 - 0.098)) = 12.32 > continuation 1 / (0.09 x 0.91) = 12.21
    (0.09, ROTATE, True),
    # waiting goal 1 / (0.2 x (1 - 0.208)) = 6.31 < 12.21: the slot would come straight back
    (0.2, ROTATE, False),
    # ... but above a 3 s move's continuation 1 / (0.09 x 2.91) = 3.82, and 2.91 s >= 0.2 s
    (0.2, FORWARD, True),
    # G(s_0) = 1 s: the waiting goal is already late (W 1.008 s > ERT; slack floor 10 ms):
    # 0.984 / (1.0 x 0.01) = 98.4 outranks both continuations, but a 1 s rotation leaves
    # 0.91 s, less than the 1 s its first segment takes: the rotation's plan resumes first
    (1.0, ROTATE, False),
    (1.0, FORWARD, True),
])
def test_contended_rule_suspends_only_for_waiting_work_that_outranks_the_continuation(g0, calls, suspends):
    """Suspend at a boundary only if the best-ranked waiting generation comes before this
    plan's continuation in Eq. 4's order and the continuation's slack covers the waiting
    generation's segment time (hand-computed priorities in the cases)."""
    planner, a = _waiting_goal_setup(g0)
    assert planner.exec_model.predict("drone0", "drone", calls) == pytest.approx(1.0 if calls is ROTATE else 3.0)
    assert planner.segment_time.estimate("drone", 1) == pytest.approx(0.09)  # the profiled default
    assert planner._suspend_here(a, calls) is suspends


def test_contended_rule_streams_when_nothing_ready_waits():
    """Nothing left waiting by the last decision: no suspension, however long the robot's
    action (a suspension would hand the engine to no one)."""
    clock, planner, _ = _planner("improved")
    rid = planner.submit(goal_for(1, "drone0"))
    planner.tick()
    assert planner._waiting_row is None
    assert not planner._suspend_here(rid, FORWARD)
