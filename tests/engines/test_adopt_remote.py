"""Engine.adopt on the remote engine, against test_remote_pool.py's fake OpenAI-compatible servers
(no model): a generation adopted on a second engine from the token ids of its first segments
resumes with ``prompt ids + those ids`` on a server and reports the rest of the plan exactly as
the uninterrupted generation did."""

from __future__ import annotations

import dataclasses
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("transformers")

from llm_planner_node.core.engine_api import FinishedEvent, GenerationSpec, SegmentEvent  # noqa: E402

from test_remote_pool import FakeServers, _engine  # noqa: E402


def _drive(eng, gid: int, timeout_s: float = 20.0) -> list:
    events: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ev in eng.step():
            if ev.gen_id != gid:
                continue
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                eng.resume(gid)
            if isinstance(ev, FinishedEvent):
                return events
    raise AssertionError(f"generation {gid} did not end")


def test_a_generation_adopted_on_another_remote_engine_goes_on_as_the_uninterrupted_one():
    from transformers import AutoTokenizer

    from llm_planner_node.engines.vllm_engine import EMBEDDED_MODEL
    from llm_planner_node.planner_model.corpus import canonical_examples
    from llm_planner_node.prompts.prompt import build_prompt

    tok = AutoTokenizer.from_pretrained(str(EMBEDDED_MODEL))
    ex = next(e for e in canonical_examples() if e.task_id == 2)  # 4 segments
    prompt = build_prompt(ex.instruction, "drone")
    prompt_ids = tok(prompt, add_special_tokens=True)["input_ids"]
    servers = FakeServers(["http://127.0.0.1:1", "http://127.0.0.1:2"],
                          tok(" " + ex.plan, add_special_tokens=False)["input_ids"], tok.eos_token_id, len(prompt_ids))
    spec = GenerationSpec(1, prompt, 160, "drone", "tello_minispec", True)
    a = _engine(servers)
    try:
        a.add(spec)
        whole = _drive(a, 1)
    finally:
        a.close()
    segs = [ev for ev in whole if isinstance(ev, SegmentEvent)]
    assert len(segs) == 4

    k = 2
    ids = [t for s in segs[:k] for t in s.token_ids]
    b = _engine(servers)
    try:
        with pytest.raises(ValueError):  # one token short of the boundary
            b.adopt(dataclasses.replace(spec, gen_id=3), ids[:-1], k)
        b.adopt(dataclasses.replace(spec, gen_id=2), ids, k)
        sent = len(servers.requests)
        b.resume(2)
        rest = _drive(b, 2)
        assert servers.requests[sent][1]["prompt"] == prompt_ids + ids  # resumed from the adopted ids
        assert b.placements[0][2] == "new"  # no home server yet: placed as a new generation would be
    finally:
        b.close()
    rest_segs = [ev for ev in rest if isinstance(ev, SegmentEvent)]
    assert ([(s.index, s.text, s.calls, s.token_ids) for s in rest_segs]
            == [(s.index, s.text, s.calls, s.token_ids) for s in segs[k:]])
    assert rest[-1].reason == whole[-1].reason
