"""The fleet's memory of what its robots saw: sightings kept in an SQLite file, so they outlive a
restart of the planner, and carried to a standby in the journal, so they outlive a takeover.

A :class:`Sighting` is one thing a robot reported seeing: a perception call that answered that
it found the thing (``scan(cat)`` -> ``True``, ``object_dis(cup)`` -> ``84.0``) or a label of
an idle robot's scene; where the robot was in the fleet frame when the planner heard it, when,
and under which goal. :class:`FleetMemory` stores them (the standard library's ``sqlite3``, WAL
mode, one connection behind a lock: the scheduler thread records, ROS service threads query) and
forgets those older than ``max_age_s``. :class:`SightingRecorder` turns the statuses the
service takes into sightings, records them and keeps the new ones for the journal.

What the memory is for: choosing a robot and writing prompts. A remembered position never
widens what a robot may do: every plan still goes through its robot's envelope.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from timely_robot.perceivable import thing_name
from timely_robot.skills import SkillSet

#: A position in the fleet frame (x, y, z metres).
Position = tuple[float, float, float]

#: Sightings older than this are forgotten by default (s): a day.
DEFAULT_MAX_AGE_S = 24 * 3600.0
#: Most sightings one query returns.
MAX_RESULTS = 100
#: Most sightings the file holds; beyond it the oldest go first (a disk is finite).
MAX_ROWS = 200_000
#: Longest robot id, label or goal id stored (longer ones are cut).
MAX_TEXT = 64
#: New sightings kept for the journal until a take carries them; beyond it the oldest are dropped
#: (with no standby following, journals are heartbeats and carry none).
MAX_PENDING = 1_000
#: A thing that stays in an idle robot's scene is recorded again at most this often (s).
SCENE_REFRESH_S = 60.0
#: Version of the file's schema (``PRAGMA user_version``).
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Sighting:
    """One thing a robot saw: ``label`` (as :func:`~timely_robot.perceivable.thing_name` files
    it), the robot's ``confidence`` in it when it reported one, where the robot was in the fleet
    frame (None: unknown), the wall time (UNIX s) and the goal it ran ('' for an idle robot)."""

    robot_id: str
    label: str
    confidence: float | None
    position: Position | None
    wall_time: float
    goal_id: str = ""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sightings (
    id INTEGER PRIMARY KEY,
    label TEXT NOT NULL,
    robot_id TEXT NOT NULL,
    confidence REAL,
    x REAL, y REAL, z REAL,
    wall_time REAL NOT NULL,
    goal_id TEXT NOT NULL,
    UNIQUE (robot_id, label, wall_time, goal_id)
);
CREATE INDEX IF NOT EXISTS sightings_by_label ON sightings (label, wall_time);
CREATE INDEX IF NOT EXISTS sightings_by_time ON sightings (wall_time);
"""


