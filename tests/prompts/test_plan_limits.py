"""The plan grammars' bounds as properties: whatever a model writes under the grammar ends within
max_tokens and stays inside the plan limits (loop counts, nesting, statements, sentences).

Plans are drawn at random from the generated grammar itself (every alternative and repetition
count reachable), for random small limits; the longest derivation is built too, to show the
computed bound is reached (exact, not just an upper bound)."""

from __future__ import annotations

import random
from functools import lru_cache

import pytest
from hypothesis import given, settings, strategies as st

from llm_planner_node.core.plan_limits import PlanLimits, limits_for
from timely_robot.skills import DEFAULT_SKILL_SETS
from llm_planner_node.prompts.grammar import (Alt, Chars, GrammarChecker, Lit, PlanGrammar, Ref, Rep, Seq, build_plan_grammar,
                                      longest_plan_chars)
from llm_planner_node.segmenters.arm import parse_arm_plan
from timely_robot.minispec import Assign, BoolOp, Call, If, Loop, Return, parse_program

DRONE = DEFAULT_SKILL_SETS["tello_minispec"]
ARM = DEFAULT_SKILL_SETS["indy7_arm"]
CHAT = DEFAULT_SKILL_SETS["chat"]


def _char(c: Chars, r: random.Random) -> str:
    assert not c.negated  # the plan grammars spell every character class positively (ASCII)
    lo, hi = r.choice(c.ranges)
    return chr(r.randint(ord(lo), ord(hi)))


def derive(g: PlanGrammar, r: random.Random, node=None) -> str:
    """A random string of the grammar (every rule is bounded: no budget needed)."""
    node = Ref("root") if node is None else node
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Chars):
        return _char(node, r)
    if isinstance(node, Ref):
        return derive(g, r, g.rules[node.name])
    if isinstance(node, Seq):
        return "".join(derive(g, r, x) for x in node.items)
    if isinstance(node, Alt):
        return derive(g, r, r.choice(node.items))
    if isinstance(node, Rep):
        assert node.max is not None, "an unbounded repetition"
        return "".join(derive(g, r, node.item) for _ in range(r.randint(node.min, node.max)))
    raise TypeError(node)


def longest(g: PlanGrammar, node=None, memo=None) -> str:
    """The longest string of the grammar, built (longest alternative, most repetitions)."""
    memo = {} if memo is None else memo
    node = Ref("root") if node is None else node
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Chars):
        return node.ranges[0][0]
    if isinstance(node, Ref):
        if node.name not in memo:
            memo[node.name] = longest(g, g.rules[node.name], memo)
        return memo[node.name]
    if isinstance(node, Seq):
        return "".join(longest(g, x, memo) for x in node.items)
    if isinstance(node, Alt):
        return max((longest(g, x, memo) for x in node.items), key=len)
    if isinstance(node, Rep):
        return longest(g, node.item, memo) * node.max
    raise TypeError(node)


def _walk(stmts, depth=1):
    """(statements counted as the limits count them, deepest block nesting, largest loop count)."""
    n, deepest, loop = 0, 0, 0
    for s in stmts:
        n += 1
        if isinstance(s, Loop):
            loop = max(loop, s.count)
        if isinstance(s, (If, Loop)):
            deepest = max(deepest, depth)
            bodies = [s.body, s.orelse] if isinstance(s, If) else [s.body]
            for b in bodies:
                # an else-if (``:?c{...}``) is at the if's own depth; a block is one deeper
                elif_ = isinstance(s, If) and b is s.orelse and len(b) == 1 and isinstance(b[0], If)
                k, d, lp = _walk(b, depth if elif_ else depth + 1)
                n, deepest, loop = n + k, max(deepest, d), max(loop, lp)
    return n, deepest, loop


def _starts_with_a_call(stmts) -> bool:
    first = stmts[0] if stmts else None
    while isinstance(first, Loop):
        first = first.body[0]
    if isinstance(first, If):  # ?call...{...}: the condition's first operand
        cond = first.cond
        while isinstance(cond, BoolOp):
            cond = cond.values[0]
        first = cond.left
    if isinstance(first, (Assign, Return)):
        first = first.value
    return isinstance(first, Call)


@lru_cache(maxsize=64)
def grammar(skill_set_id: str, limits: PlanLimits) -> PlanGrammar:
    return build_plan_grammar(DEFAULT_SKILL_SETS[skill_set_id], limits=limits)


small_limits = st.builds(PlanLimits, max_statements=st.integers(1, 6), max_depth=st.integers(0, 2),
                         max_loop=st.integers(1, 12), max_vars=st.integers(0, 2), max_conditions=st.integers(1, 2),
                         max_name_chars=st.integers(1, 12), max_string_chars=st.integers(1, 12),
                         max_sentences=st.integers(1, 4), max_sentence_chars=st.integers(1, 40))


