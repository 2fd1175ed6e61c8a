"""timely_tools/bench/engine_loop.run_generations, the step loop of `bench grammar` and `bench plans`, on a
scripted engine: generations added as slots free, each event recorded on its run, suspended
segments resumed at once, ends, per-generation timeouts and the loop's deadline."""

from __future__ import annotations

from llm_planner_node.core.engine_api import (FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent,
                                              TokensEvent)
from timely_robot.outcomes import FinishReason
from timely_tools.bench.engine_loop import GenerationRun, run_generations


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class _ScriptedEngine:
    """Each step advances the clock by 1 s and reports, per generation added so far (in add
    order), the next batch of its script (``script[gen_id](t)``: the batches from the first step
    after its add, at time ``t``, on)."""

    def __init__(self, script):
        self.script, self.clock = script, _Clock()
        self.added: list[tuple[int, float]] = []   # (gen id, clock at add)
        self.batches: dict[int, list | None] = {}
        self.resumed: list[int] = []
        self.aborted: list[int] = []

    def add(self, spec: GenerationSpec) -> None:
        self.added.append((spec.gen_id, self.clock.t))
        self.batches[spec.gen_id] = None

    def step(self):
        self.clock.t += 1
        out = []
        for gid, _t in self.added:
            if gid not in self.aborted:
                if self.batches[gid] is None:  # the script starts at the first step after the add
                    self.batches[gid] = self.script[gid](self.clock.t)
                out += self.batches[gid].pop(0) if self.batches[gid] else []
        return out

    def resume(self, gen_id, priority=0):
        self.resumed.append(gen_id)

    def abort(self, gen_id):
        self.aborted.append(gen_id)


def _segment(gid, t, ids, suspended):
    return SegmentEvent(gid, t, 0, "tp;", (), tuple(ids), suspended)


def _spec_for(engine, runs, id_base):
    def spec_for(i):
        runs[i].t_add = engine.clock.now()
        return GenerationSpec(id_base + i, [1, 2, 3], 16, "drone", "tello_minispec", suspend_at_segments=True)
    return spec_for


def _ended(r, ev):
    r.status = type(ev).__name__


def test_runs_record_their_events_and_a_third_generation_waits_for_a_free_slot():
    script = {
        # step 1: two tokens; step 2: a suspended segment; step 3 (after the resume): one more, then the end
        10: lambda t: [[TokensEvent(10, t, 2, token_ids=(1, 2))],
                       [_segment(10, t + 1, (1, 2), True)],
                       [TokensEvent(10, t + 2, 1, token_ids=(3,)), FinishedEvent(10, t + 2, FinishReason.EOS)]],
        11: lambda t: [[TokensEvent(11, t, 1, token_ids=(7,)), _segment(11, t, (7,), False),
                        FinishedEvent(11, t, FinishReason.MAX_TOKENS)]],
        12: lambda t: [[FailedEvent(12, t, "invalid plan: x", invalid_plan=True)]],
    }
    engine = _ScriptedEngine(script)
    runs = [GenerationRun(k) for k in "abc"]
    ended = []
    run_generations(engine, runs, _spec_for(engine, runs, 10), _ended, concurrency=2,
                    on_end=lambda r: ended.append(r.item))
    # 10 and 11 at once; 12 once 11 ended (step 1, at t = 1)
    assert engine.added == [(10, 0.0), (11, 0.0), (12, 1.0)]
    a, b, c = runs
    assert (a.status, a.tokens, a.token_ids, len(a.segments)) == ("FinishedEvent", 3, [1, 2, 3], 1)
    assert (a.t_add, a.t_first_token, a.t_first_segment, a.t_end) == (0.0, 1.0, 2.0, 3.0)
    assert engine.resumed == [10]  # the suspended segment, resumed at once; 11's was not suspended
    assert (b.status, b.tokens, b.token_ids, b.t_first_token, b.t_first_segment, b.t_end) == (
        "FinishedEvent", 1, [7], 1.0, 1.0, 1.0)
    assert (c.status, c.tokens, c.segments, c.t_add, c.t_first_token, c.t_end) == (
        "FailedEvent", 0, [], 1.0, None, 2.0)
    assert ended == ["b", "c", "a"] and engine.aborted == []


def test_a_generation_past_its_timeout_is_aborted_and_the_next_one_runs():
    script = {0: lambda t: [[TokensEvent(0, t, 1, token_ids=(5,))]] + [[]] * 10,   # never ends
              1: lambda t: [[FinishedEvent(1, t, FinishReason.EOS)]]}
    engine = _ScriptedEngine(script)
    runs = [GenerationRun("slow"), GenerationRun("next")]
    ended = []
    run_generations(engine, runs, _spec_for(engine, runs, 0), _ended, concurrency=1, timeout_s=2.5,
                    on_end=lambda r: ended.append(r.item))
    slow, nxt = runs
    # added at t = 0; at t = 3 it has run 3 s > 2.5 s
    assert (slow.status, slow.error, slow.t_end, slow.tokens) == ("timeout", "no end within 2.5 s", 3.0, 1)
    assert engine.aborted == [0] and engine.added == [(0, 0.0), (1, 3.0)]
    assert (nxt.status, nxt.t_end) == ("FinishedEvent", 4.0)
    assert ended == ["slow", "next"]


def test_at_the_deadline_every_generation_still_running_is_aborted():
    engine = _ScriptedEngine({100: lambda t: [], 101: lambda t: []})  # nothing ever ends
    runs = [GenerationRun("x"), GenerationRun("y"), GenerationRun("z")]
    run_generations(engine, runs, _spec_for(engine, runs, 100), _ended, concurrency=2, deadline_s=0.05)
    assert engine.aborted == [100, 101]
    assert [r.status for r in runs] == ["timeout", "timeout", "running"]  # z was never added
    assert [r.t_end for r in runs] == [None, None, None] and [r.error for r in runs] == ["", "", ""]
