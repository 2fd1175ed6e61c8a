"""The planner service without ROS (llm_planner_node/service/planner_service.py): the status path,
back-pressure and how goals end, driven through its public methods with recording ports."""

from __future__ import annotations

import threading
from dataclasses import dataclass
import time

import pytest

from llm_planner_node.service import planner_service as ps
from llm_planner_node.core.clock import WallClock
from llm_planner_node.core.task_model import EndKind
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.config.params import parse_params
from llm_planner_node.service.planner_service import (CANCELLED, DONE, EXECUTING, FAILED, GoalIn, PlannerService,
                                              StatusIn)
from testkit import QuietPorts


class Ports(QuietPorts):
    def __init__(self):
        self.segments, self.stops, self.logs = [], [], []

    def segment(self, goal_id, req, index, final):
        self.segments.append((goal_id, index, req.segments[index].calls))
        return ("seg", goal_id, index)

    def stop(self, goal_id, robot_id, sequence):
        self.stops.append((goal_id, robot_id, sequence))
        return ("stop", goal_id)

    def log(self, level, text):
        self.logs.append((level, text))


def service(engine=None, **planner):
    params = parse_params({"planner": {"engine": {"kind": "sim"}, "robot_timeout_s": 30.0, **planner},
                           "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"},
                                      {"id": "d2", "kind": "drone", "adapter": "sim"}]})
    ports = Ports()
    svc = PlannerService(params, ports, engine=engine or RealtimeSimEngine(WallClock()))
    svc.accepting = True
    svc.start()
    return svc, ports


def wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


GID = "a" * 32


def submit(svc, goal_id=GID, robot="d1", instruction="look for the cat", max_tokens=0):
    ended = []
    reason = svc.submit(goal_id, GoalIn(robot, instruction, max_tokens=max_tokens), ended.append)
    return reason, ended


@pytest.mark.parametrize("status, reason", [
    (StatusIn("ghost", GID, 0, DONE), "unknown robot"),
    (StatusIn("d1", "not-a-goal-id", 0, DONE), "malformed goal id"),
    (StatusIn("d1", GID, 0, 9), "malformed state or sequence"),
    (StatusIn("d1", GID, 0, DONE, (float("nan"),)), "duration not finite or outside [0, 3600] s"),
    (StatusIn("d1", GID, 0, DONE, (-1e308,)), "duration not finite or outside [0, 3600] s"),
    (StatusIn("d1", GID, 0, FAILED, (), "x" * 5000), "oversize report"),
    (StatusIn("x" * 100_000, GID, 0, DONE), "unknown robot"),
])
def test_malformed_statuses_are_refused_before_touching_state(status, reason):
    svc, _ = service()
    try:
        assert svc.check_status(status) == reason
        assert svc.on_status(status) is False
        assert svc.status_drops[reason] == 1
    finally:
        svc.close()


def test_a_status_that_does_not_match_the_goal_changes_nothing():
    """A FAILED from another robot, or for a segment never dispatched, neither ends the goal nor
    counts as hearing from its robot."""
    svc, ports = service()
    try:
        reason, ended = submit(svc)
        assert reason is None
        assert wait(lambda: ports.segments)
        heard_before = svc.delivery.silent_for(GID, 1e9)
        svc.on_status(StatusIn("d2", GID, 0, FAILED, (), "FORGED"))
        svc.on_status(StatusIn("d1", GID, 50, FAILED, (), "FORGED"))
        time.sleep(0.3)
        assert not ended
        assert svc.status_drops["does not match a goal in flight"] == 2
        assert svc.delivery.silent_for(GID, 1e9) == heard_before
        svc.on_status(StatusIn("d1", GID, 0, FAILED, (), "gripper jammed"))  # the real robot
        assert wait(lambda: ended)
        assert ended[0].end is EndKind.ROBOT_FAILED and "gripper jammed" in ended[0].end_reason
        assert ports.stops == [(GID, "d1", len(ended[0].segments))]  # the robot is stopped
    finally:
        svc.close()


def test_a_robot_that_cancels_by_itself_ends_the_goal_cancelled_with_its_reason():
    svc, ports = service()
    try:
        _, ended = submit(svc)
        assert wait(lambda: ports.segments)
        svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        svc.on_status(StatusIn("d1", GID, 0, CANCELLED, (), "operator pressed stop"))
        assert wait(lambda: ended)
        assert ended[0].end is EndKind.CANCELLED
        assert ended[0].end_reason == "robot d1 cancelled segment 0: operator pressed stop"
    finally:
        svc.close()


