"""Active and standby planners over ROS: the journal of the goals in flight and the planner's role.

The active planner publishes its journal (``timely_fleet/PlannerJournal`` on ``planner/journal``:
reliable, transient-local, keep last 1, so a standby that starts late gets the latest at once)
at least every :data:`JOURNAL_PERIOD_S` and within :data:`JOURNAL_MIN_S` of a change (goals the
action server accepted that have not reached the core yet included, as new goals), signed with the key derived from every robot key
(:func:`~llm_planner_node.security.signing.journal_key`). A standby keeps the latest verified
journal of the highest term; when it has heard none for ``takeover_s`` (default ``lease_s / 2``)
it takes over (:meth:`PlannerNode.take_over`). Every planner publishes its role and term
(``timely_fleet/PlannerRole`` on ``planner/active``) whenever they change, and a standby every
:data:`ROLE_PERIOD_S` besides: clients re-attach to a new active planner, and standbys see each
other. Any number of standbys may follow one active planner: they take over in the order of
their names (:meth:`FailoverLink.rank`), each waiting :data:`TAKEOVER_STAGGER_S` more for every
live standby before it, and the others follow the new active planner. A planner that reads a
trusted journal of a higher term than its own has been replaced (it was paused or cut off): it
stops serving (fenced); so does an active planner that reads one of its own term from a planner
whose name sorts first (two standbys that took over at once: one yields).

This module holds the ROS side of that protocol (messages, QoS, signing); what a journal entry
holds and how a goal is adopted is in :mod:`llm_planner_node.service.takeover` (ROS-free).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rclpy.qos import LivelinessPolicy, QoSProfile
from timely_fleet.msg import JournalGoal, PlannerJournal, PlannerRole, SkillAnswer, SkillSegment

from llm_planner_node.core.skills import DEFAULT_SKILL_SETS, SkillCall
from llm_planner_node.core.task_model import Progress, Segment
from llm_planner_node.ros.messages import JOURNAL_TOPIC, LATCHED_QOS, ROLE_TOPIC
from llm_planner_node.ros.robot_link import skill_msgs
from llm_planner_node.security.signing import Counter, RobotKey, mac_bytes, message_fields, sign, verify
from llm_planner_node.service.ports import GoalIn
from llm_planner_node.service.takeover import JournalEntry

#: The active planner's journal goes out at least this often (and a standby's silence clock is
#: measured against it), and, after a goal arrived or ended or a segment went out, within
#: JOURNAL_MIN_S (at most that often: a burst of goals makes one journal, not one each).
JOURNAL_PERIOD_S = 0.2
JOURNAL_MIN_S = 0.05
#: A standby re-announces its role this often; one unheard for STANDBY_GONE_S counts as gone.
ROLE_PERIOD_S = 1.0
STANDBY_GONE_S = 3.0
#: A standby's takeover waits this much longer for every live standby that ranks before it.
TAKEOVER_STAGGER_S = 0.5
#: Goals a journal may carry (a rogue's oversize journal is dropped whole).
MAX_JOURNAL_GOALS = 10_000


def journal_qos(lease_s: float) -> QoSProfile:
    """The journal's QoS: latched (reliable, transient-local, keep last 1) with automatic
    liveliness whose lease is a third of the robots' (DDS declares a silent writer not alive)."""
    from rclpy.duration import Duration

    qos = QoSProfile(depth=LATCHED_QOS.depth, reliability=LATCHED_QOS.reliability, history=LATCHED_QOS.history,
                     durability=LATCHED_QOS.durability)
    if lease_s > 0:
        qos.liveliness = LivelinessPolicy.AUTOMATIC
        qos.liveliness_lease_duration = Duration(seconds=max(lease_s / 3, 0.2))
    return qos


def _rel(ts: tuple[float | None, ...]) -> list[float]:
    return [-1.0 if t is None else float(t) for t in ts]


def _unrel(ts: Any) -> tuple[float | None, ...]:
    return tuple(None if t < 0 else float(t) for t in ts)


def entry_msg(e: JournalEntry) -> Any:
    """A journal entry as a ``JournalGoal`` message."""
    g, p = e.goal, e.progress
    segs = [SkillSegment(goal_id=e.goal_id, robot_id=g.robot_id, sequence=p.seq_base + s.index, text=s.text,
                         skills=skill_msgs(s.calls, g.skill_set or None), final=s.final) for s in p.segments]
    return JournalGoal(
        goal_id=e.goal_id, robot_id=g.robot_id, robot_kind=g.robot_kind, task_type=g.task_type,
        instruction=g.instruction, skill_set=g.skill_set, ert_s=g.ert_s, alpha=g.alpha, beta=g.beta,
        max_tokens=g.max_tokens, cancel_key_sha256=e.cancel_key_sha256, age_s=e.age_s, scene=list(e.scene or ()),
        prompt_token_ids=list(e.prompt_token_ids), seq_base=p.seq_base, earlier_plans=list(p.earlier_plans),
        replans=e.replans, generated=p.generated, truncated=p.truncated, segments=segs,
        segment_tokens=[len(s.token_ids) for s in p.segments], token_ids=list(p.token_ids),
        gen_start_s=_rel(p.gen_start), gen_end_s=_rel(p.gen_end), dispatched_s=_rel(p.dispatched_at),
        exec_start_s=_rel(p.exec_start), exec_end_s=_rel(p.exec_end),
        answers=[SkillAnswer(segment=p.seq_base + k, skill=n, value=v) for k in sorted(p.answers)
                 for n, v in p.answers[k]],
        has_return_value=p.return_value is not None, return_value=p.return_value or "")


