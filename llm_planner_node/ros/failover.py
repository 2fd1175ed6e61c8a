"""Active and standby planners over ROS: the journal of the goals in flight and the planner's role.

The active planner publishes its journal (``timely_fleet/PlannerJournal`` on ``planner/journal``:
reliable, volatile, keep last :data:`JOURNAL_DEPTH`) as deltas: every :data:`JOURNAL_PERIOD_S`
the goals that changed since the last one (a goal started or re-planned, a segment sent, a
segment reported ended: only those goals, and the ids of those that ended; empty, it is the
heartbeat), and within :data:`JOURNAL_MIN_S` when the action server accepted goals (so a takeover
keeps them), so what it costs grows with the rate of changes, not with the fleet. Each journal also
carries the fleet memory's sightings recorded since the last one (each once; a snapshot carries
only those, never older ones), which a standby records in its own memory. A snapshot (every goal in flight) goes to a standby
that asks for one (``timely_fleet/JournalAck`` on ``planner/journal_ack``: it started late, or a gap
in the journals' sequence numbers shows it missed one) and, while a standby follows, every
:data:`SNAPSHOT_PERIOD_S`. With no standby following (none announced on ``planner/active`` for
:data:`STANDBY_GONE_S`) only the heartbeat goes out: a standby that appears asks for a snapshot.
The scheduler thread only takes the changed entries (:func:`~llm_planner_node.service.takeover.take`);
a writer thread of its own (:meth:`FailoverLink.write`) turns them into messages, signs each journal
once (HMAC with the key derived from every robot key,
:func:`~timely_robot.link.signing.journal_key`) and publishes it. A standby acknowledges the
journals it applied (the last sequence number, every :data:`ACK_PERIOD_S`), so an entry can be
known to be held by a standby.

A standby keeps what it heard in a :class:`~llm_planner_node.service.takeover.JournalReplica`;
when it has heard no journal for ``takeover_s`` (default ``lease_s / 2``) it takes over
(:meth:`~llm_planner_node.service.failover_role.FailoverRole.take_over`) with the goals the replica holds. Every planner publishes its role
and term (``timely_fleet/PlannerRole`` on ``planner/active``) whenever they change, and a standby
every :data:`ROLE_PERIOD_S` besides: clients re-attach to a new active planner, standbys see each
other and the active planner sees who follows it. Any number of standbys may follow one active
planner: they take over in the order of their names (:meth:`FailoverLink.rank`), each waiting
:data:`TAKEOVER_STAGGER_S` more for every live standby before it, and the others follow the new
active planner (its first journal is a snapshot). A planner that reads a trusted journal of a
higher term than its own has been replaced (it was paused or cut off): it stops serving (fenced);
so does an active planner that reads one of its own term from a planner whose name sorts first
(two standbys that took over at once: one yields).

This module holds the ROS side of that protocol (messages, QoS, signing, the writer thread); when
to journal, to take over or to yield is decided in :mod:`llm_planner_node.service.failover_role`,
and what a journal entry holds, how a replica follows and how a goal is adopted in
:mod:`llm_planner_node.service.takeover` (both ROS-free).
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rclpy.qos import DurabilityPolicy, HistoryPolicy, LivelinessPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from timely_fleet.msg import JournalAck, JournalGoal, PlannerJournal, PlannerRole

from timely_robot.skills import DEFAULT_SKILL_SETS, SkillCall
from llm_planner_node.core.task_model import Progress, Segment
from llm_planner_node.core.text import safe_text
from llm_planner_node.ros.memory_server import sighting_msg, sighting_of_msg
from llm_planner_node.ros.messages import JOURNAL_ACK_TOPIC, JOURNAL_TOPIC, LATCHED_QOS, ROLE_TOPIC
from timely_robot.link.signing import Counter, RobotKey, mac_bytes, message_fields, sign, verify
from llm_planner_node.service.ports import GoalIn
from llm_planner_node.service.failover_role import JOURNAL_PERIOD_S, JournalOut
from llm_planner_node.service.memory import Sighting
from llm_planner_node.service.takeover import JournalEntry, JournalReplica, aged

#: While a standby follows, a snapshot of every goal in flight goes out this often (a delta the
#: standby applied wrongly is mended within it), and at most every SNAPSHOT_MIN_S on request.
SNAPSHOT_PERIOD_S = 30.0
SNAPSHOT_MIN_S = 0.5
#: A standby out of sync asks for a snapshot again after this long without one.
SNAPSHOT_RETRY_S = 1.0
#: A standby acknowledges the last journal it applied at most this often (and every snapshot at once).
ACK_PERIOD_S = 0.2
#: Journals the writer keeps for a reader that has not acknowledged them yet (DDS reliability): a
#: reader that falls further behind misses some, notices the gap and asks for a snapshot.
JOURNAL_DEPTH = 200
#: A standby unheard for STANDBY_GONE_S (it re-announces its role every ROLE_PERIOD_S) counts as gone.
STANDBY_GONE_S = 3.0


#: Goals a journal may carry (a rogue's oversize journal is dropped whole).
MAX_JOURNAL_GOALS = 10_000
#: Sightings a journal may carry (the active planner keeps at most service/memory.MAX_PENDING new ones).
MAX_JOURNAL_SIGHTINGS = 10_000

#: planner/journal_ack: acknowledgements and snapshot requests, reliable, for whoever listens now.
ACK_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                     durability=DurabilityPolicy.VOLATILE)


def journal_qos(lease_s: float) -> QoSProfile:
    """The journal's QoS: reliable, volatile, keep last JOURNAL_DEPTH (every delta counts; a late
    standby asks for a snapshot instead of reading old deltas), with automatic liveliness whose
    lease is a third of the robots' (DDS declares a silent writer not alive)."""
    from rclpy.duration import Duration

    qos = QoSProfile(depth=JOURNAL_DEPTH, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                     durability=DurabilityPolicy.VOLATILE)
    if lease_s > 0:
        qos.liveliness = LivelinessPolicy.AUTOMATIC
        qos.liveliness_lease_duration = Duration(seconds=max(lease_s / 3, 0.2))
    return qos


