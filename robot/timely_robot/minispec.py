"""MiniSpec: TypeFly's drone plan language — its grammar, parser and AST.

Grammar supported (TypeFly, Chen et al. 2023; both call dialects of TypeFly's releases)::

    program    ::= { statement [';'] }          -- ';' ends a simple statement; optional after '}'
    statement  ::= call | assign | if | loop | return
    call       ::= NAME [ ',' arg { ',' arg } ]            -- v1 dialect:  mf,100   s,cat
                 | NAME '(' [ arg { ',' arg } ] ')'        -- v2 dialect:  mf(100)  s('cat')
    assign     ::= VAR '=' ( call | VAR | literal )        -- _1=iv,cat
    if         ::= '?' condition '{' program '}' [ ':' ( '{' program '}' | if ) ]
                                                           -- ':' = else / else-if (TypeFly v2)
    loop       ::= INT '{' program '}'                     -- 8{tc,45;}
    return     ::= '->' operand                            -- ->_1   ->True
    condition  ::= conj { ('|' | '||') conj }
    conj       ::= compare { ('&' | '&&') compare }
    compare    ::= operand [ ('==' | '!=' | '>' | '<' | '>=' | '<=') operand ]
    operand    ::= call | VAR | literal       -- in operands a NAME is a call, except True/False/None
    arg        ::= VAR | literal | NAME       -- a bare NAME argument is a string (object label)
    literal    ::= INT | FLOAT | STRING | True | False | None     -- STRING: '...' or "..."
    VAR        ::= '_' digits                 NAME ::= [A-Za-z][A-Za-z0-9_]*

Whitespace between tokens is ignored. Inside a block the last simple statement may omit its ';'
(``{g,cat;tp}``); at the very end of a plan the last statement may omit it too.
Not supported (raise :class:`PlanSyntaxError`): arithmetic (``_1*1.2``), nested calls as
arguments, ``break``/``skip``, bare names with spaces (quote them: ``s,'sports ball'``).

Semantics checked statically (so invalid or unsafe text never reaches a robot):
every call names a skill (canonical name or MiniSpec alias) of the robot's :class:`SkillSet`,
has the right number of arguments, and every literal argument has the right type and is inside
the skill's safe range; variables must have been assigned earlier in the plan; loop counts are
1..``max_loop``. Variable arguments are checked at run time by whoever executes the plan.

AST (frozen dataclasses; ``span`` = (start, end) char offsets in the parsed text, excluded from
equality so that ASTs can be compared structurally)::

    Stmt     = Call | Assign | If | Loop | Return
    Operand  = Call | Var | Literal
    Cond     = Compare | BoolOp
    Call(name, args, alias)      name: canonical skill name; args: coerced python values or Var;
                                 alias: the name as written; .skill_call -> SkillCall
    Assign(target: Var, value: Operand)
    If(cond: Cond, body: tuple[Stmt], orelse: tuple[Stmt])   -- else-if = orelse == (If(...),)
    Loop(count: int, body: tuple[Stmt])
    Return(value: Operand)
    Compare(left: Operand, op: str | None, right: Operand | None)  -- op None: truthiness of left
    BoolOp(op: 'and' | 'or', values: tuple[Cond, ...])
    Var(name)   Literal(value)

The incremental segmenter that cuts a generation at each complete top-level statement is
``llm_planner_node.segmenters.minispec``; the robot runs the parsed AST with
:mod:`timely_robot.minispec_interpreter`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from timely_robot.skills import SkillCall, SkillSet
from timely_robot.plans import PlanSyntaxError, Repair, check_call

_SPAN = field(default=(0, 0), compare=False, repr=False)


# ---------------------------------------------------------------------------------------------
# AST
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    """A MiniSpec variable ``_1``, ``_2``, ... (holds a skill's return value at run time)."""

    name: str
    span: tuple[int, int] = _SPAN

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Literal:
    """A constant: int, float, str, bool or None."""

    value: Any
    span: tuple[int, int] = _SPAN


@dataclass(frozen=True)
class Call:
    """A skill call. ``args`` are coerced literal values (int/float/str/bool) or :class:`Var`."""

    name: str
    args: tuple[Any, ...] = ()
    alias: str = ""
    span: tuple[int, int] = _SPAN

    @property
    def skill_call(self) -> SkillCall:
        return SkillCall(self.name, self.args)


@dataclass(frozen=True)
class Assign:
    target: Var
    value: "Operand"
    span: tuple[int, int] = _SPAN


@dataclass(frozen=True)
class Compare:
    left: "Operand"
    op: str | None = None
    right: "Operand | None" = None
    span: tuple[int, int] = _SPAN


@dataclass(frozen=True)
class BoolOp:
    op: str  # 'and' | 'or'
    values: tuple["Cond", ...]
    span: tuple[int, int] = _SPAN


@dataclass(frozen=True)
class If:
    cond: "Cond"
    body: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...] = ()
    span: tuple[int, int] = _SPAN


