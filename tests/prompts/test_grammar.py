"""Plan grammars generated from skill sets (llm_planner_node.prompts.grammar).

* every canonical corpus plan (drone, arm, chat) is accepted by its skill set's grammar;
* strings derived at random FROM each grammar (a bounded-depth derivation generator over the
  generated rule structure) pass the segmenter's validation and the safe ranges, and what
  follows each top-level segment boundary is again accepted (the resumption property);
* out-of-range integers and unknown skills are rejected by the grammar;
* the grammar compiles with xgrammar for each built-in skill set;
* int_range_ebnf is exact (exhaustive for small ranges, hypothesis for large ones).

Acceptance is checked with xgrammar's GrammarMatcher on characters (GrammarChecker).
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from timely_robot.skills import (
    BUILT_IN_SKILL_SETS, CHAT, DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, INDY7_ARM, TELLO_MINISPEC, ArgSpec,
    SkillSet, SkillSpec)
from llm_planner_node.prompts.grammar import (Alt, Chars, GrammarChecker, Lit, PlanGrammar, Ref, Rep, Seq,
                                      build_plan_grammar, derivatives_for, float_range, int_range, int_range_ebnf,
                                      language_of, node_to_regex, plan_grammar)
from llm_planner_node.planner_model.corpus import (canonical_chat_examples, canonical_examples,
                                                   generate_chat_corpus, generate_corpus, segmenter_for)
from llm_planner_node.segmenters import get_segmenter, segment_all
from timely_robot.minispec import Var

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# a new robot's skill set: its grammar comes from the same generator (choices, optional and
# negative float arguments, bool, an int range that starts at a power of ten)
ROVER = SkillSet(
    id="rover_test",
    robot_kind="drone",
    skills=(
        SkillSpec("drive", (ArgSpec("cm", "int", 100, 9999), ArgSpec("speed", "float", -2, 5, optional=True))),
        SkillSpec("paint", (ArgSpec("color", "str", choices=("red", "dark blue", "True")),)),
        SkillSpec("beep", (ArgSpec("loud", "bool"),), alias="bp"),
        SkillSpec("stop"),
        SkillSpec("see", (ArgSpec("object", "str"),), returns="bool", kind="perception"),
    ),
)
SKILL_SETS = list(BUILT_IN_SKILL_SETS) + [ROVER]


@lru_cache(maxsize=None)
def checker(skill_set_id: str) -> GrammarChecker:
    ss = DEFAULT_SKILL_SETS.get(skill_set_id) or {ROVER.id: ROVER}[skill_set_id]
    return GrammarChecker(plan_grammar(ss))


def segmenter_name(ss: SkillSet) -> str:
    return {"minispec": "minispec", "arm": "arm", "chat": "chat"}[language_of(ss)]


# ---------------------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ss", SKILL_SETS, ids=lambda s: s.id)
def test_grammar_compiles_with_xgrammar(ss):
    import xgrammar as xg

    text = plan_grammar(ss)
    assert "root ::=" in text
    xg.Grammar.from_ebnf(text)  # raises on a syntax error
    # every plan calls a skill (a chat answer has a sentence): an empty plan would end INVALID_PLAN
    assert not checker(ss.id).accepts("") and not checker(ss.id).accepts(" ")


def test_grammar_compiles_with_the_shipped_tokenizer():
    import xgrammar as xg
    from transformers import AutoTokenizer

    from llm_planner_node.planner_model import DEFAULT_MODEL_PATH

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_PATH)
    info = xg.TokenizerInfo.from_huggingface(tok)
    compiler = xg.GrammarCompiler(info, cache_enabled=False)
    for ss in BUILT_IN_SKILL_SETS:
        compiled = compiler.compile_grammar(plan_grammar(ss))
        m = xg.GrammarMatcher(compiled)
        example = {"drone": " mu,50;tc,180;", "arm": " home(); push(book, 50); home();", "base": " mf,50;tc,180;",
                   "chat": " Hello there. Bye."}[ss.robot_kind]
        for tid in tok(example, add_special_tokens=False)["input_ids"]:
            assert m.accept_token(tid), (ss.id, tok.decode([tid]))


def test_new_skill_set_gets_a_grammar_and_unknown_kinds_need_a_language():
    assert "call_drive" in plan_grammar(ROVER)
    odd = SkillSet(id="odd", robot_kind="submarine", skills=(SkillSpec("dive"),))
    with pytest.raises(ValueError, match="language"):
        plan_grammar(odd)
    assert "dive" in plan_grammar(odd, language="arm")


# ---------------------------------------------------------------------------------------------
# corpus plans are accepted
# ---------------------------------------------------------------------------------------------
def test_every_canonical_plan_is_accepted():
    for ex in canonical_examples() + canonical_chat_examples():
        ss = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[ex.robot_kind]]
        assert checker(ss.id).accepts(ex.plan), (ex.task_id, ex.plan)
        assert checker(ss.id).accepts(" " + ex.plan), "the model writes the plan after 'Plan: '"


def test_every_corpus_plan_is_accepted():
    examples = generate_corpus() + generate_chat_corpus()
    rejected = [(ex.robot_kind, ex.plan) for ex in examples
                if not checker(DEFAULT_SKILL_SET_FOR_KIND[ex.robot_kind]).accepts(ex.plan)]
    assert rejected == []
    assert {ex.robot_kind for ex in examples} == {"drone", "arm", "chat"}


# ---------------------------------------------------------------------------------------------
# rejections
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "mu(2000);", "mu,2000;", "mu,19;", "mf,501;", "tc,0;", "tc,361;", "d,10001;", "mu,-20;", "mu,020;",
    "fly up 20 meters", "fly,20;", "xx;", "_1=xx,cat;", "?iv,cat{xx};", "mf,100",  # last ';' required
    "1001{tp};", "0{tp};", "mf,'100';", "s,'';", "s,' ';", "tp,1;", "mf;", "?_1==True{};",
    "a" * 3 + ";",
])
def test_minispec_grammar_rejects(text):
    assert not checker("tello_minispec").accepts(text)


def test_minispec_nesting_beyond_the_plan_limits_is_rejected_by_the_grammar():
    """The grammar nests blocks at most max_depth (2 by default); the parser's own limit (16)
    still guards plans decoded without the grammar."""
    deep = "2{2{tp}};"
    assert checker("tello_minispec").accepts(deep)
    assert not checker("tello_minispec").accepts("2{2{2{tp}}};")
    deepest = "".join("2{" for _ in range(17)) + "tp" + "}" * 17 + ";"
    with pytest.raises(Exception, match="deeper"):
        segment_all(get_segmenter("minispec"), [deepest])


@pytest.mark.parametrize("text", [
    "move_to(900, 0, 200);", "move_to(0, 0, 20);", "move_to(700.5, 0, 200);", "move_to(-700.01, 0, 200);",
    "move_to(0, 0, 200, 181);", "push(book, 5);", "push(book, 300.1);", "wait(31);", "wait(-1);",
    "fly();", "pick();", "place(cup);", "pick(_1);", "home(1);", "pick('');", "home()",
])
def test_arm_grammar_rejects(text):
    assert not checker("indy7_arm").accepts(text)


@pytest.mark.parametrize("text", ["move_to(700, -700.000, 800.0, -180);", "wait(0);", "wait(29.999);",
                                  "push('red box', 10);", "home;"])
def test_arm_grammar_accepts_the_bounds(text):
    assert checker("indy7_arm").accepts(text)
    segment_all(get_segmenter("arm"), [text])


def test_chat_grammar_is_sentences():
    c = checker("chat")
    assert c.accepts("Hello there. How are you?! \"Fine,\" said the fox.\nThe end.")
    assert not c.accepts("Hello there.\n\nThe end.")  # no runs of whitespace
    assert not c.accepts(" ".join(["One more."] * 7))  # at most max_sentences (6)
    assert not c.accepts("a sentence without an end")
    assert not c.accepts("Line one\nline two.")


def test_choices_are_literal_alternations():
    c = checker(ROVER.id)
    for ok in ("paint,red;", "paint('dark blue');", 'paint("red");', "paint,'True';", "bp,True;"):
        assert c.accepts(ok), ok
    for bad in ("paint,green;", "paint,'dark  blue';", "paint,True;", "drive,99;", "drive,10000;",
                "drive,100,5.5;", "drive,100,-2.001;"):
        assert not c.accepts(bad), bad
    assert c.accepts("drive,100,-2;drive(9999,5.000);")


def _literal(spec: ArgSpec) -> str:
    """A valid literal of an argument (its lower bound, first choice or a name)."""
    if spec.choices:
        return f"'{spec.choices[0]}'"
    if spec.type == "bool":
        return "True"
    if spec.type in ("int", "float"):
        return str(int(spec.min)) if spec.min is not None else "1"
    return "cat"


@pytest.mark.parametrize("ss", [s for s in [*BUILT_IN_SKILL_SETS, ROVER] if language_of(s) != "chat"],
                         ids=lambda s: s.id)
@given(data=st.data())
@SETTINGS
def test_one_optional_space_after_each_argument_comma(ss, data):
    """After the comma before an argument (``mf, 100``, ``push(book, 50)``) the plan language has
    exactly one optional space: none or one is accepted, two are not, in both MiniSpec call
    dialects. (The grammar spells the space as an alternation, ``" " arg | arg``, which xgrammar
    masks faster than a nullable rule; this checks the language did not change with it.)"""
    skill = data.draw(st.sampled_from([s for s in ss.skills if s.args]))
    spaces = data.draw(st.lists(st.sampled_from(["", " ", "  "]), min_size=len(skill.args), max_size=len(skill.args)))
    args = [_literal(a) for a in skill.args]
    name = skill.alias or skill.name
    rest = "".join("," + sp + a for sp, a in zip(spaces[1:], args[1:]))
    cases = [(name + "(" + args[0] + rest + ");", spaces[1:])]  # (text, the spaces after its commas)
    if language_of(ss) == "minispec":  # the v1 dialect also has the space after the name's comma
        cases.append((name + "," + spaces[0] + args[0] + rest + ";", spaces))
    for text, after_commas in cases:
        ok = all(len(sp) <= 1 for sp in after_commas)
        assert checker(ss.id).accepts(text) == ok, text


# ---------------------------------------------------------------------------------------------
# random derivations FROM the grammar pass the segmenter
# ---------------------------------------------------------------------------------------------
_POOL = [chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n", "\r", "\u00e9", "\u201d", "\u2019", "\u20ac"]


class Deriver:
    """Random derivations of a PlanGrammar's rules, bounded depth: once ``budget`` rule
    expansions deep, every choice takes a shortest derivation."""

    def __init__(self, g: PlanGrammar) -> None:
        self.rules = g.rules
        self.height: dict[str, float] = {n: float("inf") for n in g.rules}
        changed = True
        while changed:
            changed = False
            for n, node in g.rules.items():
                h = self._h(node)
                if h < self.height[n]:
                    self.height[n], changed = h, True
        assert all(h < float("inf") for h in self.height.values())

    def _h(self, node) -> float:
        if isinstance(node, (Lit, Chars)):
            return 0
        if isinstance(node, Ref):
            return self.height[node.name] + 1
        if isinstance(node, Seq):
            return max((self._h(x) for x in node.items), default=0)
        if isinstance(node, Alt):
            return min(self._h(x) for x in node.items)
        if isinstance(node, Rep):
            return 0 if node.min == 0 else self._h(node.item)
        raise TypeError(node)

    def derive(self, r: random.Random, budget: int = 12, root: str = "root") -> str:
        out: list[str] = []
        self._gen(self.rules[root], r, budget, out)
        return "".join(out)

    def _gen(self, node, r: random.Random, budget: int, out: list[str]) -> None:
        if isinstance(node, Lit):
            out.append(node.text)
        elif isinstance(node, Chars):
            out.append(r.choice([c for c in _POOL if node.contains(c)]))
        elif isinstance(node, Ref):
            self._gen(self.rules[node.name], r, budget - 1, out)
        elif isinstance(node, Seq):
            for x in node.items:
                self._gen(x, r, budget, out)
        elif isinstance(node, Alt):
            items = node.items
            if budget <= 0:
                best = min(self._h(x) for x in items)
                items = tuple(x for x in items if self._h(x) == best)
            self._gen(r.choice(items), r, budget, out)
        elif isinstance(node, Rep):
            extra = 3 if budget > 6 else 1
            hi = node.min + extra if node.max is None else min(node.max, node.min + extra)
            n = node.min if budget <= 0 else r.randint(node.min, hi)
            for _ in range(n):
                self._gen(node.item, r, budget, out)
        else:
            raise TypeError(node)


@lru_cache(maxsize=None)
def deriver(skill_set_id: str) -> Deriver:
    ss = DEFAULT_SKILL_SETS.get(skill_set_id) or ROVER
    return Deriver(build_plan_grammar(ss))


def _with_vars_assigned(text: str, ss: SkillSet) -> str:
    """Variables used before assignment are the segmenter's check, not the grammar's: assign
    every variable the derivation mentions first (``_k=True;`` is itself a statement)."""
    code = re.sub(r"'[^']*'|\"[^\"]*\"", "", text)  # a "_7" inside a string literal is no variable
    # a variable is a token of its own: the "_4" in an object name such as d_4T is none
    names = sorted(set(re.findall(r"(?<![A-Za-z0-9_])_[1-9][0-9]?(?![A-Za-z0-9_])", code)), key=lambda v: int(v[1:]))
    # the first from a call: a plan starts with a call (the grammar's first statement rule)
    call = next(f"{k.name}()" for k in ss.skills if not any(not a.optional for a in k.args))
    return "".join(f"{v}={call if i == 0 else 'True'};" for i, v in enumerate(names)) + text


@lru_cache(maxsize=None)
def _roomy(skill_set_id: str):
    """MiniSpec's checker and derivatives with room for the variable statements
    :func:`_with_vars_assigned` prepends (built once per skill set)."""
    from llm_planner_node.core.plan_limits import limits_for

    ss = DEFAULT_SKILL_SETS[skill_set_id] if skill_set_id in DEFAULT_SKILL_SETS else ROVER
    lim = limits_for("minispec")
    roomy = lim.merged({"max_statements": lim.max_statements + lim.max_vars})
    return GrammarChecker(plan_grammar(ss, limits=roomy)), derivatives_for(ss, limits=roomy)


def _check_derivation(ss: SkillSet, r: random.Random) -> None:
    text = deriver(ss.id).derive(r)
    # statement length limits (max_statement_chars) stay with the segmenter: keep derivations short
    assert len(text) < 1500, len(text)
    if language_of(ss) == "minispec":
        text = _with_vars_assigned(text, ss)
    c, derivs = _roomy(ss.id) if language_of(ss) == "minispec" else (checker(ss.id), derivatives_for(ss))
    st = derivs.state()
    assert c.accepts(text), text
    segs = segment_all(get_segmenter(segmenter_name(ss), ss), [text])
    for s in segs:
        for call in s.calls:
            assert call.name in ss.names()
            if language_of(ss) == "chat":  # chat keeps the sentence verbatim (no quote stripping)
                ss.validate(call.name, call.args)
            elif not any(isinstance(a, Var) for a in call.args):
                assert ss.validate(call.name, call.args) == call  # types and safe ranges
        # resumption: what follows a top-level boundary is again a plan of the grammar (MiniSpec:
        # of plan_k, k = variables assigned so far: the resume grammar is that rule)
        if language_of(ss) == "minispec":
            st.advance(text[st.consumed:s.end])
            assert isinstance(st.node, Ref) and st.node.name.startswith("plan_"), (text, s.end)
        elif text[s.end:].strip():  # arm and chat: the rest is again a plan (at least one statement)
            assert c.accepts(text[s.end:]), (text, s.end)
    if language_of(ss) == "minispec":
        assert st.advance(text[st.consumed:]).accepts_end()
    # the segmenter also accepts the text in small pieces (token-like streaming)
    pieces = [text[i:i + 3] for i in range(0, len(text), 3)]
    assert [s.text for s in segment_all(get_segmenter(segmenter_name(ss), ss), pieces)] == [s.text for s in segs]


@SETTINGS
@given(st.integers(0, 2**32))
def test_derivations_from_the_minispec_grammar_pass_the_segmenter(seed):
    _check_derivation(TELLO_MINISPEC, random.Random(seed))


@SETTINGS
@given(st.integers(0, 2**32))
def test_derivations_from_the_arm_grammar_pass_the_segmenter(seed):
    _check_derivation(INDY7_ARM, random.Random(seed))


@SETTINGS
@given(st.integers(0, 2**32))
def test_derivations_from_the_chat_grammar_pass_the_segmenter(seed):
    _check_derivation(CHAT, random.Random(seed))


@SETTINGS
@given(st.integers(0, 2**32))
def test_derivations_from_a_new_skill_sets_grammar_pass_the_segmenter(seed):
    _check_derivation(ROVER, random.Random(seed))


def test_derivations_reach_blocks_loops_conditionals_and_returns():
    r = random.Random(7)
    texts = [deriver("tello_minispec").derive(r) for _ in range(300)]
    joined = "".join(texts)
    for needle in ("{", "?", ":", "->", "=", "(", ","):
        assert needle in joined, needle
    assert re.search(r"(^|;)\s*\d+\{", joined)  # a loop


@pytest.mark.parametrize("text", ["g,_3;", "->_1;", "_2=s,cat;", "_1=g,_1;", "->_10;", "_1=s,cat;->_2;",
                                  "?s,cat{_1=iv,cat};g,_2;"])
def test_variables_are_used_only_after_assignment(text):
    """The segmenter's rule, in the grammar: a variable is used only after it is assigned, and
    variables are numbered _1, _2, ... in order of first assignment."""
    assert not checker("tello_minispec").accepts(text)


@pytest.mark.parametrize("text", ["_1=s,cat;->_1;", "?s,cat{_1=iv,cat};g,_1;", "_1=s,a;_2=s,b;_1=_2;->_1;",
                                  "4{_1=iv,cat;?_1==True{g,cat;tp;->True};tc,90};->False;",
                                  "?s,a{_1=True}:{_2=False};->_2;"])
def test_assigned_variables_are_accepted(text):
    assert checker("tello_minispec").accepts(text)
    segment_all(get_segmenter("minispec"), [text])


# ---------------------------------------------------------------------------------------------
# integer and float ranges
# ---------------------------------------------------------------------------------------------
def _canonical_ints(lo: int, hi: int) -> list[str]:
    return [str(x) for x in range(lo, hi + 1)]


def test_int_range_exhaustive_small_ranges():
    for lo in range(-25, 26):
        for hi in range(lo, 26):
            rx = re.compile(node_to_regex(int_range(lo, hi)))
            for x in range(-40, 41):
                assert bool(rx.fullmatch(str(x))) == (lo <= x <= hi), (lo, hi, x)
            for junk in ("-0", "+1", "01", "00", "", "-", "1.0", " 1"):
                assert not rx.fullmatch(junk), (lo, hi, junk)


@pytest.mark.parametrize("lo,hi", [(20, 500), (1, 360), (0, 10000), (1, 1000), (-700, 700), (100, 9999),
                                   (-1000, -10), (99, 101), (0, 0), (-1, -1), (9, 10)])
def test_int_range_exhaustive_with_xgrammar(lo, hi):
    c = GrammarChecker(f"root ::= {int_range_ebnf(lo, hi)}\n")
    span = range(min(lo, 0) - 30, max(hi, 0) + 30) if hi - lo < 2000 else \
        list(range(lo - 30, lo + 1200)) + list(range(hi - 1200, hi + 30))
    for x in span:
        assert c.accepts(str(x)) == (lo <= x <= hi), (lo, hi, x)
    assert not c.accepts("0" + str(abs(hi)))


@settings(max_examples=400, deadline=None)
@given(st.integers(-10**12, 10**12), st.integers(0, 10**12), st.data())
def test_int_range_large_ranges(lo, width, data):
    hi = lo + width
    rx = re.compile(node_to_regex(int_range(lo, hi)))
    near = st.sampled_from([lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -lo, -hi, 10 ** len(str(abs(hi)))])
    for x in (data.draw(near), data.draw(st.integers(lo - 10**6, hi + 10**6)),
              data.draw(st.integers(-10**13, 10**13))):
        assert bool(rx.fullmatch(str(x))) == (lo <= x <= hi), (lo, hi, x)


@settings(max_examples=400, deadline=None)
@given(st.integers(-1000, 1000), st.integers(0, 1000), st.integers(-1100, 2100), st.integers(0, 999),
       st.integers(1, 3))
def test_float_range_exact_for_integer_bounds(lo, width, ip, frac, nd):
    hi = lo + width
    node, exact = float_range(lo, hi)
    assert exact
    rx = re.compile(node_to_regex(node))
    f = str(frac).zfill(3)[:nd]
    for text in (str(ip), f"{ip}.{f}", f"-{abs(ip)}.{f}"):
        if text.startswith("-") and float(text) == 0 and lo >= 0:
            assert not rx.fullmatch(text)  # no negative zero unless the range has negatives
            continue
        assert bool(rx.fullmatch(text)) == (lo <= float(text) <= hi), (lo, hi, text)
    assert not rx.fullmatch(f"{ip}.")
    assert not rx.fullmatch(f"{ip}.1234")


def test_resume_grammar_text_is_memoised_and_equals_a_fresh_build():
    """Derivatives.ebnf_for caches by state: the same state reached again (another goal, same
    kept text) gives the identical text without rebuilding it, and that text is what a fresh
    build gives; different states give different texts."""
    from llm_planner_node.prompts.grammar import derivatives_for

    d = derivatives_for("tello_minispec", "drone")
    a = d.state().advance("tu(50);_")
    b = d.state().advance("tu(50);_")
    c = d.state().advance("tu(50);")
    assert not a.at_start and not c.at_start and c.node == Ref("plan_0_7")  # a boundary: one statement used
    first = a.ebnf()
    assert b.ebnf() is first  # the cached object, not a rebuild
    assert first == d._build_ebnf(b.node)
    other = d.state().advance("tu(50);t")
    assert other.node != a.node and other.ebnf() != first
