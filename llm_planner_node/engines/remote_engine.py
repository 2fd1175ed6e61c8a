"""Remote engine: segmented generation on one or many ``vllm serve`` servers over HTTP.

Implements :class:`llm_planner_node.core.engine_api.Engine` for the scheduling core
(``planner.engine.kind: remote``, ``planner.engine.servers: [url, ...]``). The planner keeps the
tokenizer, the segmenters and the plan grammars; the servers only run the model.

One generation on a server (OpenAI-compatible ``POST /v1/completions``, streamed):

- ``add``: ``prompt`` = the goal's prompt **token ids** (tokenised once here, never re-tokenised
  text), greedy sampling (``temperature: 0`` and every other sampling default pinned, so the
  server's ``generation_config`` cannot change the tokens), ``stop_token_ids`` = the model's end
  of sequence, ``priority`` = the core's rank of this admission (the server runs with
  ``--scheduling-policy priority``; a server without it refuses non-zero priorities, then this
  engine stops sending them to that server and logs it once), ``return_token_ids: true`` so
  every streamed chunk carries its token ids, and, with constrained decoding, the plan grammar
  as ``structured_outputs: {"grammar": <EBNF>}`` (xgrammar on the server).
- Token ids from the stream go through the **same** segment-boundary detection as the in-process
  engine (both hold a :class:`~llm_planner_node.engines.stream.GenerationStreams`: incremental
  detokeniser, segmenter, grammar bookkeeping). At a boundary with ``suspend_at_segments`` the
  stream is closed (vLLM aborts a request whose client went away) and the token ids are kept.
- ``resume``: a new completion from ``prompt ids + generated ids`` with the *resume grammar* of
  what was generated (``grammar.GrammarState``), so segmented == unsegmented token for token.
- ``adopt``: as the in-process engine (the shared streams replay the ids); its ``resume`` goes to
  a server as a new generation would.
- ``num_cached_tokens``: the server reports it (``usage.prompt_tokens_details.cached_tokens``,
  with ``--enable-prompt-tokens-details`` and ``stream_options.include_usage``) only at the end
  of a stream that ends by itself: a resume that runs to the plan's end reports it exactly
  (:meth:`cache_hits`, and the last TokensEvent's ``cached_prompt_tokens``); a stream closed at
  a boundary gets no usage chunk. Each server's prefix-cache counters
  (``vllm:prefix_cache_hits/queries`` in ``/metrics``) are kept as well
  (:meth:`prefix_cache_stats`).
- ``retain(gen, "discard")``: the next resume carries a fresh ``cache_salt``, so the server
  recomputes the whole context (the salted blocks cannot match); other modes map to ``cache``.

Several servers (:class:`ServerPool`, pure logic, unit-tested without servers):

- every ``metrics_interval_s`` (0.5 s) each server's ``/metrics`` is read: requests running and
  waiting, KV-cache usage, KV capacity (``vllm:cache_config_info``: blocks x block size), prefix
  cache counters. A server that refuses the connection (or misses 3 polls) is *down*.
- a new generation goes to the least-loaded server that is up (running + waiting requests,
  counting this engine's own streams that the last poll did not see yet; KV usage breaks ties),
  preferring servers that are not overloaded;
- a suspended generation resumes on the server that holds its context (cache affinity) unless
  that server is overloaded (``overload_waiting`` requests waiting or ``overload_kv`` KV usage)
  or down;
- a server that fails: each generation streaming there resumes on another server from its kept
  token ids (prompt + everything generated so far, a re-prefill there; greedy decoding continues
  with the same tokens), no goal is lost; each failover is logged (WARNING) and counted
  (:meth:`diagnostics`, :attr:`failover_log`). With no server up, generations wait (parked) up to
  ``park_timeout_s`` and then fail. A server that comes back is used again.

The HTTP I/O runs on this engine's own asyncio thread (httpx); the core's calls are queued into
it, and ``step`` only drains the event queue, exactly like the in-process engine (both:
:class:`~llm_planner_node.engines.stream_engine.StreamEngineCalls`).

KV accounting is the in-process engine's: each admitted generation reserves ``context + remaining
max_tokens`` (whole blocks) against the summed KV capacity of the servers that are up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from llm_planner_node.config.params import EngineParams
from llm_planner_node.core.clock import Clock
from llm_planner_node.core.engine_api import GenerationSpec
from llm_planner_node.engines.asyncio_thread import cancel_other_tasks, start_loop, stop_loop
from llm_planner_node.engines.stream import (Generation, GenerationStreams, GrammarFactory, SegmenterFactory,
                                             default_grammar_factory, default_segmenter_factory)
from llm_planner_node.engines.stream_engine import StreamEngineCalls
from llm_planner_node.engines.vllm_engine import resolve_model_path, sampling_kwargs

log = logging.getLogger(__name__)

_LABEL = re.compile(r'(\w+)="([^"]*)"')


# -- server metrics and choice (pure logic) ------------------------------------------------------
@dataclass
class ServerMetrics:
    """What one ``/metrics`` read says about a server (summed over its engines)."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0          # 0..1, the fullest engine's
    capacity_tokens: int | None = None
    block_size: int | None = None
    prefix_hits: float = 0.0
    prefix_queries: float = 0.0


