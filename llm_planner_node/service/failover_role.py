"""A planner's role in failover, without ROS: its term, its journal's timing, a standby's watch on
the active planner and the takeover (docs/guides/failover.md).

:class:`FailoverRole` decides; the node's ROS parts act through two narrow ports: the journal
link (:class:`JournalLink`, :class:`llm_planner_node.ros.failover.FailoverLink` over ROS: the
journal, acknowledgement and role topics) and :class:`TakeoverPorts` (the node: heartbeats to
the robots, the action server and its services, adopting a goal in the action server). Every 50 ms
the node calls :meth:`FailoverRole.tick`: the active planner journals (a delta of the goals that
changed every :data:`JOURNAL_PERIOD_S`, empty as a heartbeat; within :data:`JOURNAL_MIN_S` of
goals the action server accepted; a snapshot when one is due), a standby watches the active
planner's silence (:class:`SilenceWatch`) and takes over past ``takeover_s`` (plus
:data:`TAKEOVER_STAGGER_S` for every live standby that ranks before it). A planner replaced by
another (a trusted journal of a higher term, or a pause past a standby's takeover time) is fenced:
it stops serving and sends nothing more.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

from llm_planner_node.core.task_model import Request
from llm_planner_node.core.text import safe_text
from llm_planner_node.service.cancel_rights import CancelRights
from llm_planner_node.service.health_report import ERROR, OK, WARN, StatusReport
from llm_planner_node.service.ports import GoalIn
from llm_planner_node.service.takeover import JournalEntry, JournalTake
from timely_robot.link.rules import ACTIVE, STANDBY, PlannerTerm

#: The active planner's journal goes out this often (the changes since the last one, batched; an
#: empty delta when nothing changed: a standby's silence clock is measured against it), and within
#: JOURNAL_MIN_S of a goal the action server accepted.
JOURNAL_PERIOD_S = 0.2
JOURNAL_MIN_S = 0.05
#: A standby re-announces its role this often.
ROLE_PERIOD_S = 1.0
#: A standby's takeover waits this much longer for every live standby that ranks before it.
TAKEOVER_STAGGER_S = 0.5

GoalEnd = Callable[[Request | str], None]


@dataclass(frozen=True)
class JournalOut:
    """One journal for the link's writer thread: a ``snapshot`` (every goal in flight) or a delta
    (the goals that changed; ``ended``: those that ended), at ``term``; ``take_cpu_s``: what
    taking the entries cost the scheduler thread; ``sightings``: what robots saw since the last one."""

    term: int
    snapshot: bool
    entries: tuple[JournalEntry, ...] = ()
    ended: tuple[str, ...] = ()
    take_cpu_s: float = 0.0
    sightings: tuple[Any, ...] = ()  # the fleet memory's new sightings (service/memory.Sighting)


class SilenceWatch:
    """The active planner's silence as a standby judges it: the real time since the last journal
    heard, found past the takeover time at two watch ticks in a row before it counts. rclpy's
    executor runs the timers of one wait before its subscriptions and waits again before a
    timer's next tick, so between the two ticks every subscription that had a message at the
    first tick's wait has been taken: a standby that did not run for a while (starved on a loaded
    host, paused) reads a journal the living active planner sent meanwhile before it could judge
    it dead, and one that died is judged a tick later than its silence, still at the real time
    of the silence."""

    def __init__(self) -> None:
        self._past: float | None = None  # the heard_at a tick last found past the takeover time

    def observe(self, heard_at: float | None, now: float, takeover_s: float) -> float | None:
        """The silence to act on at this tick (``now``), or None: no journal heard yet, not past
        ``takeover_s``, or past it only since this tick; ``heard_at``: when the last journal arrived."""
        if heard_at is None or now - heard_at < takeover_s:
            self._past = None
            return None
        if self._past != heard_at:  # first found past: once more, after the journals waiting are read
            self._past = heard_at
            return None
        return now - heard_at


class JournalLink(Protocol):
    """The journal, acknowledgement and role topics as the role uses them (FailoverLink over ROS)."""

    standby_seen: bool  # a standby has announced itself on planner/active
    last_role_published: float  # monotonic s
    heard: Any  # the latest trusted journal of another planner (``.msg``, ``.at``), or None
    replica: Any  # a standby's JournalReplica
    stats: Any  # the active planner's JournalStats
    acked: dict[str, int]
    drops: dict[str, int]

    def followers(self) -> int: ...
    def snapshot_due(self) -> str | None: ...
    def publish_role(self, role: str, term: int, adopted: list[str] = ...) -> None: ...
    def rank(self) -> int: ...
    def heard_at(self) -> float | None: ...
    def silent_for(self) -> float | None: ...
    def write(self, out: JournalOut) -> None: ...
    def publish_now(self, out: JournalOut) -> bool: ...
    def adoptable(self) -> list[JournalEntry]: ...


class JournalService(Protocol):
    """The planner service as the role uses it (:class:`.planner_service.PlannerService`)."""

    accepting: bool
    params: Any

    def journal(self, publish: Callable[[JournalTake], None], what: str = "delta") -> None: ...
    def in_flight(self, goal_id: str) -> bool: ...
    def adopt(self, entries: list[JournalEntry], on_end_of: Callable[[str], GoalEnd]) -> None: ...


class TakeoverPorts(Protocol):
    """What a takeover and a fence do through the node: its action server and services."""

    def serve(self) -> None:
        """Bring up the action server and the planner's services."""

    def unserve(self) -> None:
        """Take them down: no more goals or requests reach this planner."""

    def adopt_goal(self, entry: JournalEntry) -> GoalEnd | None:
        """Adopt the entry's goal in the action server under its own goal id: the callback that
        reports its end, or None when it cannot be adopted."""

    def log(self, level: str, text: str) -> None: ...


