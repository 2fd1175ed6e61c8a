"""Plan grammars generated from skill sets (grammar-safe generation).

:func:`plan_grammar` turns a :class:`~timely_robot.skills.SkillSet` into the EBNF of
its plan language, in the dialect xgrammar (and so vLLM's structured outputs) accepts: root
rule ``root``, string literals, character classes, ``* + ? {m,n}`` repetition. There is one
generator for every skill set: a new robot's skill set gets its grammar for free. The language
is picked from the robot kind exactly as the segmenters are (``drone``/``sim`` -> MiniSpec,
``arm`` -> the arm language, ``chat`` -> sentences), or given explicitly.

What the grammar enforces (a string it accepts is a plan the robot may run, up to the checks
listed below):

- **MiniSpec** (TypeFly): calls of the skill set's skills only (canonical name or alias; v1
  ``mf,100`` and v2 ``mf(100)`` call dialects), the right number of arguments, every literal
  argument of the right type; blocks ``{...}``, conditionals ``?cond{...}:{...}`` with else-if,
  loops ``n{...}``, variables ``_1=...``, return ``->value`` (at the top level it ends the
  plan). Variables are used only after they are assigned (textual order, the segmenter's rule)
  and are numbered ``_1``, ``_2``, ... in order of first assignment.
- **arm**: ``name(arg, ...);`` calls of the skill set's skills with typed literal arguments.
- **chat**: sentences of printable ASCII, each ending with ``.``, ``!`` or ``?`` and optional
  closing quotes/brackets.
- **Bounded plans** (:class:`~llm_planner_node.core.plan_limits.PlanLimits`, per plan language):
  at most ``max_statements`` statements in the whole plan (a block counts one plus its body),
  blocks nested at most ``max_depth``, loop counts ``1..max_loop``, at most ``max_vars``
  variables and ``max_conditions`` comparisons per condition, names and quoted strings of
  bounded length, at most one blank between statements, chat answers of at most
  ``max_sentences`` sentences; every character ASCII. So every plan the grammar admits is
  finite and at most :func:`longest_plan_chars` characters (bytes, so tokens) long, and ends.
- **Known objects**: with a robot's object list, object arguments (``ArgSpec.is_object``) are
  only those names.
- **Integer ranges exactly**: :func:`int_range_ebnf` is an exact expression for ``[lo, hi]``
  (canonical decimals: no leading zeros, no ``-0``, no ``+``); ``mu(2000)`` cannot be written.
- **Float ranges exactly when the bounds are integers** (all shipped skill sets): integer part
  and up to :data:`FLOAT_FRACTION_DIGITS` fractional digits, ``hi`` itself only with a zero
  fraction. Non-integer bounds get the enclosing integer envelope; the rest is the segmenter's.
- **Closed vocabularies** (``ArgSpec.choices``): alternations of string literals (bare name and
  quoted forms, each checked with :meth:`ArgSpec.coerce`).
- Every top-level statement ends with ``;`` (the parser also accepts a block without ``;`` and
  a last statement without ``;``; the grammar is the stricter, canonical form the corpus and
  the prompt use).

What stays with the segmenter checks (the grammar cannot express them, or only at great size):
values of variables passed as arguments (checked
by the adapter at run time); float ranges with non-integer bounds; statement length limits
(``max_statement_chars``); the chat segmenter's abbreviation rules (a grammar "sentence" may
end at "Dr."; that only changes where segments are cut, never what is allowed).

Resumption: a plan is a sequence of top-level statements (``ws``: at most one blank, written
inline; arm: ``root ::= (ws stmt ";"){0,S} ws``; chat: ``(ws sentence){0,S} ws``; MiniSpec:
``plan_k_r``, k = variables assigned so far, r = statements left). A resumed
generation gets a fresh grammar matcher, and its kept tokens may end inside a statement (the
shipped tokenizer has ``;_``, ``;?_``, ``};->_``), so the engine resumes with the exact *resume
grammar* of :class:`GrammarState`: the plan language after the generated text (left quotient
by Brzozowski derivatives of these rules). At a top-level boundary it is a named rule
(``plan_k_r``; arm and chat: the bounded repetition with fewer statements left), so the resume
grammars of a skill set are few and vLLM's compiled-grammar cache serves them.

The module imports nothing outside :mod:`llm_planner_node.core` and the segmenters (no ROS, no
vLLM); :class:`GrammarChecker` imports xgrammar lazily.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Union

from llm_planner_node.core.plan_limits import PlanLimits, limits_for
from timely_robot.skills import KIND_LANGUAGE, ArgSpec, SkillError, SkillSet, SkillSpec

__all__ = [
    "Lit", "Chars", "Ref", "Seq", "Alt", "Rep", "Node", "PlanGrammar", "GrammarChecker",
    "GrammarState", "Derivatives", "derivatives_for", "plan_grammar", "build_plan_grammar", "int_range", "int_range_ebnf", "float_range",
    "node_to_regex", "language_of", "FLOAT_FRACTION_DIGITS", "INT_MAX_DIGITS", "longest_plan_chars", "object_names", "language_for",
]

#: Fractional digits a float literal may have in a grammar (the parser allows any number).
FLOAT_FRACTION_DIGITS = 3
#: Digits of an integer/float whose range is unbounded on a side (ArgSpec min/max None).
INT_MAX_DIGITS = 18
#: Integer part digits of free number literals in MiniSpec operands (comparisons, returns).
LITERAL_MAX_DIGITS = 6


# ---------------------------------------------------------------------------------------------
# Grammar nodes
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lit:
    """A string literal."""

    text: str


@dataclass(frozen=True)
class Chars:
    """A character class: inclusive ``ranges`` of characters, or everything but them."""

    ranges: tuple[tuple[str, str], ...]
    negated: bool = False

    def contains(self, c: str) -> bool:
        inside = any(lo <= c <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True)
class Ref:
    """A reference to a named rule."""

    name: str


def _cached_items_hash(self: "Seq | Alt") -> int:
    """Hash of a Seq / Alt node, computed once (derivatives hash nodes often)."""
    h = self.__dict__.get("_hash")
    if h is None:
        h = hash((type(self).__name__, self.items))
        object.__setattr__(self, "_hash", h)
    return h


@dataclass(frozen=True)
class Seq:
    items: tuple["Node", ...]

    __hash__ = _cached_items_hash


@dataclass(frozen=True)
class Alt:
    items: tuple["Node", ...]

    __hash__ = _cached_items_hash


@dataclass(frozen=True)
class Rep:
    """``item`` repeated ``min``..``max`` times (``max`` None: unbounded)."""

    item: "Node"
    min: int = 0
    max: int | None = None

    def __hash__(self) -> int:  # cached: derivatives hash nodes often
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((type(self).__name__, self.item, self.min, self.max))
            object.__setattr__(self, "_hash", h)
        return h


Node = Union[Lit, Chars, Ref, Seq, Alt, Rep]
EMPTY = Seq(())
DIGIT = Chars((("0", "9"),))


def seq(*items: Node) -> Node:
    out: list[Node] = []
    for it in items:
        if isinstance(it, Seq):
            out.extend(it.items)
        elif isinstance(it, Lit) and it.text == "":
            continue
        else:
            out.append(it)
    # fuse adjacent literals
    fused: list[Node] = []
    for it in out:
        if fused and isinstance(it, Lit) and isinstance(fused[-1], Lit):
            fused[-1] = Lit(fused[-1].text + it.text)
        else:
            fused.append(it)
    return fused[0] if len(fused) == 1 else Seq(tuple(fused))


def alt(*items: Node) -> Node:
    out: list[Node] = []
    for it in items:
        for x in (it.items if isinstance(it, Alt) else (it,)):
            if x not in out:
                out.append(x)
    if not out:
        raise ValueError("empty alternation")
    return out[0] if len(out) == 1 else Alt(tuple(out))


def opt(item: Node) -> Node:
    return Rep(item, 0, 1)


def star(item: Node) -> Node:
    return Rep(item, 0, None)


def lits(*words: str) -> Node:
    return alt(*(Lit(w) for w in words))


def chars(*ranges: str, negated: bool = False) -> Chars:
    """``chars("a-z", "_")``: ranges written ``x-y`` or single characters."""
    rs = []
    for r in ranges:
        rs.append((r[0], r[2]) if len(r) == 3 and r[1] == "-" else (r, r))
    return Chars(tuple(rs), negated)


# ---------------------------------------------------------------------------------------------
# EBNF / regex output
# ---------------------------------------------------------------------------------------------
def _esc_char(c: str, specials: str) -> str:
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    if c == "\r":
        return "\\r"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    if c in specials:
        return "\\" + c
    return c


def _ebnf(node: Node, ctx: int = 0) -> str:
    """ctx: 0 = top of a rule/alternative, 1 = inside a sequence, 2 = operand of a repetition."""
    if isinstance(node, Lit):
        return '"' + "".join(_esc_char(c, '"\\') for c in node.text) + '"'
    if isinstance(node, Chars):
        body = "".join(
            _esc_char(lo, "]\\^-") if lo == hi else _esc_char(lo, "]\\^-") + "-" + _esc_char(hi, "]\\^-")
            for lo, hi in node.ranges
        )
        return "[" + ("^" if node.negated else "") + body + "]"
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, Seq):
        if not node.items:
            return '""'
        s = " ".join(_ebnf(x, 1) for x in node.items)
        return f"({s})" if ctx >= 2 and len(node.items) > 1 else s
    if isinstance(node, Alt):
        s = " | ".join(_ebnf(x, 0) for x in node.items)
        return f"({s})" if ctx >= 1 else s
    if isinstance(node, Rep):
        inner = _ebnf(node.item, 2)
        lo, hi = node.min, node.max
        if (lo, hi) == (0, None):
            return inner + "*"
        if (lo, hi) == (1, None):
            return inner + "+"
        if (lo, hi) == (0, 1):
            return inner + "?"
        if hi is None:
            return f"{inner}{{{lo},}}"
        if lo == hi:
            return f"{inner}{{{lo}}}"
        return f"{inner}{{{lo},{hi}}}"
    raise TypeError(f"not a grammar node: {node!r}")


def node_to_regex(node: Node, rules: dict[str, Node] | None = None) -> str:
    """A Python regular expression for a node (rule references inlined; no recursion)."""
    if isinstance(node, Lit):
        return re.escape(node.text)
    if isinstance(node, Chars):
        body = "".join(
            re.escape(lo) if lo == hi else f"{re.escape(lo)}-{re.escape(hi)}" for lo, hi in node.ranges
        )
        return "[" + ("^" if node.negated else "") + body + "]"
    if isinstance(node, Ref):
        if rules is None:
            raise ValueError(f"rule {node.name} needs the rules")
        return "(?:" + node_to_regex(rules[node.name], rules) + ")"
    if isinstance(node, Seq):
        return "".join("(?:" + node_to_regex(x, rules) + ")" for x in node.items)
    if isinstance(node, Alt):
        return "|".join("(?:" + node_to_regex(x, rules) + ")" for x in node.items)
    if isinstance(node, Rep):
        hi = "" if node.max is None else str(node.max)
        return f"(?:{node_to_regex(node.item, rules)}){{{node.min},{hi}}}"
    raise TypeError(f"not a grammar node: {node!r}")


@dataclass
class PlanGrammar:
    """The generated grammar: named rules (``root`` first), for EBNF output and for walking."""

    language: str
    skill_set_id: str
    rules: dict[str, Node] = field(default_factory=dict)

    def add(self, name: str, node: Node) -> Ref:
        if name in self.rules and self.rules[name] != node:
            raise ValueError(f"rule {name} defined twice differently")
        self.rules[name] = node
        return Ref(name)

    def ebnf(self) -> str:
        lines = [f"# plan grammar of skill set '{self.skill_set_id}' ({self.language}), generated by "
                 "llm_planner_node.prompts.grammar"]
        lines += [f"{name} ::= {_ebnf(node)}" for name, node in self.rules.items()]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------
def _digit_class(a: str, b: str) -> Node:
    return Lit(a) if a == b else Chars(((a, b),))


def _same_len(x: str, y: str) -> Node:
    """All decimal strings of len(x) digits between x and y inclusive (x <= y, same length)."""
    n = len(x)
    if x == y:
        return Lit(x)
    if x[0] == y[0]:
        return seq(Lit(x[0]), _same_len(x[1:], y[1:]))
    if n == 1:
        return _digit_class(x, y)
    rest = n - 1
    tail = DIGIT if rest == 1 else Rep(DIGIT, rest, rest)
    parts: list[Node] = []
    lo_d, hi_d = int(x[0]), int(y[0])
    if x[1:] != "0" * rest:
        parts.append(seq(Lit(x[0]), _same_len(x[1:], "9" * rest)))
        lo_d += 1
    upper: Node | None = None
    if y[1:] != "9" * rest:
        upper = seq(Lit(y[0]), _same_len("0" * rest, y[1:]))
        hi_d -= 1
    if lo_d <= hi_d:
        parts.append(seq(_digit_class(str(lo_d), str(hi_d)), tail))
    if upper is not None:
        parts.append(upper)
    return alt(*parts)


def _nonneg_range(a: int, b: int) -> list[Node]:
    """Alternatives for the canonical decimals of a..b (0 <= a <= b)."""
    out: list[Node] = []
    for length in range(len(str(a)), len(str(b)) + 1):
        lo = max(a, 10 ** (length - 1) if length > 1 else 0)
        hi = min(b, 10**length - 1)
        if lo <= hi:
            out.append(_same_len(str(lo), str(hi)))
    return out


def int_range(lo: int, hi: int) -> Node:
    """Exact grammar node for the canonical decimal integers in ``[lo, hi]``."""
    lo, hi = int(lo), int(hi)
    if lo > hi:
        raise ValueError(f"empty integer range [{lo}, {hi}]")
    parts: list[Node] = []
    if lo < 0:  # negatives -1..lo: "-" + (max(1, -hi) .. -lo)
        parts.append(seq(Lit("-"), alt(*_nonneg_range(max(1, -hi), -lo))))
    if hi >= 0:
        parts.extend(_nonneg_range(max(lo, 0), hi))
    return alt(*parts)


def int_range_ebnf(lo: int, hi: int) -> str:
    """EBNF expression (xgrammar dialect) matching exactly the integers ``lo..hi`` as written
    canonically (``-12``, ``0``, ``500``; no leading zeros, ``+`` or ``-0``)."""
    return _ebnf(int_range(lo, hi))


def _bounds(spec: ArgSpec) -> tuple[float, float]:
    cap = 10**INT_MAX_DIGITS - 1
    lo = -cap if spec.min is None else spec.min
    hi = cap if spec.max is None else spec.max
    return lo, hi


def float_range(lo: float, hi: float, frac_digits: int = FLOAT_FRACTION_DIGITS) -> tuple[Node, bool]:
    """(node, exact) for decimal literals of value in ``[lo, hi]``: integers or ``i.ddd``.

    Exact when both bounds are integers: integer part in the range below ``hi`` with any
    fraction, or ``hi`` (and ``lo`` when negative) with a zero fraction. Otherwise the node
    covers the enclosing integer envelope and ``exact`` is False (the segmenter's range check
    decides)."""
    exact = float(lo).is_integer() and float(hi).is_integer()
    a, b = math.floor(lo), math.ceil(hi)
    if a > b:
        raise ValueError(f"empty float range [{lo}, {hi}]")
    frac = opt(seq(Lit("."), Rep(DIGIT, 1, frac_digits)))
    zero = opt(seq(Lit("."), Rep(Lit("0"), 1, frac_digits)))
    parts: list[Node] = []
    if b >= 0:  # non-negative values in [max(a,0), b]
        s = max(a, 0)
        if s <= b - 1:
            parts.append(seq(int_range(s, b - 1), frac))
        parts.append(seq(int_range(b, b), zero))
    if a < 0:  # negative values -x, x in (0 or -b .. -a]
        s = 0 if b >= 0 else -b
        neg: list[Node] = []
        if s <= -a - 1:
            neg.append(seq(int_range(s, -a - 1), frac))
        neg.append(seq(int_range(-a, -a), zero))
        parts.append(seq(Lit("-"), alt(*neg)))
    return alt(*parts), exact


# ---------------------------------------------------------------------------------------------
# Shared lexical rules
# ---------------------------------------------------------------------------------------------
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_KEYWORDS = ("True", "False", "None")
#: Characters of a quoted string: printable ASCII but quotes and backslash (so a plan's length in
#: bytes, which bounds its length in tokens, is its length in characters).
_QCHAR = Chars(((" ", "!"), ("#", "&"), ("(", "["), ("]", "~")))
_QCHAR_NS = Chars((("!", "!"), ("#", "&"), ("(", "["), ("]", "~")))
#: Whitespace between statements: at most one space or newline, written inline where it is used
#: rather than as a ``ws`` rule: xgrammar then decides a token such as `` mf`` (a space and a
#: skill name) at a statement start from its precomputed masks instead of checking it at run
#: time against the whole parser stack. No runs: a model cannot fill max_tokens with blanks.
WS = opt(chars(" ", "\n"))


def _common_rules(g: PlanGrammar, lim: PlanLimits, objects: tuple[str, ...] = ()) -> None:
    g.add("name", seq(chars("A-Z", "a-z"), Rep(chars("A-Z", "a-z", "0-9", "_"), 0, lim.max_name_chars - 1)))
    # a quoted string argument: non-empty after stripping spaces (ArgSpec.coerce)
    g.add("qstr_arg", alt(
        seq(Lit("'"), opt(Lit(" ")), _QCHAR_NS, Rep(_QCHAR, 0, lim.max_string_chars - 1), Lit("'")),
        seq(Lit('"'), opt(Lit(" ")), _QCHAR_NS, Rep(_QCHAR, 0, lim.max_string_chars - 1), Lit('"')),
    ))
    if objects:
        g.add("object_arg", lits(*objects))


def object_names(objects: Iterable[str]) -> tuple[str, ...]:
    """Known objects as plan arguments: snake_case names (``"red box"`` -> ``red_box``), sorted,
    without duplicates; names that are not identifiers after that are dropped."""
    out = set()
    for o in objects:
        name = re.sub(r"[^A-Za-z0-9_]+", "_", str(o).strip().lower()).strip("_")
        if _NAME_RE.fullmatch(name) and name not in _KEYWORDS:
            out.add(name)
    return tuple(sorted(out))


def _rule_id(x: float) -> str:
    s = f"{x:g}".replace("-", "m").replace(".", "p").replace("+", "")
    return s


def _quoted_forms(text: str) -> list[str]:
    return [q + text + q for q in ("'", '"') if q not in text and "\\" not in text and "\n" not in text]


def _arg_rule(g: PlanGrammar, skill: SkillSpec, spec: ArgSpec) -> Ref:
    """The rule of one argument's literal values (shared between skills by type and range)."""
    if spec.choices is not None:
        forms: list[str] = []
        for c in spec.choices:
            cands = ([c] if _NAME_RE.fullmatch(c) and c not in _KEYWORDS else []) + _quoted_forms(c)
            for form in cands:
                try:
                    spec.coerce(skill.name, form.strip("'\"") if form[0] in "'\"" else form)
                except SkillError:
                    continue
                forms.append(form)
        if not forms:
            raise ValueError(f"skill '{skill.name}': argument '{spec.name}' has no writable choice")
        name = f"choice_{re.sub(r'[^a-z0-9]+', '_', (skill.name + '_' + spec.name).lower())}"
        return g.add(name, lits(*forms))
    if spec.type == "int":
        lo, hi = _bounds(spec)
        lo_i, hi_i = math.ceil(lo), math.floor(hi)
        return g.add(f"int_{_rule_id(lo_i)}_{_rule_id(hi_i)}", int_range(lo_i, hi_i))
    if spec.type == "float":
        lo, hi = _bounds(spec)
        node, _exact = float_range(lo, hi)
        return g.add(f"float_{_rule_id(lo)}_{_rule_id(hi)}", node)
    if spec.type == "bool":
        return g.add("bool", lits("True", "False"))
    if spec.is_object and "object_arg" in g.rules:
        return Ref("object_arg")
    return g.add("str_arg", alt(Ref("name"), Ref("qstr_arg")))


