"""The scheduler thread's typed commands (service/commands.py): data, dispatched by type."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from llm_planner_node.service import commands as c


def test_every_command_is_a_frozen_dataclass_of_data():
    for cls in c.COMMANDS:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        assert not any("Callable" in str(f.type) for f in dataclasses.fields(cls)), cls


def test_commands_run_in_order_each_with_the_handler_of_its_type():
    q = c.CommandQueue()
    seen: list[tuple[str, str]] = []
    q.on(c.CancelGoal, lambda cmd: seen.append(("cancel", cmd.goal_id)))
    q.on(c.EndAll, lambda cmd: seen.append(("end", cmd.reason)))
    for cmd in (c.CancelGoal("g1"), c.EndAll("shutdown"), c.CancelGoal("g2")):
        q.post(cmd)
    while not q.empty():
        q.run(q.get_nowait())
    assert seen == [("cancel", "g1"), ("end", "shutdown"), ("cancel", "g2")]


def test_a_command_nobody_handles_or_that_carries_a_callable_is_refused_at_post():
    woken = []
    q = c.CommandQueue(lambda: woken.append(1))
    with pytest.raises(TypeError, match="no handler for CancelGoal"):
        q.post(c.CancelGoal("g1"))
    q.on(c.StopLate, lambda cmd: None)
    with pytest.raises(TypeError, match="StopLate carries a callable"):
        q.post(c.StopLate("r1", print, "stopped"))  # type: ignore[arg-type]
    assert q.empty() and woken == []
    q.post(c.StopLate("r1", "g1", "stopped"))
    assert woken == [1] and not q.empty()


def test_a_type_has_one_handler():
    q = c.CommandQueue()
    q.on(c.EndAll, lambda cmd: None)
    with pytest.raises(ValueError, match="EndAll has a handler already"):
        q.on(c.EndAll, lambda cmd: None)


def test_a_stop_leaves_its_outcome_for_the_waiting_thread():
    reply = c.StopReply()
    q = c.CommandQueue()
    q.on(c.StopRobots, lambda cmd: (setattr(cmd.reply, "outcome", list(cmd.robots)), cmd.reply.done.set()))
    q.post(c.StopRobots(("r1", "r2"), "ops", reply))
    threading.Thread(target=lambda: q.run(q.get_nowait())).start()
    assert reply.done.wait(5) and reply.outcome == ["r1", "r2"]
