"""Untrusted strings on their way to logs and messages: bounded and escaped (one place)."""

from __future__ import annotations

#: Robot ids quoted in a refusal that lists the fleet ("unknown robot ...; known: a, b, ...").
KNOWN_ROBOTS_LISTED = 20


def safe_text(text: str, limit: int = 80) -> str:
    """An untrusted string for a log line or message: bounded, control characters escaped."""
    t = text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit} chars)"
    return t if t.isprintable() else t.encode("unicode_escape").decode("ascii")
