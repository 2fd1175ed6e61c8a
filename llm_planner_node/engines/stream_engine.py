"""The Engine calls a live engine answers from its generation streams.

:class:`StreamEngineCalls` is the part of :class:`llm_planner_node.core.engine_api.Engine` that the
in-process vLLM engine and the remote engine share: both hold a
:class:`~llm_planner_node.engines.stream.GenerationStreams` and an asyncio loop of their own, queue
the core's commands into that loop in order, and drain the events the streams produced in
``step``. What differs stays in each engine: how a request starts (``_start``), how its stream is
stopped (the ``stop_stream`` each gives its streams), its KV capacity, warm-up and shutdown.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, Callable, Coroutine, Sequence, TypeVar

from llm_planner_node.core.engine_api import EngineEvent, GenerationSpec
from llm_planner_node.engines.stream import Generation, GenerationStreams

T = TypeVar("T")


class StreamEngineCalls:
    """The Engine calls that pass through to ``self.streams`` (a mixin).

    The engine sets ``streams``, ``step_timeout_s`` and ``_loop`` (its event loop, running in its
    own thread) and defines ``_start(gen, fresh)`` (on that loop: start ``gen``'s request; a fresh
    generation is registered by ``streams.start_attempt``) and ``kv_capacity_tokens()``.
    """

    streams: GenerationStreams
    step_timeout_s: float
    _loop: asyncio.AbstractEventLoop

    def _start(self, gen: Generation, fresh: bool) -> None:
        raise NotImplementedError

    def kv_capacity_tokens(self) -> int:
        raise NotImplementedError

    # -- Engine protocol ----------------------------------------------------------------------------
    def count_prompt_tokens(self, prompt: object) -> int:
        return len(self.prompt_ids(prompt))

    def free_kv_tokens(self) -> int:
        return max(0, self.kv_capacity_tokens() - self.streams.reserved_tokens())

    def add(self, spec: GenerationSpec) -> None:
        self._call(self._start, self.streams.new_gen(spec), True)

    def resume(self, gen_id: int, priority: int = 0) -> None:
        self._call(self._resume, gen_id, priority)

    def adopt(self, spec: GenerationSpec, generated_ids: Sequence[int], segments: int) -> None:
        """A suspended generation of ``spec`` that generated ``generated_ids`` (segments
        0..segments-1; Engine.adopt): its segmenter, detokeniser and grammar state are advanced
        over them here, as its stream would have (ValueError at once if they do not end at that
        boundary); ``resume`` then sends ``prompt ids + generated_ids`` with the resume grammar."""
        self._call(self.streams.park, self.streams.adopted(spec, generated_ids, segments))

    def suspend(self, gen_id: int) -> None:
        self._call(self.streams.suspend, gen_id, False)

    def abort(self, gen_id: int) -> None:
        self._call(self.streams.suspend, gen_id, True)

    def retain(self, gen_id: int, mode: str) -> str:
        """LAMPS retention of a suspended generation; returns the mode applied: ``discard`` -> its
        next request recomputes the whole context (each engine says how), any other mode ->
        ``cache`` (the context stays in the prefix cache until evicted)."""
        return self.streams.retain(gen_id, mode)

    def step(self) -> Sequence[EngineEvent]:
        """The events the streams produced since the last call, waiting up to ``step_timeout_s``
        for the first one (or until :meth:`wake`)."""
        return self.streams.events(self.step_timeout_s)

    def wake(self) -> None:
        """End the wait of a ``step`` in progress (or the next one) now."""
        self.streams.wake()

    # -- reporting ----------------------------------------------------------------------------------
    def running(self) -> int:
        return self.streams.running()

    def prompt_ids(self, prompt: object) -> list[int]:
        """The prompt's token ids, as this engine tokenises it."""
        return self.streams.prompt_ids(prompt)

    def run_on_loop(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the engine's event loop (a tool that drives the engine's own client
        beside the planner's requests); its future."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # -- internals ----------------------------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` into the engine's loop (the core's commands run there in order)."""
        self._loop.call_soon_threadsafe(fn, *args)

    def _resume(self, gen_id: int, priority: int) -> None:
        gen = self.streams.to_resume(gen_id, priority)
        if gen is not None:
            self._start(gen, False)