def journal_node_of(raw: bytes) -> str | None:
    """The ``node`` field of a serialized PlannerJournal (CDR: a 4-byte encapsulation header, the
    stamp's two 32-bit integers, then the string's 32-bit length and bytes), read without
    deserializing the journal; None if the bytes do not hold one."""
    if len(raw) < 16:
        return None
    little = bool(raw[1] & 1)  # encapsulation: its low bit says little-endian (CDR_LE 0x0001, CDR2_LE 0x0007)
    n = int.from_bytes(raw[12:16], "little" if little else "big")
    if n < 1 or 16 + n > len(raw):
        return None
    return raw[16:16 + n - 1].decode("utf-8", errors="replace")  # the length counts the NUL


def _rel(ts: tuple[float | None, ...]) -> list[float]:
    return [-1.0 if t is None else float(t) for t in ts]


def _unrel(ts: Any) -> tuple[float | None, ...]:
    return tuple(None if t < 0 else float(t) for t in ts)


def _progress_fields(e: JournalEntry) -> dict[str, Any]:
    """The fields of a ``JournalGoal`` every entry carries: the goal's progress, flattened."""
    p = e.progress
    skill_names: list[str] = []
    arg_counts: list[int] = []
    args: list[str] = []
    for seg in p.segments:
        for c in seg.calls:
            skill_names.append(c.name)
            arg_counts.append(len(c.args))
            args.extend(str(a) for a in c.args)
    answers = [(p.seq_base + k, n, v) for k in sorted(p.answers) for n, v in p.answers[k]]
    return dict(
        goal_id=e.goal_id, robot_id=e.goal.robot_id, age_s=e.age_s, seq_base=p.seq_base, generated=p.generated,
        truncated=p.truncated, segment_texts=[seg.text for seg in p.segments],
        segment_final=[bool(seg.final) for seg in p.segments], segment_skills=[len(seg.calls) for seg in p.segments],
        skill_names=skill_names, skill_arg_counts=arg_counts, skill_args=args,
        segment_tokens=[len(seg.token_ids) for seg in p.segments], token_ids=list(p.token_ids),
        gen_start_s=_rel(p.gen_start), gen_end_s=_rel(p.gen_end), dispatched_s=_rel(p.dispatched_at),
        exec_start_s=_rel(p.exec_start), exec_end_s=_rel(p.exec_end),
        answer_segments=[k for k, _, _ in answers], answer_skills=[n for _, n, _ in answers],
        answer_values=[v for _, _, v in answers],
        has_return_value=p.return_value is not None, return_value=p.return_value or "")


