"""Request states move only along the legal transitions."""

import pytest

from llm_planner_node.core.task_model import TRANSITIONS, GenState, Goal, IllegalTransition, Request
from llm_planner_node.core.tuf import NORMAL


def _req() -> Request:
    return Request(0, Goal("r0", "drone", "t", "prompt", NORMAL), 0.0, 10)


def test_segmented_lifecycle():
    r = _req()
    for s in (GenState.RUNNING, GenState.SUSPENDED, GenState.RUNNING, GenState.SUSPENDED,
              GenState.RUNNING, GenState.GENERATED, GenState.FINISHED):
        r.transition(s)
    assert r.state.terminal


@pytest.mark.parametrize("path", [
    (GenState.SUSPENDED,),                              # never ran
    (GenState.GENERATED,),
    (GenState.RUNNING, GenState.FINISHED),              # must be GENERATED first
    (GenState.RUNNING, GenState.GENERATED, GenState.RUNNING),
    (GenState.CANCELLED, GenState.RUNNING),             # terminal is final
    (GenState.RUNNING, GenState.FAILED, GenState.CANCELLED),
])
def test_illegal_transitions_raise(path):
    r = _req()
    with pytest.raises(IllegalTransition):
        for s in path:
            r.transition(s)


def test_every_non_terminal_state_can_be_cancelled_or_failed():
    for s, nxt in TRANSITIONS.items():
        assert (not s.terminal) == ({GenState.CANCELLED, GenState.FAILED} <= nxt)
        assert s.terminal == (not nxt)


def test_goal_validation():
    with pytest.raises(ValueError):
        Goal("r0", "drone", "t", "p", NORMAL, max_tokens=0)
    with pytest.raises(ValueError):
        Goal("", "drone", "t", "p", NORMAL)
