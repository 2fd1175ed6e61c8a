"""Bearer tokens of ``timely-fleet mcp --http``: a YAML file that holds only their SHA-256.

The file (default ``$XDG_CONFIG_HOME/timely_fleet/mcp_tokens.yaml``, ``--tokens FILE``)::

    # timely-fleet MCP tokens: only the SHA-256 of each token is stored
    tokens:
      - name: mission-agent            # who holds it: named in goal records, refusals and the log
        sha256: 9f86d081...            # SHA-256 (hex) of the token, as the planner's cancel keys
        robots: [tello_1, tello_2]     # robots it may task (and see); or: all
        urgencies: [normal]            # TUF presets (planner.tuf_presets) it may use; or: all
                                       # (all also admits explicit ert_s / alpha / beta)
        operator: false                # true: may cancel any goal (the server presents the operator secret)

``timely-fleet mcp token add NAME [--robots a,b] [--urgencies normal] [--operator]`` creates a
token, prints it once and stores only its hash; ``token list`` and ``token remove NAME`` do what
they say. The server re-reads the file when it changes, so an added or removed token counts from
the next request on. The file must not be writable by other users (it decides who may command
robots); it is written with mode 0600.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TOKEN_PREFIX = "tfmcp_"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
HEADER = "# timely-fleet MCP tokens (`timely-fleet mcp token add|list|remove`): only the SHA-256 of each token is stored\n"


class TokenFileError(ValueError):
    """A token file or token command mistake, phrased so the user knows what to change."""


def default_tokens_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "timely_fleet" / "mcp_tokens.yaml"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who calls a tool and what they may do: a token of the file (HTTP) or the local user (stdio)."""

    name: str
    robots: frozenset[str] | None = None      # None: every robot
    urgencies: frozenset[str] | None = None   # None: every preset and explicit ert_s/alpha/beta
    operator: bool = False

    def may_task(self, robot_id: str) -> bool:
        return self.robots is None or robot_id in self.robots

    def describe_robots(self) -> str:
        return "every robot" if self.robots is None else ", ".join(sorted(self.robots)) or "no robot"


@dataclass(frozen=True)
class TokenEntry:
    name: str
    sha256: str
    robots: tuple[str, ...] | None
    urgencies: tuple[str, ...] | None
    operator: bool
    created: str = ""

    def principal(self) -> Principal:
        return Principal(self.name, None if self.robots is None else frozenset(self.robots),
                         None if self.urgencies is None else frozenset(self.urgencies), self.operator)

    def as_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "sha256": self.sha256,
                               "robots": "all" if self.robots is None else list(self.robots),
                               "urgencies": "all" if self.urgencies is None else list(self.urgencies),
                               "operator": self.operator}
        if self.created:
            out["created"] = self.created
        return out


def _list_or_all(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None or value == "all":
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TokenFileError(f"{where} must be a list of names or 'all', got {value!r}")
    return tuple(value)


def parse_entries(data: Any, path: Path) -> list[TokenEntry]:
    if data is None:
        return []
    if not isinstance(data, dict) or not isinstance(data.get("tokens", []), list):
        raise TokenFileError(f"token file {path} must be a mapping with a list 'tokens:'")
    out: list[TokenEntry] = []
    for i, item in enumerate(data.get("tokens") or []):
        where = f"token file {path}, tokens[{i}]"
        if not isinstance(item, dict):
            raise TokenFileError(f"{where} must be a mapping with name and sha256")
        unknown = set(item) - {"name", "sha256", "robots", "urgencies", "operator", "created"}
        if unknown:
            raise TokenFileError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
                                 "(keys: name, sha256, robots, urgencies, operator)")
        name, digest = item.get("name"), str(item.get("sha256", "")).strip().lower()
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise TokenFileError(f"{where}: name must be 1-64 letters, digits or _.@- , got {name!r}")
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise TokenFileError(f"{where} ({name}): sha256 must be 64 hex digits (the SHA-256 of the token)")
        operator = item.get("operator", False)
        if not isinstance(operator, bool):
            raise TokenFileError(f"{where} ({name}): operator must be true or false, got {operator!r}")
        out.append(TokenEntry(name, digest, _list_or_all(item.get("robots", "all"), f"{where} ({name}): robots"),
                              _list_or_all(item.get("urgencies", "all"), f"{where} ({name}): urgencies"),
                              operator, str(item.get("created", ""))))
    names = [e.name for e in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise TokenFileError(f"token file {path}: the name '{dup}' is used twice")
    return out


def read_entries(path: Path, *, missing_ok: bool = False) -> list[TokenEntry]:
    try:
        st = path.stat()
        text = path.read_text()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise TokenFileError(f"token file {path} does not exist: create a token with "
                             f"`timely-fleet mcp token add NAME --tokens {path}`") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TokenFileError(f"token file {path} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise TokenFileError(f"token file {path} may be changed by other users: `chmod 600 {path}` first")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TokenFileError(f"token file {path} is not valid YAML ({str(e).splitlines()[0]})") from None
    return parse_entries(data, path)


def write_entries(path: Path, entries: list[TokenEntry]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(HEADER)
        yaml.safe_dump({"tokens": [e.as_yaml() for e in entries]}, f, sort_keys=False)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


class TokenFile:
    """The token file as the HTTP server reads it: re-read when it changes (mtime, size)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sig: tuple[int, int] | None = None
        self._entries: list[TokenEntry] = []
        self.reload()
        if not self._entries:
            raise TokenFileError(f"token file {path} holds no token: create one with "
                                 f"`timely-fleet mcp token add NAME --tokens {path}`")

    def reload(self) -> None:
        st = self.path.stat() if self.path.exists() else None
        sig = (st.st_mtime_ns, st.st_size) if st else (0, 0)
        if sig != self._sig:
            self._entries = read_entries(self.path, missing_ok=True)
            self._sig = sig

    def verify(self, token: str) -> Principal | None:
        """The principal of a presented token, or None (compared in constant time against every entry)."""
        try:
            self.reload()
        except (OSError, TokenFileError):
            pass  # keep the last good contents; the next change is read again
        digest = token_digest(token)
        found = None
        for e in self._entries:
            if hmac.compare_digest(digest, e.sha256):
                found = e
        return found.principal() if found is not None else None


def add_token(path: Path, name: str, robots: tuple[str, ...] | None, urgencies: tuple[str, ...] | None,
              operator: bool) -> str:
    """Create a token, store its hash in ``path`` and return it (the only time it is seen)."""
    if not NAME_RE.match(name):
        raise TokenFileError(f"token name must be 1-64 letters, digits or _.@- , got {name!r}")
    entries = read_entries(path, missing_ok=True)
    if any(e.name == name for e in entries):
        raise TokenFileError(f"a token named '{name}' exists in {path}: remove it first "
                             f"(`timely-fleet mcp token remove {name}`) or choose another name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    entries.append(TokenEntry(name, token_digest(token), robots, urgencies, operator,
                              time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    write_entries(path, entries)
    return token


def remove_token(path: Path, name: str) -> None:
    entries = read_entries(path)
    kept = [e for e in entries if e.name != name]
    if len(kept) == len(entries):
        raise TokenFileError(f"no token named '{name}' in {path} (tokens: {', '.join(e.name for e in entries) or 'none'})")
    write_entries(path, kept)
