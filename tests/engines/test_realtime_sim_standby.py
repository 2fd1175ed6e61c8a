"""The real-time simulated engine's standby list: a slot freed at an iteration boundary is refilled
there with the core's next generation (vLLM's waiting queue), never beyond the batch the core
left, in the core's order, and never with a goal that ended meanwhile."""

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.engine_api import GenerationSpec, StandbyItem, StartedEvent
from llm_planner_node.core.exec_table import TableExecutionTime
from llm_planner_node.core.planner import Planner
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.task_model import GenState
from llm_planner_node.engines.sim_engine import IterationModel, RealtimeSimEngine, SimEngineConfig, SimPrompt, SimSegment
from timely_robot.skills import SkillCall
from timely_tools.sim.workload import goal_for

MODEL = IterationModel(0.010, 0.001, 0.0005)
CALL = (SkillCall("takeoff"),)


def _prompt(tokens: int) -> SimPrompt:
    return SimPrompt(100, 20, tuple(SimSegment("a;", 1, CALL) for _ in range(tokens)), "skills")


def _spec(gid: int, tokens: int = 2, max_tokens: int = 30) -> GenerationSpec:
    return GenerationSpec(gid, _prompt(tokens), max_tokens, "drone", "skills", False)


def _boundary(clock: VirtualClock, engine: RealtimeSimEngine) -> list:
    """Run to the end of the iteration in flight; its events (and the standby's starts)."""
    clock.advance_to(engine.in_flight_end())
    return engine.step()


def test_a_freed_slot_is_refilled_at_the_boundary_never_beyond_the_cap_and_in_order():
    clock = VirtualClock()
    engine = RealtimeSimEngine(clock, SimEngineConfig(MODEL, 300, block_size=16))  # 150 KV tokens a generation
    engine.add(_spec(0, tokens=2))
    engine.add(_spec(1, tokens=6))
    engine.standby([StandbyItem(2, _spec(2)), StandbyItem(3, _spec(3))], max_running=2)
    engine.step()  # the first iteration starts
    evs = _boundary(clock, engine)
    assert not any(isinstance(e, StartedEvent) for e in evs)  # both slots busy: nothing starts
    t_end = engine.in_flight_end()
    evs = _boundary(clock, engine)  # generation 0 ends here
    assert [e for e in evs if isinstance(e, StartedEvent)] == [StartedEvent(2, t_end)]
    assert set(engine._running) == {1, 2}  # 2 joined the iteration that started at that boundary
    assert engine.stats.standby_starts == 1


def test_the_standby_stops_at_the_first_generation_that_does_not_fit_and_abort_takes_one_off():
    clock = VirtualClock()
    engine = RealtimeSimEngine(clock, SimEngineConfig(MODEL, 300, block_size=16))
    engine.add(_spec(0, tokens=1))
    engine.add(_spec(1, tokens=6))
    # 3 needs 320 tokens (never fits beside 1), 4 would fit: the order is never skipped
    engine.standby([StandbyItem(3, _spec(3, max_tokens=200)), StandbyItem(4, _spec(4))], max_running=2)
    engine.step()
    evs = _boundary(clock, engine)  # 0 ends
    assert not any(isinstance(e, StartedEvent) for e in evs)
    engine.abort(3)  # its goal ended: off the list, and 4 is next
    evs = _boundary(clock, engine)
    assert [e.gen_id for e in evs if isinstance(e, StartedEvent)] == [4]


class Sink:
    def __init__(self):
        self.ended = []

    def dispatch(self, request, segment):
        pass

    def done(self, request):
        self.ended.append(request.id)


class NoStandby(RealtimeSimEngine):
    """The same engine without a standby list: a freed slot waits for the core's next decision."""

    standby = None


def _run(engine_cls, cancel_waiting: bool = False):
    clock = VirtualClock()
    g = goal_for(1, "drone0")
    probe = engine_cls(clock)
    need = probe.count_prompt_tokens(g.prompt) + g.max_tokens
    engine = engine_cls(clock, SimEngineConfig(kv_capacity_tokens=2 * need + need // 2))  # two at a time
    planner = Planner(engine, get_policy("vllm"), clock, TableExecutionTime(), Sink())
    a = planner.submit(goal_for(1, "drone0"))
    planner.tick()  # a alone
    planner.tick()
    clock.advance_to(engine.in_flight_end())
    planner.tick()
    c = planner.submit(goal_for(1, "drone1"))
    b = planner.submit(goal_for(1, "drone2"))
    planner.tick()  # c admitted beside a; b waits (no room)
    if cancel_waiting:
        planner.cancel(b)
    for _ in range(500):
        end = engine.in_flight_end()
        if end is None and planner.queued() == 0 and all(r.state is not GenState.RUNNING for r in planner.requests.values()):
            break
        if end is not None:
            clock.advance_to(end)
        planner.tick()
    return planner, planner.requests[a], planner.requests[b], planner.requests[c]


def test_the_core_takes_a_standby_start_as_its_admission_at_that_boundary():
    planner, a, b, c = _run(RealtimeSimEngine)
    assert b.gen_start[0] == a.gen_end[-1] < c.gen_end[-1]  # b started where a ended, c still running
    assert planner.standby_starts == 1 and b.state is GenState.GENERATED
    _, a0, b0, _ = _run(NoStandby)
    assert a0.gen_end == a.gen_end  # the same run up to there
    # without it the core admits b at that boundary too, but the engine has already started its
    # next iteration with c alone: b's prefill waits one iteration, and so does its first segment
    assert b0.gen_end[0] > b.gen_end[0]


def test_a_goal_cancelled_while_on_standby_never_starts():
    planner, _a, b, _c = _run(RealtimeSimEngine, cancel_waiting=True)
    assert planner.standby_starts == 0 and b.state is not GenState.GENERATED and b.gen_start == []
