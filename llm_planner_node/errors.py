"""The error every command raises for a mistake the user can fix (below the commands and the
composition root, so both import it without importing each other)."""

from __future__ import annotations


class CommandError(Exception):
    """A mistake the user can fix; its message is one sentence saying what to change."""
