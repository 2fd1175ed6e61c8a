"""Authenticated robot links: per-robot keys, message signing and replay protection.

The Fast DDS in the pip wheels has no DDS-Security, so anyone on the ROS domain can publish a
segment to a robot or a status to the planner. This module authenticates both directions of the
robot link in the spirit of MAVLink 2 message signing:

- every robot has a 32-byte secret key, shared by the planner and that robot's adapter only,
  kept in a :class:`Keystore` directory (one ``<robot_id>.key`` file per robot, mode 0600,
  created by ``timely-fleet keys``); a key's id is the first 8 hex digits of SHA-256 of the
  secret, so it names the key without revealing it;
- a message carries ``key_id``, a ``counter`` (microseconds since the epoch, or the last value
  plus one: strictly increasing per sender, also across restarts, like MAVLink 2's timestamp)
  and ``mac`` = HMAC-SHA256(secret, kind || key_id || counter || fields), where ``fields`` is an
  unambiguous length-prefixed encoding of every other field of the message and ``kind`` is
  ``segment`` (planner -> robot) or ``status`` (robot -> planner), so a MAC of one direction is
  never valid in the other;
- a receiver (:class:`LinkVerifier`) drops a message that is unsigned, signed with a key id it
  does not hold for that robot, has a wrong MAC, or repeats (or goes back on) a counter it
  already accepted from that sender and key, and counts the drops by reason.

Not covered: confidentiality (messages are readable by anyone on the domain) and a compromised
host that holds the keys. Stdlib only (``hmac``, ``hashlib``, ``secrets``); no ROS import: the
``*_msg`` helpers take any object with the message's attributes.
"""

from __future__ import annotations

import array
import datetime as _dt
import hashlib
import hmac
import json
import math
import operator
import os
import re
import secrets
import stat
import struct
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

#: ``security.mode`` values: ``off`` sends unsigned and accepts everything; ``sign`` signs and verifies.
MODES = ("off", "sign")
KINDS = ("segment", "status", "journal", "journal_ack")
KEY_BYTES = 32
MAC_BYTES = 32
#: Robot ids that may name a key file: the ROS-name characters the fleet YAML allows, bounded.
ROBOT_ID_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
KEY_SUFFIX = ".key"
KEYS_COMMAND = "timely-fleet keys"
#: the robot computer's command that installs a key file copied from the planner's computer
INSTALL_COMMAND = "timely-robot key install"

#: Drop reasons counted by :class:`LinkVerifier` (in this order in diagnostics).
UNSIGNED = "unsigned"
UNKNOWN_KEY = "unknown key id"
BAD_MAC = "bad mac"
REPLAYED = "replayed"
OUT_OF_WINDOW = "counter out of window"
DROP_REASONS = (UNSIGNED, UNKNOWN_KEY, BAD_MAC, REPLAYED, OUT_OF_WINDOW)


class KeystoreError(ValueError):
    """A key file that exists but cannot be used (unreadable, malformed, readable by others)."""


class MissingKeyError(KeyError):
    """No key file for a robot; the message is one sentence naming ``timely-fleet keys``."""

    def __str__(self) -> str:  # KeyError would print the message's repr
        return str(self.args[0]) if self.args else "missing key"


def default_keystore_dir() -> Path:
    """``$TIMELY_FLEET_KEYS``, else ``$XDG_CONFIG_HOME/timely_fleet/keys``, else
    ``~/.config/timely_fleet/keys``: per user, outside any source checkout."""
    env = os.environ.get("TIMELY_FLEET_KEYS")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "timely_fleet" / "keys"


def check_robot_id(robot_id: str) -> str:
    """``robot_id`` if it is safe as a file name (letters, digits, '_', at most 64); else ValueError."""
    if not isinstance(robot_id, str) or not ROBOT_ID_RE.match(robot_id):
        raise ValueError(f"robot id {robot_id!r} cannot name a key: use 1-64 letters, digits and '_'")
    return robot_id


def key_id_of(secret: bytes) -> str:
    """The public id of a key: first 8 hex digits of SHA-256(secret) (reveals nothing usable)."""
    return hashlib.sha256(secret).hexdigest()[:8]


@dataclass(frozen=True)
class RobotKey:
    robot_id: str
    key_id: str
    secret: bytes

    def __repr__(self) -> str:  # never print the secret (logs, tracebacks, test failures)
        return f"RobotKey(robot_id={self.robot_id!r}, key_id={self.key_id!r}, secret=<{len(self.secret)} bytes>)"


