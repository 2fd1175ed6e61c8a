"""The planner runtime driving the simulated engine: dispatch semantics per policy, cancel,
robot reports, failures, preemption."""

import numpy as np
import pytest

from llm_planner_node.core.clock import VirtualClock
from llm_planner_node.core.exec_table import TableExecutionTime
from llm_planner_node.core.planner import Planner
from llm_planner_node.core.policies import get_policy
from llm_planner_node.core.policies.base import Decision, Policy
from llm_planner_node.core.task_model import EndKind, GenState
from llm_planner_node.engines.sim_engine import SimEngine, SimEngineConfig
from timely_tools.sim.simulation import simulate
from timely_tools.sim.workload import Arrival, goal_for


class Sink:
    def __init__(self):
        self.dispatched, self.ended = [], []

    def dispatch(self, request, segment):
        self.dispatched.append((request.id, segment.index))

    def done(self, request):
        self.ended.append((request.id, request.state))


class RecordingModel(TableExecutionTime):
    def __init__(self):
        super().__init__()
        self.observed = []

    def observe(self, robot_id, robot_kind, call, duration_s):
        self.observed.append((robot_id, call.name, duration_s))


def _planner(policy="timelyllm", capacity=45_000):
    clock = VirtualClock()
    engine = SimEngine(clock, SimEngineConfig(kv_capacity_tokens=capacity))
    sink, model = Sink(), RecordingModel()
    return clock, engine, Planner(engine, get_policy(policy), clock, model, sink), sink, model


def _run_engine(clock, engine, planner, until=lambda: False, max_iter=1000):
    planner.tick()
    for _ in range(max_iter):
        engine.start_iteration()
        end = engine.in_flight_end()
        if end is None or until():
            return
        clock.advance_to(end)
        planner.tick()


def _dispatch_times(result, rid):
    return [t for t, r, _ in result.dispatch_log if r == rid]


def test_vllm_dispatches_whole_plan_at_end_stream_as_generated():
    arr = [Arrival(0.0, goal_for(1, "drone0"))]  # 4 segments
    whole = simulate(arr, "vllm")
    stream = simulate(arr, "vllm-stream")
    seg = simulate(arr, "seg-fcfs", admission="literal")  # suspends at every boundary
    assert len(set(_dispatch_times(whole, 0))) == 1
    assert len(set(_dispatch_times(stream, 0))) == 4
    # same tokens, same finish of generation: streaming only moves dispatch earlier
    assert _dispatch_times(stream, 0)[-1] == pytest.approx(_dispatch_times(whole, 0)[-1])
    assert stream.engine.resume_hits + stream.engine.resume_misses == 0
    assert seg.engine.resume_hits == 3  # suspended after segments 0, 1, 2 and resumed from cache
    for r in (whole, stream, seg):
        assert r.requests[0].state is GenState.FINISHED
        assert [s.index for s in r.requests[0].segments] == [0, 1, 2, 3]


def test_cancel_while_running_and_after():
    clock, engine, planner, sink, _ = _planner()
    rid = planner.submit(goal_for(1, "drone0"))
    other = planner.submit(goal_for(2, "drone1"))
    planner.tick()
    engine.start_iteration()
    assert planner.requests[rid].state is GenState.RUNNING
    assert planner.cancel(rid)
    assert not planner.cancel(rid) and not planner.cancel(999)
    _run_engine(clock, engine, planner)
    assert sink.ended == [(rid, GenState.CANCELLED)]
    assert planner.requests[rid].generated_tokens == 0  # its in-flight token was dropped
    assert planner.requests[other].state is GenState.GENERATED  # waits for robot reports
    assert all(r != rid for r, _ in sink.dispatched)


def test_robot_reports_finish_request_and_feed_model():
    clock, engine, planner, sink, model = _planner("vllm")
    rid = planner.submit(goal_for(7, "drone3"))  # mu(80); tc(90); mf(50)
    _run_engine(clock, engine, planner)
    req = planner.requests[rid]
    assert req.state is GenState.GENERATED and len(req.dispatched_at) == 3
    assert not planner.on_robot_status("wrong-robot", rid, 0, "started")
    assert not planner.on_robot_status("drone3", rid, 5, "started")
    t = clock.now()
    for k in range(3):
        assert planner.on_robot_status("drone3", rid, k, "started", t=t + k)
        assert planner.on_robot_status("drone3", rid, k, "finished", durations=[0.9], t=t + k + 0.9)
    assert req.state is GenState.FINISHED and sink.ended == [(rid, GenState.FINISHED)]
    assert [name for _, name, _ in model.observed] == ["move_up", "turn_cw", "move_forward"]
    assert not planner.on_robot_status("drone3", rid, 0, "finished")  # terminal: ignored
    with pytest.raises(ValueError):
        planner.on_robot_status("drone3", rid, 0, "exploded")