def entry_of_msg(m: Any) -> JournalEntry:
    """A ``JournalGoal`` message as a journal entry (ValueError if it does not hold together)."""
    skill_set = DEFAULT_SKILL_SETS.get(m.skill_set) if m.skill_set else None
    if m.skill_set and skill_set is None:
        raise ValueError(f"unknown skill set {m.skill_set!r}")
    counts = list(m.segment_tokens)
    ids = [int(t) for t in m.token_ids]
    if len(counts) != len(m.segments) or sum(counts) != len(ids):
        raise ValueError("segment token counts do not add up to the generation's token ids")
    segs, at = [], 0
    for k, (s, n) in enumerate(zip(m.segments, counts, strict=True)):
        calls = tuple(skill_set.validate(sk.name, list(sk.arg_values)) if skill_set is not None
                      else SkillCall(sk.name, tuple(sk.arg_values)) for sk in s.skills)
        segs.append(Segment(k, s.text, calls, tuple(ids[at:at + n]), bool(s.final)))
        at += n
    answers: dict[int, list[tuple[str, str]]] = {}
    for a in m.answers:
        answers.setdefault(int(a.segment) - int(m.seq_base), []).append((a.skill, a.value))
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


def sign_journal(msg: Any, key: RobotKey | None, counter: Counter) -> Any:
    """Sign a journal (unsigned when ``key`` is None: ``security.mode: off``)."""
    if key is not None:
        c = counter.next()
        fields = message_fields(msg)
        msg.key_id, msg.counter, msg.mac = key.key_id, c, list(sign(key, "journal", fields, c))
    return msg


def journal_problem(msg: Any, key: RobotKey | None) -> str | None:
    """Why a received journal is not trusted (None: it is)."""
    if len(msg.goals) > MAX_JOURNAL_GOALS:
        return f"oversize journal ({len(msg.goals)} goals)"
    if key is None:
        return None
    if not msg.mac:
        return "unsigned journal"
    if not verify(key, "journal", message_fields(msg), int(msg.counter), mac_bytes(msg), msg.key_id):
        return "journal signature does not verify"
    return None


@dataclass
class Heard:
    """The latest trusted journal of another planner, and when it arrived (monotonic s)."""

    msg: Any
    at: float


class FailoverLink:
    """The journal and role topics of one planner node (module docstring). ``on_higher_term(term,
    node)``: another planner claims a term above this one's (called from the executor)."""

    def __init__(self, node: Any, lease_s: float, key: RobotKey | None, counter: Counter,
                 on_higher_term: Callable[[int, str], None]) -> None:
        self._node = node
        self._key = key
        self._counter = counter
        self._on_higher_term = on_higher_term
        self.lease_s = lease_s
        self._sequence = 0
        self._lock = threading.Lock()
        self.heard: Heard | None = None
        self.drops: dict[str, int] = {}
        self.last_published = 0.0
        self.last_role_published = 0.0
        self.standbys: dict[str, float] = {}  # other standbys: name -> when its role was last heard
        # two planners of one namespace share the node name: the process tells them apart
        self._name = f"{node.get_fully_qualified_name()}@{socket.gethostname()}:{os.getpid()}"
        self._journal_pub = node.create_publisher(PlannerJournal, JOURNAL_TOPIC, journal_qos(lease_s))
        self._role_pub = node.create_publisher(PlannerRole, ROLE_TOPIC, LATCHED_QOS)
        # fencing follows the signed journal only: planner/active is unsigned (clients read it); a
        # standby's role there tells an active planner that one follows it (see PlannerNode._resumed)
        self.standby_seen = False
        self._subs = [node.create_subscription(PlannerJournal, JOURNAL_TOPIC, self._on_journal, journal_qos(lease_s)),
                      node.create_subscription(PlannerRole, ROLE_TOPIC, self._on_role, LATCHED_QOS)]

    def destroy(self) -> None:
        for sub in self._subs:
            self._node.destroy_subscription(sub)
        self._node.destroy_publisher(self._journal_pub)
        self._node.destroy_publisher(self._role_pub)
        self._subs = []

    # -- the active side --------------------------------------------------------------------------
    def publish_journal(self, term: int, entries: list[JournalEntry], cancel_keys: dict[str, str]) -> None:
        """Publish the journal of ``entries`` (any thread)."""
        goals = []
        for e in entries:
            m = entry_msg(e)
            m.cancel_key_sha256 = cancel_keys.get(e.goal_id, "")
            goals.append(m)
        with self._lock:
            self._sequence += 1
            msg = PlannerJournal(stamp=self._node.get_clock().now().to_msg(), node=self._name, term=term,
                                 sequence=self._sequence, lease_s=float(self.lease_s),
                                 link_counter=self._counter.last, goals=goals)
            self._journal_pub.publish(sign_journal(msg, self._key, self._counter))
            self.last_published = time.monotonic()

    @property
    def name(self) -> str:
        """This planner as its journal and role name it: node name@host:process id."""
        return self._name

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

    def _on_journal(self, msg: Any) -> None:
        if msg.node == self._name:
            return
        why = journal_problem(msg, self._key)
        if why is not None:
            self._drop(why)
            return
        term = int(msg.term)
        if term > self._node.term or (term == self._node.term and msg.node < self._name):
            self._on_higher_term(term, msg.node)
        heard = self.heard
        if heard is not None and term < int(heard.msg.term):
            self._drop("journal of an older term")
            return
        if heard is not None and heard.msg.node != msg.node:
            self._node.get_logger().info(f"now following planner {msg.node} (term {term}), "
                                         f"after {heard.msg.node} (term {heard.msg.term})")
        self.heard = Heard(msg, time.monotonic())

    def silent_for(self) -> float | None:
        """Seconds since the active planner's last journal (None: none heard yet)."""
        heard = self.heard
        return None if heard is None else time.monotonic() - heard.at