def _read_key_file(path: Path) -> tuple[dict[str, Any], bytes, str, str]:
    """A key file's JSON, secret, key id and robot id (OSError, ValueError, KeyError or TypeError
    when it is none)."""
    data = json.loads(path.read_text())
    return data, bytes.fromhex(data["key"]), str(data["key_id"]), str(data["robot_id"])


class Keystore:
    """A directory of per-robot keys: ``<path>/<robot_id>.key`` as JSON
    ``{"robot_id", "key_id", "key": <64 hex digits>, "created": <ISO 8601 UTC>}``, file mode 0600,
    directory mode 0700 (when this class creates it).

    :meth:`key` re-reads a file only when it changed. Every segment and status needs its robot's
    key, so it looks at the files rarely: the directory once per ``recheck_s`` for all robots (a
    key written by :meth:`rotate` or ``timely-fleet keys --rotate`` is renamed into place, which
    changes the directory), and a robot's own file when the directory changed or after
    ``FILE_RECHECK`` x ``recheck_s`` (a file edited in place). A stat per robot per second was 12 %
    of the planner's CPU at 1,000 robots. So a rotated key is picked up by a running planner and
    adapter within ``recheck_s`` without a restart. Creation is race-free between processes (the
    planner and the adapters may both call :meth:`ensure` on first run): a key file appears
    complete or not at all, and an existing key is never overwritten except by :meth:`rotate`.
    """

    #: a robot's key file is looked at after this many ``recheck_s`` even when the directory did not change
    FILE_RECHECK = 10

    def __init__(self, path: str | os.PathLike[str] | None = None, *, recheck_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path).expanduser() if path is not None else default_keystore_dir()
        self.recheck_s = recheck_s
        self._clock = clock
        self._cache: dict[str, tuple[tuple[int, int, int], RobotKey]] = {}
        self._checked: dict[str, tuple[float, int]] = {}  # robot -> (when its file was stat'ed, directory generation)
        self._dir_sig: tuple[int, ...] | None = None
        self._dir_checked = -math.inf
        self._dir_generation = 0  # goes up whenever the directory is seen changed
        self._lock = threading.Lock()

    def _generation(self, now: float) -> int:
        """The directory's generation, looked at once per ``recheck_s`` (under the lock)."""
        if now - self._dir_checked >= self.recheck_s:
            self._dir_checked = now
            try:
                st = self.path.stat()
                sig: tuple[int, ...] = (st.st_mtime_ns, st.st_ino, st.st_nlink, st.st_size)
            except OSError:
                sig = ()
            if sig != self._dir_sig:
                self._dir_sig = sig
                self._dir_generation += 1
        return self._dir_generation

    def file_of(self, robot_id: str) -> Path:
        return self.path / f"{check_robot_id(robot_id)}{KEY_SUFFIX}"

    def robot_ids(self) -> list[str]:
        """Robots that have a key file, sorted."""
        if not self.path.is_dir():
            return []
        return sorted(p.name[: -len(KEY_SUFFIX)] for p in self.path.iterdir()
                      if p.name.endswith(KEY_SUFFIX) and ROBOT_ID_RE.match(p.name[: -len(KEY_SUFFIX)]))

    def has(self, robot_id: str) -> bool:
        return self.file_of(robot_id).is_file()

    def key(self, robot_id: str) -> RobotKey:
        """The robot's key; :class:`MissingKeyError` (a KeyError) when it has no key file."""
        now = self._clock()
        with self._lock:
            cached = self._cache.get(robot_id)
            if cached is not None:
                at, generation = self._checked.get(robot_id, (-math.inf, -1))
                if now - at < self.recheck_s:
                    return cached[1]
                if now - at < self.recheck_s * self.FILE_RECHECK and generation == self._generation(now):
                    return cached[1]
            generation = self._generation(now)
        path = self.file_of(robot_id)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise MissingKeyError(f"no key for robot '{robot_id}' in {self.path}: run "
                                  f"'{KEYS_COMMAND} --params <fleet.yaml> --dir {self.path}' to create it, or on a "
                                  f"robot's computer '{INSTALL_COMMAND} {robot_id} <key file>'") from None
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            self._checked[robot_id] = (now, generation)
            cached = self._cache.get(robot_id)
            if cached is not None and cached[0] == sig:
                return cached[1]
        key = self._load(path, robot_id, st)
        with self._lock:
            self._cache[robot_id] = (sig, key)
        return key

    def _load(self, path: Path, robot_id: str, st: os.stat_result) -> RobotKey:
        if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeystoreError(f"key file {path} is accessible by other users "
                                f"(mode {stat.S_IMODE(st.st_mode):o}): run 'chmod 600 {path}'")
        try:
            _data, secret, stored_id, stored_robot = _read_key_file(path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KeystoreError(f"key file {path} is not a valid key ({type(e).__name__}): "
                                f"rotate it with '{KEYS_COMMAND} --rotate {robot_id}'") from None
        if len(secret) != KEY_BYTES or stored_robot != robot_id or stored_id != key_id_of(secret):
            raise KeystoreError(f"key file {path} is inconsistent (length, robot id or key id): "
                                f"rotate it with '{KEYS_COMMAND} --rotate {robot_id}'")
        return RobotKey(robot_id, stored_id, secret)

    def _make_dir(self) -> None:
        if not self.path.is_dir():
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            os.chmod(self.path, 0o700)  # makedirs' mode is masked by the umask

    def _write_private(self, robot_id: str, body: str) -> Path:
        """``body`` in a temporary file of the keystore, mode 0600 and synced, to be linked or
        renamed into place."""
        fd, tmp = tempfile.mkstemp(prefix=f".{robot_id}.", suffix=".tmp", dir=self.path)  # mode 0600
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(body + "\n")
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return Path(tmp)

    def _write_tmp(self, robot_id: str) -> tuple[Path, RobotKey]:
        secret = secrets.token_bytes(KEY_BYTES)
        key = RobotKey(robot_id, key_id_of(secret), secret)
        body = json.dumps({"robot_id": robot_id, "key_id": key.key_id, "key": secret.hex(),
                           "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
        return self._write_private(robot_id, body), key

    def create(self, robot_id: str) -> bool:
        """Create the robot's key unless it exists; True when this call created it."""
        final = self.file_of(robot_id)
        if final.exists():
            return False
        self._make_dir()
        tmp, _key = self._write_tmp(robot_id)
        try:
            os.link(tmp, final)  # atomic and never overwrites: a concurrent creator wins cleanly
            return True
        except FileExistsError:
            return False
        except OSError:  # file systems without hard links
            if final.exists():
                return False
            os.replace(tmp, final)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def install(self, robot_id: str, source: str | os.PathLike[str]) -> RobotKey:
        """Install the key file ``source`` (copied from the planner's keystore) as the robot's key,
        atomically and readable by this user only; the file must be a valid key of ``robot_id``
        (:class:`KeystoreError` otherwise). Returns the installed key."""
        check_robot_id(robot_id)
        src = Path(source).expanduser()
        try:
            data, secret, stored_id, stored_robot = _read_key_file(src)
        except FileNotFoundError:
            raise KeystoreError(f"key file {src} does not exist") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KeystoreError(f"{src} is not a key file of timely_fleet ({type(e).__name__})") from None
        if stored_robot != robot_id:
            raise KeystoreError(f"{src} is the key of robot '{stored_robot}', not of '{robot_id}'")
        if len(secret) != KEY_BYTES or stored_id != key_id_of(secret):
            raise KeystoreError(f"key file {src} is inconsistent (its length or key id): copy it again")
        self._make_dir()
        tmp = self._write_private(robot_id, json.dumps(data))
        try:
            os.replace(tmp, self.file_of(robot_id))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        with self._lock:
            self._cache.pop(robot_id, None)
        return RobotKey(robot_id, stored_id, secret)

    def ensure(self, robot_ids: Iterable[str]) -> list[str]:
        """Create the missing keys of ``robot_ids``; returns the ids created (in the given order)."""
        ids = [check_robot_id(r) for r in robot_ids]
        return [r for r in ids if self.create(r)]

    def rotate(self, robot_id: str) -> RobotKey:
        """Replace the robot's key by a new one (atomically); returns the new key."""
        final = self.file_of(robot_id)
        self._make_dir()
        tmp, key = self._write_tmp(robot_id)
        os.replace(tmp, final)
        with self._lock:
            self._cache.pop(robot_id, None)
        return key


# -- canonical encoding of the signed fields ------------------------------------------------------
# Every value is a one-byte type tag followed by a fixed-size or length-prefixed body, so no two
# different field lists encode to the same bytes (an attacker cannot move bytes between fields).

def _u(value: int) -> bytes:
    v = int(value)
    if not 0 <= v < 1 << 64:
        raise ValueError(f"unsigned field out of range: {v}")
    return b"u" + v.to_bytes(8, "big")


def _s(value: str) -> bytes:
    raw = str(value).encode("utf-8", "surrogatepass")
    return b"s" + len(raw).to_bytes(4, "big") + raw


def _b(value: bool) -> bytes:
    return b"b\x01" if value else b"b\x00"


def _d(value: float) -> bytes:
    return b"d" + struct.pack(">d", float(value))


def _f(value: float) -> bytes:
    """A float32 field as the receiver sees it (the value is rounded to float32 on the wire)."""
    v = float(value)
    try:
        return b"f" + struct.pack(">f", v)
    except OverflowError:  # beyond float32 range: what a float32 conversion would give
        return b"f" + struct.pack(">f", math.copysign(math.inf, v))


def _list(items: Sequence[bytes]) -> bytes:
    return b"l" + len(items).to_bytes(4, "big") + b"".join(items)


def _skill(skill: Sequence[Any]) -> bytes:
    if len(skill) == 2:  # (name, arg_values)
        name, names, values = skill[0], (), skill[1]
    elif len(skill) == 3:  # (name, arg_names, arg_values)
        name, names, values = skill
    else:
        raise ValueError("a skill is (name, arg_values) or (name, arg_names, arg_values)")
    return _s(name) + _list([_s(n) for n in names]) + _list([_s(v) for v in values])


def _stamp(stamp: tuple[int, int] | None) -> bytes:
    if stamp is None:
        return b"n"
    sec, nanosec = stamp
    return b"t" + struct.pack(">qQ", int(sec), int(nanosec))


def segment_fields(goal_id: str, robot_id: str, sequence: int, text: str,
                   skills: Sequence[Sequence[Any]], final: bool, cancel: bool,
                   stamp: tuple[int, int] | None = None, term: int = 0) -> bytes:
    """The signed bytes of a segment: every field except key_id, counter and mac (which the MAC
    covers by construction). ``skills``: ``(name, arg_values)`` or ``(name, arg_names, arg_values)``;
    ``term``: the sending planner's term (tag ``SEG2``: a ``SEG1`` MAC, made without the term,
    never verifies)."""
    return b"".join([b"SEG2", _u(term), _s(goal_id), _s(robot_id), _u(sequence), _s(text),
                     _list([_skill(s) for s in skills]), _b(final), _b(cancel), _stamp(stamp)])


def status_fields(robot_id: str, goal_id: str, sequence: int, state: int, current_skill: str,
                  progress: float, elapsed_s: float, predicted_remaining_s: float,
                  skill_names: Sequence[str], skill_durations_s: Sequence[float], error: str,
                  stamp: tuple[int, int] | None = None, *,
                  answers: Sequence[tuple[int, str, str]] = (), return_value: str | None = None,
                  measured: tuple[float, ...] = (-1.0, -1.0, -1.0, -1.0),
                  scene: Sequence[str] | None = None,
                  pose: Sequence[float] | None = None) -> bytes:
    """The signed bytes of a status (``progress`` and the ``measured`` battery, temperature,
    height and link age are float32 on the wire, the rest float64; floats as IEEE-754 big-endian bytes, so NaN,
    infinities and -0.0 are covered). ``answers``: (segment, skill, value) of each call that
    answered; ``return_value``: the plan's return value, None when it has none; ``pose``: the
    robot's measured (x, y, z, yaw) in its own frame, None when it reports none."""
    if pose is not None and len(pose) != 4:
        raise ValueError(f"a status's pose is (x, y, z, yaw), got {len(pose)} values")
    return b"".join([b"STA4", _s(robot_id), _s(goal_id), _u(sequence), _u(state), _s(current_skill),
                     _f(progress), _d(elapsed_s), _d(predicted_remaining_s),
                     _list([_s(n) for n in skill_names]), _list([_d(x) for x in skill_durations_s]),
                     _s(error), _list([_u(k) + _s(n) + _s(v) for k, n, v in answers]),
                     _b(return_value is not None), _s(return_value or ""),
                     b"".join(_f(x) for x in measured), _b(scene is not None),
                     _list([_s(e) for e in scene or ()]), _b(pose is not None),
                     b"".join(_d(x) for x in pose or ()), _stamp(stamp)])


def _mac_input(kind: str, key_id: str, counter: int, fields: bytes) -> bytes:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    return b"".join([b"timely_fleet/1", _s(kind), _s(key_id), _u(counter), fields])


def sign(key: RobotKey, kind: str, fields: bytes, counter: int) -> bytes:
    """HMAC-SHA256(secret, kind || key_id || counter (8 bytes, big-endian) || fields), 32 bytes."""
    return hmac.new(key.secret, _mac_input(kind, key.key_id, counter, fields), hashlib.sha256).digest()


def verify(key: RobotKey, kind: str, fields: bytes, counter: int, mac: bytes, key_id: str | None = None) -> bool:
    """True when ``mac`` is the MAC of these fields under ``key`` (constant-time comparison).
    ``key_id``: the id the message claims (default: the key's own)."""
    if key_id is not None and key_id != key.key_id:
        return False
    try:
        expected = sign(key, kind, fields, counter)
    except ValueError:  # counter out of range, unknown kind
        return False
    return hmac.compare_digest(expected, bytes(mac))


def journal_key(keystore: Keystore, robot_ids: Iterable[str]) -> RobotKey:
    """The key of the planners' journal (planner/journal): derived from every robot key of the
    fleet (HMAC-SHA256 over their secrets in robot id order), so a planner that holds them all
    can write it and a robot, which holds only its own, cannot."""
    keys = [keystore.key(r) for r in sorted(set(robot_ids))]
    secret = hmac.new(b"timely_fleet/journal", b"".join(k.secret for k in keys), hashlib.sha256).digest()
    return RobotKey("planner", key_id_of(secret), secret)


# -- counters and replay protection ---------------------------------------------------------------

def now_us() -> int:
    return time.time_ns() // 1000


class Counter:
    """A sender's message counter: ``next()`` = max(last + 1, now in µs since the epoch).

    Strictly increasing within a process, and across restarts as long as the wall clock does not
    go back and the sender averaged less than one message per microsecond (as MAVLink 2's signing
    timestamp). Thread-safe.
    """

    def __init__(self, clock_us: Callable[[], int] = now_us, start: int = 0) -> None:
        self._clock = clock_us
        self._last = max(int(start), int(clock_us()) - 1)
        self._lock = threading.Lock()

    @property
    def last(self) -> int:
        return self._last

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, int(self._clock()))
            return self._last

    def raise_to(self, value: int) -> None:
        """Continue above ``value`` (a planner taking over signs above the counters of the one it
        replaces: the robots' replay guards keep one stream per robot key)."""
        with self._lock:
            self._last = max(self._last, int(value))


class ReplayGuard:
    """Last accepted counter per stream ``(sender, key_id)``; :meth:`accept` takes only a
    strictly greater counter.

    Time window (``None`` disables a side): a counter more than ``max_future_s`` ahead of the
    local clock is refused, so one forged or mis-clocked huge counter cannot lock the link; the
    first counter of a stream this guard has not seen (after a receiver restart) must not be older
    than ``max_past_s``, nor signed more than ``start_grace_s`` before this guard was created: a
    sender signs every send afresh (re-sends included), so a message signed before the receiver
    started can only be a recording, and a restarted adapter does not run a finished goal's
    segments again. Hosts' clocks must agree within ``start_grace_s`` (NTP/chrony; a sender whose
    clock is further behind is refused only until its clock passes the receiver's start). Memory
    is bounded by ``max_streams`` (least recently used streams are forgotten; only authenticated
    messages create streams).
    """

    def __init__(self, max_future_s: float | None = 600.0, max_past_s: float | None = 600.0,
                 max_streams: int = 4096, clock_us: Callable[[], int] = now_us,
                 start_grace_s: float | None = 5.0) -> None:
        self.max_future_us = None if max_future_s is None else int(max_future_s * 1e6)
        self.max_past_us = None if max_past_s is None else int(max_past_s * 1e6)
        self.max_streams = int(max_streams)
        self._clock = clock_us
        self._oldest_first = None if start_grace_s is None else int(clock_us()) - int(start_grace_s * 1e6)
        self._last: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, sender: str, key_id: str, counter: int) -> str | None:
        """None when ``counter`` is acceptable (and records it); else :data:`REPLAYED` or
        :data:`OUT_OF_WINDOW`."""
        counter = int(counter)
        now = int(self._clock())
        if self.max_future_us is not None and counter > now + self.max_future_us:
            return OUT_OF_WINDOW
        stream = (sender, key_id)
        with self._lock:
            last = self._last.get(stream)
            if last is None:
                if self.max_past_us is not None and counter < now - self.max_past_us:
                    return OUT_OF_WINDOW
                if self._oldest_first is not None and counter < self._oldest_first:
                    return OUT_OF_WINDOW  # signed before this receiver started: a recording
            elif counter <= last:
                return REPLAYED
            self._last[stream] = counter
            self._last.move_to_end(stream)
            while len(self._last) > self.max_streams:
                self._last.popitem(last=False)
        return None

    def accept(self, sender: str, key_id: str, counter: int) -> bool:
        return self.check(sender, key_id, counter) is None

    def __len__(self) -> int:
        return len(self._last)


# -- ROS message helpers (duck-typed: any object with the message's attributes) -------------------

def _stamp_of(msg: Any) -> tuple[int, int] | None:
    stamp = getattr(msg, "stamp", None)
    if stamp is None:
        return None
    return int(getattr(stamp, "sec", 0)), int(getattr(stamp, "nanosec", 0))


def segment_msg_fields(msg: Any) -> bytes:
    """:func:`segment_fields` of a ``timely_fleet/SkillSegment`` (skills with arg names, stamp, term)."""
    skills = [(s.name, list(s.arg_names), list(s.arg_values)) for s in msg.skills]
    return segment_fields(msg.goal_id, msg.robot_id, msg.sequence, msg.text, skills, bool(msg.final),
                          bool(msg.cancel), _stamp_of(msg), int(getattr(msg, "term", 0)))


def measured_of(msg: Any) -> tuple[float, float, float, float]:
    """A ``RobotStatus``'s measured battery %, temperature, height and link age (-1: not measured)."""
    return (float(getattr(msg, "battery_pct", -1.0)), float(getattr(msg, "temperature_c", -1.0)),
            float(getattr(msg, "height_cm", -1.0)), float(getattr(msg, "link_age_s", -1.0)))


def status_msg_fields(msg: Any) -> bytes:
    """:func:`status_fields` of a ``timely_fleet/RobotStatus`` (with its stamp)."""
    return status_fields(msg.robot_id, msg.goal_id, msg.sequence, msg.state, msg.current_skill, msg.progress,
                         msg.elapsed_s, msg.predicted_remaining_s, list(msg.skill_names),
                         list(msg.skill_durations_s), msg.error, _stamp_of(msg),
                         answers=[(a.segment, a.skill, a.value) for a in getattr(msg, "answers", ())],
                         return_value=msg.return_value if getattr(msg, "has_return_value", False) else None,
                         measured=measured_of(msg),
                         scene=list(msg.scene) if getattr(msg, "has_scene", False) else None,
                         pose=pose_of(msg))


def pose_of(msg: Any) -> tuple[float, float, float, float] | None:
    """A ``RobotStatus``'s measured pose (x, y, z metres, yaw radians, in the robot's own frame),
    None when it reports none (``has_pose`` false)."""
    if not getattr(msg, "has_pose", False):
        return None
    return (float(msg.x_m), float(msg.y_m), float(msg.z_m), float(msg.yaw_rad))


_SIGNATURE_FIELDS = ("key_id", "counter", "mac")
_BIG_ENDIAN = sys.byteorder == "big"
_Out = list  # the encoded parts, joined once at the end


def _array(value: Any) -> bytes:
    """A numeric sequence (``array.array``, or a numpy array for a fixed-size field) as its
    elements' big-endian bytes: one C copy, not one call per element."""
    if value.itemsize > 1 and not _BIG_ENDIAN:
        if type(value).__name__ == "ndarray":
            value = value.byteswap()
        else:
            value = array.array(value.typecode, value)
            value.byteswap()
    raw = value.tobytes()
    return b"a" + bytes((value.itemsize,)) + len(raw).to_bytes(4, "big") + raw


def _int(value: int) -> bytes:
    return b"i" + int(value).to_bytes(9, "big", signed=True)  # int64 and uint64 alike


def _wire(value: str) -> bytes:
    """A string field as a ROS receiver gets it (a C string: it ends at its first NUL)."""
    return _s(value.split("\x00", 1)[0] if "\x00" in value else value)


def _strings(value: Sequence[str], out: _Out) -> None:
    out.append(b"l" + len(value).to_bytes(4, "big"))
    out.extend(_wire(v) for v in value)


def _bools(value: Sequence[bool], out: _Out) -> None:
    out.append(b"l" + len(value).to_bytes(4, "big") + b"B" + bytes(bool(v) for v in value))


def _scalar(encode: Callable[[Any], bytes]) -> Callable[[Any, _Out], None]:
    return lambda value, out: out.append(encode(value))


#: how a field of each ROS type is encoded (other types: :func:`_any`)
_BY_TYPE: dict[str, Callable[[Any, _Out], None]] = {
    "string": _scalar(_wire), "wstring": _scalar(_wire), "boolean": _scalar(_b), "double": _scalar(_d),
    "float": _scalar(_f), "sequence<string>": _strings, "sequence<boolean>": _bools,
    **{t: _scalar(_int) for t in ("byte", "char", "octet", "int8", "uint8", "int16", "uint16", "int32",
                                  "uint32", "int64", "uint64")},
}
_ENCODERS: dict[type, tuple[Callable[[Any], tuple[Any, ...]], tuple[Callable[..., None], ...]]] = {}


def _any(value: Any, out: _Out, between: Callable[[], None] | None = None) -> None:
    """A value whose field type has no entry in ``_BY_TYPE``: a nested message, a numeric
    sequence or array, a sequence of messages (``between()`` after each), bytes."""
    if hasattr(value, "get_fields_and_field_types"):
        _message(value, out, between)
    elif type(value) is array.array or type(value).__name__ == "ndarray":
        out.append(_array(value))
    elif isinstance(value, (list, tuple)):
        out.append(b"l" + len(value).to_bytes(4, "big"))
        for v in value:
            _any(v, out)
            if between is not None:
                between()
    elif isinstance(value, bytes):
        out.append(b"y" + len(value).to_bytes(4, "big") + value)
    elif isinstance(value, bool):
        out.append(_b(value))
    elif isinstance(value, int):
        out.append(_int(value))
    elif isinstance(value, float):
        out.append(_d(value))
    elif isinstance(value, str):
        out.append(_wire(value))
    else:
        raise TypeError(f"cannot sign a message field of type {type(value).__name__}")


def _encoder(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], tuple[Callable[..., None], ...]]:
    """A message class's fields but the signature's, in the order of its definition: one getter
    for all of them and each one's encoder (by its ROS type: a float32 field as the wire rounds it)."""
    enc = _ENCODERS.get(cls)
    if enc is None:
        fields = [(k, t) for k, t in cls.get_fields_and_field_types().items()  # type: ignore[attr-defined]
                  if k not in _SIGNATURE_FIELDS]
        names = [k for k, _ in fields]
        getter = operator.attrgetter(*names) if len(names) > 1 else (lambda m, _g=operator.attrgetter(*names): (_g(m),))
        enc = _ENCODERS[cls] = (getter if names else (lambda m: ()),
                                tuple(_BY_TYPE.get(t, _any) for _, t in fields))
    return enc