def entry_msg(e: JournalEntry) -> Any:
    """A journal entry as a ``JournalGoal`` message (a progress-only entry leaves the static fields
    empty)."""
    if e.progress_only:
        return JournalGoal(progress_only=True, **_progress_fields(e))
    g, p = e.goal, e.progress
    return JournalGoal(
        robot_kind=g.robot_kind, task_type=g.task_type, instruction=g.instruction, skill_set=g.skill_set,
        ert_s=g.ert_s, alpha=g.alpha, beta=g.beta, max_tokens=g.max_tokens, cancel_key_sha256=e.cancel_key_sha256,
        scene=list(e.scene or ()), prompt_token_ids=list(e.prompt_token_ids), earlier_plans=list(p.earlier_plans),
        replans=e.replans, **_progress_fields(e))


def entry_of_msg(m: Any) -> JournalEntry:
    """A ``JournalGoal`` message as a journal entry (ValueError if it does not hold together)."""
    if m.progress_only:
        raise ValueError("a progress-only entry whose whole entry was never received")
    skill_set = DEFAULT_SKILL_SETS.get(m.skill_set) if m.skill_set else None
    if m.skill_set and skill_set is None:
        raise ValueError(f"unknown skill set {m.skill_set!r}")
    texts, finals, per_seg, counts = list(m.segment_texts), list(m.segment_final), list(m.segment_skills), list(m.segment_tokens)
    names, arg_counts, args = list(m.skill_names), list(m.skill_arg_counts), list(m.skill_args)
    ids = [int(t) for t in m.token_ids]
    if not len(texts) == len(finals) == len(per_seg) == len(counts) or sum(counts) != len(ids):
        raise ValueError("segment token counts do not add up to the generation's token ids")
    if sum(per_seg) != len(names) or len(arg_counts) != len(names) or sum(arg_counts) != len(args):
        raise ValueError("the segments' skill calls do not add up")
    segs, at, call, arg = [], 0, 0, 0
    for k, (text, final, n_calls, n_tokens) in enumerate(zip(texts, finals, per_seg, counts, strict=True)):
        calls = []
        for _ in range(n_calls):
            values = args[arg:arg + arg_counts[call]]
            calls.append(skill_set.validate(names[call], values) if skill_set is not None
                         else SkillCall(names[call], tuple(values)))
            arg += arg_counts[call]
            call += 1
        segs.append(Segment(k, text, tuple(calls), tuple(ids[at:at + n_tokens]), bool(final)))
        at += n_tokens
    answers: dict[int, list[tuple[str, str]]] = {}
    for seq, skill, value in zip(m.answer_segments, m.answer_skills, m.answer_values, strict=True):
        answers.setdefault(int(seq) - int(m.seq_base), []).append((skill, value))
    progress = Progress(segments=tuple(segs), gen_start=_unrel(m.gen_start_s), gen_end=_unrel(m.gen_end_s),  # type: ignore[arg-type]
                        dispatched_at=_unrel(m.dispatched_s), exec_start=_unrel(m.exec_start_s),
                        exec_end=_unrel(m.exec_end_s), generated=bool(m.generated), truncated=bool(m.truncated),
                        answers={k: tuple(v) for k, v in answers.items()},
                        return_value=m.return_value if m.has_return_value else None, seq_base=int(m.seq_base),
                        earlier_plans=tuple(m.earlier_plans))
    return JournalEntry(goal_id=m.goal_id, goal=GoalIn.of(m), age_s=float(m.age_s),
                        scene=tuple(m.scene) if m.scene else None,
                        prompt_token_ids=tuple(int(t) for t in m.prompt_token_ids), progress=progress,
                        replans=int(m.replans), cancel_key_sha256=m.cancel_key_sha256)


#: The journal's writer lets other threads take the GIL after this much work on a delta (s): a
#: thread that waits for a busy one otherwise waits Python's switch interval (5 ms) each time.
#: A snapshot is written without pauses: it is rare, and each pause costs the writer up to a
#: switch interval to get the GIL back (1,000 goals' pauses would delay the heartbeat seconds).
WRITER_SLICE_S = 0.002


class GilSlices:
    """``pause()`` gives the GIL away (``time.sleep(0)``) once ``slice_s`` of work has passed since
    the last time: the scheduler thread waits at most a slice for a busy writer."""

    def __init__(self, slice_s: float = WRITER_SLICE_S) -> None:
        self.slice_s = slice_s
        self._since = time.perf_counter()

    def pause(self) -> None:
        now = time.perf_counter()
        if now - self._since >= self.slice_s:
            time.sleep(0)
            self._since = time.perf_counter()


