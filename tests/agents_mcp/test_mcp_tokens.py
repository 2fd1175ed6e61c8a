"""The MCP front end's pieces without ROS: the token file (SHA-256 at rest, rights, re-read on
change, refused when others may change it) and the segments of a result whose feedback came late."""

from __future__ import annotations

import hashlib
import os
from types import SimpleNamespace

import pytest

from llm_planner_node.agents_mcp.bridge import late_segments, result_dict
from llm_planner_node.agents_mcp.tokens import (TokenFile, TokenFileError, add_token, read_entries, remove_token,
                                                token_digest)


def test_tokens_are_stored_as_sha256_with_their_rights(tmp_path):
    path = tmp_path / "cfg" / "tokens.yaml"
    a = add_token(path, "drones", ("tello_1", "tello_2"), ("normal",), False)
    b = add_token(path, "ops", None, None, True)
    text = path.read_text()
    assert a not in text and b not in text and hashlib.sha256(a.encode()).hexdigest() in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    tf = TokenFile(path)
    who = tf.verify(a)
    assert who.name == "drones" and who.may_task("tello_1") and not who.may_task("indy_1")
    assert who.urgencies == frozenset({"normal"}) and not who.operator
    ops = tf.verify(b)
    assert ops.operator and ops.robots is None and ops.may_task("anything")
    assert tf.verify("tfmcp_wrong") is None and tf.verify("") is None
    with pytest.raises(TokenFileError, match="a token named 'ops' exists"):
        add_token(path, "ops", None, None, False)
    remove_token(path, "drones")
    assert tf.verify(a) is None and tf.verify(b) is not None  # re-read on change
    with pytest.raises(TokenFileError, match="no token named 'drones'"):
        remove_token(path, "drones")


def test_token_file_mistakes_are_one_sentence(tmp_path):
    path = tmp_path / "tokens.yaml"
    with pytest.raises(TokenFileError, match="holds no token"):
        TokenFile(path)
    path.write_text("tokens:\n  - {name: x, sha256: abc}\n")
    os.chmod(path, 0o600)
    with pytest.raises(TokenFileError, match=r"tokens\[0\] \(x\): sha256 must be 64 hex digits"):
        read_entries(path)
    path.write_text(f"tokens:\n  - {{name: x, sha256: {token_digest('t')}, robot: [a]}}\n")
    with pytest.raises(TokenFileError, match="unknown key"):
        read_entries(path)
    path.write_text(f"tokens:\n  - {{name: x, sha256: {token_digest('t')}, robots: [a]}}\n")
    assert read_entries(path)[0].robots == ("a",)
    os.chmod(path, 0o620)
    with pytest.raises(TokenFileError, match="may be changed by other users"):
        read_entries(path)


def _seg(i, dispatched=True):
    return SimpleNamespace(index=i, text=f"s{i};", skills=[], queued_s=0.1 * i, generation_start_s=0.1 * i + 0.01,
                           generation_end_s=0.1 * i + 0.05, dispatch_s=0.1 * i + 0.06 if dispatched else -1.0)


def test_segments_whose_feedback_came_after_the_result_are_reported_from_it():
    res = SimpleNamespace(status=0, segments=[_seg(2), _seg(0), _seg(1)])
    late = late_segments(res, {0})
    assert [(f.index, f.text, f.final) for f in late] == [(1, "s1;", False), (2, "s2;", True)]
    assert late[0].queue_s == pytest.approx(0.01) and late[0].generation_s == pytest.approx(0.04)
    cancelled = SimpleNamespace(status=2, segments=[_seg(0), _seg(1, dispatched=False)])
    assert [f.index for f in late_segments(cancelled, set())] == [0]


@pytest.mark.ros
def test_a_tools_result_carries_the_status_name_reason_and_the_calls_that_did_not_achieve_their_action():
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import GoalResult, SkillAnswer

    goto = SkillAnswer(segment=2, skill="goto(person)", value="False")
    for res in (PlanTask.Result(status=PlanTask.Result.STATUS_NOT_ACHIEVED, reason="not_achieved", answers=[goto],
                                unachieved=[goto], message="plan executed, but goto(person) answered False"),
                GoalResult(status=10, reason="not_achieved", answers=[goto], unachieved=[goto])):  # a record alike
        out = result_dict(res)
        assert (out["status"], out["reason"]) == ("NOT_ACHIEVED", "not_achieved")
        assert out["unachieved"] == [{"segment": 2, "skill": "goto(person)", "value": "False"}]
    out = result_dict(PlanTask.Result(status=PlanTask.Result.STATUS_INVALID_PLAN, reason="unperceivable"))
    assert (out["status"], out["reason"], out["unachieved"]) == ("INVALID_PLAN", "unperceivable", [])