@dataclass(frozen=True)
class Loop:
    count: int
    body: tuple["Stmt", ...]
    span: tuple[int, int] = _SPAN


@dataclass(frozen=True)
class Return:
    value: "Operand"
    span: tuple[int, int] = _SPAN


Operand = Union[Call, Var, Literal]
Cond = Union[Compare, BoolOp]
Stmt = Union[Call, Assign, If, Loop, Return]
BLOCK_TYPES = (If, Loop)


def iter_calls(node: Any) -> Iterator[Call]:
    """All Call nodes under ``node`` (a statement, a condition or a sequence), in source order."""
    if isinstance(node, (list, tuple)):
        for n in node:
            yield from iter_calls(n)
    elif isinstance(node, Call):
        yield node
    elif isinstance(node, Assign):
        yield from iter_calls(node.value)
    elif isinstance(node, Return):
        yield from iter_calls(node.value)
    elif isinstance(node, Compare):
        yield from iter_calls(node.left)
        if node.right is not None:
            yield from iter_calls(node.right)
    elif isinstance(node, BoolOp):
        yield from iter_calls(node.values)
    elif isinstance(node, If):
        yield from iter_calls(node.cond)
        yield from iter_calls(node.body)
        yield from iter_calls(node.orelse)
    elif isinstance(node, Loop):
        yield from iter_calls(node.body)


def _fmt_value(v: Any) -> str:
    if isinstance(v, Var):
        return v.name
    if isinstance(v, str):
        if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", v) and v not in ("True", "False", "None"):
            return v
        return "'" + v.replace("'", "") + "'"
    return str(v)


def to_source(node: Any, skill_set: SkillSet | None = None) -> str:
    """Canonical MiniSpec text (v1 comma dialect; aliases if ``skill_set`` gives them)."""
    if isinstance(node, (list, tuple)):
        return "".join(to_source(n, skill_set) + ("" if isinstance(n, BLOCK_TYPES) else ";") for n in node)
    if isinstance(node, Call):
        name = node.name
        if skill_set is not None and node.name in skill_set:
            name = skill_set.spec(node.name).alias or node.name
        return name + "".join("," + _fmt_value(a) for a in node.args)
    if isinstance(node, Var):
        return node.name
    if isinstance(node, Literal):
        return _fmt_value(node.value)
    if isinstance(node, Assign):
        return f"{node.target.name}={to_source(node.value, skill_set)}"
    if isinstance(node, Return):
        return f"->{to_source(node.value, skill_set)}"
    if isinstance(node, Compare):
        s = to_source(node.left, skill_set)
        return s if node.op is None else f"{s}{node.op}{to_source(node.right, skill_set)}"
    if isinstance(node, BoolOp):
        return ("&" if node.op == "and" else "|").join(to_source(v, skill_set) for v in node.values)
    if isinstance(node, If):
        s = f"?{to_source(node.cond, skill_set)}{{{to_source(node.body, skill_set)}}}"
        if node.orelse:
            if len(node.orelse) == 1 and isinstance(node.orelse[0], If):
                s += ":" + to_source(node.orelse[0], skill_set)[:-1]
            else:
                s += f":{{{to_source(node.orelse, skill_set)}}}"
        return s + ";"
    if isinstance(node, Loop):
        return f"{node.count}{{{to_source(node.body, skill_set)}}};"
    raise TypeError(f"not a MiniSpec AST node: {node!r}")