def test_a_status_ends_the_engines_wait_and_is_applied_at_once():
    """The engine's step may wait (here a minute: an idle simulated engine with ``idle_wait_s``
    60); a robot status wakes it (``Engine.wake``), so the status is applied now, not after the
    engine's wait. Without the wake this goal would end a minute later."""
    svc, ports = service(engine=RealtimeSimEngine(WallClock(), idle_wait_s=60.0))
    try:
        _, ended = submit(svc)
        assert wait(lambda: ports.segments)
        assert wait(lambda: svc.planner.engine.in_flight_end() is None)  # segment 0 out, engine idle
        time.sleep(0.2)  # the scheduler is back in the engine's (minute-long) wait
        svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        svc.on_status(StatusIn("d1", GID, 0, CANCELLED, (), "operator pressed stop"))
        assert wait(lambda: ended, 10.0), "the status waited for the engine"
        assert ended[0].end is EndKind.CANCELLED
    finally:
        svc.close()


class CountingEngine(RealtimeSimEngine):
    """The simulated engine, counting the steps that returned (one per scheduling tick) and the
    wake-ups the service asked of it."""

    steps = 0
    wakes = 0

    def step(self):
        events = super().step()
        self.steps += 1
        return events

    def wake(self):
        self.wakes += 1
        super().wake()


def test_a_status_that_wakes_the_engine_is_applied_and_scheduled_in_one_tick():
    """The status's wake ends the engine's wait; the tick it ends applies the status (the core's
    ``between`` hook) before its scheduling decision, so no second tick is spent on it (with
    1,000 drones reporting, a second tick per status was most of the planner's CPU)."""
    engine = CountingEngine(WallClock(), idle_wait_s=60.0)
    svc, ports = service(engine=engine)
    try:
        submit(svc)
        assert wait(lambda: ports.segments)
        assert wait(lambda: engine.in_flight_end() is None)  # segment 0 out, engine idle
        time.sleep(0.3)  # the scheduler is back in the engine's (minute-long) wait
        before = engine.steps
        svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        req = next(iter(svc.planner.requests.values()))
        assert wait(lambda: req.exec_start[0] is not None, 10.0), "the status waited for the engine"
        time.sleep(0.3)
        assert engine.steps - before == 1
    finally:
        svc.close()


@dataclass(frozen=True)
class Hold:
    """A test's command: the scheduler thread says it is ``busy`` and waits for ``gate``."""

    busy: threading.Event
    gate: threading.Event


@dataclass(frozen=True)
class Count:
    """A test's command: the scheduler thread records ``i``."""

    i: int


def hold_scheduler(svc: PlannerService) -> threading.Event:
    """Hold the scheduler inside one tick (a command that waits) until the returned gate is set."""
    gate, busy = threading.Event(), threading.Event()
    svc.commands.on(Hold, lambda c: (c.busy.set(), c.gate.wait(10)))
    svc.commands.post(Hold(busy, gate))
    assert busy.wait(10)
    return gate


def test_a_burst_of_statuses_wakes_the_scheduler_once_and_every_status_is_applied():
    """Statuses that arrive while the scheduler is busy ring it once (not once per status), and
    the one drain applies them all; a status after that drain rings again (none is left)."""
    engine = CountingEngine(WallClock(), idle_wait_s=60.0)
    svc, ports = service(engine=engine)
    try:
        submit(svc)
        assert wait(lambda: ports.segments)
        gate = hold_scheduler(svc)
        before, applied = engine.wakes, len(svc.status_delays)
        for _ in range(20):
            assert svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        assert engine.wakes - before == 1
        gate.set()
        assert wait(lambda: len(svc.status_delays) - applied == 20), "not every status was applied"
        svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        assert engine.wakes - before == 2
        assert wait(lambda: len(svc.status_delays) - applied == 21)
    finally:
        svc.close()