def _space_optional(node: Node) -> Node:
    """``" "? node`` spelled ``" " node | node``: the same language, but xgrammar then decides
    a token such as `` cat`` (a space and a word) from its precomputed masks. With the optional
    space as its own nullable rule the token crosses that rule's end and is checked at run time
    against the whole parser stack, at every argument of every call: the plan grammar's
    costliest positions."""
    return alt(seq(Lit(" "), node), node)


def _call_rule(g: PlanGrammar, index: int, skill: SkillSpec, *, with_vars: bool, v1: bool) -> Ref:
    names = lits(*[n for n in (skill.alias, skill.name) if n])
    args: list[Node] = []
    for a in skill.args:
        r = _arg_rule(g, skill, a)
        args.append(alt(r, Ref("var")) if with_vars else r)
    # a, "," b, ("," c ("," d)?)?   -- optional arguments nest at the tail
    tail: Node = EMPTY
    for k in range(len(args) - 1, -1, -1):
        part = args[k] if k == 0 else seq(Lit(","), _space_optional(args[k]))
        tail = seq(part, tail)
        if skill.args[k].optional:
            tail = opt(tail)
    forms: list[Node] = []
    if not args:
        forms = [seq(names, opt(Lit("()")))]
    else:
        required = skill.min_args > 0
        if v1:
            forms.append(seq(names, Lit(","), _space_optional(tail)) if required
                         else seq(names, opt(seq(Lit(","), _space_optional(tail)))))
        forms.append(seq(names, Lit("("), tail, Lit(")")))
    rname = f"call_{re.sub(r'[^a-z0-9]+', '_', skill.name.lower())}"
    if rname in g.rules:
        rname += f"_{index}"
    return g.add(rname, alt(*forms))


