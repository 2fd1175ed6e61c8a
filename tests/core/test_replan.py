"""Re-planning in the core: a plan whose robot ran ``re_plan`` goes on in a new generation on the
goal's time-utility clock, the robot's sequence numbers running on; the service's answer decides
whether it may (a reason ends the goal REPLAN_REFUSED), and a prompt that cannot fit ends it too."""

from dataclasses import replace

import pytest

from llm_planner_node.core.task_model import EndKind, GenState
from timely_tools.sim.workload import goal_for

from tests.core.test_planner import _planner, _run_engine


def _execute_all(planner, clock, rid, robot, answers=()):
    req = planner.requests[rid]
    for k in range(len(req.dispatched_at)):
        if k == len(req.dispatched_at) - 1 and answers:
            req.answers[k] = tuple(answers)
        planner.on_robot_status(robot, rid, k, "finished", durations=[0.5] * len(req.segments[k].calls),
                                t=clock.now())


def test_a_plan_that_ran_re_plan_continues_on_the_goals_clock():
    clock, engine, planner, sink, _ = _planner("vllm")
    asked = []
    planner.replanner = lambda req: asked.append(req.id) or replace(req.goal, instruction="again")
    rid = planner.submit(goal_for(7, "drone3"))  # mu(80); tc(90); mf(50)
    _run_engine(clock, engine, planner)
    first = planner.requests[rid]
    arrival = first.arrival
    clock.advance_to(clock.now() + 2.0)
    _execute_all(planner, clock, rid, "drone3", answers=[("re_plan()", "requested")])
    assert asked == [rid]
    assert first.end is EndKind.REPLANNED and first.state is GenState.FINISHED
    nxt = planner.requests[first.replanned_as]
    assert nxt.arrival == arrival                     # the same time-utility clock
    assert nxt.queued_at(0) == clock.now() > arrival   # queued (and waited for) from the re-plan
    assert nxt.seq_base == 3 and nxt.chain == (first, nxt)
    assert nxt.goal.instruction == "again" and nxt.state is GenState.QUEUED
    _run_engine(clock, engine, planner)
    _execute_all(planner, clock, nxt.id, "drone3")  # no re_plan this time: the goal succeeds
    assert nxt.end is EndKind.SUCCEEDED
    assert [r for r, _ in sink.ended] == [rid, nxt.id]


def test_without_the_answer_or_a_replanner_the_plan_just_succeeds():
    clock, engine, planner, _sink, _ = _planner("vllm")
    planner.replanner = lambda req: replace(req.goal)
    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    _execute_all(planner, clock, rid, "drone3", answers=[("is_visible(cat)", "False")])
    assert planner.requests[rid].end is EndKind.SUCCEEDED


def test_a_refused_or_oversized_re_plan_ends_the_goal_replan_refused():
    clock, engine, planner, _sink, _ = _planner("vllm", capacity=5_000)
    planner.replanner = lambda req: "planner.max_replans is 0"
    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    _execute_all(planner, clock, rid, "drone3", answers=[("rp()", "requested")])
    req = planner.requests[rid]
    assert req.end is EndKind.REPLAN_REFUSED and req.end_reason == "planner.max_replans is 0"
    planner.replanner = lambda req: replace(req.goal, max_tokens=20_000)
    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    _execute_all(planner, clock, rid, "drone3", answers=[("re_plan()", "requested")])
    req = planner.requests[rid]
    assert req.end is EndKind.REPLAN_REFUSED and "engine capacity is 5000" in req.end_reason


@pytest.mark.parametrize("reached, end", [("False", EndKind.NOT_ACHIEVED), ("True", EndKind.SUCCEEDED)])
def test_only_the_last_plan_of_a_re_plan_chain_decides_whether_it_was_achieved(reached, end):
    """"turn right 90 degrees, then plan again to go to the person": the second plan's goto
    answering False ends the goal NOT_ACHIEVED; a first plan's miss is what its re-plan is for."""
    clock, engine, planner, _sink, _ = _planner("vllm")
    planner.replanner = lambda req: replace(req.goal, instruction="go to the person")
    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    _execute_all(planner, clock, rid, "drone3", answers=[("goto(person)", "False"), ("re_plan()", "requested")])
    nxt = planner.requests[planner.requests[rid].replanned_as]
    _run_engine(clock, engine, planner)
    _execute_all(planner, clock, nxt.id, "drone3", answers=[("goto(person)", reached)])
    assert nxt.end is end
    assert nxt.unachieved == (((nxt.seq_base + 2, "goto(person)", "False"),) if reached == "False" else ())