def test_a_burst_of_goal_commands_is_taken_slice_after_slice_without_waiting_for_the_engine():
    """Commands beyond one tick's slice (``COMMAND_SLICE``) ring the engine again, so the next
    tick takes the next slice at once; otherwise each slice would wait for the engine's next
    event (here a minute: nothing is generating), and a burst of goals would reach the core one
    engine step per slice."""
    engine = CountingEngine(WallClock(), idle_wait_s=60.0)
    svc, _ = service(engine=engine)
    try:
        gate = hold_scheduler(svc)
        taken: list[int] = []
        svc.commands.on(Count, lambda c: taken.append(c.i))
        n = 3 * ps.COMMAND_SLICE
        for i in range(n):
            svc.commands.post(Count(i))
        gate.set()
        assert wait(lambda: len(taken) == n, 10.0), f"{len(taken)} of {n} commands taken in 10 s"
        assert taken == list(range(n))  # in the order they came
    finally:
        svc.close()


def test_a_plan_cut_by_max_tokens_ends_truncated_after_its_segments_executed():
    svc, ports = service()
    try:
        _, ended = submit(svc, max_tokens=12)  # the cat search is longer: cut after its first segment(s)
        assert wait(lambda: ports.segments and svc.planner.requests and
                    all(r.truncated for r in svc.planner.requests.values()), 10)
        for gid, k, calls in list(ports.segments):
            svc.on_status(StatusIn("d1", gid, k, DONE, tuple(0.1 for _ in calls)))
        assert wait(lambda: ended)
        r = ended[0]
        assert r.end is EndKind.TRUNCATED, (r.end, r.end_reason)
        assert r.end_reason == (f"plan cut at max_tokens=12 after {len(r.segments)} segment(s); "
                                "those segments were executed")
        assert ports.stops  # not a success: the robot is stopped (hover)
    finally:
        svc.close()


def test_a_goto_that_answered_false_with_the_robots_done_ends_not_achieved_and_stops_the_robot():
    """The answers arrive with a segment's DONE status; the core reads them when the plan has run."""
    svc, ports = service()
    try:
        _, ended = submit(svc)
        assert wait(lambda: svc.planner.requests and all(
            r.state.value == "generated" for r in svc.planner.requests.values()), 10)
        for gid, k, calls in list(ports.segments):
            answers = (("goto(cat)", "False"),) if k == len(ports.segments) - 1 else ()
            svc.on_status(StatusIn("d1", gid, k, DONE, tuple(0.1 for _ in calls), answers=answers))
        assert wait(lambda: ended)
        r = ended[0]
        assert r.end is EndKind.NOT_ACHIEVED, (r.end, r.end_reason)
        assert r.unachieved == ((len(ports.segments) - 1, "goto(cat)", "False"),)
        assert ports.stops  # not a success: the robot is stopped (harmless: its plan has ended)
    finally:
        svc.close()


def test_goal_intake_is_bounded_and_refuses_at_once_beyond(monkeypatch):
    monkeypatch.setattr(ps, "PENDING_GOALS_MAX", 1)
    svc, _ = service()
    try:
        assert submit(svc, "a" * 32, "d1")[0] is None
        t0 = time.monotonic()
        reason, _ = submit(svc, "b" * 32, "d2")
        assert time.monotonic() - t0 < 0.5
        assert reason == "planner overloaded: 1 goals in flight (limit 1); try again later"
        assert svc.counters["rejected"] == 1
    finally:
        svc.close()


def test_oversize_identifiers_are_refused_with_a_bounded_message():
    svc, _ = service()
    try:
        reason, _ = submit(svc, robot="r" * 100_000)
        assert reason == "robot_id has 100000 characters, the limit is 64"
        reason, _ = submit(svc, robot="\x1b[31mrobot\n[ERROR] forged")
        assert reason is not None and "\x1b" not in reason and "\n" not in reason
    finally:
        svc.close()


def test_statuses_are_applied_before_queued_goal_commands():
    """With 1,000 goal commands queued, a status is applied after at most one bounded slice
    of them (COMMAND_SLICE, 8), not after all: statuses have priority over goal intake."""
    svc, ports = service()
    try:
        _, ended = submit(svc)
        assert wait(lambda: ports.segments)
        ran = [0]
        at_end: list[int] = []
        block = threading.Event()
        svc.commands.on(Hold, lambda c: c.gate.wait(5))
        svc.commands.on(Count, lambda c: ran.__setitem__(0, ran[0] + 1))
        svc.commands.post(Hold(threading.Event(), block))   # the scheduler is busy with a command
        for i in range(1000):
            svc.commands.post(Count(i))
        svc.on_status(StatusIn("d1", GID, 0, FAILED, (), "real failure"))
        original = ended.append
        ended_hook = lambda r: (at_end.append(ran[0]), original(r))  # noqa: E731 - records the order
        svc.goals.by_request[next(iter(svc.goals.by_request))].on_end = ended_hook
        block.set()
        assert wait(lambda: ended, 10) and wait(lambda: ran[0] == 1000, 10)
        assert at_end[0] <= ps.COMMAND_SLICE, at_end
    finally:
        svc.close()