class RobotSends(Protocol):
    """What a takeover sends the robots (:class:`llm_planner_node.ros.planner_ports.RosPorts`)."""

    def heartbeat(self, goal_id: str, robot_id: str) -> None:
        """Send the robot a heartbeat at the planner's term now (renews its lease)."""

    def raise_link_counter(self, counter: int) -> None:
        """Continue the signed link's counter above ``counter`` (the last active planner's)."""


class FailoverRole:
    """One planner's term and role, its journal's timing and a standby's takeover (module docstring).

    ``standby``: follow the active planner's journal and take over when it falls silent;
    ``on_fenced(reason)``: called once when another planner took over from this one. The service,
    the journal link and the robot sends exist between configure and cleanup (:meth:`attach`,
    :meth:`detach`); the term outlives them."""

    def __init__(self, ports: TakeoverPorts, cancel_rights: CancelRights, *, term: int, standby: bool,
                 on_fenced: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ports = ports
        self._cancel_rights = cancel_rights
        self._term = PlannerTerm(term, STANDBY if standby else ACTIVE)
        self._takeover_setting_s = 0.0
        self._lease_s = 0.0
        self._on_fenced = on_fenced
        self._clock = clock
        self.fenced: str | None = None  # why this planner stopped serving (another took over)
        self.takeovers: list[dict[str, Any]] = []  # each takeover: term, from, adopted goal ids, seconds, why
        self.lifecycle_active = False  # a standby takes over only while its node is active
        self._link: JournalLink | None = None
        self._service: JournalService | None = None
        self._sends: RobotSends | None = None
        self._last_tick = clock()  # the tick's last run (a pause shows as a gap)
        self._silence = SilenceWatch()
        self._posted = False  # a journal take is queued on the scheduler thread
        self._last_take = 0.0
        # while a standby follows: goals that ended since the last journal, and goals the action
        # server accepted that have not reached the core yet (goal id -> when, the goal)
        self._following = False
        self._lock = threading.Lock()
        self._ended: list[str] = []
        self._unjournaled: dict[str, tuple[float, GoalIn]] = {}

    # -- term and role ---------------------------------------------------------------------------
    @property
    def term(self) -> int:
        """The term every segment, heartbeat and stop this planner sends carries."""
        return self._term.value

    @property
    def role(self) -> str:
        return self._term.role

    @property
    def link(self) -> JournalLink | None:
        return self._link

    def set_term(self, term: int) -> None:
        """Raise the planner's term (any thread; it must be above the current one, else ValueError):
        every message sent from now on, re-sends included, carries it, and adapters that see it
        drop the messages of lower terms."""
        old = self._term.raise_to(term)
        self._ports.log("info", f"planner term {old} -> {self.term} (role {self.role})")

    def set_timing(self, takeover_s: float, lease_s: float) -> None:
        """``planner.takeover_s`` (0: half the robots' lease) and ``security.lease_s``."""
        self._takeover_setting_s, self._lease_s = takeover_s, lease_s

    def takeover_s(self) -> float:
        """The active planner's silence after which a standby takes over."""
        t = self._takeover_setting_s
        return t if t > 0 else max(self._lease_s / 2, 0.5)

    def attach(self, service: JournalService, link: JournalLink, sends: RobotSends) -> None:
        """The configured node's service, journal link and robot sends."""
        self._service, self._link, self._sends = service, link, sends

    def detach(self) -> None:
        self._service = self._link = self._sends = None

    # -- goals as the action server sees them ----------------------------------------------------
    def goal_accepted(self, goal_id: str, goal: GoalIn) -> None:
        """A goal the action server accepted: journaled as new until it reaches the core."""
        if self._following:
            with self._lock:
                self._unjournaled[goal_id] = (self._clock(), goal)

    def goal_ended(self, goal_id: str) -> None:
        if self._following:
            with self._lock:
                self._unjournaled.pop(goal_id, None)
                self._ended.append(goal_id)

    def resumed(self) -> bool:
        """True while the tick has not run for a standby's takeover time (this planner was paused,
        and its first look at the journal is still to come): its answers wait."""
        return (self.role == ACTIVE and self._link is not None and self._link.standby_seen
                and self._clock() - self._last_tick >= self.takeover_s())

    # -- the tick --------------------------------------------------------------------------------
    def tick(self) -> None:
        """Every 50 ms: the active planner's journal (:meth:`_journal`), or a standby's watch on
        the active one."""
        service, link = self._service, self._link
        now = self._clock()
        gap, self._last_tick = now - self._last_tick, now
        if service is None or link is None or self.fenced is not None:
            return
        if self.role == ACTIVE and link.standby_seen and gap >= self.takeover_s():
            # paused (SIGSTOP, a frozen host) past a standby's takeover time: it has taken over, or
            # would have; a planner that cannot know which must not command robots or answer clients
            self.fence(f"this planner was paused for {gap:.1f} s while a standby followed it "
                       f"(it takes over after {self.takeover_s():g} s)")
            return
        if self.role == ACTIVE:
            self._journal(service, link, now)
            return
        if now - link.last_role_published >= ROLE_PERIOD_S:
            link.publish_role(STANDBY, self.term)  # standbys see each other (their order of takeover)
        rank = link.rank()
        silent = self._silence.observe(link.heard_at(), now, self.takeover_s() + rank * TAKEOVER_STAGGER_S)
        if silent is not None and self.lifecycle_active:
            self.take_over(f"no journal for {silent:.2f} s" + (f" ({rank} standby(s) before this one were silent too)"
                                                               if rank else ""))

    def _journal(self, service: JournalService, link: JournalLink, now: float) -> None:
        """The active planner's journal: while a standby follows, a delta of the goals that changed
        every JOURNAL_PERIOD_S (empty, it is the heartbeat), within JOURNAL_MIN_S when goals were
        accepted (a takeover then keeps them), and a snapshot when one is due; with none
        following, only the heartbeat, every JOURNAL_PERIOD_S. Each goes through the scheduler
        thread (a planner whose scheduler is stuck falls silent and is taken over), which only
        takes the entries."""
        if self._posted:
            return  # the last take is still queued behind the scheduler's work
        following = link.followers() > 0
        snapshot = link.snapshot_due() is not None
        if snapshot and not following:
            following = True  # a standby asked before its role was heard
        if following != self._following:
            with self._lock:
                self._following = following
                self._ended.clear()
                self._unjournaled.clear()
            snapshot = snapshot or following  # a standby (again): it starts from a snapshot
        since = now - self._last_take
        fresh = following and bool(self._unjournaled)  # goals accepted since the last take
        if not (snapshot or since >= JOURNAL_PERIOD_S or (fresh and since >= JOURNAL_MIN_S)):
            return
        self._posted, self._last_take = True, now
        term = self.term
        what = "snapshot" if snapshot else "delta" if following else "heartbeat"
        service.journal(lambda take: self._taken(link, term, take), what)

    def _taken(self, link: JournalLink, term: int, take: JournalTake) -> None:
        """Scheduler thread: hand the take, the goals that ended since the last one and the goals
        accepted but not yet in the core to the link's writer thread."""
        self._posted = False
        service = self._service
        with self._lock:
            ended, self._ended = tuple(self._ended), []
            fresh = []
            now = self._clock()
            for goal_id, (at, goal) in list(self._unjournaled.items()):
                if service is not None and service.in_flight(goal_id):
                    del self._unjournaled[goal_id]  # in the core: its start is in a take
                else:
                    fresh.append(JournalEntry(goal_id=goal_id, goal=goal, age_s=max(0.0, now - at)))
        # a whole entry carries its client's cancel key (the service does not know it)
        entries = tuple(replace(e, cancel_key_sha256=key) if not e.progress_only
                        and (key := self._cancel_rights.key_of(e.goal_id)) else e for e in take.entries + tuple(fresh))
        link.write(JournalOut(term, take.snapshot, entries, () if take.snapshot else ended, take.cpu_s,
                              take.sightings))

    # -- takeover and fencing --------------------------------------------------------------------
    def take_over(self, why: str) -> list[str]:
        """Become the active planner (executor thread): a term above the last active one's, the
        robots told at once (a heartbeat at the new term renews their lease and fences the old
        planner off), the action server and services up, and every goal of the last journal
        adopted under its own goal id (the generation continues from its token ids, unfinished
        segments are sent again). Returns the adopted goal ids."""
        link, service, sends = self._link, self._service, self._sends
        if link is None or service is None or sends is None:
            raise RuntimeError("a planner takes over only while configured")
        t0 = self._clock()
        heard = link.heard
        journal = heard.msg if heard is not None else None
        old_term = max(self.term, int(journal.term) if journal is not None else 0)
        self._term.role = ACTIVE
        self.set_term(old_term + 1)
        if journal is not None:
            sends.raise_link_counter(int(journal.link_counter))
        entries = link.adoptable()
        for e in entries:  # the robots hear the new term first: their lease is renewed, the old planner fenced off
            if service.params.robot(e.goal.robot_id) is not None:
                sends.heartbeat(e.goal_id, e.goal.robot_id)
        # then the new term's journal, a snapshot with the goals being adopted: another standby
        # follows this planner from it instead of taking over too (its turn comes TAKEOVER_STAGGER_S later)
        link.publish_now(JournalOut(self.term, True, tuple(entries)))
        self._ports.serve()
        ends: dict[str, GoalEnd] = {}
        for e in entries:
            end = self._ports.adopt_goal(e)
            if end is not None:
                ends[e.goal_id] = end
                self._cancel_rights.protect(e.goal_id, e.cancel_key_sha256)
        adopted = list(ends)
        service.accepting = True
        service.adopt([e for e in entries if e.goal_id in ends], ends.__getitem__)
        link.publish_role(ACTIVE, self.term, adopted)
        source = journal.node if journal is not None else "(none heard)"
        self.takeovers.append({"term": self.term, "from": source, "adopted": adopted, "s": self._clock() - t0,
                               "why": why})
        self._ports.log("warning", f"took over from planner {safe_text(source)} (term {old_term}) at term {self.term}: "
                                   f"{why}; adopted {len(adopted)} goal(s){': ' if adopted else ''}"
                                   f"{', '.join(a[:8] for a in adopted[:20])}{' ...' if len(adopted) > 20 else ''}")
        return adopted

    def on_higher_term(self, term: int, node: str) -> None:
        """A trusted journal of another planner at ``term`` above this one's (or at its own, from
        a planner whose name sorts first): an active planner has been replaced (it was paused or
        cut off, or another standby took over at the same moment) and stops serving; a standby
        follows."""
        if self.role != ACTIVE or self.fenced is not None:
            return
        if term == self.term:
            self.fence(f"planner {node} is active at this planner's term {term} (both took over at once; "
                       "the planner whose name sorts first stays)")
            return
        self.fence(f"planner {node} took over at term {term} (this planner's term is {self.term})")

    def fence(self, why: str) -> None:
        """Stop serving: another planner took over (or may have) from this one."""
        if self.fenced is not None:
            return
        self.fenced = why
        self._ports.log("error", f"{why}: this planner stops serving; its goals are that planner's now")
        self._ports.unserve()
        if self._service is not None:
            self._service.accepting = False
        if self._on_fenced is not None:
            self._on_fenced(why)

    # -- diagnostics -----------------------------------------------------------------------------
    def report(self, name: str) -> StatusReport:
        """``<node>: role``: the role and term, the active planner a standby follows (in sync or
        not), the journal's cost on the active planner, and the takeovers."""
        role, term, link = self.role, self.term, self._link
        values = [("role", role), ("term", str(term)), ("takeovers", str(len(self.takeovers)))]
        level, message = OK, f"{role}, term {term}"
        if self.fenced is not None:
            level, message = ERROR, f"fenced: {self.fenced}"
        elif link is not None and role == STANDBY:
            heard = link.heard
            if heard is None:
                level, message = WARN, f"{role}, term {term}: no active planner heard yet"
            else:
                rank, replica, silent = link.rank(), link.replica, link.silent_for() or 0.0
                sync = "in sync" if replica.needs_snapshot is None else f"out of sync ({replica.needs_snapshot})"
                message = (f"{role}, term {term}: following {heard.msg.node} (term {heard.msg.term}, "
                           f"{len(replica)} goal(s) in flight, heard {silent:.1f} s ago, {sync})"
                           + (f"; {rank} standby(s) take over before this one" if rank else ""))
                if replica.needs_snapshot is not None:
                    level = WARN
                values += [("following", heard.msg.node), ("standbys before this one", str(rank))]
                values += [(f"replica {k}", str(v)) for k, v in (
                    ("goals", len(replica)), ("sequence", replica.sequence), ("journals applied", replica.applied),
                    ("snapshots applied", replica.snapshots), ("sequence gaps", replica.gaps))]
        elif link is not None and role == ACTIVE:
            st = link.stats
            values += [(f"journal {k}", str(v)) for k, v in (
                ("standbys following", link.followers()), ("journals", st.journals), ("snapshots", st.snapshots),
                ("entries", st.entries), ("ended", st.ended), ("snapshot requests", st.snapshot_requests),
                ("cpu s", f"{st.cpu_s:.3f}"),
                ("acknowledged", ", ".join(f"{n}: {q}" for n, q in sorted(link.acked.items())) or "-"))]
        if self.takeovers:
            last = self.takeovers[-1]
            values.append(("last takeover", f"term {last['term']} from {last['from']}: "
                                            f"{len(last['adopted'])} goal(s) adopted"))
        if link is not None:
            values += [(f"journal dropped: {k}", str(v)) for k, v in sorted(link.drops.items())]
        return StatusReport(level, f"{name}: role", message, values)
