"""Who may cancel a goal (service/cancel_rights.py), without ROS: a goal with a cancel key only
by its client's secret or an operator's; one without, by anyone; each refusal counted."""

from __future__ import annotations

import hashlib

from llm_planner_node.service.cancel_rights import (CANCELLING, NO_SUCH_GOAL, PROTECTED, REFUSED, WRONG_SECRET,
                                                    CancelRights)


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def test_a_protected_goal_is_cancelled_only_by_its_secret_or_an_operators():
    operators = [sha("op-1")]
    rights = CancelRights(lambda: ", ".join(operators))
    rights.protect("g1", "  " + sha("client").upper() + " ")  # as a client may write it
    rights.protect("g2", "")  # no key: anyone cancels it
    assert rights.standard_cancel("g2") and not rights.standard_cancel("g1")
    assert rights.cancel_by_secret("g1", "guess", True) == (False, REFUSED)
    assert rights.cancel_by_secret("g1", "", True) == (False, REFUSED)
    assert rights.cancel_by_secret("g1", "client", True) == (True, CANCELLING)
    assert rights.cancel_by_secret("g1", "op-1", True) == (True, CANCELLING)
    operators.append(sha("op-2"))  # the parameter changed while running
    assert rights.cancel_by_secret("g1", "op-2", True) == (True, CANCELLING)
    assert rights.cancel_by_secret("g9", "client", False) == (False, NO_SUCH_GOAL)
    assert rights.refusals == {PROTECTED: 1, WRONG_SECRET: 2}
    assert rights.key_of("g1") == sha("client") and rights.key_of("g2") == ""


def test_an_ended_goal_forgets_its_key():
    rights = CancelRights(lambda: "")
    rights.protect("g1", sha("client"))
    rights.forget("g1")
    assert rights.standard_cancel("g1") and rights.key_of("g1") == "" and rights.refusals == {}