# ---------------------------------------------------------------------------------------------
# Languages
# ---------------------------------------------------------------------------------------------
def _comparison(left: Node, k: int) -> Node:
    """``left`` alone or compared with an operand that may use variables ``_1`` .. ``_k``."""
    return seq(left, opt(seq(lits("==", "!=", ">=", "<=", ">", "<"), Ref(f"operand_{k}"))))


def _condition(first: Node, k: int, lim: PlanLimits) -> Node:
    """``first`` comparison, then at most ``max_conditions - 1`` more joined by and/or."""
    return seq(first, Rep(seq(lits("&&", "&", "||", "|"), Ref(f"cmp_{k}")), 0, lim.max_conditions - 1))


def _if_branches(cond: Node, d: int, a_: int, b_: int, s: int) -> list[Node]:
    """An if statement of ``s`` statements at depth ``d`` entered with ``a_`` and left with ``b_``
    variables assigned: ``?cond{...}`` and ``?cond{...}:{...}`` / ``:?...`` (else-if)."""
    inner = f"block_{d + 1}"
    branches: list[Node] = [seq(Lit("?"), cond, Ref(f"{inner}_{a_}_{b_}_{s - 1}"))]
    for c in range(a_, b_ + 1):
        for s1 in range(1, s - 1):
            s2 = s - 1 - s1
            branches.append(seq(Lit("?"), cond, Ref(f"{inner}_{a_}_{c}_{s1}"), Lit(":"),
                                alt(Ref(f"{inner}_{c}_{b_}_{s2}"), Ref(f"if_{d}_{c}_{b_}_{s2}"))))
    return branches