def test_robot_failure_fails_request_and_frees_engine():
    clock, engine, planner, sink, _ = _planner("seg-fcfs")
    rid = planner.submit(goal_for(1, "drone0"))
    _run_engine(clock, engine, planner, until=lambda: len(planner.requests[rid].dispatched_at) >= 1)
    assert planner.on_robot_status("drone0", rid, 0, "failed", reason="battery low")
    req = planner.requests[rid]
    assert req.state is GenState.FAILED and req.end_reason == "battery low"
    _run_engine(clock, engine, planner)
    assert engine.free_kv_tokens() == engine.kv_capacity_tokens()  # the reservation is free
    assert engine.resident_prefixes() == {"tello_minispec"}  # the prefix stays, as evictable cache


def test_goal_larger_than_kv_capacity_is_rejected():
    _, _, planner, _, _ = _planner(capacity=1000)
    with pytest.raises(ValueError, match="KV tokens"):
        planner.submit(goal_for(1, "drone0"))


def test_w_reference_follows_robot_reports():
    clock, engine, planner, _, _ = _planner("seg-fcfs", capacity=45_000)
    rid = planner.submit(goal_for(1, "drone0"))
    req = planner.requests[rid]
    _run_engine(clock, engine, planner, until=lambda: len(req.dispatched_at) >= 1)
    t_sent = req.dispatched_at[0]
    # W reference of segment 1 = predicted end of segment 0's execution. tc(90) is predicted
    # 0.5 + 90 / 90 = 1.5 s from its arrival at the robot (dispatch + 8 ms)
    assert planner._predicted_exec_end(req, 0) == pytest.approx(t_sent + 0.008 + 1.5)
    planner.on_robot_status("drone0", rid, 0, "started", t=t_sent + 0.5)
    assert planner._predicted_exec_end(req, 0) == pytest.approx(t_sent + 0.5 + 1.5)
    planner.on_robot_status("drone0", rid, 0, "finished", t=t_sent + 1.0)
    assert planner._predicted_exec_end(req, 0) == pytest.approx(t_sent + 1.0)


class PreemptFirst(Policy):
    """Test policy: admits FCFS, preempts the oldest running generation once."""

    name = "test-preempt"
    suspends_at_segments = False
    dispatches_early = True
    decides_on_empty_queue = True  # it preempts with nothing queued

    def __init__(self):
        super().__init__()
        self.fired = False

    def order(self, q, now, net_latency):
        return np.argsort(q.seq, kind="stable")

    def preempt(self, q, running, now):
        if len(running) and not self.fired and now > 0.05:
            self.fired = True
            return running.gen_id[:1]
        return super().preempt(q, running, now)


def test_preempted_generation_resumes_and_completes():
    pol = PreemptFirst()
    r = simulate([Arrival(0.0, goal_for(1, "drone0"))], pol)
    assert pol.fired
    req = r.requests[0]
    # trace 1 = tc(90); 4 tokens + s('cat'); 5 + g('cat'); 5 + tp(); 3 + EOS 1 = 18
    assert req.state is GenState.FINISHED and req.generated_tokens == 18
    assert r.engine.resume_hits == 1


def _preempted_drone_goal():
    """One drone goal on the simulated engine under PreemptFirst, run until it is preempted."""
    clock = VirtualClock()
    engine = SimEngine(clock, SimEngineConfig())
    sink, pol = Sink(), PreemptFirst()
    planner = Planner(engine, pol, clock, RecordingModel(), sink)
    rid = planner.submit(goal_for(1, "drone0"))
    _run_engine(clock, engine, planner, until=lambda: pol.fired)
    assert pol.fired
    return clock, engine, planner, sink, rid


