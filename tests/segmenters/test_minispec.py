"""MiniSpec parser/AST and incremental segmenter."""

import random

import pytest

from timely_robot.skills import TELLO_MINISPEC as T, SkillCall, SkillError
from llm_planner_node.planner_model.corpus import canonical_examples, generate_corpus
from llm_planner_node.segmenters import PlanSyntaxError, UnsafePlanError, get_segmenter, segment_all
from timely_robot.minispec import (
    Assign, BoolOp, Call, Compare, If, Literal, Loop, Return, Var, iter_calls, parse_program, statement_boundaries,
    to_source)

DRONE_PLANS = sorted({e.plan for e in generate_corpus() + canonical_examples() if e.robot_kind == "drone"})

TYPEFLY_EXAMPLES = [
    "_1=s,cat;?_1==True{g,cat;tp};->_1;",
    "?s('bottle')==True{g('bottle');_2=oh('bottle');l(_2);tp};",
    "tu(90);?iv('apple')==True&iv('orange'){l('Yes');->True}l('No');->False;",
    "12{_1=p('Any animal target here?');?_1!=False{l(_1);->True}tc(30)}->False;",
    "?iv,cat{g,cat}:?iv,dog{g,dog}:{tc,90};",
    "_1=sa,'Any edible target here?';?_1!=False{g,_1};",
    "o,apple;a",
    "mf(100);tu(135);mf(100);",
    "  mu,100 ;\n mf , 50 ;",
]


def test_ast_shapes():
    prog = parse_program("_1=iv,cat;?_1==True{g,cat;tp}:{tc,90};8{tc,45;};->_1;", T)
    assert prog == [
        Assign(Var("_1"), Call("is_visible", ("cat",), "iv")),
        If(Compare(Var("_1"), "==", Literal(True)),
           (Call("goto", ("cat",), "g"), Call("take_picture", (), "tp")),
           (Call("turn_cw", (90,), "tc"),)),
        Loop(8, (Call("turn_cw", (45,), "tc"),)),
        Return(Var("_1")),
    ]
    assert prog[0].span == (0, 9)
    c = parse_program("?iv,cat&iv,dog|_9==1{tp};", T, check_vars=False)[0].cond
    assert isinstance(c, BoolOp) and c.op == "or" and isinstance(c.values[0], BoolOp)
    assert c.values[0].op == "and"


def test_both_call_dialects_give_same_ast():
    assert parse_program("mf,100;s,cat;tp;", T) == parse_program("mf(100);s('cat');tp();", T)


@pytest.mark.parametrize("src", TYPEFLY_EXAMPLES + DRONE_PLANS[:50])
def test_roundtrip_to_source(src):
    prog = parse_program(src, T)
    assert parse_program(to_source(prog, T), T) == prog


@pytest.mark.parametrize(
    "bad,exc,fragment",
    [
        ("mf,600;", UnsafePlanError, "above the safe maximum 500"),
        ("mf,10;", UnsafePlanError, "below the safe minimum 20"),
        ("tc,0;", UnsafePlanError, "below"),
        ("tc,361;", UnsafePlanError, "above"),
        ("fly,100;", UnsafePlanError, "not in skill set"),
        ("mf,abc;", UnsafePlanError, "must be int"),
        ("mf;", UnsafePlanError, "takes 1 argument"),
        ("?_3==1{tp};", PlanSyntaxError, "used before it is assigned"),
        ("tp;}", PlanSyntaxError, "unbalanced"),
        ("0{tp};", PlanSyntaxError, "loop count"),
        ("_1=iv,cat;_1*2;", PlanSyntaxError, "unexpected character"),
        ("mf,100 tp;", PlanSyntaxError, "expected ';'"),
        ("?iv,cat{tp", PlanSyntaxError, "expected '}'"),
        ("l,'abc;", PlanSyntaxError, "unterminated string"),
    ],
)
def test_invalid_programs_raise_with_clear_message(bad, exc, fragment):
    with pytest.raises(exc) as ei:
        parse_program(bad, T)
    assert fragment in str(ei.value)
    assert isinstance(ei.value, SkillError)  # PlanError is a SkillError


def feed_chars(seg, text):
    out = []
    for ch in text:
        out.extend(seg.feed(ch))
    return out + seg.finish()