def _minispec(g: PlanGrammar, skill_set: SkillSet, lim: PlanLimits, objects: tuple[str, ...] = ()) -> None:
    """MiniSpec with variables checked by the grammar and every size bounded (:class:`PlanLimits`).

    Variables: a variable is used only after it is assigned (textual order, as the segmenter
    checks) and variables are numbered ``_1``, ``_2``, ... in order of first assignment (at most
    ``max_vars``). Size: at most ``max_statements`` statements in the whole plan (a block counts
    one plus its body), blocks nested at most ``max_depth``, loop counts ``1..max_loop``,
    conditions of at most ``max_conditions`` comparisons; a top-level return ends the plan.
    The rules carry both counts: ``plan_k_r`` (k variables assigned, r statements left),
    ``stmt_d_a_b_s`` (a statement at depth d entered with a and left with b variables assigned,
    of exactly s statements), and the same for ``seq``/``block``/``if``/``loop``."""
    V, D, S = lim.max_vars, lim.max_depth, lim.max_statements
    g.add("root", Ref(f"plan_0_{S}"))
    _common_rules(g, lim, objects)
    for k in range(V + 1):
        if k:
            g.add(f"var_{k}", Lit("_1") if k == 1 else seq(Lit("_"), chars(f"1-{k}")))
        calls = [_call_rule_k(g, i, s, k) for i, s in enumerate(skill_set.skills)]
        g.add(f"call_{k}", alt(*calls))
    num = seq(opt(Lit("-")), alt(Lit("0"), seq(chars("1-9"), Rep(DIGIT, 0, LITERAL_MAX_DIGITS - 1))),
              opt(seq(Lit("."), Rep(DIGIT, 1, FLOAT_FRACTION_DIGITS))))
    g.add("number", num)
    g.add("qstr", alt(seq(Lit("'"), Rep(_QCHAR, 0, lim.max_string_chars), Lit("'")),
                      seq(Lit('"'), Rep(_QCHAR, 0, lim.max_string_chars), Lit('"'))))
    g.add("literal", alt(Ref("number"), Ref("qstr"), lits(*_KEYWORDS)))
    g.add("loop_count", int_range(1, lim.max_loop))
    for k in range(V + 1):
        g.add(f"operand_{k}", alt(Ref(f"call_{k}"), *([Ref(f"var_{k}")] if k else []), Ref("literal")))
        g.add(f"cmp_{k}", _comparison(Ref(f"operand_{k}"), k))
        g.add(f"cond_{k}", _condition(Ref(f"cmp_{k}"), k, lim))
        g.add(f"ret_{k}", seq(Lit("->"), Ref(f"operand_{k}")))
    pairs = [(a_, b_) for a_ in range(V + 1) for b_ in range(a_, V + 1)]
    for d in range(D + 1):
        for a_, b_ in pairs:
            for s in range(1, S + 1):
                alts: list[Node] = []
                if s == 1:
                    if a_ == b_:
                        alts.append(Ref(f"call_{a_}"))
                        if d:  # a return inside a block (at the top level it ends the plan: plan_k_r)
                            alts.append(Ref(f"ret_{a_}"))
                        if a_:  # re-assign a variable already assigned
                            alts.append(seq(Ref(f"var_{a_}"), Lit("="), Ref(f"operand_{a_}")))
                    if b_ == a_ + 1:  # assign the next variable
                        alts.append(seq(Lit(f"_{b_}="), Ref(f"operand_{a_}")))
                elif d < D:
                    inner = f"block_{d + 1}"
                    g.add(f"if_{d}_{a_}_{b_}_{s}", alt(*_if_branches(Ref(f"cond_{a_}"), d, a_, b_, s)))
                    g.add(f"loop_{d}_{a_}_{b_}_{s}", seq(Ref("loop_count"), Ref(f"{inner}_{a_}_{b_}_{s - 1}")))
                    alts += [Ref(f"if_{d}_{a_}_{b_}_{s}"), Ref(f"loop_{d}_{a_}_{b_}_{s}")]
                if alts:
                    g.add(f"stmt_{d}_{a_}_{b_}_{s}", alt(*alts))
        if d >= 1:
            for a_, b_ in pairs:
                for s in range(1, S + 1):
                    more = [seq(Ref(f"stmt_{d}_{a_}_{c}_{s1}"), Lit(";"), WS, Ref(f"seq_{d}_{c}_{b_}_{s - s1}"))
                            for c in range(a_, b_ + 1) for s1 in range(1, s)]
                    g.add(f"seq_{d}_{a_}_{b_}_{s}", alt(Ref(f"stmt_{d}_{a_}_{b_}_{s}"), *more))
                    g.add(f"block_{d}_{a_}_{b_}_{s}", seq(Lit("{"), WS, Ref(f"seq_{d}_{a_}_{b_}_{s}"), opt(Lit(";")),
                                                          WS, Lit("}")))
    for k in range(V + 1):
        for r in range(S + 1):
            alts = [seq(WS, Ref(f"stmt_0_{k}_{j}_{s}"), Lit(";"), Ref(f"plan_{j}_{r - s}"))
                    for s in range(1, r + 1) for j in range(k, V + 1)]
            if r:
                alts.append(seq(WS, Ref(f"ret_{k}"), Lit(";"), WS))
            alts.append(WS)
            g.add(f"plan_{k}_{r}", alt(*alts))
    _first_statement(g, lim)
    _drop_unproductive(g)