def test_preempted_generation_whose_segment_and_end_cross_the_suspend_still_completes():
    """A live engine's events and commands cross: the core preempts a generation, and before
    the suspend reaches the engine the generation reports one more segment and its end. The
    core counts both (the engine kept those tokens): the segment is dispatched, the request is
    GENERATED and leaves the queue (it is never resumed), and the robot's reports finish it."""
    from llm_planner_node.core.engine_api import FinishedEvent, SegmentEvent
    from timely_robot.skills import SkillCall

    clock, engine, planner, sink, rid = _preempted_drone_goal()
    req = planner.requests[rid]
    assert req.state is GenState.SUSPENDED and planner.queued() == 1
    resumed = []
    engine.resume = lambda gid, rank=0: resumed.append(gid)
    k = req.next_segment
    engine.step = lambda: [SegmentEvent(rid, clock.now(), k, "tp();", (SkillCall("take_picture"),), (7, 8), False, final=True),
                           FinishedEvent(rid, clock.now(), "eos")]
    planner.tick()
    engine.step = lambda: []
    for _ in range(3):
        planner.tick()
    assert req.state is GenState.GENERATED and planner.queued() == 0 and resumed == []
    assert len(req.segments) == k + 1 and (rid, k) in sink.dispatched
    t = clock.now()
    for i in range(k + 1):
        assert planner.on_robot_status("drone0", rid, i, "started", t=t + i)
        assert planner.on_robot_status("drone0", rid, i, "finished", durations=[0.5] * len(req.segments[i].calls),
                                       t=t + i + 0.5)
    assert req.state is GenState.FINISHED and req.end is EndKind.SUCCEEDED and sink.ended == [(rid, GenState.FINISHED)]


def test_preempted_generation_that_fails_before_its_suspend_ends_with_the_engines_kind():
    """The engine's failure of a generation the core has just preempted ends the request
    (INVALID_PLAN) instead of being dropped as late: it leaves the queue, nothing is resumed."""
    from llm_planner_node.core.engine_api import FailedEvent

    clock, engine, planner, sink, rid = _preempted_drone_goal()
    assert planner.requests[rid].state is GenState.SUSPENDED
    engine.step = lambda: [FailedEvent(rid, clock.now(), "invalid plan: bad call", True)]
    planner.tick()
    req = planner.requests[rid]
    assert req.end is EndKind.INVALID_PLAN and "bad call" in req.end_reason and planner.queued() == 0


@pytest.mark.parametrize("raising", ["add", "resume"])
def test_an_engine_that_raises_on_admission_does_not_lose_the_goal(raising):
    """The engine raises inside add (or resume): the scheduler treats that as an engine failure
    and restarts the engine. The request it was admitting is RUNNING (not lost between queue
    and engine), so the restart ends it ENGINE_FAILED and its robot is free again."""
    clock = VirtualClock()
    engine = SimEngine(clock, SimEngineConfig())
    sink = Sink()
    pol = PreemptFirst() if raising == "resume" else get_policy("timelyllm")
    planner = Planner(engine, pol, clock, RecordingModel(), sink)
    rid = planner.submit(goal_for(1, "drone0"))
    if raising == "resume":
        _run_engine(clock, engine, planner, until=lambda: pol.fired)
        assert planner.requests[rid].state is GenState.SUSPENDED

    def boom(*_a, **_k):
        raise RuntimeError("engine loop is closed")

    setattr(engine, raising, boom)
    with pytest.raises(RuntimeError):
        planner.tick()
    req = planner.requests[rid]
    assert req.state is GenState.RUNNING and planner.queued() == 0
    assert planner.restart_engine(SimEngine(clock, SimEngineConfig()), "engine loop is closed") == [rid]
    assert req.end is EndKind.ENGINE_FAILED and planner.active() == 0 and sink.ended == [(rid, GenState.FAILED)]


def test_decision_default_has_no_preemption():
    assert len(Decision(np.array([1])).preempt) == 0


def test_segment_generation_timeline():
    """gen_start/gen_end per segment follow the engine's segment events."""
    from timely_tools.sim.simulation import simulate
    from timely_tools.sim.workload import Arrival, goal_for

    res = simulate([Arrival(0.0, goal_for(1, "d0"))], "timelyllm", seed=0)
    req = res.requests[0]
    k = len(req.segments)
    assert k >= 2 and len(req.gen_start) == len(req.gen_end) == k
    for i in range(k):
        assert req.queued_at(i) <= req.gen_start[i] < req.gen_end[i] <= req.dispatched_at[i]
    assert req.queued_at(0) == req.arrival and req.queued_at(1) == req.gen_end[0]