def test_a_status_flood_pauses_robot_timeouts_instead_of_ending_live_goals():
    """While refused statuses pour in faster than FLOOD_DROPS_PER_S, the robot's real reports may
    be stuck behind them: its silence clock stands still, so the goal is not ended TIMEOUT."""
    params_timeout = 1.0
    svc, ports = service(robot_timeout_s=params_timeout)
    try:
        _, ended = submit(svc)
        assert wait(lambda: ports.segments)
        svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        deadline = time.monotonic() + 3 * params_timeout  # 3 s of garbage at ~2,000/s
        while time.monotonic() < deadline:
            for _ in range(100):
                svc.on_status(StatusIn("ghost", GID, 0, DONE))
            time.sleep(0.05)
        assert not ended, f"a live goal ended during the flood: {ended[0].end_reason if ended else ''}"
        assert svc.flood_seconds > 2.0
        assert any("status flood" in text for _level, text in ports.logs)
        # after the flood and its grace period, a robot that stays silent does time out
        assert wait(lambda: ended, 10)
        assert ended[0].end is EndKind.ROBOT_TIMEOUT
    finally:
        svc.close()


def test_an_unknown_robot_rejection_lists_a_bounded_number_of_robots():
    """With a fleet of 1,000 the message names the first robots and the count, not 10 KB of ids."""
    robots = [{"id": f"drone_{i}", "kind": "drone", "adapter": "sim"} for i in range(1000)]
    params = parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": robots})
    svc = PlannerService(params, Ports(), engine=RealtimeSimEngine(WallClock()))
    reason = svc.precheck(GoalIn("ghost", "look for the cat"))
    assert reason.startswith("unknown robot 'ghost' (configured robots: drone_0, drone_1,")
    assert reason.endswith(f"drone_{ps.KNOWN_ROBOTS_LISTED - 1}, ... (1000 in all))")
    assert len(reason) < 400


class DeadEngine(RealtimeSimEngine):
    """An engine whose device is lost once it has a generation: every step then raises."""

    lost = False

    def add(self, spec):
        super().add(spec)
        self.lost = True

    def step(self):
        if self.lost:
            raise RuntimeError("device lost")
        return super().step()


def test_a_dead_engine_without_a_factory_ends_goals_and_refuses_new_ones_once():
    """No engine left: the goal that reached the core ends ENGINE_FAILED with the error, later
    goals are refused at once with it, and the dead engine is not stepped again (a scheduler that
    re-stepped it would spin in a hot loop, logging each failure, and the goal would never end)."""
    svc, ports = service(engine=DeadEngine(WallClock()))
    try:
        reason, ended = submit(svc)
        assert reason is None
        assert wait(lambda: ended, 5.0), "the goal was left hanging"
        assert ended[0].end is EndKind.ENGINE_FAILED
        assert ended[0].end_reason == "inference engine failed: device lost"
        reason, _ = submit(svc, "b" * 32, "d2")
        assert reason == "the inference engine is down (device lost): no goal can be planned until it restarts"
        time.sleep(0.5)
        assert svc.health.state == "down" and svc.health.failures == 1
        assert sum(1 for level, _ in ports.logs if level == "error") == 1
    finally:
        svc.close()