def parse_metrics(text: str) -> ServerMetrics:
    """The few series the remote engine uses, from vLLM's Prometheus text."""
    m = ServerMetrics()
    capacity = 0
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace = line.find("{")
        space = line.rfind(" ")
        if space < 0:
            continue
        name = line[:brace] if 0 < brace < space else line[:space]
        try:
            value = float(line[space + 1:])
        except ValueError:
            continue
        if name == "vllm:num_requests_running":
            m.running += value
        elif name == "vllm:num_requests_waiting":
            m.waiting += value
        elif name == "vllm:kv_cache_usage_perc":
            m.kv_usage = max(m.kv_usage, value)
        elif name == "vllm:prefix_cache_hits_total":
            m.prefix_hits += value
        elif name == "vllm:prefix_cache_queries_total":
            m.prefix_queries += value
        elif name == "vllm:cache_config_info":
            labels = dict(_LABEL.findall(line[brace:space]))
            try:
                blocks, bs = int(labels["num_gpu_blocks"]), int(labels["block_size"])
            except (KeyError, ValueError):
                continue
            capacity += blocks * bs
            m.block_size = bs
    m.capacity_tokens = capacity or None
    return m


@dataclass
class ServerState:
    url: str
    index: int
    up: bool = False
    ever_up: bool = False
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    base_metrics: ServerMetrics | None = None   # first read (prefix-cache counters start here)
    inflight: int = 0                           # this engine's streams on it now
    model: str | None = None                    # served model name (GET /v1/models)
    priority_ok: bool = True                    # False: the server refused priorities (fcfs)
    poll_failures: int = 0                      # consecutive failed polls
    down_since: float | None = None


