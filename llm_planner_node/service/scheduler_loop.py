"""The scheduler thread: engine steps with statuses and goal commands applied between them,
engine failures handed to its keeper, robot checks (re-sends, silence) and diagnostics."""

from __future__ import annotations

import math
import queue
import threading
from typing import Any, Callable

from llm_planner_node.core.task_model import EndKind
from llm_planner_node.core.text import safe_text
from llm_planner_node.service.commands import CommandQueue
from llm_planner_node.service.diagnostics import Diagnostics
from llm_planner_node.service.engine_keeper import EngineKeeper
from llm_planner_node.service.operator_control import OperatorControl
from llm_planner_node.service.shared import ServicePart, Shared
from llm_planner_node.service.status_path import StatusPath

#: Goal commands run between two drains of the status queue and two engine steps (a burst of
#: submits must not hold the engine: with 64, the engine stepped ~20 times/s during intake).
COMMAND_SLICE = 8


class SchedulerLoop(ServicePart):
    """The one thread that touches the core (see :mod:`.planner_service` for the threading)."""

    def __init__(self, shared: Shared, keeper: EngineKeeper, commands: CommandQueue,
                 wake: threading.Event, wake_up: Callable[[], None], statuses: StatusPath,
                 operator: OperatorControl, diagnostics: Diagnostics) -> None:
        """``commands``: the typed commands posted to this thread; ``wake``: set when a command or a
        status arrives (ends the idle wait); ``wake_up``: set it and ring the engine."""
        super().__init__(shared)
        self._keeper = keeper
        self._commands = commands
        self._wake = wake
        self._wake_up = wake_up
        self._statuses = statuses
        self._operator = operator
        self._diagnostics = diagnostics
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="planner-core", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the thread (after its current step; waits at most 5 s)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        next_check = next_stats = 0.0
        while not self._stop.is_set():
            down = self._keeper.health.state == "down"
            if down or (self._commands.empty() and self._statuses.empty() and not self._goals.by_request):
                # nothing in flight, or no engine: sleep until a goal or status comes (at most
                # until the next robot check), instead of stepping an idle engine every few ms
                wake_at = min(next_check, next_stats,
                              self._keeper.retry_at if down and self._keeper.rebuildable else math.inf)
                self._wake.wait(max(0.0, wake_at - self._clock.now()))
                self._wake.clear()
            if down:
                self._apply_arrivals()  # statuses and cancels still count; goals end at once:
                self._planner.engine_lost(self._keeper.health.reason)  # those that reached the core
                if self._keeper.rebuildable and self._clock.now() >= self._keeper.retry_at:
                    self._keeper.restart()
            else:
                try:
                    self._planner.tick(between=self._apply_arrivals)
                except Exception as e:  # noqa: BLE001 - an engine that died: fail its goals, restart it
                    try:
                        self._keeper.failed(e)
                    except Exception as e2:  # noqa: BLE001 - the scheduler thread must survive
                        self._keeper.go_down(f"engine restart failed: {safe_text(repr(e2), 300)}")
                    self._apply_arrivals()  # the engine may have failed before the hook: goals still end
            now = self._clock.now()
            if now >= next_check:
                self._check_robots(now)
                next_check = now + 0.1
            if now >= next_stats:
                self._diagnostics.refresh(now)
                next_stats = now + 1.0

    def _apply_arrivals(self) -> None:
        """Statuses and goal commands that arrived, applied between the engine's events and the
        tick's scheduling decision (their arrival woke the engine: one tick serves them).
        Statuses first, never starved by goal commands; a bounded slice of commands. Commands
        left after the slice ring the engine again: the next tick takes them at once, not after
        the engine's next event (with nothing generating, its whole idle wait)."""
        self._statuses.drain(self._contained)
        try:
            for _ in range(COMMAND_SLICE):  # a bounded slice of goal commands, then statuses again
                self._contained(self._commands.run, self._commands.get_nowait())
                self._statuses.drain(self._contained)
        except queue.Empty:
            return
        if not self._commands.empty():
            self._wake_up()

    def _contained(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run one command or status on the scheduler thread; its failure is its own (counted
        and logged): it never stops the others, nor passes for an engine failure."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            self._counters["internal_errors"] += 1
            self._ports.log("error", f"planner command failed: {safe_text(repr(e), 300)}")

    def _check_robots(self, now: float) -> None:
        """Re-send unacknowledged segments and owed stops; time out adapters that went silent."""
        self._statuses.flood_check(now)
        self._operator.check(now)  # approvals: time-outs, decisions, held goals' silence clocks
        owes = {}
        for rid, g in self._goals.by_request.items():
            req = self._planner.requests[rid]
            # a report is owed for a dispatched segment only: a plan generated but held until it
            # is complete (policy vllm, trail, ...) has sent the robot nothing to report on
            owes[g.goal_id] = not req.state.terminal and any(e is None for e in req.exec_end[:len(req.dispatched_at)])
        resend, given_up = self._delivery.due(now, owes)
        for robot_id, msg in resend:
            self._ports.publish(robot_id, msg)
        for goal_id, robot_id, n in given_up:
            self._ports.log("error", f"robot {safe_text(robot_id)} did not confirm the stop of goal "
                                     f"{goal_id[:8]} after {n} sends")
        for goal_id, silent_s in self._delivery.silent(now, owes):
            rid = self._goals.by_goal_id[goal_id]
            robot = self._planner.requests[rid].goal.robot_id
            self._planner.cancel(rid, f"robot {robot} sent no status for {silent_s:.1f} s "
                                      f"(robot_timeout_s={self._delivery.silence_timeout_s})", EndKind.ROBOT_TIMEOUT)
