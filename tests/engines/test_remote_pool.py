"""The remote backend's pure logic, without servers: /metrics parsing, server choice (least
loaded, overload), cache-affine resume, up/down bookkeeping and counters; and the engine's
failover bookkeeping against fake OpenAI-compatible servers (httpx MockTransport): a stream that
breaks mid-plan resumes on another server from its kept token ids with the same tokens, with no
server up a generation waits and resumes when one returns, and a server without priority
scheduling is retried without priorities."""

from __future__ import annotations

import json
import logging
import time

import pytest

from llm_planner_node.engines.remote_engine import ServerMetrics, ServerPool, parse_metrics

METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="planner"} 3.0
vllm:num_requests_waiting{engine="0",model_name="planner"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="planner",reason="capacity"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="planner"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="planner"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="planner"} 900.0
vllm:cache_config_info{block_size="32",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="512"} 1.0
vllm:num_requests_running{engine="1",model_name="planner"} 1.0
vllm:kv_cache_usage_perc{engine="1",model_name="planner"} 0.5
vllm:cache_config_info{block_size="32",engine="1",num_gpu_blocks="256"} 1.0
"""


def test_parse_metrics_sums_engines_and_reads_the_kv_capacity():
    m = parse_metrics(METRICS)
    assert (m.running, m.waiting) == (4.0, 2.0)  # waiting_by_reason is not waiting
    assert m.kv_usage == 0.5  # the fullest engine
    assert m.capacity_tokens == (512 + 256) * 32 and m.block_size == 32
    assert (m.prefix_hits, m.prefix_queries) == (900.0, 1000.0)
    assert parse_metrics("").capacity_tokens is None


def _pool(*loads, **kw):
    pool = ServerPool([f"http://s{i}" for i in range(len(loads))], **kw)
    for s, (running, waiting, kv) in zip(pool.servers, loads):
        pool.poll_ok(s.url, ServerMetrics(running, waiting, kv, capacity_tokens=1000, block_size=32), 0.0)
    return pool


def test_new_generations_go_to_the_least_loaded_server():
    pool = _pool((3, 0, 0.1), (1, 0, 0.1), (1, 0, 0.05))
    assert pool.choose_new().url == "http://s2"  # equal requests: lower KV usage
    pool.servers[2].inflight = 4  # streams this engine started since the last poll count too
    assert pool.choose_new().url == "http://s1"
    assert pool.choose_new(exclude={"http://s1"}).url == "http://s0"


def test_waiting_requests_weigh_more_and_overloaded_servers_come_last():
    pool = _pool((0, 2, 0.1), (3, 0, 0.1))
    assert pool.choose_new().url == "http://s1"  # 2 waiting (x2) > 3 running
    pool = _pool((0, 0, 0.97), (6, 3, 0.5), overload_waiting=4)
    assert pool.overloaded(pool.servers[0]) and not pool.overloaded(pool.servers[1])
    assert pool.choose_new().url == "http://s1"  # the idle one is out of KV space


def test_resume_stays_on_the_server_that_holds_the_context():
    pool = _pool((5, 0, 0.3), (0, 0, 0.0))
    server, why = pool.choose_resume("http://s0")
    assert (server.url, why) == ("http://s0", "affinity")  # busier, but it has the context
    assert pool.counters["affinity_resumes"] == 1


def test_resume_moves_when_its_server_is_overloaded_or_gone():
    pool = _pool((5, 6, 0.3), (0, 0, 0.0), overload_waiting=4)
    server, why = pool.choose_resume("http://s0")
    assert (server.url, why) == ("http://s1", "overloaded")
    pool = _pool((5, 6, 0.3), (5, 6, 0.3), overload_waiting=4)
    assert pool.choose_resume("http://s0")[0].url == "http://s0"  # all overloaded: keep the cache hit
    pool = _pool((0, 0, 0.0), (0, 0, 0.0))
    pool.mark_down("http://s0", 1.0)
    server, why = pool.choose_resume("http://s0")
    assert (server.url, why) == ("http://s1", "gone")
    assert pool.counters["moved_resumes"] == 1


def test_down_and_back_up_are_counted_once_each():
    pool = _pool((0, 0, 0.0), (0, 0, 0.0), down_after_failures=3)
    assert not pool.poll_failed("http://s0", 1.0, refused=False)  # one timeout: not yet
    assert not pool.poll_failed("http://s0", 1.5, refused=False)
    assert pool.poll_failed("http://s0", 2.0, refused=False)  # third in a row: down
    assert not pool.poll_failed("http://s0", 2.5, refused=True)  # already down
    assert pool.poll_failed("http://s1", 2.5, refused=True)  # connection refused: down at once
    assert pool.choose_new() is None
    assert pool.counters["server_failures"] == 2
    assert pool.capacity_tokens() == 2000  # capacity of the servers seen, while none is up
    assert pool.poll_ok("http://s1", ServerMetrics(capacity_tokens=1000), 3.0)
    assert not pool.poll_ok("http://s1", ServerMetrics(capacity_tokens=1000), 3.5)
    assert pool.counters["server_recoveries"] == 1
    assert pool.choose_new().url == "http://s1"
    assert pool.capacity_tokens() == 1000


def test_first_contact_is_not_a_recovery():
    pool = ServerPool(["http://a"])
    pool.poll_failed("http://a", 0.0, refused=True)  # not up yet: no failure counted
    assert pool.poll_ok("http://a", ServerMetrics(), 1.0)
    assert pool.counters == {**pool.counters, "server_failures": 0, "server_recoveries": 0}


def test_a_pool_needs_a_server():
    with pytest.raises(ValueError, match="planner.engine.servers"):
        ServerPool([])


# -- the engine against fake servers ------------------------------------------------------------
httpx = pytest.importorskip("httpx")
pytest.importorskip("transformers")


class FakeServers:
    """OpenAI-compatible fakes: greedy 'model' = the fixed plan, continued from the prompt's end."""

    def __init__(self, urls, plan_ids, eos, prompt_len):
        self.urls = urls
        self.plan = list(plan_ids) + [eos]
        self.prompt_len = prompt_len
        self.down: set[str] = set()
        self.break_after: dict[str, int] = {}  # url -> tokens streamed before the connection drops
        self.no_priority: set[str] = set()
        self.requests: list[tuple[str, dict]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        if base in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "fake"}]})
        if path == "/metrics":
            return httpx.Response(200, text='vllm:cache_config_info{block_size="32",num_gpu_blocks="100"} 1.0\n')
        if path == "/health":
            return httpx.Response(200)
        body = json.loads(request.content)
        self.requests.append((base, body))
        if base in self.no_priority and body.get("priority"):
            return httpx.Response(400, json={"error": {"message": "priority scheduling is not enabled"}})
        done = len(body["prompt"]) - self.prompt_len
        rest = self.plan[done:done + body["max_tokens"]]
        cut = self.break_after.pop(base, None)
        lines = []
        for i, t in enumerate(rest):
            last = i == len(rest) - 1
            reason = ("stop" if t == self.plan[-1] else "length") if last else None
            lines.append("data: " + json.dumps({"choices": [{"index": 0, "token_ids": [t], "finish_reason": reason}]}))
        lines.append("data: " + json.dumps({"choices": [], "usage": {
            "prompt_tokens": len(body["prompt"]), "prompt_tokens_details": {"cached_tokens": len(body["prompt"]) - 1}}}))
        lines.append("data: [DONE]")

        async def stream():
            for i, line in enumerate(lines):
                if cut is not None and i >= cut:
                    self.down.add(base)  # the server died with this stream
                    raise httpx.ReadError("connection reset by peer")
                yield (line + "\n\n").encode()

        return httpx.Response(200, content=stream())