def test_an_engine_that_cannot_be_rebuilt_is_retried_until_it_can(monkeypatch):
    """The factory fails once: the goal held by the dead engine ends ENGINE_FAILED, goals are
    refused while the engine is down, and the next attempt (ENGINE_RETRY_S later) brings it back:
    the next goal is planned."""
    monkeypatch.setattr(ps, "ENGINE_RETRY_S", 0.3)
    builds = []

    def factory():
        builds.append(time.monotonic())
        if len(builds) == 1:
            raise OSError("no device yet")
        return RealtimeSimEngine(WallClock())

    params = parse_params({"planner": {"engine": {"kind": "sim"}, "robot_timeout_s": 30.0},
                           "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]})
    ports = Ports()
    svc = PlannerService(params, ports, engine=DeadEngine(WallClock()), engine_factory=factory)
    svc.accepting = True
    svc.start()
    try:
        _, ended = submit(svc)
        assert wait(lambda: ended, 5.0) and ended[0].end is EndKind.ENGINE_FAILED
        assert svc.health.state in ("down", "restarting")
        assert wait(lambda: svc.health.state == "up", 5.0)
        assert len(builds) == 2 and builds[1] - builds[0] >= 0.3
        assert ("error", "inference engine could not be restarted (next try in 0.3 s): OSError('no device yet')") \
            in ports.logs
        ports.segments.clear()
        reason, ended = submit(svc, "b" * 32)
        assert reason is None
        assert wait(lambda: ports.segments, 5.0), "the rebuilt engine plans nothing"
    finally:
        svc.close()


class TokenizerFailsOnce(RealtimeSimEngine):
    """An engine whose prompt count fails once (a fault in the engine's tokenizer)."""

    failed = False

    def count_prompt_tokens(self, prompt):
        if not self.failed:
            self.failed = True
            raise RuntimeError("tokenizer crashed")
        return super().count_prompt_tokens(prompt)


def test_a_goal_command_that_fails_ends_that_goal_only():
    """A fault while taking one goal (not a ValueError: not the goal's own fault) ends that goal
    with the error; it does not pass for an engine failure (no restart, nothing else ended) and
    the next goal is served."""
    svc, ports = service(engine=TokenizerFailsOnce(WallClock()))
    try:
        _, ended = submit(svc)
        assert wait(lambda: ended, 5.0)
        assert ended[0] == "the planner could not take the goal: RuntimeError('tokenizer crashed')"
        assert svc.health.state == "up" and svc.health.failures == 0
        reason, ended = submit(svc, "b" * 32)  # the robot was released
        assert reason is None
        assert wait(lambda: ports.segments, 5.0)
    finally:
        svc.close()


def test_a_status_whose_handling_fails_is_logged_and_the_next_statuses_are_applied(monkeypatch):
    """A fault while applying one status is counted and logged; the statuses after it are
    applied and the engine is not taken for failed."""
    svc, ports = service()
    try:
        _, ended = submit(svc)
        assert wait(lambda: ports.segments)
        real = svc.planner.on_robot_status
        calls = []

        def flaky(*a, **kw):
            calls.append(a)
            if len(calls) == 1:
                raise KeyError("execution-time model")
            return real(*a, **kw)

        monkeypatch.setattr(svc.planner, "on_robot_status", flaky)
        svc.on_status(StatusIn("d1", GID, 0, EXECUTING))
        svc.on_status(StatusIn("d1", GID, 0, CANCELLED, (), "operator pressed stop"))
        assert wait(lambda: ended, 5.0) and ended[0].end is EndKind.CANCELLED
        assert svc.health.failures == 0 and svc.counters["internal_errors"] == 1
        assert ("error", "planner command failed: KeyError('execution-time model')") in ports.logs
    finally:
        svc.close()


class WarmedSimEngine(RealtimeSimEngine):
    """The real simulated engine, recording what it was warmed with."""

    def __init__(self, *a, fail=False, **kw):
        super().__init__(*a, **kw)
        self.warmed, self.fail = [], fail

    def warm_up(self, specs, plans=()):
        self.warmed.append((list(specs), [list(p) for p in plans]))
        if self.fail:
            raise RuntimeError("server gone")
        super().warm_up(specs, plans)


def _fleet_of_three_kinds():
    return parse_params({"planner": {"engine": {"kind": "sim"}},
                         "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"},
                                    {"id": "d2", "kind": "drone", "adapter": "sim"},
                                    {"id": "a1", "kind": "arm", "adapter": "sim"},
                                    {"id": "c1", "kind": "chat", "adapter": "sim"}]})


def test_a_new_engine_is_warmed_once_per_robot_kind_before_any_goal():
    eng = WarmedSimEngine(WallClock())
    capacity = eng.free_kv_tokens()
    ports = Ports()
    PlannerService(_fleet_of_three_kinds(), ports, engine=eng)
    ((specs, plans),) = eng.warmed
    by_kind = {s.robot_kind: p for s, p in zip(specs, plans)}
    assert len(by_kind["drone"]) == 8 and len(by_kind["arm"]) == 3 and len(by_kind["chat"]) == 3  # canonical plans
    assert sorted((s.robot_kind, s.skill_set_id) for s in specs) == [
        ("arm", "indy7_arm"), ("chat", "chat"), ("drone", "tello_minispec")]
    assert all(s.max_tokens == 1 and not s.suspend_at_segments for s in specs)
    # the shared prefixes are resident (cache in free memory) before the first goal
    assert eng.resident_prefixes() == {"indy7_arm", "chat", "tello_minispec"} and eng.free_kv_tokens() == capacity
    assert any(level == "debug" and text.startswith("engine warmed for 3 robot kind(s)") for level, text in ports.logs)


