"""MiniSpec interpreter for drone segments (TypeFly's plan language).

Runs the AST of :mod:`timely_robot.minispec` (``parse_program``): skill calls,
variables (``_1=iv,cat``), conditionals (``?_1==True{...}:{...}``, ``&``/``|``), loops
(``8{tc,45}``) and returns (``->_1``). Every skill call goes through ``call_skill`` (the drone
executor or a simulator); perception skills return values that later statements test.

Safety: ``run_text`` parses and validates the *whole* segment before executing anything, so an
unknown skill or an out-of-range literal argument is refused before any command is sent.
Arguments that are variables are validated when the call is reached (``SkillSet.validate``),
again before the command. Loops are bounded by ``max_steps`` calls per run.

Variables persist across segments of one plan (``reset()`` between goals), because a later
segment may test a variable an earlier one assigned. After a ``->`` return the plan is finished:
``returned`` is True and further segments of that goal execute nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Generator, Sequence

from timely_robot.skills import SkillCall, SkillError, SkillSet
from timely_robot.minispec import Assign, BoolOp, Call, Compare, If, Literal, Loop, Return, Var, parse_program


class MiniSpecRuntimeError(RuntimeError):
    """A plan that cannot continue (undefined variable, bad comparison, step limit)."""


class _Returned(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class MiniSpecInterpreter:
    def __init__(self, skill_set: SkillSet, call_skill: Callable[[SkillCall], Any], *,
                 max_steps: int = 2000) -> None:
        self.skill_set = skill_set
        self.call_skill = call_skill
        self.max_steps = max_steps
        self.vars: dict[str, Any] = {}
        self.returned = False
        self.return_value: Any = None
        self.steps_run = 0  # skill calls of the current run (bounded by max_steps)

    def reset(self) -> None:
        self.vars.clear()
        self.returned = False
        self.return_value = None

    # ------------------------------------------------------------------ entry points
    def parse(self, text: str):
        """Validate a segment (raises PlanError / SkillError subclasses) without running it."""
        return parse_program(text, self.skill_set, check_vars=False)

    def run_text(self, text: str) -> Any:
        return self.run(self.parse(text))

    def run(self, stmts: Sequence[Any]) -> Any:
        """Execute statements; returns the value of a ``->`` return (or None)."""
        gen = self.steps(stmts)
        value: Any = None
        try:
            while True:
                call = gen.send(value)
                value = self.call_skill(call)
        except StopIteration as stop:
            return stop.value

    def steps(self, stmts: Sequence[Any]) -> Generator[SkillCall, Any, Any]:
        """:meth:`run` as a generator, for an event-driven adapter: yields each skill call (validated
        as in :meth:`run`) and is sent the call's value when the robot answered; returns the value
        of a ``->`` return (or None). No thread waits while a skill runs."""
        if self.returned:
            return self.return_value
        self.steps_run = 0
        try:
            yield from self._block(stmts)
        except _Returned as r:
            self.returned, self.return_value = True, r.value
            return r.value
        return None

    # ------------------------------------------------------------------ evaluation (generators)
    def _block(self, stmts: Sequence[Any]) -> Generator[SkillCall, Any, None]:
        for s in stmts:
            yield from self._stmt(s)

    def _stmt(self, s: Any) -> Generator[SkillCall, Any, None]:
        if isinstance(s, Call):
            yield from self._call(s)
        elif isinstance(s, Assign):
            self.vars[s.target.name] = yield from self._operand(s.value)
        elif isinstance(s, If):
            if (yield from self._cond(s.cond)):
                yield from self._block(s.body)
            else:
                yield from self._block(s.orelse)
        elif isinstance(s, Loop):
            for _ in range(s.count):
                yield from self._block(s.body)
        elif isinstance(s, Return):
            raise _Returned((yield from self._operand(s.value)))
        else:  # pragma: no cover - parser produces only the types above
            raise MiniSpecRuntimeError(f"unsupported statement {type(s).__name__}")

    def _call(self, c: Call) -> Generator[SkillCall, Any, Any]:
        self.steps_run += 1
        if self.steps_run > self.max_steps:
            raise MiniSpecRuntimeError(f"plan exceeded {self.max_steps} skill calls")
        args = [self._var(a) if isinstance(a, Var) else a for a in c.args]
        if any(isinstance(a, Var) for a in c.args):
            call = self.skill_set.validate(c.name, args)  # runtime check of variable arguments
        else:
            call = SkillCall(c.name, tuple(args))
        return (yield call)

    def _var(self, v: Var) -> Any:
        if v.name not in self.vars:
            raise MiniSpecRuntimeError(f"variable {v.name} used before assignment")
        return self.vars[v.name]

    def _operand(self, o: Any) -> Generator[SkillCall, Any, Any]:
        if isinstance(o, Call):
            return (yield from self._call(o))
        if isinstance(o, Var):
            return self._var(o)
        if isinstance(o, Literal):
            return o.value
        return o

    def _cond(self, c: Any) -> Generator[SkillCall, Any, bool]:
        if isinstance(c, BoolOp):
            want = c.op != "and"  # and: stop at the first False; or: at the first True
            for v in c.values:
                if (yield from self._cond(v)) == want:
                    return want
            return not want
        if isinstance(c, Compare):
            left = yield from self._operand(c.left)
            if c.op is None:
                return _truthy(left)
            right = yield from self._operand(c.right)
            return _compare(left, c.op, right)
        return _truthy((yield from self._operand(c)))


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() not in ("", "false", "none", "0", "unknown")
    return bool(v)


def _norm(v: Any) -> Any:
    if isinstance(v, str):
        s = v.strip()
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        try:
            return float(s)
        except ValueError:
            return s.lower()
    return v


def _compare(a: Any, op: str, b: Any) -> bool:
    a, b = _norm(a), _norm(b)
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    try:
        if op == ">":
            return a > b
        if op == "<":
            return a < b
        if op == ">=":
            return a >= b
        if op == "<=":
            return a <= b
    except TypeError:
        raise MiniSpecRuntimeError(f"cannot compare {a!r} {op} {b!r}") from None
    raise MiniSpecRuntimeError(f"unknown comparison '{op}'")


__all__ = ["MiniSpecInterpreter", "MiniSpecRuntimeError", "SkillError"]
