"""YAML overrides of a settings dataclass (plan limits, sampling, budgets): one check of the names."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def with_overrides(settings: T, overrides: Mapping[str, Any] | None, what: str, plural: str) -> T:
    """``settings`` (a frozen dataclass) with some fields replaced; an unknown name raises
    ValueError naming it and the known ones (``unknown <what> 'x' (<plural>: a, b, ...)``)."""
    if not overrides:
        return settings
    known = {f.name for f in fields(settings)}  # type: ignore[arg-type]
    bad = sorted(set(overrides) - known)
    if bad:
        raise ValueError(f"unknown {what} {bad[0]!r} ({plural}: {', '.join(sorted(known))})")
    return replace(settings, **dict(overrides))  # type: ignore[type-var]