def sign_journal(msg: Any, key: RobotKey | None, counter: Counter, kind: str = "journal",
                 between: Callable[[], None] | None = None) -> Any:
    """Sign a journal, or a journal acknowledgement (``kind`` ``journal_ack``), with one MAC over
    the whole message (unsigned when ``key`` is None: ``security.mode: off``); ``between()`` is
    called after each goal it encodes (:class:`GilSlices`)."""
    if key is not None:
        c = counter.next()
        fields = message_fields(msg, between)
        msg.key_id, msg.counter, msg.mac = key.key_id, c, list(sign(key, kind, fields, c))
    return msg


def journal_problem(msg: Any, key: RobotKey | None, kind: str = "journal") -> str | None:
    """Why a received journal (or acknowledgement) is not trusted (None: it is)."""
    if len(getattr(msg, "goals", ())) > MAX_JOURNAL_GOALS:
        return f"oversize journal ({len(msg.goals)} goals)"
    if len(getattr(msg, "sightings", ())) > MAX_JOURNAL_SIGHTINGS:
        return f"oversize journal ({len(msg.sightings)} sightings)"
    if key is None:
        return None
    if not msg.mac:
        return f"unsigned {kind.replace('_', ' ')}"
    if not verify(key, kind, message_fields(msg), int(msg.counter), mac_bytes(msg), msg.key_id):
        return f"{kind.replace('_', ' ')} signature does not verify"
    return None


@dataclass
class JournalStats:
    """What the active planner's journal cost: journals and snapshots published, goal entries,
    ends and sightings they carried, CPU seconds (the writer thread's, plus the scheduler thread's takes)."""

    journals: int = 0
    snapshots: int = 0
    entries: int = 0
    ended: int = 0
    cpu_s: float = 0.0
    snapshot_requests: int = 0
    sightings: int = 0


@dataclass
class Heard:
    """The latest trusted journal of another planner, and when it arrived (monotonic s)."""

    msg: Any
    at: float


