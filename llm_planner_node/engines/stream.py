"""Generation streams: what a live engine's token ids become for the scheduling core.

:class:`GenerationStreams` holds the generations of one live engine (in-process vLLM or remote
servers) and turns each one's stream of token ids into the core's engine events
(:mod:`llm_planner_node.core.engine_api`): tokens, segments cut by the generation's segmenter, a
suspension at a boundary, the finish reason, a failure. It keeps each generation's grammar state
(the resume grammar after its kept tokens) and KV reservation; the engine that holds it runs the
requests and hands it what they stream.
"""

from __future__ import annotations

import codecs
import logging
import math
import queue
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from llm_planner_node.config.params import CONSTRAINED_DECODING, EngineParams
from llm_planner_node.core.clock import Clock
from llm_planner_node.core.engine_api import (EngineEvent, FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent,
                                              TokensEvent)
from timely_robot.outcomes import FinishReason
from llm_planner_node.prompts.grammar import Derivatives, GrammarState, derivatives_for
from llm_planner_node.segmenters import PlanError, Segment, Segmenter, get_segmenter
from llm_planner_node.segmenters.detok import IncrementalDetokenizer

log = logging.getLogger(__name__)

SegmenterFactory = Callable[[GenerationSpec], Segmenter]
GrammarFactory = Callable[[GenerationSpec], Derivatives | None]

#: Put on the event queue by :meth:`GenerationStreams.wake`; :meth:`GenerationStreams.events` drops it.
_WAKE: Any = object()
#: Prompt texts whose token ids are remembered (counted at submit, then used at add).
PROMPT_IDS_CACHE_MAX = 256


def default_segmenter_factory(spec: GenerationSpec) -> Segmenter:
    """The robot kind's segmenter over the goal's skill set (chat: sentence segmentation)."""
    return get_segmenter(spec.robot_kind, spec.skill_set_id)


def default_grammar_factory(spec: GenerationSpec) -> Derivatives:
    """The plan grammar of the goal's skill set, in the language of its robot kind, bounded by the
    goal's plan limits and, when the robot lists them, admitting only its known objects."""
    return derivatives_for(spec.skill_set_id, spec.robot_kind, limits=spec.plan_limits, objects=spec.objects)


@dataclass
class Generation:
    """One generation of a live engine: its prompt, the token ids it kept, its segmenter and
    grammar state, and where its request stands."""

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


