"""engines/stream_engine.StreamEngineCalls, the Engine calls the vLLM and remote engines share: what
each passes to the engine's GenerationStreams, which of them are queued into the engine's loop
(in order) and which answer at once; on fakes (the live engines run them in their own tests)."""

from __future__ import annotations

from types import SimpleNamespace

from llm_planner_node.engines.stream_engine import StreamEngineCalls


class _Loop:
    """Holds what ``call_soon_threadsafe`` queues until ``run``."""

    def __init__(self) -> None:
        self.queued: list = []

    def call_soon_threadsafe(self, fn, *args) -> None:
        self.queued.append((fn, args))

    def run(self) -> None:
        queued, self.queued = self.queued, []
        for fn, args in queued:
            fn(*args)


class _Streams:
    def __init__(self, log: list) -> None:
        self.log, self.reserved = log, 0
        self.suspended = {7: SimpleNamespace(name="gen 7")}

    def prompt_ids(self, prompt):
        return [ord(c) for c in prompt]

    def reserved_tokens(self):
        return self.reserved

    def new_gen(self, spec):
        return SimpleNamespace(name=f"new {spec}")

    def adopted(self, spec, ids, segments):
        self.log.append(("adopted", spec, tuple(ids), segments))
        return SimpleNamespace(name=f"adopted {spec}")

    def park(self, gen):
        self.log.append(("park", gen.name))

    def to_resume(self, gen_id, priority):
        self.log.append(("to_resume", gen_id, priority))
        return self.suspended.get(gen_id)

    def suspend(self, gen_id, drop):
        self.log.append(("suspend", gen_id, drop))

    def retain(self, gen_id, mode):
        return "discard" if mode == "discard" else "cache"

    def events(self, timeout_s):
        return [("events", timeout_s)]

    def wake(self):
        self.log.append(("wake",))

    def running(self):
        return 3


class _Engine(StreamEngineCalls):
    def __init__(self) -> None:
        self.log: list = []
        self.streams = _Streams(self.log)  # type: ignore[assignment]
        self.step_timeout_s = 0.25
        self._loop = _Loop()  # type: ignore[assignment]

    def _start(self, gen, fresh):
        self.log.append(("start", gen.name, fresh))

    def kv_capacity_tokens(self):
        return 1000


def test_commands_are_queued_into_the_engine_loop_in_order():
    e = _Engine()
    e.add("spec A")
    e.resume(7, priority=2)
    e.resume(8)               # nothing suspended under 8: no start
    e.suspend(7)
    e.abort(9)
    e.adopt("spec B", [4, 5], 1)
    assert e.log == [("adopted", "spec B", (4, 5), 1)]  # checked at once, on the caller's thread
    e.log.clear()
    e._loop.run()
    assert e.log == [("start", "new spec A", True), ("to_resume", 7, 2), ("start", "gen 7", False),
                     ("to_resume", 8, 0), ("suspend", 7, False), ("suspend", 9, True), ("park", "adopted spec B")]


def test_what_answers_at_once():
    e = _Engine()
    assert e.count_prompt_tokens("abcd") == 4 and e.prompt_ids("ab") == [97, 98]
    e.streams.reserved = 300
    assert e.free_kv_tokens() == 700
    e.streams.reserved = 1200  # more reserved than the capacity: none free, never negative
    assert e.free_kv_tokens() == 0
    assert e.retain(7, "discard") == "discard" and e.retain(7, "swap") == "cache"
    assert e.step() == [("events", 0.25)]
    e.wake()
    assert e.running() == 3 and e.log == [("wake",)] and e._loop.queued == []
