"""The benchmarks' engine step loop: generations added to an engine, a few at a time, and stepped
until each ends, suspended segments resumed at once (``bench grammar``, ``bench plans``).

:func:`run_generations` drives any :class:`~llm_planner_node.core.engine_api.Engine` (the live
vLLM engine in the benchmarks) and records what each generation produced in a
:class:`GenerationRun`; the benchmark builds each GenerationSpec and says what an end means.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent, TokensEvent


@dataclass
class GenerationRun:
    """One generation a benchmark ran: its item, how it ended (the benchmark's words), what it
    produced and when (the engine clock)."""

    item: Any
    status: str = "running"            # the benchmark's, set at the end; "timeout" if it had none
    error: str = ""
    segments: list[Any] = field(default_factory=list)    # SegmentEvents, in order
    token_ids: list[int] = field(default_factory=list)   # every generated token (TokensEvents)
    plan: str = ""
    t_add: float = 0.0                                   # set by the benchmark when it builds the spec
    t_first_token: float | None = None
    t_first_segment: float | None = None
    t_end: float | None = None
    tokens: int = 0


Run = TypeVar("Run", bound=GenerationRun)


def run_generations(engine: Any, runs: Sequence[Run], spec_for: Callable[[int], GenerationSpec],
                    ended: Callable[[Run, FinishedEvent | FailedEvent], None], *, concurrency: int,
                    timeout_s: float | None = None, deadline_s: float | None = None,
                    on_end: Callable[[Run], None] | None = None) -> None:
    """Run ``runs`` on ``engine``, ``concurrency`` at a time, in order: ``spec_for(i)`` is the
    GenerationSpec of ``runs[i]`` (added as soon as a slot is free; the benchmark sets its
    ``t_add``); each event goes to its run (token counts and ids, segments, first token and first
    segment times), a suspended segment is resumed at once, and a FinishedEvent or FailedEvent
    sets ``t_end`` and calls ``ended(run, event)``, which sets the status.

    ``timeout_s``: a generation still running that long after its ``t_add`` (engine clock) is
    aborted: status ``timeout``, an error saying so, ``t_end`` now. ``deadline_s``: the loop stops
    after that long (monotonic clock) and aborts every generation still running (status
    ``timeout``). ``on_end(run)`` follows every end, timeouts included. The plan text is the
    benchmark's to decode."""
    running: dict[int, Run] = {}
    nxt = 0
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    while (nxt < len(runs) or running) and (deadline is None or time.monotonic() < deadline):
        while nxt < len(runs) and len(running) < concurrency:
            spec = spec_for(nxt)
            engine.add(spec)
            running[spec.gen_id] = runs[nxt]
            nxt += 1
        for ev in engine.step():
            r = running.get(ev.gen_id)
            if r is None:
                continue
            if isinstance(ev, TokensEvent):
                r.tokens += ev.count
                r.token_ids.extend(ev.token_ids)
                if r.t_first_token is None:
                    r.t_first_token = ev.t
            elif isinstance(ev, SegmentEvent):
                r.segments.append(ev)
                if r.t_first_segment is None:
                    r.t_first_segment = ev.t
                if ev.suspended:
                    engine.resume(ev.gen_id)
            elif isinstance(ev, (FinishedEvent, FailedEvent)):
                r.t_end = ev.t
                ended(r, ev)
                running.pop(ev.gen_id)
                if on_end is not None:
                    on_end(r)
        if timeout_s is not None:
            now = engine.clock.now()
            for gid, r in list(running.items()):
                if now - r.t_add > timeout_s:
                    engine.abort(gid)
                    r.status, r.error, r.t_end = "timeout", f"no end within {timeout_s:g} s", now
                    running.pop(gid)
                    if on_end is not None:
                        on_end(r)
    for gid, r in running.items():
        engine.abort(gid)
        r.status = "timeout"
        if on_end is not None:
            on_end(r)