# ---------------------------------------------------------------------------------------------
# Lexer
# ---------------------------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<str>'[^']*'|"[^"]*")
  | (?P<num>-?\d+(?:\.\d+)?)
  | (?P<var>_\d+)
  | (?P<name>[A-Za-z][A-Za-z0-9_]*)
  | (?P<op>->|==|!=|>=|<=|&&|\|\||[><&|=?,(){};:])
    """,
    re.VERBOSE,
)


class _Tok:
    __slots__ = ("kind", "text", "start", "end")

    def __init__(self, kind: str, text: str, start: int, end: int) -> None:
        self.kind = kind  # str num var name op eof
        self.text = text
        self.start = start
        self.end = end


def _lex(text: str, base: int, stmt_text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch in "'\"":
                raise PlanSyntaxError("unterminated string", stmt_text, base + pos)
            raise PlanSyntaxError(f"unexpected character {ch!r}", stmt_text, base + pos)
        kind = m.lastgroup or ""
        if kind != "ws":
            toks.append(_Tok(kind, m.group(), base + pos, base + m.end()))
        pos = m.end()
    toks.append(_Tok("eof", "", base + n, base + n))
    return toks


# ---------------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------------
_CMP_OPS = ("==", "!=", ">", "<", ">=", "<=")
_KEYWORD_LITERALS = {"True": True, "False": False, "None": None}


class _Parser:
    def __init__(
        self,
        text: str,
        skill_set: SkillSet,
        *,
        base: int = 0,
        defined: set[str] | None = None,
        max_loop: int = 1000,
        max_depth: int = 16,
        repair: Repair = "none",
        check_vars: bool = True,
    ) -> None:
        self.text = text
        self.base = base
        self.skill_set = skill_set
        self.defined = defined if defined is not None else set()
        self.max_loop = max_loop
        self.max_depth = max_depth
        self.repair = repair
        self.check_vars = check_vars
        self.repairs: list[str] = []
        self.stmt_text = text.strip()
        self.toks = _lex(text, base, self.stmt_text)
        self.i = 0
        self.depth = 0

    # -- helpers --
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    # (hot path) _is is called for every token boundary

    def _err(self, msg: str, tok: _Tok | None = None) -> PlanSyntaxError:
        t = tok or self.tok
        return PlanSyntaxError(msg, self.stmt_text, t.start)

    def _next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def _is(self, *ops: str) -> bool:
        t = self.toks[self.i]
        return t.kind == "op" and t.text in ops

    def _expect(self, op: str, what: str) -> _Tok:
        if not self._is(op):
            got = repr(self.tok.text) if self.tok.kind != "eof" else "end of text"
            raise self._err(f"expected {op!r} {what}, got {got}")
        return self._next()

    # -- grammar --
    def program(self, in_block: bool) -> list[Stmt]:
        stmts: list[Stmt] = []
        while True:
            while self._is(";"):
                self._next()
            if self.tok.kind == "eof" or self._is("}"):
                if self._is("}") and not in_block:
                    raise self._err("unbalanced '}'")
                return stmts
            st = self.statement()
            stmts.append(st)
            if isinstance(st, BLOCK_TYPES):
                if self._is(";"):
                    self._next()
                continue
            if self._is(";"):
                self._next()
            elif self.tok.kind == "eof" or (in_block and self._is("}")):
                pass
            else:
                got = repr(self.tok.text)
                raise self._err(f"expected ';' after statement, got {got}")

    def statement(self) -> Stmt:
        t = self.tok
        if self._is("?"):
            return self.if_stmt()
        if self._is("->"):
            self._next()
            val = self.operand()
            return Return(val, span=(t.start, self.toks[self.i - 1].end))
        if t.kind == "num":
            return self.loop_stmt()
        if t.kind == "var":
            self._next()
            if not self._is("="):
                raise self._err(f"expected '=' after variable {t.text} (assignment)")
            self._next()
            val = self.operand()
            self.defined.add(t.text)
            return Assign(Var(t.text, span=(t.start, t.end)), val, span=(t.start, self.toks[self.i - 1].end))
        if t.kind == "name":
            if t.text in _KEYWORD_LITERALS:
                raise self._err(f"a statement cannot start with {t.text}")
            return self.call()
        got = repr(t.text) if t.kind != "eof" else "end of text"
        raise self._err(f"expected a statement (skill call, assignment, '?', loop or '->'), got {got}")

    def block(self) -> tuple[Stmt, ...]:
        self._expect("{", "to open a block")
        self.depth += 1
        if self.depth > self.max_depth:
            raise self._err(f"blocks nested deeper than {self.max_depth}")
        body = self.program(in_block=True)
        self._expect("}", "to close the block")
        self.depth -= 1
        return tuple(body)

    def if_stmt(self) -> If:
        start = self._next().start  # '?'
        cond = self.condition()
        body = self.block()
        orelse: tuple[Stmt, ...] = ()
        if self._is(":"):
            self._next()
            if self._is("?"):
                orelse = (self.if_stmt(),)
            else:
                orelse = self.block()
        return If(cond, body, orelse, span=(start, self.toks[self.i - 1].end))

    def loop_stmt(self) -> Loop:
        t = self._next()
        if not re.fullmatch(r"\d+", t.text):
            raise self._err(f"loop count must be a positive integer, got {t.text!r}", t)
        count = int(t.text)
        if not 1 <= count <= self.max_loop:
            raise self._err(f"loop count {count} outside 1..{self.max_loop}", t)
        if not self._is("{"):
            raise self._err("a number can only start a loop 'n{...}'", t)
        body = self.block()
        return Loop(count, body, span=(t.start, self.toks[self.i - 1].end))

    def condition(self) -> Cond:
        start = self.tok.start
        vals = [self.conj()]
        while self._is("|", "||"):
            self._next()
            vals.append(self.conj())
        if len(vals) == 1:
            return vals[0]
        return BoolOp("or", tuple(vals), span=(start, self.toks[self.i - 1].end))

    def conj(self) -> Cond:
        start = self.tok.start
        vals = [self.compare()]
        while self._is("&", "&&"):
            self._next()
            vals.append(self.compare())
        if len(vals) == 1:
            return vals[0]
        return BoolOp("and", tuple(vals), span=(start, self.toks[self.i - 1].end))

    def compare(self) -> Compare:
        start = self.tok.start
        left = self.operand()
        if self._is(*_CMP_OPS):
            op = self._next().text
            right = self.operand()
            return Compare(left, op, right, span=(start, self.toks[self.i - 1].end))
        return Compare(left, span=(start, self.toks[self.i - 1].end))

    def operand(self) -> Operand:
        t = self.tok
        if t.kind == "name":
            if t.text in _KEYWORD_LITERALS:
                self._next()
                return Literal(_KEYWORD_LITERALS[t.text], span=(t.start, t.end))
            return self.call()
        if t.kind == "var":
            self._next()
            return self._use_var(t)
        if t.kind in ("num", "str"):
            self._next()
            return Literal(self._literal(t), span=(t.start, t.end))
        got = repr(t.text) if t.kind != "eof" else "end of text"
        raise self._err(f"expected a value, variable or skill call, got {got}")

    def _use_var(self, t: _Tok) -> Var:
        if self.check_vars and t.text not in self.defined:
            raise self._err(f"variable {t.text} is used before it is assigned", t)
        return Var(t.text, span=(t.start, t.end))

    @staticmethod
    def _literal(t: _Tok) -> Any:
        if t.kind == "str":
            return t.text[1:-1]
        if t.kind == "num":
            return float(t.text) if "." in t.text else int(t.text)
        if t.kind == "name":
            return _KEYWORD_LITERALS.get(t.text, t.text)
        raise AssertionError(t)

    def arg(self) -> Any:
        t = self.tok
        if t.kind == "var":
            self._next()
            return self._use_var(t)
        if t.kind in ("num", "str", "name"):
            self._next()
            return self._literal(t)
        got = repr(t.text) if t.kind != "eof" else "end of text"
        raise self._err(f"expected an argument, got {got}")

    def call(self) -> Call:
        t = self._next()  # name
        args: list[Any] = []
        if self._is("("):
            self._next()
            if not self._is(")"):
                args.append(self.arg())
                while self._is(","):
                    self._next()
                    args.append(self.arg())
            self._expect(")", f"to close the arguments of {t.text}")
        elif self._is(","):
            while self._is(","):
                self._next()
                args.append(self.arg())
        end = self.toks[self.i - 1].end
        stmt = self.text[t.start - self.base : end - self.base]
        sc = check_call(
            self.skill_set,
            t.text,
            args,
            statement=stmt,
            offset=t.start,
            repair=self.repair,
            repairs=self.repairs,
            is_var=lambda v: isinstance(v, Var),
        )
        return Call(sc.name, sc.args, t.text, span=(t.start, end))


def parse_program(
    text: str,
    skill_set: SkillSet,
    *,
    max_loop: int = 1000,
    repair: Repair = "none",
    check_vars: bool = True,
) -> list[Stmt]:
    """Parse and validate a whole MiniSpec program; return its top-level statements.

    Raises :class:`PlanSyntaxError` (malformed) or :class:`UnsafePlanError` (unknown skill,
    wrong arity/type, argument outside the safe range). ``check_vars=False`` accepts variables
    that are not assigned in ``text`` (e.g. when parsing a fragment of a plan).
    """
    p = _Parser(text, skill_set, max_loop=max_loop, repair=repair, check_vars=check_vars)
    stmts = p.program(in_block=False)
    if p.tok.kind != "eof":  # pragma: no cover - program() consumes everything or raises
        raise p._err("unexpected text")
    return stmts


def parse_statement(
    text: str,
    skill_set: SkillSet,
    *,
    base: int = 0,
    defined: set[str] | None = None,
    max_loop: int = 1000,
    repair: Repair = "none",
) -> tuple[Stmt, list[str]]:
    """Parse exactly one top-level statement (optionally followed by ';'). Returns (stmt, repairs).

    ``base`` is added to all offsets (spans, error offsets); ``defined`` is the set of variables
    assigned so far (updated in place).
    """
    p = _Parser(text, skill_set, base=base, defined=defined, max_loop=max_loop, repair=repair)
    if p.tok.kind == "eof":
        raise PlanSyntaxError("empty statement", p.stmt_text, base)
    st = p.statement()
    if p._is(";"):
        p._next()
    if p.tok.kind != "eof":
        raise p._err(f"unexpected {p.tok.text!r} after the statement")
    return st, p.repairs


# ---------------------------------------------------------------------------------------------
# Incremental segmenter
# ---------------------------------------------------------------------------------------------
def statement_boundaries(text: str, skill_set: SkillSet) -> list[int]:
    """End offsets of the top-level statements of ``text`` according to the parser (reference
    for tests): the end of each statement including its ';' if one follows."""
    p = _Parser(text, skill_set)
    ends: list[int] = []
    while True:
        while p._is(";"):
            p._next()
        if p.tok.kind == "eof":
            return ends
        st = p.statement()
        end = st.span[1]
        if p._is(";"):
            end = p._next().end
        ends.append(end)