class FailoverLink:
    """The journal, acknowledgement and role topics of one planner node (module docstring).
    ``role``: the planner's role (a :class:`~llm_planner_node.service.failover_role.FailoverRole`:
    its ``term`` and ``role``, and ``on_higher_term(term, node)``, called from the executor when
    another planner claims a term above this one's). The writer thread starts with the link and
    stops at :meth:`destroy`."""

    def __init__(self, node: Any, lease_s: float, key: RobotKey | None, counter: Counter, role: Any,
                 on_sightings: Callable[[list[Sighting]], None] | None = None) -> None:
        """``on_sightings(sightings)``: a standby's store for the sightings the active planner's
        journals carry (its fleet memory; None: they are not kept)."""
        self._node = node
        self._on_sightings = on_sightings
        self._key = key
        self._counter = counter
        self._role = role
        self.lease_s = lease_s
        self._sequence = 0
        self._lock = threading.Lock()  # the dicts the executor and the writer share (held briefly)
        self._publish_lock = threading.Lock()  # sequence numbers and publication order
        self.heard: Heard | None = None
        self.replica = JournalReplica()
        self.drops: dict[str, int] = {}
        self.stats = JournalStats()
        self.last_published = 0.0
        self.last_snapshot = 0.0
        self.last_role_published = 0.0
        self._last_ack = 0.0
        self._last_request = 0.0
        self._snapshot_wanted: str | None = None  # a standby asked for a snapshot (why)
        self.acked: dict[str, int] = {}  # standby name -> the last journal sequence it applied
        self.standbys: dict[str, float] = {}  # other standbys: name -> when its role or ack was last heard
        # two planners of one namespace share the node name: the process tells them apart
        self._name = f"{node.get_fully_qualified_name()}@{socket.gethostname()}:{os.getpid()}"
        self._journal_pub = node.create_publisher(PlannerJournal, JOURNAL_TOPIC, journal_qos(lease_s))
        self._ack_pub = node.create_publisher(JournalAck, JOURNAL_ACK_TOPIC, ACK_QOS)
        self._role_pub = node.create_publisher(PlannerRole, ROLE_TOPIC, LATCHED_QOS)
        # fencing follows the signed journal only: planner/active is unsigned (clients read it); a
        # standby's role there tells an active planner that one follows it (see FailoverRole.resumed)
        self.standby_seen = False
        # the journal arrives serialized: this planner's own journals are recognised by their
        # node field and never deserialized (DDS hands a node its own publications too)
        self._subs = [node.create_subscription(PlannerJournal, JOURNAL_TOPIC, self._on_raw_journal,
                                               journal_qos(lease_s), raw=True),
                      node.create_subscription(JournalAck, JOURNAL_ACK_TOPIC, self._on_ack, ACK_QOS),
                      node.create_subscription(PlannerRole, ROLE_TOPIC, self._on_role, LATCHED_QOS)]
        self._out: queue.SimpleQueue[JournalOut | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="journal-writer", daemon=True)
        self._writer.start()

    def destroy(self) -> None:
        self._out.put(None)
        self._writer.join(5.0)
        for sub in self._subs:
            self._node.destroy_subscription(sub)
        self._node.destroy_publisher(self._journal_pub)
        self._node.destroy_publisher(self._ack_pub)
        self._node.destroy_publisher(self._role_pub)
        self._subs = []

    @property
    def name(self) -> str:
        """This planner as its journal and role name it: node name@host:process id."""
        return self._name

    # -- the active side --------------------------------------------------------------------------
    def write(self, out: JournalOut) -> None:
        """Hand a journal to the writer thread (any thread; cheap: the scheduler thread calls it)."""
        self._out.put(out)

    def _write_loop(self) -> None:
        while True:
            out = self._out.get()
            if out is None:
                return
            try:
                self.publish_now(out)
            except Exception as e:  # noqa: BLE001 - a context shut down under the writer: nothing to publish to
                self._drop(f"journal not published: {type(e).__name__}")

    def publish_now(self, out: JournalOut) -> bool:
        """Serialize, sign and publish ``out`` on the calling thread (the writer's; a takeover's
        first journal); an empty delta only when the heartbeat is due. True if published."""
        t0 = time.thread_time()
        with self._publish_lock:  # not the executor's lock: a snapshot takes a while to write
            now = time.monotonic()
            if (not (out.snapshot or out.entries or out.ended or out.sightings)
                    and now - self.last_published < JOURNAL_PERIOD_S * 0.9):
                return False
            pause = None if out.snapshot else GilSlices().pause
            goals = []
            for e in out.entries:
                goals.append(entry_msg(e))
                if pause is not None:
                    pause()
            self._sequence += 1
            msg = PlannerJournal(stamp=self._node.get_clock().now().to_msg(), node=self._name, term=out.term,
                                 sequence=self._sequence, snapshot=out.snapshot, lease_s=float(self.lease_s),
                                 link_counter=self._counter.last, goals=goals, ended_goal_ids=list(out.ended),
                                 sightings=[sighting_msg(s) for s in out.sightings])
            self._journal_pub.publish(sign_journal(msg, self._key, self._counter, between=pause))
            self.last_published = now
            st = self.stats
            st.journals += 1
            st.entries += len(goals)
            st.ended += len(out.ended)
            st.sightings += len(out.sightings)
            if out.snapshot:
                st.snapshots += 1
                self.last_snapshot = now
            st.cpu_s += time.thread_time() - t0 + out.take_cpu_s
        return True

    def followers(self) -> int:
        """Standbys that follow this planner now: role or acknowledgement heard in the last STANDBY_GONE_S."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for t in self.standbys.values() if now - t <= STANDBY_GONE_S)

    def snapshot_due(self) -> str | None:
        """Why a snapshot should go out now (a standby asked, or SNAPSHOT_PERIOD_S passed while one
        follows), or None; a request is answered at most every SNAPSHOT_MIN_S."""
        now = time.monotonic()
        since = now - self.last_snapshot
        with self._lock:
            if self._snapshot_wanted is not None and since >= SNAPSHOT_MIN_S:
                why, self._snapshot_wanted = self._snapshot_wanted, None
                return why
        if since >= SNAPSHOT_PERIOD_S and self.followers():
            return "period"
        return None

    def publish_role(self, role: str, term: int, adopted: list[str] = ()) -> None:
        self._role_pub.publish(PlannerRole(stamp=self._node.get_clock().now().to_msg(), node=self._name, role=role,
                                           term=term, adopted_goal_ids=list(adopted)))
        self.last_role_published = time.monotonic()

    def rank(self) -> int:
        """How many live standbys (role heard in the last STANDBY_GONE_S) take over before this
        one: those whose names sort before its own."""
        now = time.monotonic()
        with self._lock:
            live = [n for n, t in self.standbys.items() if now - t <= STANDBY_GONE_S]
        return sum(1 for n in live if n < self._name)

    def _on_ack(self, msg: Any) -> None:
        if msg.node == self._name or msg.active != self._name:
            return
        why = journal_problem(msg, self._key, "journal_ack")
        if why is not None:
            self._drop(why)
            return
        with self._lock:
            self.standbys[msg.node] = time.monotonic()
            self.acked[msg.node] = int(msg.sequence)
            if msg.snapshot:
                self._snapshot_wanted = f"{msg.node} asked: {msg.reason}"
                self.stats.snapshot_requests += 1

    # -- the standby side -------------------------------------------------------------------------
    def _drop(self, why: str) -> None:
        self.drops[why] = self.drops.get(why, 0) + 1

    def _on_role(self, msg: Any) -> None:
        if msg.node == self._name:
            return
        with self._lock:
            if msg.role == "standby":
                self.standby_seen = True
                self.standbys[msg.node] = time.monotonic()
            else:  # it took over (or was active all along): no longer in line
                self.standbys.pop(msg.node, None)
                self.acked.pop(msg.node, None)

    def _on_raw_journal(self, raw: bytes) -> None:
        node = journal_node_of(raw)
        if node == self._name:
            return
        try:
            msg = deserialize_message(raw, PlannerJournal)
        except Exception:  # noqa: BLE001 - bytes that are no journal
            self._drop("malformed journal")
            return
        self._on_journal(msg)

    def _on_journal(self, msg: Any) -> None:
        if msg.node == self._name:
            return
        why = journal_problem(msg, self._key)
        if why is not None:
            self._drop(why)
            return
        term = int(msg.term)
        mine = self._role.term
        if term > mine or (term == mine and msg.node < self._name):
            self._role.on_higher_term(term, msg.node)
        heard = self.heard
        if heard is not None and term < int(heard.msg.term):
            self._drop("journal of an older term")
            return
        if heard is not None and heard.msg.node != msg.node:
            self._node.get_logger().info(f"now following planner {msg.node} (term {term}), "
                                         f"after {heard.msg.node} (term {heard.msg.term})")
        now = time.monotonic()
        self.heard = Heard(msg, now)
        if self._role.role != "standby":
            return
        was_in_sync = self.replica.needs_snapshot is None
        need = self.replica.apply(msg, now)
        if msg.sightings and self._on_sightings is not None:  # what robots saw: into this planner's memory
            self._on_sightings([sighting_of_msg(m) for m in msg.sightings])
        if need is not None:  # asked at once, and again every SNAPSHOT_RETRY_S until a snapshot comes
            if was_in_sync or now - self._last_request >= SNAPSHOT_RETRY_S:
                self._last_request = now
                self._ack(msg, snapshot=need)
        elif msg.snapshot or now - self._last_ack >= ACK_PERIOD_S:
            self._ack(msg)

    def _ack(self, msg: Any, snapshot: str | None = None) -> None:
        """Acknowledge the last journal applied to planner ``msg.node``; ask for a snapshot if ``snapshot`` (why)."""
        ack = JournalAck(stamp=self._node.get_clock().now().to_msg(), node=self._name, active=msg.node,
                         term=int(msg.term), sequence=self.replica.sequence, snapshot=snapshot is not None,
                         reason=snapshot or "")
        self._ack_pub.publish(sign_journal(ack, self._key, self._counter, "journal_ack"))
        self._last_ack = time.monotonic()

    def silent_for(self) -> float | None:
        """Seconds since the active planner's last journal (None: none heard yet)."""
        heard = self.heard
        return None if heard is None else time.monotonic() - heard.at

    def heard_at(self) -> float | None:
        """When the active planner's last journal arrived (``time.monotonic()``; None: none yet)."""
        heard = self.heard
        return None if heard is None else heard.at

    def adoptable(self) -> list[JournalEntry]:
        """The goals the replica holds as entries to adopt, their ages run on to now (a goal
        whose entry cannot be read is logged and left out)."""
        out = []
        for m, since in self.replica.entries():
            try:
                out.append(aged(entry_of_msg(m), since))
            except (ValueError, KeyError) as e:
                self._node.get_logger().error(f"goal {safe_text(m.goal_id)[:8]} of the journal cannot be adopted: "
                                              f"{safe_text(str(e), 200)}")
        return out