def test_admissions_carry_the_policys_rank_to_the_engine():
    """Three goals arrive together: an urgent one after two normal ones. The engine receives
    them with priorities 0, 1, 2 in the policy's order (timelyllm: the urgent goal first)."""
    clock, engine, planner, sink, _ = _planner("timelyllm")
    seen = []
    add = engine.add
    engine.add = lambda spec: (seen.append((spec.gen_id, spec.priority)), add(spec))[1]
    normal_a = planner.submit(goal_for(1, "d0"))
    normal_b = planner.submit(goal_for(2, "d1"))
    urgent = planner.submit(goal_for(6, "d2"))
    planner.tick()
    assert [p for _, p in seen] == list(range(len(seen))) and len(seen) == 3
    assert seen[0][0] == urgent and {g for g, _ in seen[1:]} == {normal_a, normal_b}


@pytest.mark.parametrize("invalid_plan, kind", [(True, EndKind.INVALID_PLAN), (False, EndKind.ENGINE_FAILED)])
def test_engine_failure_kind_reaches_the_request(invalid_plan, kind):
    """The engine says whether the model wrote an invalid plan or the engine itself failed;
    the core keeps that kind on the request (the node maps it to the result status)."""
    from llm_planner_node.core.engine_api import FailedEvent

    clock, engine, planner, sink, _ = _planner("timelyllm")
    rid = planner.submit(goal_for(1, "d0"))
    planner.tick()
    assert planner.requests[rid].state is GenState.RUNNING
    engine.step = lambda: [FailedEvent(rid, clock.now(), "boom", invalid_plan)]
    planner.tick()
    req = planner.requests[rid]
    assert req.state is GenState.FAILED and req.end is kind and "boom" in req.end_reason
    assert sink.ended == [(rid, GenState.FAILED)]


def test_restart_engine_ends_only_what_the_dead_engine_held():
    """Engine restart is a core method: generations the dead engine held end ENGINE_FAILED,
    a goal still queued runs on the new engine, nothing is aborted on the dead one."""
    clock, engine, planner, sink, _ = _planner("timelyllm")
    held = planner.submit(goal_for(1, "d0"))
    planner.tick()
    assert planner.requests[held].state is GenState.RUNNING
    queued = planner.submit(goal_for(2, "d1"))
    aborted = []
    engine.abort = aborted.append
    fresh = SimEngine(clock, SimEngineConfig())
    assert planner.restart_engine(fresh, "device lost") == [held]
    assert planner.engine is fresh and aborted == []
    r = planner.requests[held]
    assert r.end is EndKind.ENGINE_FAILED and r.end_reason == "inference engine failed: device lost"
    assert planner.requests[queued].state is GenState.QUEUED and planner.requests[queued].end is None
    planner.tick()
    assert planner.requests[queued].state is GenState.RUNNING


def test_engine_lost_ends_running_and_queued_generations_and_aborts_nothing():
    """No engine replaces the dead one: what it held and what waits for it end ENGINE_FAILED
    (nothing is aborted on the dead engine); a second call ends nothing more."""
    clock, engine, planner, sink, _ = _planner("timelyllm")
    held = planner.submit(goal_for(1, "d0"))
    planner.tick()
    queued = planner.submit(goal_for(2, "d1"))
    aborted = []
    engine.abort = aborted.append
    assert sorted(planner.engine_lost("device lost")) == sorted([held, queued])
    assert aborted == []
    for rid in (held, queued):
        r = planner.requests[rid]
        assert r.end is EndKind.ENGINE_FAILED and r.end_reason == "inference engine failed: device lost"
    assert planner.engine_lost("device lost") == []
    assert planner.queued() == 0


def test_tick_calls_between_after_the_engine_events_and_before_the_decision():
    """A goal submitted by ``between`` is scheduled in the same tick (it runs after that tick)."""
    clock, engine, planner, sink, _ = _planner("timelyllm")
    order = []
    real_step = engine.step
    engine.step = lambda: (order.append("step"), real_step())[1]
    rid = []
    planner.tick(between=lambda: (order.append("between"), rid.append(planner.submit(goal_for(1, "d0")))))
    assert order == ["step", "between"]
    assert planner.requests[rid[0]].state is GenState.RUNNING