class ServerPool:
    """Server choice for new generations and resumes; up/down bookkeeping; counters.

    No I/O: the engine feeds it poll results and stream failures (so it is unit-tested alone).
    """

    def __init__(self, urls: Iterable[str], *, overload_waiting: int = 4, overload_kv: float = 0.95,
                 down_after_failures: int = 3) -> None:
        self.servers = [ServerState(u.rstrip("/"), i) for i, u in enumerate(urls)]
        if not self.servers:
            raise ValueError("the remote engine needs at least one server URL (planner.engine.servers)")
        self.overload_waiting = overload_waiting
        self.overload_kv = overload_kv
        self.down_after_failures = down_after_failures
        self.counters = {"server_failures": 0, "server_recoveries": 0, "failovers": 0,
                         "affinity_resumes": 0, "moved_resumes": 0, "new_generations": 0}

    def get(self, url: str) -> ServerState:
        return next(s for s in self.servers if s.url == url)

    def up(self) -> list[ServerState]:
        return [s for s in self.servers if s.up]

    @staticmethod
    def load(s: ServerState) -> float:
        """Requests on the server (its last poll, or this engine's own streams if more), waiting
        ones counted twice; KV usage (0..1) breaks ties."""
        m = s.metrics
        return max(m.running + m.waiting, s.inflight) + m.waiting + m.kv_usage

    def overloaded(self, s: ServerState) -> bool:
        return s.metrics.waiting >= self.overload_waiting or s.metrics.kv_usage >= self.overload_kv

    def choose_new(self, exclude: Iterable[str] = ()) -> ServerState | None:
        """The least-loaded server that is up (not overloaded first), or None."""
        skip = set(exclude)
        cands = [s for s in self.servers if s.up and s.url not in skip]
        if not cands:
            return None
        return min(cands, key=lambda s: (self.overloaded(s), self.load(s), s.index))

    def choose_resume(self, home: str | None, exclude: Iterable[str] = ()) -> tuple[ServerState | None, str]:
        """Where a suspended generation resumes: ``(server, why)``, why = ``affinity`` (its home
        server holds its context), ``overloaded`` or ``gone`` (moved), ``new`` (no home yet)."""
        skip = set(exclude)
        s = next((x for x in self.servers if x.url == home), None) if home else None
        if s is not None and s.up and s.url not in skip:
            if not self.overloaded(s):
                self.counters["affinity_resumes"] += 1
                return s, "affinity"
            other = self.choose_new(exclude=skip | {s.url})
            if other is None or self.overloaded(other):
                self.counters["affinity_resumes"] += 1
                return s, "affinity"       # everything is overloaded: keep the cache hit
            self.counters["moved_resumes"] += 1
            return other, "overloaded"
        other = self.choose_new(exclude=skip)
        if other is not None and home is not None:
            self.counters["moved_resumes"] += 1
        return other, ("gone" if home is not None else "new")

    def poll_ok(self, url: str, metrics: ServerMetrics, now: float) -> bool:
        """A successful poll; True if the server came (back) up with it."""
        s = self.get(url)
        s.metrics = metrics
        if s.base_metrics is None:
            s.base_metrics = metrics
        s.poll_failures = 0
        if s.up:
            return False
        if s.ever_up:
            self.counters["server_recoveries"] += 1
        s.up = s.ever_up = True
        s.down_since = None
        return True

    def poll_failed(self, url: str, now: float, *, refused: bool) -> bool:
        """A failed poll (``refused``: nobody listens); True if the server went down with it."""
        s = self.get(url)
        s.poll_failures += 1
        if s.up and (refused or s.poll_failures >= self.down_after_failures):
            return self.mark_down(url, now)
        return False

    def mark_down(self, url: str, now: float) -> bool:
        s = self.get(url)
        if not s.up:
            return False
        s.up = False
        s.down_since = now
        s.metrics = ServerMetrics(capacity_tokens=s.metrics.capacity_tokens, block_size=s.metrics.block_size)
        self.counters["server_failures"] += 1
        return True

    def capacity_tokens(self) -> int | None:
        """Summed KV capacity of the servers that are up (of every server ever seen if none is)."""
        caps = [s.metrics.capacity_tokens for s in self.up() if s.metrics.capacity_tokens]
        if not caps:
            caps = [s.metrics.capacity_tokens for s in self.servers if s.metrics.capacity_tokens]
        return sum(caps) if caps else None