def _first_statement(g: PlanGrammar, lim: PlanLimits) -> None:
    """The plan's first statement calls a skill, so every plan the grammar admits does something
    (a plan of returns and literals, ``10{10{->10}}`` or ``_1=5;->_1;``, or an empty one is no
    plan): a call, an assignment or return of a call, a condition that starts with a call
    (``?scan(cat){...}``), or a loop whose body starts so. ``first_d_b_s``
    (depth d, leaving b variables assigned, s statements) and ``firstseq_d_b_s`` mirror
    ``stmt``/``seq`` of :func:`_minispec`, entered with no variable assigned."""
    V, D, S = lim.max_vars, lim.max_depth, lim.max_statements
    # a condition whose first comparison starts with a call: ``?scan(cat){...}``
    g.add("first_cond", _condition(_comparison(Ref("call_0"), 0), 0, lim))
    for d in range(D, -1, -1):
        for b_ in range(V + 1):
            for s in range(1, S + 1):
                alts: list[Node] = []
                if s == 1:
                    if b_ == 0:
                        alts.append(Ref("call_0"))
                    if b_ == 1:
                        alts.append(seq(Lit("_1="), Ref("call_0")))
                elif d < D:
                    alts.append(seq(Ref("loop_count"), Lit("{"), WS, Ref(f"firstseq_{d + 1}_{b_}_{s - 1}"),
                                    opt(Lit(";")), WS, Lit("}")))
                    alts += _if_branches(Ref("first_cond"), d, 0, b_, s)
                if alts:
                    g.add(f"first_{d}_{b_}_{s}", alt(*alts))
                if d >= 1:
                    more = [seq(Ref(f"first_{d}_{c}_{s1}"), Lit(";"), WS, Ref(f"seq_{d}_{c}_{b_}_{s - s1}"))
                            for c in range(0, b_ + 1) for s1 in range(1, s)]
                    items = ([Ref(f"first_{d}_{b_}_{s}")] if alts else []) + more
                    if items:
                        g.add(f"firstseq_{d}_{b_}_{s}", alt(*items))
    starts = [seq(WS, Ref(f"first_0_{j}_{s}"), Lit(";"), Ref(f"plan_{j}_{S - s}"))
              for s in range(1, S + 1) for j in range(V + 1)]
    starts.append(seq(WS, Lit("->"), Ref("call_0"), Lit(";"), Ref("plan_0_0")))
    g.rules["root"] = alt(*starts)