def _message(msg: Any, out: _Out, between: Callable[[], None] | None = None) -> None:
    getter, encoders = _encoder(type(msg))
    out.append(b"m")
    for value, encode in zip(getter(msg), encoders):
        if encode is _any:
            _any(value, out, between)
        else:
            encode(value, out)


def message_fields(msg: Any, between: Callable[[], None] | None = None) -> bytes:
    """The signed bytes of a whole ROS message (the planner journal and its acknowledgements):
    every field but the signature's (``key_id``, ``counter``, ``mac``), nested messages and
    sequences included, in the order of the message's definition (which the signer and the
    verifier share), each value tagged and length-prefixed as the robot link's fields are (numeric
    sequences as their big-endian bytes; float32 fields rounded and strings cut at a NUL as the
    wire does). Not its
    CDR serialization: that may differ between sender and receiver in its padding bytes.
    ``between()``: called after each message of a sequence of messages (where the journal's
    writer may let the scheduler thread take the GIL)."""
    out: list[bytes] = []
    _message(msg, out, between)
    return b"".join(out)


def _sign_msg(msg: Any, key: RobotKey, counter: int, kind: str, fields: bytes) -> Any:
    msg.key_id = key.key_id
    msg.counter = int(counter)
    msg.mac = list(sign(key, kind, fields, counter))  # uint8[]: a list of ints is accepted by rclpy
    return msg