# -- the engine ------------------------------------------------------------------------------------
class ServerError(Exception):
    """A server answered a request with an error (``status``) or broke the stream (``status`` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RemoteEngine(StreamEngineCalls):
    """The ``remote`` backend: the core's Engine protocol over ``vllm serve`` (module docstring).

    ``retain`` (from :class:`StreamEngineCalls`): ``discard``: the next resume recomputes its whole
    context (a fresh ``cache_salt``); ``preserve`` and ``swap`` -> ``cache`` (a server has no
    per-request pin or swap).
    """

    def __init__(self, params: EngineParams, clock: Clock, servers: Sequence[str] | None = None, *,
                 segmenter_factory: SegmenterFactory = default_segmenter_factory,
                 step_timeout_s: float = 0.005, startup_timeout_s: float = 120.0,
                 constrained_decoding: str = "grammar",
                 grammar_factory: GrammarFactory = default_grammar_factory,
                 metrics_interval_s: float = 0.5, overload_waiting: int = 4, overload_kv: float = 0.95,
                 park_timeout_s: float = 120.0, max_failovers: int = 8, transport: Any = None) -> None:
        urls = list(servers if servers is not None else getattr(params, "servers", ()) or ())
        self.pool = ServerPool(urls, overload_waiting=overload_waiting, overload_kv=overload_kv)
        self.params = params
        self.clock = clock
        self.model_path = resolve_model_path(params.model)
        self.step_timeout_s = step_timeout_s
        self.streams = GenerationStreams(params, clock, self.model_path, constrained_decoding=constrained_decoding,
                                         segmenter_factory=segmenter_factory, grammar_factory=grammar_factory,
                                         stop_stream=self._stop_stream, forget=self._forget)
        self.tokenizer = self.streams.tokenizer
        self.eos_ids = self.streams.eos_ids
        self._cached_tokens: list[tuple[int, int]] = []   # (cached, context) per resume, for reports
        self.error: str | None = None
        self.metrics_interval_s = metrics_interval_s
        self.park_timeout_s = park_timeout_s
        self.max_failovers = max_failovers
        # the most recent 10,000 of each (a planner runs for days)
        self.failover_log: deque[dict[str, Any]] = deque(maxlen=10_000)  # per generation moved off a failed server
        self.placements: deque[tuple[int, str, str]] = deque(maxlen=10_000)  # (gen_id, server url, why) per add/resume
        self._tasks: dict[int, asyncio.Task] = {}
        self._on: dict[int, str] = {}       # gen id -> server its stream runs on
        self._home: dict[int, str] = {}     # gen id -> server that holds its context
        self._parked: dict[int, tuple[float, set[str]]] = {}  # gen id -> (since, servers to avoid)
        self._failovers: dict[int, int] = {}
        self._capacity_default = self._config_capacity()
        self._client: Any = None
        self._closing = False
        self._transport = transport  # an httpx transport (tests: fake servers)
        self._loop, self._thread = start_loop("remote-engine")
        fut = asyncio.run_coroutine_threadsafe(self._connect(startup_timeout_s), self._loop)
        try:
            fut.result(timeout=startup_timeout_s + 10)
        except Exception:
            self.close()
            raise

    # -- Engine protocol (and StreamEngineCalls) -----------------------------------------------------
    def warm_up(self, specs: Sequence[GenerationSpec], plans: Sequence[Sequence[str]] = (),
                timeout_s: float = 120.0) -> None:
        """The in-process engine's warm-up (one token per spec and per resume grammar of the
        plans) on every server up (each has its own prefix cache and compiled grammars); a server
        that fails it is left to the metrics poll, and its first goals pay the cold start."""
        async def one(name: str, gen: Generation, kept: list[int], grammar: str | None, server: ServerState) -> None:
            body = {**self._body(gen, server, gen.prompt_ids + kept), "max_tokens": 1, "stream": False,
                    "request_id": f"{name}-{server.url}"}
            body.pop("stream_options", None)
            body.pop("priority", None)
            if grammar is not None:
                body["structured_outputs"] = {"grammar": grammar}
            try:
                r = await self._client.post(f"{server.url}/v1/completions", json=body)
                r.raise_for_status()
            except Exception as e:  # noqa: BLE001 - a warm-up never fails the engine
                log.warning("remote engine: warm-up on %s failed (%s: %s); its first goals start cold",
                            server.url, type(e).__name__, e)

        async def all_of() -> None:
            requests = self.streams.warm_up_requests(specs, plans)
            await asyncio.gather(*(one(name, gen, kept, text, server) for name, gen, kept, text in requests
                                   for server in self.pool.up()))

        asyncio.run_coroutine_threadsafe(all_of(), self._loop).result(timeout=timeout_s)

    def kv_capacity_tokens(self) -> int:
        return self.pool.capacity_tokens() or self._capacity_default

    # -- reporting ---------------------------------------------------------------------------------
    def cache_hits(self) -> list[tuple[int, int]]:
        """(cached tokens, context tokens) of every resume whose stream reported usage."""
        return list(self._cached_tokens)

    def diagnostics(self) -> dict[str, Any]:
        """Counters for the planner's diagnostics: servers up, failovers, affinity, per server."""
        out: dict[str, Any] = dict(self.pool.counters)
        out["servers_up"] = len(self.pool.up())
        out["servers"] = len(self.pool.servers)
        out["parked"] = len(self._parked)
        for s in self.pool.servers:
            m = s.metrics
            out[f"server {s.url}"] = (f"{'up' if s.up else 'down'}, running {m.running:g}, waiting {m.waiting:g}, "
                                      f"kv {m.kv_usage:.0%}, ours {s.inflight}")
        return out

    def prefix_cache_stats(self) -> dict[str, tuple[float, float]]:
        """Per server: (prefix-cache hit tokens, queried tokens) since this engine connected."""
        out = {}
        for s in self.pool.servers:
            b = s.base_metrics or ServerMetrics()
            out[s.url] = (s.metrics.prefix_hits - b.prefix_hits, s.metrics.prefix_queries - b.prefix_queries)
        return out

    def refresh_metrics(self, timeout_s: float = 10.0) -> None:
        """Poll every server now (tests and benchmarks; the engine polls by itself)."""
        asyncio.run_coroutine_threadsafe(self._poll_all(), self._loop).result(timeout=timeout_s)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            self._closing = True
            for _ in range(5):  # a cancelled stream may not start another, but be thorough
                if not await cancel_other_tasks():
                    break
            if self._client is not None:
                await self._client.aclose()

        stop_loop(self._loop, self._thread, shutdown, 10.0, "remote engine")

    # -- start-up ----------------------------------------------------------------------------------
    def _config_capacity(self) -> int:
        """KV capacity from the parameters (used until a server reports its own)."""
        from pathlib import Path

        from llm_planner_node.config.params import kv_bytes_for_sequence

        per_seq = kv_bytes_for_sequence(Path(self.model_path) / "config.json", self.params)
        if not per_seq:
            return int(self.params.max_model_len) * len(self.pool.servers)
        seq_tokens = -(-self.params.max_model_len // self.params.block_size) * self.params.block_size
        per_token = per_seq / seq_tokens
        return int(self.params.kv_cache_gib * (1 << 30) / per_token) * len(self.pool.servers)

    async def _connect(self, timeout_s: float) -> None:
        import httpx

        self._client = httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=None), transport=self._transport,
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        deadline = time.monotonic() + timeout_s
        while True:
            await self._poll_all()
            if self.pool.up():
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no inference server answered within {timeout_s:.0f} s: "
                                   f"{', '.join(s.url for s in self.pool.servers)} "
                                   "(start one with `timely-fleet serve-engine`)")
            await asyncio.sleep(0.5)
        up = self.pool.up()
        log.info("remote engine: %d of %d servers up (%s), KV capacity %d tokens", len(up), len(self.pool.servers),
                 ", ".join(s.url for s in up), self.kv_capacity_tokens())
        self._loop.create_task(self._poller())

    async def _poller(self) -> None:
        while True:
            await asyncio.sleep(self.metrics_interval_s)
            try:
                await self._poll_all()
                self._check_parked()
            except asyncio.CancelledError:
                raise
            except Exception:  # pragma: no cover - never let the poller die
                log.exception("remote engine: metrics poll failed")

    async def _poll_all(self) -> None:
        await asyncio.gather(*(self._poll(s) for s in self.pool.servers))

    async def _poll(self, s: ServerState) -> None:
        import httpx

        now = time.monotonic()
        try:
            if s.model is None:
                r = await self._client.get(f"{s.url}/v1/models", timeout=2.0)
                r.raise_for_status()
                s.model = r.json()["data"][0]["id"]
            r = await self._client.get(f"{s.url}/metrics", timeout=2.0)
            r.raise_for_status()
            metrics = parse_metrics(r.text)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure to answer counts
            refused = isinstance(e, (httpx.ConnectError, httpx.RemoteProtocolError))
            if self.pool.poll_failed(s.url, now, refused=refused):
                self._server_down(s, f"{type(e).__name__}: {e}")
            return
        was_up_before = s.ever_up
        if self.pool.poll_ok(s.url, metrics, now):
            if was_up_before:
                log.warning("remote engine: server %s is back up; new generations go there again", s.url)
            else:
                log.info("remote engine: server %s is up (model %s)", s.url, s.model)
            self._check_parked()

    # -- generations (event-loop thread) ---------------------------------------------------------
    def _start(self, gen: Generation, fresh: bool) -> None:
        gid = gen.spec.gen_id
        self.streams.start_attempt(gen, fresh)
        if fresh:
            server, why = self.pool.choose_new(), "new"
            self.pool.counters["new_generations"] += 1
        else:
            server, why = self.pool.choose_resume(self._home.get(gid))
        self._launch(gen, server, why)

    def _launch(self, gen: Generation, server: ServerState | None, why: str, avoid: set[str] | None = None) -> None:
        gid = gen.spec.gen_id
        if self._closing:
            return
        if server is None:
            self._parked.setdefault(gid, (self.clock.now(), set(avoid or ())))
            log.warning("remote engine: no server up for generation %d; it waits for one", gid)
            return
        self._parked.pop(gid, None)
        self._on[gid] = server.url
        self._home[gid] = server.url
        self.placements.append((gid, server.url, why))
        server.inflight += 1  # counted at once: the next choice in this same loop turn sees it
        task = self._loop.create_task(self._stream(gen, gen.attempt, server))
        task.add_done_callback(lambda _t, s=server: setattr(s, "inflight", s.inflight - 1))
        self._tasks[gid] = task

    def _stop_stream(self, gen: Generation) -> None:
        """Close the generation's stream (the server aborts the request); keep its token ids."""
        gid = gen.spec.gen_id
        if gen.running:
            gen.running = False
            gen.attempt += 1
            task = self._tasks.pop(gid, None)
            if task is not None and task is not asyncio.current_task():
                task.cancel()
            self._on.pop(gid, None)
        self._parked.pop(gid, None)

    def _forget(self, gen_id: int) -> None:
        """Drop the server bookkeeping of a generation that finished, failed or was aborted."""
        for d in (self._home, self._on, self._failovers, self._tasks):
            d.pop(gen_id, None)

    def _body(self, gen: Generation, server: ServerState, context: list[int]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": server.model, "prompt": context, "max_tokens": max(1, gen.spec.max_tokens - len(gen.kept)),
            "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
            "stop_token_ids": self.eos_ids, "skip_special_tokens": False,
            # greedy, and nothing from the server's generation_config changes the tokens
            "temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0,
            **sampling_kwargs(gen.spec, self.params.seed),  # the goal's plan language's own settings
            "request_id": f"g{gen.spec.gen_id}-a{gen.attempt}",
        }
        if server.priority_ok and gen.priority:
            body["priority"] = int(gen.priority)
        grammar = self.streams.grammar_text(gen)
        if grammar is not None:
            body["structured_outputs"] = {"grammar": grammar}
        if gen.recompute:
            body["cache_salt"] = uuid.uuid4().hex
            gen.recompute = False
        return body

    async def _stream(self, gen: Generation, attempt: int, server: ServerState) -> None:
        import httpx

        gid = gen.spec.gen_id
        context = gen.prompt_ids + gen.kept
        resumed = bool(gen.kept)
        body = self._body(gen, server, context)
        try:
            for _ in range(2):  # once more without priority if the server refuses priorities
                try:
                    await self._run_stream(gen, attempt, server, body, len(context), resumed)
                    return
                except ServerError as e:
                    if e.status == 400 and "priority" in str(e) and "priority" in body:
                        log.warning("remote engine: server %s does not schedule by priority (start it with "
                                    "--scheduling-policy priority); sending no priorities to it", server.url)
                        server.priority_ok = False
                        body.pop("priority")
                        continue
                    raise
        except asyncio.CancelledError:
            raise
        except (ServerError, httpx.HTTPError, OSError) as e:
            if gen.attempt != attempt or not gen.running:
                return
            status = getattr(e, "status", None)
            if status is not None and status < 500:  # the request itself is wrong: this goal fails
                self.error = f"server {server.url}: {e}"
                self.streams.fail(gen, f"inference server refused the request: {e}")
                return
            await self._stream_broke(gen, server, f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - anything else ends this goal with the reason
            if gen.attempt == attempt and gen.running:
                log.exception("remote generation %d failed", gid)
                self.error = f"{type(e).__name__}: {e}"
                self.streams.fail(gen, f"inference engine failed: {self.error}")
        finally:
            if self._tasks.get(gid) is asyncio.current_task():
                self._tasks.pop(gid, None)

    async def _run_stream(self, gen: Generation, attempt: int, server: ServerState, body: dict[str, Any],
                          context_len: int, resumed: bool) -> None:
        held: tuple[list[int], str] | None = None  # the last chunk, waiting for the usage chunk
        async with self._client.stream("POST", f"{server.url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                try:
                    text = json.loads(text).get("error", {}).get("message", text)
                except (ValueError, AttributeError):
                    pass
                raise ServerError(f"HTTP {r.status_code}: {text[:300]}", r.status_code)
            async for line in r.aiter_lines():
                if gen.attempt != attempt:
                    return
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk and not chunk.get("choices"):
                    raise ServerError(str(chunk["error"]), None)
                usage = chunk.get("usage")
                if usage and held is not None:
                    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
                    self._end(gen, held, cached, context_len, resumed)
                    return
                for choice in chunk.get("choices") or ():
                    new = list(choice.get("token_ids") or ())
                    reason = choice.get("finish_reason")
                    if reason is not None:
                        held = (new, reason)  # the usage chunk follows at once
                        continue
                    if new and self.streams.consume(gen, new, self.clock.now(), None, False):
                        return  # suspended at a boundary (or failed): the stream closes here
        if gen.attempt != attempt:
            return
        if held is None:
            raise ServerError("the stream ended before the generation did", None)
        self._end(gen, held, None, context_len, resumed)

    def _end(self, gen: Generation, held: tuple[list[int], str], cached: int | None, context_len: int,
             resumed: bool) -> None:
        new, reason = held
        now = self.clock.now()
        if cached is not None and resumed:
            self._cached_tokens.append((cached, context_len))
        if new and self.streams.consume(gen, new, now, cached, True):
            return
        self.streams.finish(gen, reason, now)

    # -- failures ----------------------------------------------------------------------------------
    async def _stream_broke(self, gen: Generation, server: ServerState, why: str) -> None:
        """A stream broke: if the server is gone, everything on it fails over; else this one does."""
        import httpx

        alive = False
        try:
            r = await self._client.get(f"{server.url}/health", timeout=1.0)
            alive = r.status_code == 200
        except (httpx.HTTPError, OSError):
            alive = False
        if not alive and self.pool.mark_down(server.url, time.monotonic()):
            self._server_down(server, why)
        if gen.running and self._on.get(gen.spec.gen_id) == server.url:
            self._failover(gen, server.url, why)

    def _server_down(self, server: ServerState, why: str) -> None:
        moving = [g for gid, url in list(self._on.items()) if url == server.url
                  for g in [self.streams.gens.get(gid)] if g is not None and g.running]
        log.warning("remote engine: server %s is down (%s); %d running generation(s) fail over", server.url, why,
                    len(moving))
        for gen in moving:
            self._failover(gen, server.url, why)

    def _failover(self, gen: Generation, from_url: str, why: str) -> None:
        """Resume ``gen`` on another server from its kept token ids (re-prefill there)."""
        gid = gen.spec.gen_id
        task = self._tasks.pop(gid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._on.pop(gid, None)
        n = self._failovers[gid] = self._failovers.get(gid, 0) + 1
        if n > self.max_failovers:
            self.streams.fail(gen, f"inference servers failed {n - 1} times under this generation (last: {why})")
            return
        gen.attempt += 1
        target = self.pool.choose_new(exclude={from_url})
        self.pool.counters["failovers"] += 1
        self.failover_log.append({"gen_id": gid, "from": from_url, "to": target.url if target else None,
                                  "kept_tokens": len(gen.kept), "t": self.clock.now(), "why": why})
        log.warning("remote engine: failover of generation %d from %s to %s after %d kept tokens (%s)", gid,
                    from_url, target.url if target else "(no server up: waiting)", len(gen.kept), why)
        self._launch(gen, target, "failover", avoid={from_url})

    def _check_parked(self) -> None:
        now = self.clock.now()
        for gid, (since, avoid) in list(self._parked.items()):
            gen = self.streams.gens.get(gid)
            if gen is None or not gen.running:
                self._parked.pop(gid, None)
                continue
            target = self.pool.choose_new(exclude=avoid) or self.pool.choose_new()
            if target is not None:
                gen.attempt += 1
                self._launch(gen, target, "unparked")
            elif now - since > self.park_timeout_s:
                self._parked.pop(gid, None)
                self.streams.fail(gen, f"no inference server was up for {self.park_timeout_s:.0f} s")


def build_remote_engine(params: EngineParams, clock: Clock, *, constrained_decoding: str = "grammar") -> RemoteEngine:
    """The ``remote`` engine of the parameters (``planner.engine.servers``)."""
    servers = tuple(getattr(params, "servers", ()) or ())
    if not servers:
        raise ValueError("planner.engine.kind remote needs planner.engine.servers: [url, ...] "
                         "(start a server with `timely-fleet serve-engine`)")
    return RemoteEngine(params, clock, servers, constrained_decoding=constrained_decoding)


__all__ = ["RemoteEngine", "ServerPool", "ServerMetrics", "ServerState", "parse_metrics", "build_remote_engine"]