def _drop_unproductive(g: PlanGrammar) -> None:
    """Remove alternatives that derive no string (statements that would have to assign more
    variables than the depth allows); keeps every rule productive."""
    prod: set[str] = set()

    def ok(n: Node) -> bool:
        if isinstance(n, (Lit, Chars)):
            return True
        if isinstance(n, Ref):
            return n.name in prod
        if isinstance(n, Seq):
            return all(ok(x) for x in n.items)
        if isinstance(n, Alt):
            return any(ok(x) for x in n.items)
        if isinstance(n, Rep):
            return n.min == 0 or ok(n.item)
        raise TypeError(n)

    changed = True
    while changed:
        changed = False
        for name, body in g.rules.items():
            if name not in prod and ok(body):
                prod.add(name)
                changed = True

    def prune(n: Node) -> Node | None:
        if isinstance(n, Ref):
            return n if n.name in prod else None
        if isinstance(n, Seq):
            items = [prune(x) for x in n.items]
            return None if any(x is None for x in items) else Seq(tuple(items))  # type: ignore[arg-type]
        if isinstance(n, Alt):
            items = [x for x in (prune(y) for y in n.items) if x is not None]
            return None if not items else (items[0] if len(items) == 1 else Alt(tuple(items)))
        if isinstance(n, Rep):
            item = prune(n.item)
            if item is None:
                return EMPTY if n.min == 0 else None
            return Rep(item, n.min, n.max)
        return n

    for name in list(g.rules):
        if name not in prod:
            del g.rules[name]
        else:
            g.rules[name] = prune(g.rules[name])  # type: ignore[assignment]


def _call_rule_k(g: PlanGrammar, index: int, skill: SkillSpec, k: int) -> Ref:
    """A skill call whose arguments may be the variables ``_1`` .. ``_k``."""
    ref = _call_rule(g, index, skill, with_vars=False, v1=True)
    if k == 0 or not skill.args:
        return ref
    body = _subst_args(g, skill, g.rules[ref.name], Ref(f"var_{k}"))
    return g.add(f"{ref.name}_v{k}", body)


def _subst_args(g: PlanGrammar, skill: SkillSpec, node: Node, var: Ref) -> Node:
    """``node`` with every argument rule reference ``r`` replaced by ``(r | var)``."""
    arg_rules = {_arg_rule(g, skill, a).name for a in skill.args}

    def walk(n: Node) -> Node:
        if isinstance(n, Ref) and n.name in arg_rules:
            return Alt((n, var))
        if isinstance(n, Seq):
            return Seq(tuple(walk(x) for x in n.items))
        if isinstance(n, Alt):
            return Alt(tuple(walk(x) for x in n.items))
        if isinstance(n, Rep):
            return Rep(walk(n.item), n.min, n.max)
        return n

    return walk(node)


def _arm(g: PlanGrammar, skill_set: SkillSet, lim: PlanLimits, objects: tuple[str, ...] = ()) -> None:
    """Arm plans: 1 to ``max_statements`` calls ``name(arg, ...);``."""
    g.add("root", seq(Rep(seq(WS, Ref("stmt"), Lit(";")), 1, lim.max_statements), WS))
    _common_rules(g, lim, objects)
    calls = [_call_rule(g, i, s, with_vars=False, v1=False) for i, s in enumerate(skill_set.skills)]
    g.add("stmt", alt(*calls))


#: characters that end a chat sentence, and closers that may follow them (ChatSegmenter)
_TERMINALS = ".!?"
_CLOSERS = "\"')]}"
#: a chat sentence's text: printable ASCII but the terminals (bytes = characters: bounded tokens)
_CHAT_TEXT = Chars(((" ", " "), ('"', "-"), ("/", ">"), ("@", "~")))


def _chat(g: PlanGrammar, lim: PlanLimits) -> None:
    """1 to ``max_sentences`` sentences of at most ``max_sentence_chars`` characters."""
    g.add("root", seq(Rep(seq(WS, Ref("sentence")), 1, lim.max_sentences), WS))
    g.add("sentence", seq(Rep(_CHAT_TEXT, 0, lim.max_sentence_chars),
                          Rep(Chars(tuple((c, c) for c in _TERMINALS)), 1, 3),
                          Rep(Chars(tuple((c, c) for c in _CLOSERS)), 0, 2)))


_KIND_LANGUAGE = KIND_LANGUAGE
LANGUAGES = ("minispec", "arm", "chat")


def language_of(skill_set: SkillSet) -> str:
    """The plan language of a skill set's robot kind (as :func:`segmenters.get_segmenter`)."""
    try:
        return _KIND_LANGUAGE[skill_set.robot_kind]
    except KeyError:
        raise ValueError(
            f"skill set '{skill_set.id}': robot kind {skill_set.robot_kind!r} has no plan language "
            f"(kinds: {', '.join(_KIND_LANGUAGE)}); pass language="
        ) from None


def language_for(robot_kind: str, skill_set: SkillSet) -> str:
    """The plan language of a goal: its robot kind's (``sim`` robots write MiniSpec), else the
    skill set's."""
    return _KIND_LANGUAGE.get(robot_kind) or language_of(skill_set)


def build_plan_grammar(skill_set: SkillSet, *, language: str | None = None, limits: PlanLimits | None = None,
                       objects: Iterable[str] = ()) -> PlanGrammar:
    """The plan grammar of a skill set as named rules (see :func:`plan_grammar`)."""
    lang = language or language_of(skill_set)
    if lang.startswith("chat"):
        lang = "chat"
    lim = limits or limits_for(lang)
    names = object_names(objects)
    g = PlanGrammar(lang, skill_set.id)
    if lang == "minispec":
        _minispec(g, skill_set, lim, names)
    elif lang == "arm":
        _arm(g, skill_set, lim, names)
    elif lang == "chat":
        _chat(g, lim)
    else:
        raise ValueError(f"unknown plan language {lang!r} (languages: {', '.join(LANGUAGES)})")
    return g


def plan_grammar(skill_set: SkillSet, *, language: str | None = None, limits: PlanLimits | None = None,
                 objects: Iterable[str] = ()) -> str:
    """EBNF (xgrammar / GBNF dialect, root rule ``root``) of the skill set's plan language,
    bounded by ``limits`` (the language's :data:`~llm_planner_node.core.plan_limits.DEFAULT_PLAN_LIMITS`
    when None); with ``objects``, object arguments are those names only. See the module docstring."""
    return build_plan_grammar(skill_set, language=language, limits=limits, objects=objects).ebnf()