@pytest.mark.parametrize("plan", TYPEFLY_EXAMPLES + DRONE_PLANS)
def test_segment_boundaries_equal_statement_boundaries(plan):
    ref = statement_boundaries(plan, T)
    # char by char
    segs = feed_chars(get_segmenter("minispec", T), plan)
    assert [s.end for s in segs] == ref
    # whole text at once, and random chunks
    assert [s.end for s in segment_all(get_segmenter("minispec", T), [plan])] == ref
    r = random.Random(plan)
    pieces, i = [], 0
    while i < len(plan):
        k = r.randint(1, 6)
        pieces.append(plan[i : i + k])
        i += k
    segs2 = segment_all(get_segmenter("drone"), pieces)
    assert [s.end for s in segs2] == ref
    # segments cover the plan, their text is the slice, calls equal the AST's calls
    for s in segs2:
        assert plan[s.start : s.end] == s.text
        assert len(s.statements) == 1
    prog = parse_program(plan, T)
    assert [st for s in segs2 for st in s.statements] == prog
    assert [c for s in segs2 for c in s.calls] == [c.skill_call for c in iter_calls(prog)]


def test_block_is_never_cut_and_emitted_when_closed():
    seg = get_segmenter("minispec")
    text = "_1=iv,cat;?_1==True{g,cat;tp;mf,100};tc,90;"
    emitted_at = {}
    for i, ch in enumerate(text):
        for s in seg.feed(ch):
            emitted_at[s.text] = i
    assert emitted_at == {"_1=iv,cat;": 9, "?_1==True{g,cat;tp;mf,100};": 36, "tc,90;": 42}


def test_block_without_semicolon_waits_for_next_statement_or_else():
    seg = get_segmenter("minispec")
    assert seg.feed("?iv,cat{tp}") == []
    assert seg.feed("  ") == []
    assert seg.feed(":{tc,90}") == []  # else branch: still the same statement
    out = seg.feed("mf,50;")
    assert [s.text for s in out] == ["?iv,cat{tp}  :{tc,90}", "mf,50;"]
    assert out[0].end == len("?iv,cat{tp}  :{tc,90}")


def test_unsafe_args_raise_before_emission():
    seg = get_segmenter("minispec")
    got = []
    with pytest.raises(UnsafePlanError, match="mf,600"):
        for ch in "tc,90;mf,600;tp;":
            got.extend(seg.feed(ch))
    assert [s.text for s in got] == ["tc,90;"]
    assert seg.closed
    with pytest.raises(RuntimeError):
        seg.feed("tp;")
    # unsafe call nested in a block: the whole block is rejected
    seg = get_segmenter("minispec")
    with pytest.raises(UnsafePlanError, match="above the safe maximum"):
        feed_chars(seg, "?iv,cat{g,cat;mf,900};")


def test_repair_clamp_is_opt_in_and_recorded():
    seg = get_segmenter("minispec", repair="clamp")
    (s,) = segment_all(seg, ["mf,600;"])
    assert s.calls == (SkillCall("move_forward", (500,)),)
    assert s.repairs and "clamped to 500" in s.repairs[0]
    with pytest.raises(UnsafePlanError):  # unknown skills are never repaired
        segment_all(get_segmenter("minispec", repair="clamp"), ["zz,1;"])


def test_finish_errors():
    for text, msg in [("?iv,cat{tp;", "unclosed block"), ("l,'abc", "inside a string")]:
        with pytest.raises(PlanSyntaxError, match=msg):
            feed_chars(get_segmenter("minispec"), text)
    assert [s.text for s in feed_chars(get_segmenter("minispec"), "tp;a")] == ["tp;", "a"]
    with pytest.raises(PlanSyntaxError, match="without ';'"):
        feed_chars(get_segmenter("minispec", allow_unterminated_last=False), "tp;a")


def test_garbage_fails_fast():
    seg = get_segmenter("minispec")
    with pytest.raises(UnsafePlanError, match="'Sure' is not in skill set"):
        seg.feed("Sure! Here is the plan: ")
    with pytest.raises(PlanSyntaxError):
        get_segmenter("minispec").feed("{tp};")
    seg = get_segmenter("minispec", max_statement_chars=50)
    with pytest.raises(PlanSyntaxError, match="longer than 50"):
        for _ in range(100):
            seg.feed("x")


def test_variable_args_kept_as_var():
    (s0, s1) = segment_all(get_segmenter("minispec"), ["_1=sa,'tool for cutting';?_1!=False{g,_1};"])
    assert s1.calls == (SkillCall("goto", (Var("_1"),)),)


def test_segment_offsets_are_absolute():
    text = "  tc,90;\n\n mf,100 ;  "
    segs = segment_all(get_segmenter("minispec"), list(text))
    assert [(s.start, s.end, s.text) for s in segs] == [(2, 8, "tc,90;"), (11, 19, "mf,100 ;")]
