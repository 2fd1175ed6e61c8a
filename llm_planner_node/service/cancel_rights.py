"""Who may cancel a goal (docs/guides/security.md, cancel rights), without ROS.

A client that sets a cancel key (the SHA-256 of a secret of its own) on its goal protects it:
the standard action cancel, which carries no proof of who sends it (any node on the domain can
name any goal id: the goal status topics publish them), is refused for it; ``planner/cancel_goal``
cancels it for the holder of that secret or of an operator's secret
(``security.cancel_operator_keys_sha256``). A goal without a key is cancelled by anyone, as ROS
does. Every refusal is counted by its reason (``/diagnostics``)."""

from __future__ import annotations

import hashlib
import hmac
import threading
from typing import Callable

#: why a cancel was refused (the counters' keys)
PROTECTED = "protected goal: cancel it through planner/cancel_goal with its secret"
WRONG_SECRET = "wrong or missing secret"
#: the answers of a cancel by secret
NO_SUCH_GOAL = "no such goal in flight"
CANCELLING = "cancelling"
REFUSED = "refused: not the goal's client or an operator"


class CancelRights:
    """The cancel keys of the goals in flight and the refusals counted (any thread)."""

    def __init__(self, operator_keys_sha256: Callable[[], str]) -> None:
        """``operator_keys_sha256()``: the comma-separated SHA-256 (hex) of the operators'
        secrets, read at each cancel (the parameter may change while running)."""
        self._operator_keys = operator_keys_sha256
        self._keys: dict[str, str] = {}  # goal id -> SHA-256 of its client's cancel secret
        self.refusals: dict[str, int] = {}
        self._lock = threading.Lock()

    def protect(self, goal_id: str, key_sha256: str) -> None:
        """The goal's client set ``key_sha256`` (an empty key protects nothing)."""
        key = key_sha256.strip().lower()[:64]
        if key:
            with self._lock:
                self._keys[goal_id] = key

    def forget(self, goal_id: str) -> None:
        """The goal ended."""
        with self._lock:
            self._keys.pop(goal_id, None)

    def key_of(self, goal_id: str) -> str:
        """The goal's cancel key ('' if it has none), as its journal entry carries it."""
        return self._keys.get(goal_id, "")

    def _refuse(self, why: str) -> None:
        with self._lock:
            self.refusals[why] = self.refusals.get(why, 0) + 1

    def standard_cancel(self, goal_id: str) -> bool:
        """May the action's standard cancel (no proof of its sender) cancel ``goal_id``?"""
        if goal_id in self._keys:
            self._refuse(PROTECTED)
            return False
        return True

    def cancel_by_secret(self, goal_id: str, secret: str, in_flight: bool) -> tuple[bool, str]:
        """``planner/cancel_goal``: (accepted, its one-sentence answer) for a cancel of
        ``goal_id`` by the holder of ``secret``; ``in_flight``: the goal is the planner's now."""
        if not in_flight:
            return False, NO_SUCH_GOAL
        digest = hashlib.sha256(secret.encode()).hexdigest() if secret else ""
        operators = {h.strip().lower() for h in self._operator_keys().split(",") if h.strip()}
        if digest and (hmac.compare_digest(digest, self._keys.get(goal_id, "")) or digest in operators):
            return True, CANCELLING
        self._refuse(WRONG_SECRET)
        return False, REFUSED