def sign_segment_msg(msg: Any, key: RobotKey, counter: int) -> Any:
    """Set ``key_id``, ``counter`` and ``mac`` of a segment message (call after every other field
    is final); returns ``msg``."""
    return _sign_msg(msg, key, counter, "segment", segment_msg_fields(msg))


def sign_status_msg(msg: Any, key: RobotKey, counter: int) -> Any:
    """Set ``key_id``, ``counter`` and ``mac`` of a status message; returns ``msg``."""
    return _sign_msg(msg, key, counter, "status", status_msg_fields(msg))


def mac_bytes(msg: Any) -> bytes:
    """A message's ``mac`` as bytes (rclpy gives uint8[] as array.array, a list or bytes)."""
    mac = getattr(msg, "mac", None)
    if mac is None:
        return b""
    try:
        return bytes(mac)
    except (TypeError, ValueError):
        return b""


# -- the two ends of a link -----------------------------------------------------------------------

def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"security.mode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


class LinkSigner:
    """The sending end: signs outgoing segments (planner) or statuses (adapter) with the robot's
    current key and this process's :class:`Counter`. In mode ``off`` messages go out unsigned."""

    def __init__(self, keystore: Keystore | None, mode: str = "sign", counter: Counter | None = None) -> None:
        self.mode = check_mode(mode)
        if self.mode == "sign" and keystore is None:
            raise ValueError("security.mode 'sign' needs a keystore")
        self.keystore = keystore
        self.counter = counter or Counter()

    def sign_segment(self, msg: Any, robot_id: str | None = None) -> Any:
        if self.mode == "off":
            return msg
        return sign_segment_msg(msg, self.keystore.key(robot_id or msg.robot_id), self.counter.next())

    def sign_status(self, msg: Any, robot_id: str | None = None) -> Any:
        if self.mode == "off":
            return msg
        return sign_status_msg(msg, self.keystore.key(robot_id or msg.robot_id), self.counter.next())


