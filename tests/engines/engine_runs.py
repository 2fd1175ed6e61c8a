"""Helpers of the live engine tests: driving one generation through an engine to its end
(in-process vLLM: test_vllm_engine.py, test_vllm_grammar.py; remote: test_remote_engine.py), and
the two ``vllm serve`` servers the remote tests share (tests/conftest.py's ``vllm_servers``).

Imported as ``engine_runs`` by the tests of this directory (pytest puts it on ``sys.path``: the
test directories are not packages), as ``tests.engines.engine_runs`` from elsewhere (tests/conftest.py,
tests/e2e/test_remote_node.py)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent
from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
from llm_planner_node.config.params import EngineParams
from llm_planner_node.prompts.prompt import build_prompt

#: KV block size of the live engine tests' engines and servers.
BLOCK = 32
#: The remote tests' servers (and their planners): the shipped model, a small KV cache.
REMOTE_PARAMS = EngineParams(kind="remote", model="embedded", max_model_len=512, block_size=BLOCK,
                             kv_cache_gib=0.0625, max_num_seqs=16)

_gen_ids = itertools.count()


def next_gen_id() -> int:
    """A generation id no other generation of this test session has."""
    return next(_gen_ids)


def run_generation(engine: Any, instruction: str, robot_kind: str, *, segmented: bool, max_tokens: int = 160,
                   timeout_s: float = 60.0, on_suspend: Callable[[list], None] | None = None) -> list:
    """Add one generation (the planner model's prompt for ``instruction``, the robot kind's default
    skill set) and step ``engine`` until it ends; resume it right away whenever it is suspended
    (after ``on_suspend(events so far)``). Returns its events; the last is a FinishedEvent or a
    FailedEvent. Events of other generations are dropped."""
    gid = next_gen_id()
    engine.add(GenerationSpec(gid, build_prompt(instruction, robot_kind), max_tokens, robot_kind,
                              DEFAULT_SKILL_SET_FOR_KIND[robot_kind], suspend_at_segments=segmented))
    events: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ev in engine.step():
            if ev.gen_id != gid:
                continue
            events.append(ev)
            if isinstance(ev, SegmentEvent) and ev.suspended:
                if on_suspend is not None:
                    on_suspend(events)
                engine.resume(gid)
            if isinstance(ev, (FinishedEvent, FailedEvent)):
                return events
    raise AssertionError(f"generation {gid} did not end within {timeout_s} s")


def token_ids(events: list) -> list[int]:
    """The token ids of a generation's segments, in order."""
    return [t for ev in events if isinstance(ev, SegmentEvent) for t in ev.token_ids]


class Servers:
    """Two ``vllm serve`` servers (:data:`REMOTE_PARAMS`) on free loopback ports, one CPU core
    each where there are two; ``kill(i)`` / ``start(i)`` + ``wait(i)`` stop and restart one on its
    port, ``ensure_up()`` restarts any that a test left stopped."""

    def __init__(self, logs: Path) -> None:
        from llm_planner_node.vllm_server import free_port

        self.logs = logs
        self.ports = [free_port(), free_port()]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.procs: list = [None, None]

    def start(self, i: int) -> None:
        from llm_planner_node.vllm_server import start_server

        cores = str(i) if (os.cpu_count() or 1) > 1 else None
        self.procs[i] = start_server(REMOTE_PARAMS, self.ports[i], cpu_cores=cores,
                                     log_path=self.logs / f"server{i}.log")

    def kill(self, i: int) -> None:
        """SIGKILL: the server and its engine vanish mid-stream."""
        from llm_planner_node.vllm_server import stop_server

        stop_server(self.procs[i], hard=True)

    def freeze(self, i: int, frozen: bool = True) -> None:
        """SIGSTOP (SIGCONT with ``frozen=False``) the server and its engine: its streams stay open
        and make no progress, so what runs there holds still while a test reads it."""
        os.killpg(self.procs[i].pid, signal.SIGSTOP if frozen else signal.SIGCONT)

    def alive(self, i: int) -> bool:
        return self.procs[i] is not None and self.procs[i].poll() is None

    def wait(self, i: int, timeout_s: float = 420.0) -> None:
        from llm_planner_node.vllm_server import wait_ready

        try:
            wait_ready(self.urls[i], timeout_s, self.procs[i])
        except Exception:
            log = (self.logs / f"server{i}.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"server {i} did not start:\n{log}") from None

    def ensure_up(self) -> None:
        dead = [i for i in range(len(self.procs)) if not self.alive(i)]
        for i in dead:
            self.start(i)
        for i in dead:
            self.wait(i)

    def stop_all(self) -> None:
        from llm_planner_node.vllm_server import stop_server

        for p in self.procs:
            if p is not None:
                stop_server(p)