@pytest.fixture
def fake():
    from transformers import AutoTokenizer

    from llm_planner_node.engines.vllm_engine import EMBEDDED_MODEL
    from llm_planner_node.planner_model.corpus import canonical_examples
    from llm_planner_node.prompts.prompt import build_prompt

    tok = AutoTokenizer.from_pretrained(str(EMBEDDED_MODEL))
    ex = next(e for e in canonical_examples() if e.robot_kind == "drone")
    prompt = build_prompt(ex.instruction, "drone")
    prompt_ids = tok(prompt, add_special_tokens=True)["input_ids"]
    plan_ids = tok(" " + ex.plan, add_special_tokens=False)["input_ids"]
    return FakeServers(["http://127.0.0.1:1", "http://127.0.0.1:2"], plan_ids, tok.eos_token_id,
                       len(prompt_ids)), prompt, ex


def _engine(fake_servers, **kw):
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.remote_engine import RemoteEngine
    from llm_planner_node.config.params import EngineParams

    return RemoteEngine(EngineParams(kind="remote", max_model_len=512, kv_cache_gib=0.0625), WallClock(),
                        fake_servers.urls, constrained_decoding="off", metrics_interval_s=0.05,
                        transport=httpx.MockTransport(fake_servers.handler), startup_timeout_s=10, **kw)


def _run(eng, prompt, gid, *, segmented=True, timeout_s=20.0, priority=0):
    from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent

    eng.add(GenerationSpec(gid, prompt, 160, "drone", "tello_minispec", segmented, priority=priority))
    events = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ev in eng.step():
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                eng.resume(gid)
            if isinstance(ev, (FinishedEvent, FailedEvent)):
                return events
    raise AssertionError("generation did not end")


def _ids(events):
    from llm_planner_node.core.engine_api import SegmentEvent

    return [t for e in events if isinstance(e, SegmentEvent) for t in e.token_ids]


def test_fake_servers_segmented_plan_and_kv_capacity(fake):
    servers, prompt, ex = fake
    eng = _engine(servers)
    try:
        assert eng.kv_capacity_tokens() == 2 * 100 * 32
        events = _run(eng, prompt, 1)
        assert type(events[-1]).__name__ == "FinishedEvent"
        assert eng.tokenizer.decode(_ids(events), skip_special_tokens=True).strip() == ex.plan
        # every request: token-id prompt, greedy, token ids streamed, usage asked for
        for _, body in servers.requests:
            assert isinstance(body["prompt"], list) and body["temperature"] == 0.0
            assert body["return_token_ids"] and body["stream_options"] == {"include_usage": True}
        # resumes carry prompt + generated ids and stay on the server with the context
        assert len({base for base, _ in servers.requests}) == 1
        assert eng.cache_hits() and eng.cache_hits()[-1][0] == eng.cache_hits()[-1][1] - 1
    finally:
        eng.close()


