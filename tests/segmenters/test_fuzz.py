"""Hypothesis fuzz: random text / token streams never crash a segmenter (only PlanError) and
never emit a skill outside the registered set or an argument outside its safe range."""

from hypothesis import HealthCheck, given, settings, strategies as st

from timely_robot.skills import CHAT, INDY7_ARM, TELLO_MINISPEC
from llm_planner_node.segmenters import PlanError, get_segmenter
from timely_robot.minispec import Var

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DRONE_TOKENS = [
    "mf", "mb", "tc", "tu", "s", "iv", "g", "tp", "a", "l", "sa", "xx", "fly", "_1", "_2", "=", "==",
    "!=", ">", "<", "&", "|", "?", "{", "}", ";", ":", ",", "(", ")", "->", "True", "False", "cat",
    "dog", "0", "10", "20", "100", "360", "361", "500", "600", "-5", "2.5", "'", '"', " ", "\n", "8",
    "'tool for x'", "};", ";}", "{{", "}}",
]
ARM_TOKENS = [
    "home", "pick", "place", "move_to", "push", "wipe", "look", "wait", "open_gripper", "fly", "(",
    ")", ",", ";", " ", "red_box", "tray", "0", "50", "300", "700", "900", "-800", "'", "1.5", "\n",
]
CHAT_TOKENS = ["Hello", " ", ".", "!", "?", "\n", "\n\n", "Dr", "e.g", "3.5", "'", '"', ")", "a", "U.S"]


def chunks(alphabet_tokens):
    return st.lists(st.sampled_from(alphabet_tokens), max_size=60)


def _check_calls(skill_set, segs):
    for s in segs:
        for c in s.calls:
            assert c.name in skill_set.names()
            if skill_set.id == "chat":
                skill_set.validate(c.name, c.args)
            elif not any(isinstance(a, Var) for a in c.args):
                assert skill_set.validate(c.name, c.args) == c  # in range, right types


def _run(kind, skill_set, pieces, **opts):
    seg = get_segmenter(kind, skill_set, **opts)
    out = []
    try:
        for p in pieces:
            out.extend(seg.feed(p))
        out.extend(seg.finish())
    except PlanError:
        pass
    _check_calls(skill_set, out)
    ends = [s.end for s in out]
    assert ends == sorted(ends)
    return out


@SETTINGS
@given(chunks(DRONE_TOKENS))
def test_fuzz_minispec_tokens(pieces):
    _run("minispec", TELLO_MINISPEC, pieces)
    _run("minispec", TELLO_MINISPEC, pieces, repair="clamp")


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("mftcsivgpl_12=?{};:,()'-> 0569TrueFalsx\n")), max_size=80))
def test_fuzz_minispec_chars(text):
    segs = _run("minispec", TELLO_MINISPEC, list(text))
    for s in segs:
        assert text[s.start : s.end] == s.text


@SETTINGS
@given(st.text(max_size=60))
def test_fuzz_minispec_unicode(text):
    _run("minispec", TELLO_MINISPEC, [text])


@SETTINGS
@given(chunks(ARM_TOKENS))
def test_fuzz_arm(pieces):
    _run("arm", INDY7_ARM, pieces)
    _run("arm", INDY7_ARM, pieces, group_size=3)


@SETTINGS
@given(chunks(CHAT_TOKENS), st.sampled_from(["chat-sentence", "chat-paragraph"]))
def test_fuzz_chat(pieces, mode):
    segs = _run(mode, CHAT, pieces)
    text = "".join(pieces)
    for s in segs:
        assert text[s.start : s.end] == s.text and s.text