class LinkVerifier:
    """The receiving end: :meth:`check_status` (planner) and :meth:`check_segment` (adapter)
    return None for an accepted message, else the drop reason (:data:`DROP_REASONS`), and count
    both in :attr:`dropped` / :attr:`accepted`. Mode ``off`` accepts everything.

    Order of checks: signature present, key id known for that robot, MAC, then the counter (only
    authenticated messages can advance a stream's counter).
    """

    def __init__(self, keystore: Keystore | None, mode: str = "sign", replay: ReplayGuard | None = None) -> None:
        self.mode = check_mode(mode)
        if self.mode == "sign" and keystore is None:
            raise ValueError("security.mode 'sign' needs a keystore")
        self.keystore = keystore
        self.replay = replay if replay is not None else ReplayGuard()  # (an empty guard is falsy: len 0)
        self.accepted = 0
        self.dropped: dict[str, int] = {r: 0 for r in DROP_REASONS}
        self.dropped_by_robot: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def counts(self) -> dict[str, int]:
        """``accepted`` and one entry per drop reason (for diagnostics key/values)."""
        with self._lock:
            return {"accepted": self.accepted, **self.dropped}

    def _count(self, robot_id: str, reason: str | None) -> str | None:
        with self._lock:
            if reason is None:
                self.accepted += 1
            else:
                self.dropped[reason] = self.dropped.get(reason, 0) + 1
                key = robot_id if ROBOT_ID_RE.match(robot_id or "") else "?"
                if key in self.dropped_by_robot or len(self.dropped_by_robot) < 1024:
                    self.dropped_by_robot[key] = self.dropped_by_robot.get(key, 0) + 1
        return reason

    def check(self, kind: str, robot_id: str, fields: bytes | Callable[[], bytes], key_id: str,
              counter: int, mac: bytes) -> str | None:
        """Check one message of ``kind`` from/for ``robot_id``; ``fields`` may be a callable so
        that unsigned messages are refused without encoding them."""
        if self.mode == "off":
            return self._count(robot_id, None)
        if not mac:
            return self._count(robot_id, UNSIGNED)
        try:
            key = self.keystore.key(robot_id)
        except (MissingKeyError, KeystoreError, ValueError):
            return self._count(robot_id, UNKNOWN_KEY)
        if key_id != key.key_id:
            return self._count(robot_id, UNKNOWN_KEY)
        data = fields() if callable(fields) else fields
        if len(mac) != MAC_BYTES or not verify(key, kind, data, counter, mac):
            return self._count(robot_id, BAD_MAC)
        return self._count(robot_id, self.replay.check(f"{kind}:{robot_id}", key_id, counter))

    def check_status(self, msg: Any) -> str | None:
        """A ``RobotStatus`` message, verified with the key of the robot it names."""
        return self.check("status", str(msg.robot_id), lambda: status_msg_fields(msg), str(getattr(msg, "key_id", "")),
                          int(getattr(msg, "counter", 0)), mac_bytes(msg))

    def check_segment(self, msg: Any, robot_id: str) -> str | None:
        """A ``SkillSegment`` received by ``robot_id``'s adapter, verified with that robot's key
        (a segment naming another robot fails the MAC: the robot id is a signed field)."""
        return self.check("segment", robot_id, lambda: segment_msg_fields(msg), str(getattr(msg, "key_id", "")),
                          int(getattr(msg, "counter", 0)), mac_bytes(msg))


__all__ = ["BAD_MAC", "Counter", "DROP_REASONS", "KEYS_COMMAND", "KINDS", "Keystore", "KeystoreError",
           "LinkSigner", "LinkVerifier", "MODES", "MissingKeyError", "OUT_OF_WINDOW", "REPLAYED", "ReplayGuard",
           "RobotKey", "UNKNOWN_KEY", "UNSIGNED", "check_mode", "check_robot_id", "default_keystore_dir",
           "key_id_of", "mac_bytes", "now_us", "pose_of", "segment_fields", "segment_msg_fields", "sign",
           "sign_segment_msg", "sign_status_msg", "status_fields", "status_msg_fields", "verify"]