def test_a_failed_warm_up_is_logged_and_goals_still_run():
    eng = WarmedSimEngine(WallClock(), fail=True)
    ports = Ports()
    svc = PlannerService(_fleet_of_three_kinds(), ports, engine=eng)
    svc.accepting = True
    svc.start()
    try:
        assert any(level == "warning" and "warm-up failed" in text and "server gone" in text
                   for level, text in ports.logs)
        assert submit(svc)[0] is None
        assert wait(lambda: ports.segments)
    finally:
        svc.close()


def test_a_robot_sent_nothing_yet_is_not_timed_out_while_its_whole_plan_is_generated():
    """Policy ``vllm`` sends the plan only once all of it is generated. Generation slower than
    ``robot_timeout_s`` is not the robot's silence: the goal does not end ROBOT_TIMEOUT before
    its first segment is dispatched; the robot's silence clock starts there, and a robot that
    then stays silent does time out, ``robot_timeout_s`` after the dispatch at the earliest."""
    from llm_planner_node.engines.sim_engine import IterationModel, SimEngineConfig

    timeout = 0.3
    slow = SimEngineConfig(iteration=IterationModel(0.05, 0.0, 0.0))  # 50 ms per token: ~1 s per plan
    svc, ports = service(RealtimeSimEngine(WallClock(), slow), policy="vllm", robot_timeout_s=timeout)
    try:
        _, ended = submit(svc)
        t0 = time.monotonic()
        assert wait(lambda: ports.segments or ended, 10)
        dispatched = time.monotonic()
        assert ports.segments, f"ended before anything was dispatched: {ended[0].end_reason if ended else ''}"
        assert dispatched - t0 > 2 * timeout  # the plan took longer than the robot timeout
        assert wait(lambda: ended, 10)
        assert ended[0].end is EndKind.ROBOT_TIMEOUT and time.monotonic() - dispatched >= timeout
    finally:
        svc.close()


def test_every_rejection_carries_its_reason_and_is_counted_by_it():
    """One vocabulary for refusals (core.outcomes.RejectReason): the message is what the result
    says, the reason what /diagnostics counts ("rejected.<reason>")."""
    from timely_robot.outcomes import RejectReason, Rejection

    svc, _ = service()
    try:
        cases = [
            (GoalIn("ghost", "look for the cat"), RejectReason.UNKNOWN_ROBOT, "unknown robot 'ghost'"),
            (GoalIn("d1", "look for the cat", robot_kind="arm"), RejectReason.WRONG_ROBOT, "is a drone, not a arm"),
            (GoalIn("d1", "   "), RejectReason.FIELD, "instruction is empty"),
            (GoalIn("d1", "look for the cat", alpha=1.0), RejectReason.TUF, "alpha"),
            (GoalIn("x" * 300, "look for the cat"), RejectReason.FIELD, "robot_id has 300 characters"),
        ]
        for goal, reason, text in cases:
            why = svc.submit("b" * 32, goal, lambda _: None)
            assert isinstance(why, Rejection) and why.reason is reason and text in why, (why, reason)
        assert submit(svc)[0] is None  # d1 takes a goal ...
        busy = svc.submit("c" * 32, GoalIn("d1", "look for the cat"), lambda _: None)
        assert busy.reason is RejectReason.ROBOT_BUSY and "still executing goal" in busy  # ... and is busy
        svc.accepting = False
        off = svc.submit("d" * 32, GoalIn("d2", "look for the cat"), lambda _: None)
        assert off.reason is RejectReason.NOT_ACTIVE
        counts = svc.counters
        assert counts["rejected"] == 7
        assert (counts["rejected.field"], counts["rejected.unknown_robot"], counts["rejected.wrong_robot"],
                counts["rejected.tuf"], counts["rejected.robot_busy"], counts["rejected.not_active"]) == (2, 1, 1, 1, 1, 1)
    finally:
        svc.close()
