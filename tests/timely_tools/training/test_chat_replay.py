"""The chat replay mixed into the planner adapter's training: the base model's own answers to
everyday chat requests, never a benchmark's or the README's instruction."""

from __future__ import annotations

from timely_tools.training import chat_replay
from timely_tools.training.plan_data import normalise


def test_requests_are_distinct_deterministic_and_exclude_what_is_measured():
    excluded = chat_replay._excluded()
    a = chat_replay.chat_requests(240, 0, excluded)
    assert a == chat_replay.chat_requests(240, 0, excluded) and len(a) == len(set(a)) == 240
    assert not {normalise(r) for r in a} & {normalise(x) for x in excluded}
    assert "tell me a joke about robots" not in a  # the README's chat goal stays unseen


def test_the_shipped_replay_is_the_chat_grammars_answers_to_those_requests():
    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.prompts.grammar import GrammarChecker, build_plan_grammar

    pairs = chat_replay.load()
    assert len(pairs) >= 200
    requests = set(chat_replay.chat_requests(len(pairs) + 50, 0, chat_replay._excluded()))
    chat = GrammarChecker(build_plan_grammar(DEFAULT_SKILL_SETS["chat"]))
    for q, a in pairs:
        assert q in requests
        assert chat.accepts(a), a  # what the node's chat grammar admits (1-6 sentences, ASCII)