def test_a_stream_that_breaks_mid_plan_fails_over_with_the_same_tokens(fake, caplog):
    servers, prompt, ex = fake
    caplog.set_level(logging.WARNING, logger="llm_planner_node.engines.remote_engine")
    eng = _engine(servers)
    try:
        reference = _ids(_run(eng, prompt, 1, segmented=False))
        first = servers.requests[-1][0]
        servers.break_after[first] = 3  # the next stream there dies after 3 tokens
        deadline = time.monotonic() + 5
        while any(s.inflight for s in eng.pool.servers) and time.monotonic() < deadline:
            time.sleep(0.01)  # the finished stream's task has ended: the next goal goes to the same server
        events = _run(eng, prompt, 2, segmented=False)
        assert type(events[-1]).__name__ == "FinishedEvent"
        assert _ids(events) == reference  # continued from the kept ids: nothing lost or repeated
        d = eng.diagnostics()
        assert d["failovers"] == 1 and d["server_failures"] == 1 and d["servers_up"] == 1
        (f,) = eng.failover_log
        assert f["from"] == first and f["to"] != first and f["kept_tokens"] == 3
        resumed = servers.requests[-1][1]["prompt"]
        assert resumed[-3:] == reference[:3]  # the kept ids went to the other server
        assert any("failover of generation 2" in r.getMessage() for r in caplog.records)
    finally:
        eng.close()


def test_with_no_server_up_a_generation_waits_and_resumes_when_one_returns(fake):
    servers, prompt, ex = fake
    eng = _engine(servers)
    try:
        servers.down.update(servers.urls)
        deadline = time.monotonic() + 5
        while eng.diagnostics()["servers_up"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert eng.diagnostics()["servers_up"] == 0
        from llm_planner_node.core.engine_api import GenerationSpec

        eng.add(GenerationSpec(7, prompt, 160, "drone", "tello_minispec", False))
        time.sleep(0.3)
        assert eng.diagnostics()["parked"] == 1 and not eng.step()
        servers.down.clear()
        events = []
        deadline = time.monotonic() + 10
        while not events or type(events[-1]).__name__ != "FinishedEvent":
            assert time.monotonic() < deadline
            events += eng.step()
        assert eng.diagnostics()["server_recoveries"] == 2 and eng.diagnostics()["parked"] == 0
    finally:
        eng.close()


def test_a_server_without_priority_scheduling_gets_requests_without_priority(fake):
    servers, prompt, ex = fake
    servers.no_priority.update(servers.urls)
    eng = _engine(servers)
    try:
        events = _run(eng, prompt, 1, priority=5)
        assert type(events[-1]).__name__ == "FinishedEvent"
        assert [b.get("priority") for _, b in servers.requests][:2] == [5, None]
        assert not any(s.priority_ok for s in eng.pool.servers if s.url == servers.requests[0][0])
    finally:
        eng.close()


# -- composition: parameters, factory, server command line ----------------------------------------
def test_remote_is_built_from_the_parameters():
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.factory import engine_factory
    from llm_planner_node.config.params import EngineParams, parse_params
    from timely_robot.config import ParamError

    p = parse_params({"planner": {"engine": {"kind": "remote", "servers": ["http://10.0.0.5:8000/"]}}, "robots": []})
    assert p.check().planner.engine.servers == ("http://10.0.0.5:8000",)
    with pytest.raises(ParamError, match="needs planner.engine.servers"):
        parse_params({"planner": {"engine": {"kind": "remote"}}, "robots": []}).check()
    make = engine_factory(EngineParams(kind="remote"), WallClock())  # built lazily, like vllm
    with pytest.raises(ValueError, match="planner.engine.servers"):
        make()


def test_serve_engine_command_has_what_the_remote_engine_needs():
    from llm_planner_node.config.params import EngineParams
    from llm_planner_node.vllm_server import serve_command

    cmd = serve_command(EngineParams(kv_cache_gib=0.0625, max_model_len=512, tensor_parallel_size=2), port=9001,
                        pipeline_parallel_size=2)
    line = " ".join(cmd)
    for flag in ("--enable-prefix-caching", "--scheduling-policy priority", "--enable-prompt-tokens-details",
                 "--generation-config vllm", "--port 9001", "--host 127.0.0.1", "--max-model-len 512",
                 "--block-size 32", f"--kv-cache-memory-bytes {1 << 26}", "--tensor-parallel-size 2",
                 "--pipeline-parallel-size 2", "--dtype float32", "--enforce-eager"):
        assert flag in line, flag
    assert json.loads(cmd[cmd.index("--structured-outputs-config") + 1]) == {"backend": "xgrammar"}
    assert cmd[cmd.index("--model") + 1].endswith("planner_model/weights")