@settings(max_examples=40, deadline=None)
@given(lim=small_limits, seed=st.integers(0, 2**32 - 1))
def test_every_drone_plan_of_the_grammar_keeps_its_limits_and_length_bound(lim, seed):
    g = grammar(DRONE.id, lim)
    bound = longest_plan_chars(g)
    r = random.Random(seed)
    for _ in range(5):
        text = derive(g, r)
        assert len(text) <= bound
        assert text.isascii()
        stmts = parse_program(text, DRONE, max_loop=1000, check_vars=True)
        n, depth, loop = _walk(stmts)
        assert n <= lim.max_statements, text
        assert depth <= lim.max_depth, text
        assert loop <= lim.max_loop, text
        # a top-level return is the plan's last statement
        assert all(not isinstance(s, Return) for s in stmts[:-1]), text
        # and the plan calls a skill: it starts with one (a call, or a loop over one)
        assert _starts_with_a_call(stmts), text


@settings(max_examples=25, deadline=None)
@given(lim=small_limits, seed=st.integers(0, 2**32 - 1))
def test_every_arm_plan_and_chat_answer_keeps_its_limits(lim, seed):
    r = random.Random(seed)
    g = grammar(ARM.id, lim)
    for _ in range(5):
        text = derive(g, r)
        assert len(text) <= longest_plan_chars(g)
        assert len(parse_arm_plan(text, ARM)) <= lim.max_statements
    c = grammar(CHAT.id, lim)
    for _ in range(5):
        text = derive(c, r)
        assert len(text) <= longest_plan_chars(c)
        ends = sum(1 for i, ch in enumerate(text) if ch in ".!?" and (i + 1 == len(text) or text[i + 1] not in ".!?"))
        assert ends <= lim.max_sentences


@pytest.mark.parametrize("skill_set_id", ["tello_minispec", "indy7_arm", "chat"])
def test_the_length_bound_is_reached_by_a_plan_the_grammar_accepts(skill_set_id):
    """The bound is exact: the longest derivation has exactly that length and xgrammar's matcher
    (what vLLM decodes under) accepts it; one more statement or sentence is refused."""
    ss = DEFAULT_SKILL_SETS[skill_set_id]
    g = build_plan_grammar(ss)
    text = longest(g)
    assert len(text) == longest_plan_chars(g)
    checker = GrammarChecker(g)
    assert checker.accepts(text)
    extra = {"tello_minispec": "tp;", "indy7_arm": "home();", "chat": " Yes."}[skill_set_id]
    if skill_set_id == "tello_minispec" and text.rstrip().endswith(";") and "->" in text.split(";")[-2]:
        extra = "tp;"  # after a return nothing may follow either
    assert not checker.accepts(text + extra)


def test_no_whitespace_runs_and_a_return_ends_a_drone_plan():
    c = GrammarChecker(build_plan_grammar(DRONE))
    assert c.accepts("takeoff(); move_up(100);\nland();")
    assert not c.accepts("takeoff();  land();")
    assert not c.accepts("takeoff();\n\nland();")
    assert c.accepts("_1=scan(cat);->_1;")
    assert not c.accepts("->1;->2;")  # the real model's `->1;`, `->2;`, ... segments
    # a plan calls a skill first: no plan of returns, loops and literals alone
    assert not c.accepts("10{10{->10}};") and not c.accepts("_1=5;->_1;") and not c.accepts("->True;")
    assert not c.accepts("?_1==True{land();};") and not c.accepts("3{->1;take_picture();};")
    assert c.accepts("->is_visible(cat);") and c.accepts("3{3{take_picture();};};")
    assert c.accepts("_1=scan(cat);?_1==True{goto(cat);};->_1;")
    assert not c.accepts("1000{goto(bottle);take_picture();};")  # loops up to max_loop (12)
    assert c.accepts("12{turn_cw(30);};")


def test_known_objects_are_the_only_object_arguments():
    lim = limits_for("arm")
    c = GrammarChecker(build_plan_grammar(ARM, limits=lim, objects=["Apple", "fruit basket"]))
    assert c.accepts("pick(apple);place(apple, fruit_basket);")
    assert not c.accepts("pick(object);")  # the skill list's parameter name, written by a real model
    assert not c.accepts("wipe(desk);")  # the arm wipes an area of its workspace: a known name too
    free = GrammarChecker(build_plan_grammar(ARM))
    assert free.accepts("pick(object);")


def test_plans_fit_max_tokens_with_real_tokenizers():
    """Bytes bound tokens for byte-level tokenizers: the longest plan of each grammar tokenises to
    at most longest_plan_chars tokens with the shipped model's tokenizer."""
    from transformers import AutoTokenizer

    from llm_planner_node.engines.vllm_engine import EMBEDDED_MODEL

    tok = AutoTokenizer.from_pretrained(str(EMBEDDED_MODEL))
    r = random.Random(7)
    for ss in (DRONE, ARM, CHAT):
        g = build_plan_grammar(ss)
        bound = longest_plan_chars(g)
        for text in [longest(g)] + [derive(g, r) for _ in range(30)]:
            assert len(tok(text, add_special_tokens=False)["input_ids"]) <= bound