class GenerationStreams:
    """The generations of one live engine and the events their token streams become.

    The engine passes ``stop_stream(gen)``, which ends the generation's running request (its
    stream reports nothing after it), and may pass ``forget(gen_id)``, which drops what the
    engine keeps of a generation that finished, failed or was aborted. Everything runs on the
    engine's event-loop thread, except :meth:`prompt_ids`, :meth:`new_gen`, :meth:`adopted` (on a
    generation not registered yet), :meth:`reserved_tokens`, :meth:`running`, :meth:`events` and
    :meth:`wake`, which the core's thread calls too.
    """

    def __init__(self, params: EngineParams, clock: Clock, model_path: str, *, constrained_decoding: str,
                 segmenter_factory: SegmenterFactory, grammar_factory: GrammarFactory,
                 stop_stream: Callable[[Generation], None],
                 forget: Callable[[int], None] = lambda gen_id: None) -> None:
        from transformers import AutoTokenizer

        if constrained_decoding not in CONSTRAINED_DECODING:
            raise ValueError(f"constrained_decoding must be one of {', '.join(CONSTRAINED_DECODING)}, "
                             f"got {constrained_decoding!r}")
        self.params = params
        self.clock = clock
        self.segmenter_factory = segmenter_factory
        self.grammar_factory = grammar_factory
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.token_bytes: list[bytes] = self._grammar_vocab() if constrained_decoding == "grammar" else []
        self.resume_grammars: list[bool] = []  # per resume under the grammar: at a top-level boundary (own rules)?
        self.eos_ids = self._eos_ids(model_path)
        self.gens: dict[int, Generation] = {}
        self.reserved: dict[int, int] = {}     # gen id -> KV tokens reserved while it runs
        self._events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()
        self._ids_cache: dict[str, tuple[int, ...]] = {}
        self._stop_stream = stop_stream
        self._forget = forget

    # -- prompts and generations ----------------------------------------------------------------
    def prompt_ids(self, prompt: object) -> list[int]:
        """A prompt's token ids: a string tokenised once (a small cache), token ids as they are."""
        if isinstance(prompt, str):
            ids = self._ids_cache.get(prompt)
            if ids is None:
                ids = self._ids_cache[prompt] = tuple(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
                while len(self._ids_cache) > PROMPT_IDS_CACHE_MAX:
                    self._ids_cache.pop(next(iter(self._ids_cache)))
            return list(ids)
        if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        raise TypeError(f"the vLLM engine takes a prompt string or token ids, got {type(prompt).__name__}")

    def new_gen(self, spec: GenerationSpec) -> Generation:
        """A generation of ``spec``, not started: its prompt ids, segmenter and grammar state."""
        gen = Generation(spec=spec, prompt_ids=self.prompt_ids(spec.prompt), segmenter=self.segmenter_factory(spec),
                         detok=IncrementalDetokenizer(self.tokenizer), priority=spec.priority)
        derivatives = self.grammar_factory(spec) if self.token_bytes else None
        if derivatives is not None:  # (a grammar_factory may return None: that goal is unconstrained)
            gen.grammar = derivatives.state()
            gen.gbytes = codecs.getincrementaldecoder("utf-8")("replace")
        return gen

    def adopted(self, spec: GenerationSpec, generated_ids: Sequence[int], segments: int) -> Generation:
        """A generation of ``spec`` suspended at the boundary after segment ``segments - 1``, having
        generated ``generated_ids`` (Engine.adopt; not registered yet: :meth:`park` does that).
        The ids go through :meth:`feed_token` as a stream's do, so the segmenter, detokeniser and
        grammar state stand where the generation's own stood at that boundary; nothing is
        reported. Raises ValueError if the ids do not end exactly there, or if the plan could not
        go on from them (an end of sequence, text the segmenter or the plan grammar refuses, max
        tokens reached, the end of the ids inside a UTF-8 character)."""
        gen = self.new_gen(spec)
        ids = [int(t) for t in generated_ids]
        if segments < 0:
            raise ValueError(f"segments must be 0 or more, got {segments}")
        if len(ids) >= spec.max_tokens:
            raise ValueError(f"{len(ids)} generated ids reach max_tokens ({spec.max_tokens}): the generation had ended")
        cut = 0
        for i, tid in enumerate(ids):
            try:
                done = self.feed_token(gen, tid)
            except PlanError as e:
                raise ValueError(f"generated id {i} makes the text an invalid plan: {e}") from None
            if done is None:
                raise ValueError(f"generated id {i} is an end of sequence: the plan had ended")
            if done:
                cut += len(done)
                gen.seg_start = len(gen.kept)
        if cut != segments:
            raise ValueError(f"the generated ids complete {cut} segment(s), not {segments}")
        if gen.seg_start != len(gen.kept):
            raise ValueError(f"the generated ids run {len(gen.kept) - gen.seg_start} token(s) past the "
                             f"boundary after segment {segments - 1}")
        if self._grammar_mid_char(gen):
            raise ValueError("the generated ids end inside a UTF-8 character, where no generation is suspended")
        if gen.grammar is not None and self._grammar_state(gen) is None:
            raise ValueError("the generated text leaves the plan grammar: it cannot be continued under it")
        return gen

    def park(self, gen: Generation) -> None:
        """Register ``gen`` (from :meth:`adopted`) as suspended: ``resume`` starts its request."""
        self.gens[gen.spec.gen_id] = gen

    def start_attempt(self, gen: Generation, fresh: bool) -> None:
        """``gen``'s request is about to start (a fresh generation is registered): a new attempt,
        running, with ``context + remaining max_tokens`` reserved (whole blocks)."""
        if fresh:
            self.gens[gen.spec.gen_id] = gen
        gen.attempt += 1
        gen.running = True
        bs = self.params.block_size
        need = len(gen.prompt_ids) + gen.spec.max_tokens
        self.reserved[gen.spec.gen_id] = math.ceil(need / bs) * bs

    def reserved_tokens(self) -> int:
        return sum(list(self.reserved.values()))

    def running(self) -> int:
        return sum(1 for g in self.gens.values() if g.running)

    # -- the core's commands (event-loop thread) ----------------------------------------------------
    def to_resume(self, gen_id: int, priority: int) -> Generation | None:
        """The suspended generation ``gen_id``, now at ``priority``; None if none is suspended."""
        gen = self.gens.get(gen_id)
        if gen is None or gen.running or gen.done:
            return None
        gen.priority = priority
        return gen

    def suspend(self, gen_id: int, drop: bool) -> None:
        """Stop the generation's request, keeping its token ids (``drop``: and the generation)."""
        gen = self.gens.get(gen_id)
        if gen is None:
            return
        self._stop(gen)
        if drop:
            gen.done = True
            self.gens.pop(gen_id, None)
            self._forget(gen_id)

    def retain(self, gen_id: int, mode: str) -> str:
        """``discard`` of a suspended generation: its next request recomputes the whole context;
        every other mode is ``cache`` (the context stays in the prefix cache until evicted)."""
        gen = self.gens.get(gen_id)
        if mode == "discard" and gen is not None and not gen.running:
            gen.recompute = True
            return "discard"
        return "cache"

    # -- events -------------------------------------------------------------------------------------
    def events(self, timeout_s: float) -> list[EngineEvent]:
        """The events produced since the last call, waiting up to ``timeout_s`` for the first one
        (or until :meth:`wake`)."""
        out: list[EngineEvent] = []
        try:
            out.append(self._events.get(timeout=timeout_s))
            while True:
                out.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return [e for e in out if e is not _WAKE]

    def wake(self) -> None:
        """End the wait of an :meth:`events` call in progress (or the next one) now."""
        self._events.put(_WAKE)

    # -- what a stream delivers (event-loop thread) -------------------------------------------------
    def consume(self, gen: Generation, new: list[int], now: float, cached: int | None, last_output: bool) -> bool:
        """Feed new tokens to the segmenter; True if the generation stopped (suspended/failed)."""
        n = 0

        def report() -> None:  # the kept tokens since the last report, with their ids
            self._events.put(TokensEvent(gen.spec.gen_id, now, n, cached, tuple(gen.kept[len(gen.kept) - n:])))

        for i, tid in enumerate(new):
            n += 1
            try:
                segments = self.feed_token(gen, tid)
            except PlanError as e:
                report()
                self.fail(gen, f"invalid plan: {e}", invalid_plan=True)
                return True
            if segments is None:
                break
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
                    self._stop(gen)
                    return True
        if n:
            report()
        return False

    def feed_token(self, gen: Generation, tid: int) -> list[Segment] | None:
        """Keep token ``tid`` of ``gen`` and feed it to its grammar state, detokeniser and
        segmenter: the segments it completes (often none), or None if it is an end of sequence
        (kept, fed to nothing). The one place a generation's tokens become segments (streams,
        adoption and warm-up alike); raises the segmenter's PlanError."""
        gen.kept.append(tid)
        if tid in self.eos_ids:
            return None
        self.grammar_feed(gen, tid)
        return gen.segmenter.feed(gen.detok.push(tid))

    def finish(self, gen: Generation, finish_reason: str | None, now: float) -> None:
        """The request ended by itself (``finish_reason``: ``length`` at max tokens, else the end
        of the plan): the last segments, then FinishedEvent (or FailedEvent if the tail is invalid)."""
        try:
            tail = gen.segmenter.finish()
        except PlanError as e:
            self.fail(gen, f"invalid plan: {e}", invalid_plan=True)
            return
        for i, s in enumerate(tail):
            self._emit_segment(gen, s, now, suspended=False, final=i == len(tail) - 1)
        gen.running = False
        gen.done = True
        self.reserved.pop(gen.spec.gen_id, None)
        self.gens.pop(gen.spec.gen_id, None)
        self._events.put(FinishedEvent(gen.spec.gen_id, now,
                                       FinishReason.MAX_TOKENS if finish_reason == "length" else FinishReason.EOS))
        self._forget(gen.spec.gen_id)

    def fail(self, gen: Generation, error: str, *, invalid_plan: bool = False) -> None:
        """End the generation with FailedEvent(``error``)."""
        self._stop(gen)
        gen.done = True
        self.gens.pop(gen.spec.gen_id, None)
        self._events.put(FailedEvent(gen.spec.gen_id, self.clock.now(), error, invalid_plan))
        self._forget(gen.spec.gen_id)

    def _stop(self, gen: Generation) -> None:
        self._stop_stream(gen)
        self.reserved.pop(gen.spec.gen_id, None)

    def _over_batch(self) -> bool:
        """A goal waits inside vLLM for its first token: more generations run here than vLLM
        batches at once (``max_num_seqs``) and one of them has produced nothing yet, so a
        boundary suspension lets it start (the engine-side half of the core's
        ``suspend_when`` rule: a goal waiting for its first segment)."""
        running = [g for g in self.gens.values() if g.running]
        return len(running) > self.params.max_num_seqs and any(not g.kept for g in running)

    def _emit_segment(self, gen: Generation, seg: Any, now: float, *, suspended: bool, final: bool = False) -> None:
        ids = tuple(gen.kept[gen.seg_start:])
        gen.seg_start = len(gen.kept)
        self._events.put(SegmentEvent(gen.spec.gen_id, now, seg.index, seg.text, seg.calls, ids, suspended,
                                      final=final))

    # -- grammar ------------------------------------------------------------------------------------
    def grammar_text(self, gen: Generation) -> str | None:
        """The grammar (EBNF) of this add/resume: the resume grammar after everything generated,
        or None (unconstrained)."""
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

    def grammar_feed(self, gen: Generation, tid: int) -> None:
        """Queue the bytes xgrammar's matcher consumes for token ``tid`` (decoded) for ``gen``'s grammar."""
        if gen.grammar is not None:
            b = self.token_bytes[tid] if 0 <= tid < len(self.token_bytes) else b""
            gen.gtext.append(gen.gbytes.decode(b))

    def _grammar_state(self, gen: Generation) -> GrammarState | None:
        """The plan language after everything kept (the decoded text not yet fed is fed now), or
        None if the generation is unconstrained or its kept text left the language."""
        if gen.grammar is None:
            return None
        if gen.gtext:
            gen.grammar.advance("".join(gen.gtext))
            gen.gtext.clear()
        return None if gen.grammar.dead else gen.grammar

    def _grammar_mid_char(self, gen: Generation) -> bool:
        """The kept tokens end inside a UTF-8 character (no resume grammar can express that)."""
        return gen.grammar is not None and bool(gen.gbytes.getstate()[0])

    def _grammar_vocab(self) -> list[bytes]:
        """Each token id's bytes exactly as xgrammar's matcher (inside vLLM) consumes them."""
        import xgrammar as xg

        return list(xg.TokenizerInfo.from_huggingface(self.tokenizer).decoded_vocab)

    def _eos_ids(self, model_path: str) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        gen_cfg = Path(model_path) / "generation_config.json"
        if gen_cfg.is_file():
            import json

            eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [eos])
        return sorted(i for i in ids if i is not None)

    # -- warm-up ------------------------------------------------------------------------------------
    def warm_up_requests(self, specs: Sequence[GenerationSpec], plans: Sequence[Sequence[str]]
                         ) -> list[tuple[str, Generation, list[int], str | None]]:
        """An engine's warm-up requests: (request id, a fresh generation of the spec, kept token
        ids, resume grammar or None for the spec's own grammar), one per spec and one per resume
        of :meth:`warm_up_resumes` of its plans."""
        out: list[tuple[str, Generation, list[int], str | None]] = []
        for i, spec in enumerate(specs):
            gen = self.new_gen(spec)
            out.append((f"warm-up-{i}", gen, [], None))
            out.extend((f"warm-up-{i}-{j}", gen, kept, text) for j, (kept, text)
                       in enumerate(self.warm_up_resumes(spec, plans[i] if i < len(plans) else ())))
        return out

    def warm_up_resumes(self, spec: GenerationSpec, plans: Sequence[str]) -> list[tuple[list[int], str]]:
        """(kept token ids, resume grammar) of the first resume of each distinct resume grammar
        other than the base one that segmented generation of ``plans`` (as this tokenizer
        writes them) would send: a suspension at every segment boundary, as :meth:`consume`."""
        if not self.token_bytes:
            return []
        out: dict[str, list[int]] = {}
        for plan in plans:
            gen = self.new_gen(spec)
            if gen.grammar is None:
                return []
            ids = self.tokenizer(plan, add_special_tokens=False)["input_ids"]
            for tid in ids[:-1]:  # the last token ends the plan: no resume after it
                try:
                    cut = self.feed_token(gen, tid)
                except PlanError:
                    break  # not a plan of this skill set: nothing more to learn from it
                if cut is None:
                    break
                if cut and not self._grammar_mid_char(gen):
                    state = self._grammar_state(gen)
                    if state is None:
                        break
                    if not state.at_start:
                        out.setdefault(state.ebnf(), list(gen.kept))
        return [(kept, text) for text, kept in out.items()]