def longest_plan_chars(g: PlanGrammar) -> int:
    """The length in characters of the longest string the grammar admits. Every character the
    plan grammars admit is ASCII, so this also bounds a plan's bytes, and so its tokens with any
    byte-level tokenizer (every token is at least one byte): a plan of the grammar fits in
    ``longest_plan_chars + 1`` tokens (the end of sequence)."""
    memo: dict[str, int] = {}
    active: set[str] = set()

    def longest(n: Node) -> int:
        if isinstance(n, Lit):
            return len(n.text)
        if isinstance(n, Chars):
            return 1
        if isinstance(n, Ref):
            if n.name in memo:
                return memo[n.name]
            if n.name in active:
                raise ValueError(f"rule {n.name} is recursive: the grammar's plans are unbounded")
            active.add(n.name)
            memo[n.name] = longest(g.rules[n.name])
            active.discard(n.name)
            return memo[n.name]
        if isinstance(n, Seq):
            return sum(longest(x) for x in n.items)
        if isinstance(n, Alt):
            return max(longest(x) for x in n.items)
        if isinstance(n, Rep):
            if n.max is None:
                raise ValueError("an unbounded repetition: the grammar's plans are unbounded")
            return n.max * longest(n.item)
        raise TypeError(n)

    return longest(Ref("root"))


# ---------------------------------------------------------------------------------------------
# Acceptance check (tests, tools): xgrammar's matcher on characters
# ---------------------------------------------------------------------------------------------
class GrammarChecker:
    """Whether a string is in a grammar's language: xgrammar's ``GrammarMatcher`` over the
    grammar compiled with an empty vocabulary (string matching is exact, token-independent)."""

    def __init__(self, grammar: str | PlanGrammar | SkillSet) -> None:
        import xgrammar as xg

        if isinstance(grammar, SkillSet):
            grammar = plan_grammar(grammar)
        elif isinstance(grammar, PlanGrammar):
            grammar = grammar.ebnf()
        self.ebnf = grammar
        self._xg = xg
        compiler = xg.GrammarCompiler(xg.TokenizerInfo([]), cache_enabled=False)
        self.compiled = compiler.compile_grammar(xg.Grammar.from_ebnf(grammar))

    def accepts(self, text: str, *, complete: bool = True) -> bool:
        """True if ``text`` is a whole plan (``complete``) or a prefix of one (not ``complete``)."""
        m = self._xg.GrammarMatcher(self.compiled, terminate_without_stop_token=True)
        if not text:
            return m.is_terminated() if complete else True
        if not m.accept_string(text):
            return False
        return m.is_terminated() if complete else True

    def accepts_all(self, texts: Iterable[str]) -> list[str]:
        """The texts that are NOT accepted (empty list: all accepted)."""
        return [t for t in texts if not self.accepts(t)]


# ---------------------------------------------------------------------------------------------
# Resumption: the grammar of "what may follow the text generated so far" (derivatives)
# ---------------------------------------------------------------------------------------------
class GrammarState:
    """The plan language after a generated prefix, as a grammar: exact resume grammars.

    A suspended generation resumes with a fresh grammar matcher, but its kept tokens need not end
    exactly at a top-level statement boundary: the shipped tokenizer has tokens that straddle one
    (``;_``, ``;?_``, ``};->_``), and a chat sentence is cut only once the next token shows it
    has ended. ``GrammarState`` keeps, per generation, the *left quotient* of the plan language
    by everything generated so far, ``{s : generated + s in L(root)}``, as a grammar (Brzozowski
    derivatives of the rule structure, one character at a time):

    - :meth:`advance` consumes generated text (any amount, any split);
    - :meth:`ebnf` is the resume grammar: its ``root`` accepts exactly the continuations the
      unsuspended generation's matcher accepts at this point, so the token masks -- and greedy
      decoding -- are the same, token for token.

    At a top-level statement boundary the quotient is the plan language itself (``root ::=
    (ws stmt ";")* ws`` is closed under removing whole statements; MiniSpec: ``plan_k`` with the
    variables assigned so far) and the derived start rule collapses structurally back to that
    rule: with ``root`` (``at_start``) :meth:`ebnf` is byte-identical to the base grammar, so
    vLLM's compiled-grammar cache serves it. Otherwise the resume
    grammar is the base grammar plus a few derived rules (``rest of the current statement``);
    identical states give identical text (derived rules are shared per :class:`Derivatives`).
    """

    def __init__(self, derivatives: "Derivatives", node: Node | None = None) -> None:
        self.d = derivatives
        self.node: Node | None = derivatives.root if node is None else node
        self.consumed = 0

    @property
    def dead(self) -> bool:
        """No continuation is in the language (the prefix already left it)."""
        return self.node is None

    @property
    def at_start(self) -> bool:
        return self.node == self.d.root

    @property
    def own_rules(self) -> bool:
        """The state refers to the grammar's own rules only (a top-level boundary: ``plan_k_r``, a
        shorter repetition of statements), none derived mid-statement: its resume grammar is the
        same text in every process, whatever was derived before."""
        return self.node is not None and all(n in self.d.grammar.rules for n in self.d._refs_in(self.node))

    def advance(self, text: str) -> "GrammarState":
        for c in text:
            if self.node is None:
                break
            self.node = self.d.derive(self.node, c)
        self.consumed += len(text)
        return self

    def accepts_end(self) -> bool:
        """The text so far is a complete plan."""
        return self.node is not None and self.d.nullable(self.node)

    def ebnf(self) -> str:
        if self.node is None:
            raise ValueError("the generated text is not a prefix of any plan of the grammar")
        if self.at_start:
            return self.d.base_ebnf
        return self.d.ebnf_for(self.node)