class FleetMemory:
    """Sightings in an SQLite file (``":memory:"``: in this process only), newest first by label.

    ``max_age_s``: sightings older than this are never returned and are deleted at each write;
    ``clock``: the wall clock (UNIX s). Thread-safe. The same sighting recorded twice (a journal
    and the file both had it) is kept once."""

    def __init__(self, path: str | Path, max_age_s: float = DEFAULT_MAX_AGE_S,
                 clock: Callable[[], float] = time.time) -> None:
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0 (seconds), got {max_age_s!r}")
        self.path = str(path)
        self.max_age_s = float(max_age_s)
        self._clock = clock
        self._lock = threading.Lock()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # one connection for every thread, serialised by the lock; autocommit, explicit transactions
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=5.0)
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ValueError(f"the memory file {self.path} was written by a newer version of timely-fleet "
                                 f"(schema {version}, this one reads {SCHEMA_VERSION})")
            self._db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit does not wait for the disk
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except Exception:
            self._db.close()
            raise
        self._writes = 0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _oldest_kept(self) -> float:
        return self._clock() - self.max_age_s

    def record(self, sighting: Sighting) -> bool:
        """Store a sighting (its label filed by name, texts cut to MAX_TEXT); forget those past
        ``max_age_s``. False if it was not stored: too old, no label, or already held."""
        return self.record_many([sighting]) == 1

    def record_many(self, sightings: Iterable[Sighting]) -> int:
        """Store several sightings in one transaction (:meth:`record`); how many were new."""
        rows = []
        oldest = self._oldest_kept()
        for s in sightings:
            label = thing_name(s.label)[:MAX_TEXT]
            if not label or not math.isfinite(s.wall_time) or s.wall_time < oldest:
                continue
            x, y, z = s.position if s.position is not None else (None, None, None)
            conf = s.confidence if s.confidence is not None and math.isfinite(s.confidence) else None
            rows.append((label, s.robot_id[:MAX_TEXT], conf, x, y, z, float(s.wall_time), s.goal_id[:MAX_TEXT]))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                before = self._db.total_changes
                self._db.executemany("INSERT OR IGNORE INTO sightings (label, robot_id, confidence, x, y, z, "
                                     "wall_time, goal_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
                added = self._db.total_changes - before
                self._db.execute("DELETE FROM sightings WHERE wall_time < ?", (oldest,))
                self._writes += 1
                if self._writes % 256 == 0:  # bounded: the oldest beyond MAX_ROWS go
                    self._db.execute("DELETE FROM sightings WHERE id IN (SELECT id FROM sightings ORDER BY "
                                     "wall_time DESC LIMIT -1 OFFSET ?)", (MAX_ROWS,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return added

    def last(self, label: str, limit: int = 5) -> list[Sighting]:
        """The newest sightings of the thing ``label`` names (by any of its names: ``cats``,
        ``kitty`` find ``cat``), newest first, at most ``limit`` (and MAX_RESULTS)."""
        name = thing_name(label)
        limit = max(0, min(int(limit), MAX_RESULTS))
        if not name or limit == 0:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT robot_id, label, confidence, x, y, z, wall_time, goal_id FROM sightings "
                "WHERE label = ? AND wall_time >= ? ORDER BY wall_time DESC, id DESC LIMIT ?",
                (name, self._oldest_kept(), limit)).fetchall()
        return [Sighting(r, lab, c, None if x is None else (x, y, z), t, g) for r, lab, c, x, y, z, t, g in rows]

    def last_position(self, label: str) -> tuple[float, float, float] | None:
        """Where the thing ``label`` names was last seen with a known position (fleet frame), or None."""
        return next((s.position for s in self.last(label, MAX_RESULTS) if s.position is not None), None)

    def labels(self) -> list[str]:
        """Every thing remembered (sightings not past ``max_age_s``), in name order."""
        with self._lock:
            rows = self._db.execute("SELECT DISTINCT label FROM sightings WHERE wall_time >= ? ORDER BY label",
                                    (self._oldest_kept(),)).fetchall()
        return [r[0] for r in rows]


def answer(memory: FleetMemory | None, label: str, max_results: int) -> tuple[list[Sighting], str]:
    """What ``planner/memory`` answers: the newest sightings of ``label`` (``max_results`` 0:
    5) and one sentence."""
    if memory is None:
        return [], "the fleet memory is off on this planner (planner.memory.path)"
    if not thing_name(label):
        return [], "name a thing to look up, e.g. cat"
    found = memory.last(label, max_results or 5)
    if not found:
        return [], f'nothing remembered about "{label.strip()[:MAX_TEXT]}"'
    return found, f"{len(found)} sighting(s) of {thing_name(label)}, newest first"


def found_things(skill_set: SkillSet | None, answers: Iterable[tuple[str, str]]) -> list[str]:
    """The things a segment's perception calls found: each call, as the robot reports it
    (``scan(cat)``), of a skill of ``skill_set`` that takes an ``object`` and answers a finding:
    ``True``, or a number >= 0 (MiniSpec's -1 is "not in view"). A skill that returns nothing or
    text (``probe``) finds nothing here. The calls' object arguments, in order."""
    if skill_set is None:
        return []
    out = []
    for call, value in answers:
        name, _, rest = call.partition("(")
        name = name.strip()
        if name not in skill_set:
            continue
        spec = skill_set.spec(name)
        at = next((i for i, a in enumerate(spec.args) if a.name == "object"), None)
        args = [a.strip().strip("'\"") for a in rest.rstrip().removesuffix(")").split(",")]
        if at is None or spec.returns not in ("bool", "int", "float") or at >= len(args) or not args[at]:
            continue
        v = value.strip()
        if spec.returns == "bool":
            found = v == "True"
        else:
            try:
                found = float(v) >= 0
            except ValueError:
                found = False
        if found:
            out.append(args[at])
    return out


class SightingRecorder:
    """The sightings of the statuses the service takes (module docstring): recorded in
    ``memory`` with the robot's position from ``position_of(robot_id)`` (fleet frame, None:
    unknown) and the wall time from ``clock``, and kept for the journal (:meth:`take_new`).
    Thread-safe. A write that fails is counted and logged through ``log``, never raised: the
    memory must not stop a goal."""

    def __init__(self, memory: FleetMemory, position_of: Callable[[str], Position | None],
                 log: Callable[[str, str], None], clock: Callable[[], float] = time.time) -> None:
        self.memory = memory
        self._position_of = position_of
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._new: deque[Sighting] = deque(maxlen=MAX_PENDING)
        self._scene_seen: dict[tuple[str, str], float] = {}  # (robot, label) -> when last recorded from a scene
        self.failures = 0
        self.recorded = 0

    def _position(self, robot_id: str) -> Position | None:
        try:
            pos = self._position_of(robot_id)
        except Exception as e:  # noqa: BLE001 - a pose source's bug costs the position, not the sighting
            self._log("warning", f"fleet memory: no position for {robot_id}: {type(e).__name__}: {e}")
            return None
        if pos is None or len(pos) != 3 or not all(math.isfinite(float(v)) for v in pos):
            return None
        return (float(pos[0]), float(pos[1]), float(pos[2]))

    def _store(self, sightings: list[Sighting]) -> None:
        if not sightings:
            return
        try:
            self.memory.record_many(sightings)
        except (sqlite3.Error, OSError) as e:
            self.failures += 1
            if self.failures == 1 or self.failures % 100 == 0:
                self._log("error", f"fleet memory: {len(sightings)} sighting(s) not stored ({self.failures} failed "
                                   f"writes so far): {e}")
            return
        with self._lock:
            self.recorded += len(sightings)
            self._new.extend(sightings)

    def from_answers(self, robot_id: str, goal_id: str, skill_set: SkillSet | None,
                     answers: Iterable[tuple[str, str]]) -> None:
        """A segment's answers, the first time they are reported (scheduler thread)."""
        things = found_things(skill_set, answers)
        if not things:
            return
        pos, now = self._position(robot_id), self._clock()
        names = dict.fromkeys(n for n in map(thing_name, things) if n)
        self._store([Sighting(robot_id, n, None, pos, now, goal_id) for n in names])

    def from_scene(self, robot_id: str, scene: Iterable[str]) -> None:
        """An idle robot's scene (TypeFly entries, ``cat x:0.28 ...``): each thing in it, at most
        every SCENE_REFRESH_S per robot and thing (the status thread)."""
        now = self._clock()
        fresh = []
        with self._lock:
            if len(self._scene_seen) > MAX_PENDING * 10:  # bounded: what is past its refresh can go
                self._scene_seen = {k: t for k, t in self._scene_seen.items() if now - t < SCENE_REFRESH_S}
            for entry in scene:
                label = thing_name(entry.split(" ", 1)[0])
                if label and now - self._scene_seen.get((robot_id, label), -math.inf) >= SCENE_REFRESH_S:
                    self._scene_seen[(robot_id, label)] = now
                    fresh.append(label)
        if fresh:
            pos = self._position(robot_id)
            self._store([Sighting(robot_id, label, None, pos, now) for label in fresh])

    def replicated(self, sightings: list[Sighting]) -> None:
        """Sightings another planner recorded (a standby's journal): stored here, not journaled again."""
        try:
            self.memory.record_many(sightings)
        except (sqlite3.Error, OSError) as e:
            self.failures += 1
            self._log("error", f"fleet memory: {len(sightings)} journaled sighting(s) not stored: {e}")

    def take_new(self) -> tuple[Sighting, ...]:
        """The sightings recorded since the last take (for the journal), oldest first."""
        with self._lock:
            out = tuple(self._new)
            self._new.clear()
        return out
