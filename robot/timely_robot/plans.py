"""What makes generated text a plan or not, the same on both ends of the robot link: the errors
of text that must not reach a robot (:class:`PlanError`), the check of one skill call against a
skill set and its safe ranges (:func:`check_call`), and the repair mode that may clamp a numeric
literal to its range (``Repair``)."""

from __future__ import annotations

from typing import Any, Literal, Sequence

from timely_robot.skills import SkillCall, SkillError, SkillSet

Repair = Literal["none", "clamp"]


class PlanError(SkillError):
    """Generated text that must not reach a robot. ``statement`` is the offending text."""

    def __init__(self, message: str, statement: str = "", offset: int | None = None) -> None:
        self.statement = statement
        self.offset = offset
        where = f" in statement {statement!r}" if statement else ""
        at = f" (at char {offset})" if offset is not None else ""
        super().__init__(f"{message}{where}{at}")
        self.reason = message


class PlanSyntaxError(PlanError):
    """The text is not a well-formed statement of the plan language."""


class UnsafePlanError(PlanError):
    """A statement calls an unregistered skill or passes a bad/unsafe argument."""


def check_call(
    skill_set: SkillSet,
    name: str,
    args: Sequence[Any],
    *,
    statement: str = "",
    offset: int | None = None,
    repair: Repair = "none",
    repairs: list[str] | None = None,
    is_var: Any = None,
) -> SkillCall:
    """Validate one call against ``skill_set``; return the canonical :class:`SkillCall`.

    ``is_var(x)`` tells which arguments are run-time variables: those are arity-checked but not
    coerced (kept as is). With ``repair="clamp"`` out-of-range numeric literals are clamped and a
    note appended to ``repairs``. Raises :class:`UnsafePlanError` naming the statement.
    """
    try:
        spec = skill_set.spec(name)
        args = list(args)
        if repair == "clamp":
            for i, (a, v) in enumerate(zip(spec.args, args)):
                if (is_var is not None and is_var(v)) or a.type not in ("int", "float"):
                    continue
                try:
                    num = float(v) if not isinstance(v, bool) else None
                except (TypeError, ValueError):
                    num = None
                if num is None or num != num:
                    continue
                lo, hi = a.min, a.max
                new = num
                if lo is not None and num < lo:
                    new = lo
                if hi is not None and num > hi:
                    new = hi
                if new != num:
                    args[i] = int(new) if a.type == "int" else float(new)
                    if repairs is not None:
                        repairs.append(
                            f"{spec.name}: {a.name}={v} clamped to {args[i]} (safe range "
                            f"{'' if lo is None else f'{lo:g}'}..{'' if hi is None else f'{hi:g}'})"
                        )
        if is_var is None or not any(is_var(v) for v in args):
            return skill_set.validate(name, args)
        spec.check_arity(len(args))
        out = tuple(v if is_var(v) else a.coerce(spec.name, v) for a, v in zip(spec.args, args))
        return SkillCall(spec.name, out)
    except PlanError:
        raise
    except SkillError as e:
        raise UnsafePlanError(str(e), statement, offset) from None