class Derivatives:
    """Derivatives of a :class:`PlanGrammar`'s rules by characters, memoised and hash-consed
    (a derived rule whose body equals an existing rule's is that rule), for :class:`GrammarState`."""

    def __init__(self, grammar: PlanGrammar) -> None:
        self.grammar = grammar
        self._ebnf_cache: dict[Node, str] = {}
        self.rules: dict[str, Node] = dict(grammar.rules)
        self.root: Node = self.rules["root"]
        self.base_ebnf = grammar.ebnf()
        self._header = self.base_ebnf.splitlines()[0]
        self._by_body: dict[Node, str] = {}
        for name, body in self.rules.items():
            self._by_body.setdefault(body, name)
        self._memo: dict[tuple[str, str], Node | None] = {}
        self._node_memo: dict[tuple[Node, str], Node | None] = {}
        self._nullable: dict[str, bool] = {}
        self._order = {name: i for i, name in enumerate(self.rules)}
        self._fixpoint_nullable()
        self._count = 0

    def state(self) -> GrammarState:
        return GrammarState(self)

    # -- nullability ---------------------------------------------------------------------------
    def _fixpoint_nullable(self) -> None:
        changed = True
        while changed:
            changed = False
            for name, body in self.rules.items():
                if not self._nullable.get(name) and self._null(body):
                    self._nullable[name] = True
                    changed = True
        for name in self.rules:
            self._nullable.setdefault(name, False)

    def _null(self, node: Node) -> bool:
        if isinstance(node, Lit):
            return node.text == ""
        if isinstance(node, Chars):
            return False
        if isinstance(node, Ref):
            return self._nullable.get(node.name, False)
        if isinstance(node, Seq):
            return all(self._null(x) for x in node.items)
        if isinstance(node, Alt):
            return any(self._null(x) for x in node.items)
        if isinstance(node, Rep):
            return node.min == 0 or node.max == 0 or self._null(node.item)
        raise TypeError(node)

    def nullable(self, node: Node) -> bool:
        return self._null(node)

    # -- derivatives ---------------------------------------------------------------------------
    def derive(self, node: Node, c: str) -> Node | None:
        key = (node, c)
        if key in self._node_memo:
            return self._node_memo[key]
        out = self._d(node, c)
        if len(self._node_memo) > 200_000:  # a cache only (derived rules stay: states refer to them)
            self._node_memo.clear()
        self._node_memo[key] = out
        return out

    def _d(self, node: Node, c: str) -> Node | None:
        if isinstance(node, Lit):
            if node.text and node.text[0] == c:
                return Lit(node.text[1:]) if len(node.text) > 1 else EMPTY
            return None
        if isinstance(node, Chars):
            return EMPTY if node.contains(c) else None
        if isinstance(node, Ref):
            return self._d_rule(node.name, c)
        if isinstance(node, Seq):
            outs: list[Node] = []
            for i, item in enumerate(node.items):
                d = self.derive(item, c)
                if d is not None:
                    outs.append(seq(d, *node.items[i + 1:]))
                if not self._null(item):
                    break
            return alt(*outs) if outs else None
        if isinstance(node, Alt):
            outs = [d for d in (self.derive(x, c) for x in node.items) if d is not None]
            return alt(*outs) if outs else None
        if isinstance(node, Rep):
            if node.max == 0:
                return None
            d = self.derive(node.item, c)
            if d is None:
                return None
            lo = max(node.min - 1, 0)
            hi = None if node.max is None else node.max - 1
            rest: Node = EMPTY if hi == 0 else Rep(node.item, lo, hi)
            return seq(d, rest)
        raise TypeError(node)

    def _d_rule(self, name: str, c: str) -> Node | None:
        key = (name, c)
        if key in self._memo:
            return self._memo[key]
        # in progress (left recursion; the generated grammars have none): refer to a new rule
        self._count += 1
        fresh = f"{name.split('__')[0]}__r{self._count}"
        self._memo[key] = Ref(fresh)
        body = self.derive(self.rules[name], c)
        used = any(fresh == r for r in self._refs_in(body)) if body is not None else False
        if body is None and not used:
            self._memo[key] = None
            return None
        if body is None:
            raise ValueError(f"rule {name!r} is left-recursive with an empty derivative; not supported")
        if not used and isinstance(body, Ref):
            self._memo[key] = body
            return body
        if not used and body in self._by_body:
            out: Node = Ref(self._by_body[body])
        else:
            self.rules[fresh] = body
            self._order[fresh] = len(self._order)
            self._by_body.setdefault(body, fresh)
            out = Ref(fresh)
            if used:
                self._fixpoint_nullable()
            else:  # refers only to finished rules
                self._nullable[fresh] = self._null(body)
        self._memo[key] = out
        return out

    @staticmethod
    def _refs_in(node: Node) -> Iterable[str]:
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, Ref):
                yield n.name
            elif isinstance(n, (Seq, Alt)):
                stack.extend(n.items)
            elif isinstance(n, Rep):
                stack.append(n.item)

    # -- output ----------------------------------------------------------------------------------
    def ebnf_for(self, node: Node) -> str:
        """EBNF whose ``root`` is ``node``, followed by every rule it reaches. Memoised: rules
        never change once made, and goals resumed in the same state (the same kept text, e.g. a
        token straddling a statement boundary) are common, while building the text of the drone
        grammar takes milliseconds of the engine thread per resume."""
        text = self._ebnf_cache.get(node)
        if text is None:
            text = self._ebnf_cache[node] = self._build_ebnf(node)
            while len(self._ebnf_cache) > EBNF_CACHE_MAX:
                self._ebnf_cache.pop(next(iter(self._ebnf_cache)))
        return text

    def _build_ebnf(self, node: Node) -> str:
        order: list[str] = []
        seen: set[str] = set()
        stack = list(reversed(list(self._refs_in(node))))
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            order.append(n)
            stack.extend(reversed(list(self._refs_in(self.rules[n]))))
        if "root" in seen:  # not in generated grammars: the base root is never referenced
            raise ValueError("a rule refers to 'root'; resume grammars need it unreferenced")
        lines = [self._header.replace("generated by", "resume grammar, generated by"), f"root ::= {_ebnf(node)}"]
        lines += [f"{n} ::= {_ebnf(self.rules[n])}" for n in sorted(order, key=self._order.__getitem__)]
        return "\n".join(lines) + "\n"


#: Resume grammar texts kept per :class:`Derivatives` (states seen most recently win).
EBNF_CACHE_MAX = 512

_DERIVATIVES: dict[tuple, Derivatives] = {}


def derivatives_for(skill_set: SkillSet | str, robot_kind: str | None = None, *,
                    limits: PlanLimits | None = None, objects: Iterable[str] = ()) -> Derivatives:
    """The shared :class:`Derivatives` of a skill set's plan grammar (one per skill set, language,
    limits and known objects; ``skill_set`` may be an id of ``DEFAULT_SKILL_SETS``)."""
    if isinstance(skill_set, str):
        from timely_robot.skills import DEFAULT_SKILL_SETS

        skill_set = DEFAULT_SKILL_SETS[skill_set]
    lang = language_for(robot_kind, skill_set) if robot_kind else language_of(skill_set)
    names = object_names(objects)
    key = (lang, skill_set.id, skill_set, limits, names)
    d = _DERIVATIVES.get(key)
    if d is None:
        if len(_DERIVATIVES) > 64:
            _DERIVATIVES.pop(next(iter(_DERIVATIVES)))
        d = _DERIVATIVES[key] = Derivatives(build_plan_grammar(skill_set, language=lang, limits=limits,
                                                               objects=names))
    return d