def test_every_policy_that_overrides_decide_decides_on_an_empty_queue():
    """The planner skips the decision on an empty queue unless the policy keeps per-step state
    in ``decide``: every policy overriding it must say so."""
    from llm_planner_node.core.policies.base import REGISTRY

    for name, cls in REGISTRY.items():
        if cls.decide is not Policy.decide:
            assert cls.decides_on_empty_queue, name


@pytest.mark.parametrize("policy", ["timelyllm", "vllm", "trail", "seg-edf"])
def test_skipping_the_empty_queue_decision_changes_no_schedule(policy):
    """Without per-step state, a decision on an empty queue decides nothing: a WID2 run (4x its
    event rate, so queues form and drain) is identical with and without it."""
    from dataclasses import replace

    from timely_tools.sim.workload import WORKLOADS, generate

    arrivals = generate(replace(WORKLOADS["WID2"], eps=1.0, duration_s=60.0), seed=3)
    skipped = simulate(arrivals, policy)
    forced = get_policy(policy)
    forced.decides_on_empty_queue = True  # decide at every step, even with an empty queue
    full = simulate(arrivals, forced)
    assert skipped.dispatch_log == full.dispatch_log
    assert [(r.state, r.ended_at) for r in skipped.requests] == [(r.state, r.ended_at) for r in full.requests]
    assert len(skipped.dispatch_log) > 100


def test_every_policy_meets_the_same_robot_durations():
    """Simulated robot durations are drawn per (goal, segment, call), not in dispatch order:
    two policies that dispatch the same goals in different orders meet the same durations (drawn
    in dispatch order, goal 2's first segment would run 4.6 s under vllm and 1.2 s under timelyllm)."""
    arrivals = [Arrival(0.0, goal_for(t, f"drone{i}")) for i, t in enumerate((1, 2, 6))]
    runs = {p: simulate(arrivals, p, seed=0) for p in ("vllm", "timelyllm")}
    durations = {p: [[e - s for s, e in zip(r.exec_start, r.exec_end)] for r in res.requests]
                 for p, res in runs.items()}
    assert all(len(d) == len(arrivals) and all(len(x) >= 1 for x in d) for d in durations.values())
    for a, b in zip(durations["vllm"], durations["timelyllm"], strict=True):
        assert a == pytest.approx(b, abs=1e-9)
    assert [r.dispatched_at[0] for r in runs["vllm"].requests] != [r.dispatched_at[0] for r in runs["timelyllm"].requests]
    other_seed = simulate(arrivals, "vllm", seed=1).requests
    assert [[e - s for s, e in zip(r.exec_start, r.exec_end)] for r in other_seed][0] != \
        pytest.approx(durations["vllm"][0], abs=1e-6)


def _executed(planner, clock, rid, robot, answers):
    """Report every dispatched segment of ``rid`` finished, the last one with ``answers``."""
    req = planner.requests[rid]
    for k in range(len(req.dispatched_at)):
        if k == len(req.dispatched_at) - 1:
            req.answers[k] = tuple(answers)
        planner.on_robot_status(robot, rid, k, "finished", durations=[0.5] * len(req.segments[k].calls),
                                t=clock.now())
    return req


def test_a_plan_whose_goto_answered_false_ran_through_but_did_not_achieve_it():
    """goto's False says the drone never reached the object (SkillSpec.achieves): the plan ran as
    written, yet the instruction was not done. A search that found nothing is a finding: SUCCEEDED."""
    clock, engine, planner, sink, _ = _planner("vllm")
    rid = planner.submit(goal_for(7, "drone3"))  # mu(80); tc(90); mf(50)
    _run_engine(clock, engine, planner)
    req = _executed(planner, clock, rid, "drone3", [("scan(person)", "True"), ("goto(person)", "False")])
    assert req.end is EndKind.NOT_ACHIEVED and req.state is GenState.FINISHED
    assert req.unachieved == ((2, "goto(person)", "False"),)
    assert req.end_reason == "plan executed, but goto(person) answered False: did not reach it (not in view)"
    assert sink.ended == [(rid, GenState.FINISHED)]

    rid = planner.submit(goal_for(7, "drone3"))
    _run_engine(clock, engine, planner)
    req = planner.requests[rid]
    req.return_value = "False"  # the plan returned what scan found (the status path sets it)
    req = _executed(planner, clock, rid, "drone3", [("scan(person)", "False"), ("is_visible(person)", "False")])
    assert req.end is EndKind.SUCCEEDED and req.unachieved == () and req.return_value == "False"
