"""A planner's failover role without ROS (llm_planner_node/service/failover_role.py): when the
active planner journals and what, when a standby takes over and in which order it acts, and when a
planner is fenced. The journal link, the service and the node are recording stand-ins for their
ports; the same role runs over ROS in tests/e2e/test_failover_over_ros.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llm_planner_node.service.cancel_rights import CancelRights
from llm_planner_node.service.failover_role import (JOURNAL_MIN_S, JOURNAL_PERIOD_S, TAKEOVER_STAGGER_S,
                                                    FailoverRole, JournalOut)
from llm_planner_node.service.health_report import ERROR, OK, WARN
from llm_planner_node.service.ports import GoalIn
from llm_planner_node.service.takeover import JournalEntry, JournalTake
from timely_robot.link.rules import ACTIVE, STANDBY


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Link:
    """What the role asks of the journal link, recorded."""

    def __init__(self) -> None:
        self.standby_seen = False
        self.last_role_published = 0.0
        self.heard = None
        self.heard_time: float | None = None
        self.following = 0
        self.snapshot_wanted: str | None = None
        self.rank_now = 0
        self.held: list[JournalEntry] = []
        self.replica = SimpleNamespace(needs_snapshot=None, sequence=0, applied=0, snapshots=0, gaps=0)
        self.stats = SimpleNamespace(journals=0, snapshots=0, entries=0, ended=0, snapshot_requests=0, cpu_s=0.0)
        self.acked: dict[str, int] = {}
        self.drops: dict[str, int] = {}
        self.events: list[tuple] = []

    def followers(self) -> int:
        return self.following

    def snapshot_due(self) -> str | None:
        return self.snapshot_wanted

    def publish_role(self, role, term, adopted=()) -> None:
        self.events.append(("role", role, term, tuple(adopted)))

    def rank(self) -> int:
        return self.rank_now

    def heard_at(self) -> float | None:
        return self.heard_time

    def silent_for(self) -> float | None:
        return None

    def write(self, out: JournalOut) -> None:
        self.events.append(("write", out))

    def publish_now(self, out: JournalOut) -> bool:
        self.events.append(("publish_now", out))
        return True

    def adoptable(self) -> list[JournalEntry]:
        return list(self.held)


class Service:
    """What the role asks of the planner service: journal takes are answered at once."""

    def __init__(self, robots=("d1",)) -> None:
        self.accepting = False
        self.params = SimpleNamespace(robot=lambda rid: rid if rid in robots else None)
        self.takes: list[str] = []
        self.core: set[str] = set()
        self.adopted: list[str] = []
        self.ends: dict = {}
        self.changed: tuple[JournalEntry, ...] = ()

    def journal(self, publish, what="delta") -> None:
        self.takes.append(what)
        publish(JournalTake(what == "snapshot", self.changed, 0.001))

    def in_flight(self, goal_id: str) -> bool:
        return goal_id in self.core

    def adopt(self, entries, on_end_of) -> None:
        for e in entries:
            self.adopted.append(e.goal_id)
            self.ends[e.goal_id] = on_end_of(e.goal_id)


class Node:
    """The node's ports and the robot sends, in one recorder."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.events: list[tuple] = []
        self.refuse = refuse
        self.lines: list[tuple[str, str]] = []

    def serve(self) -> None:
        self.events.append(("serve",))

    def unserve(self) -> None:
        self.events.append(("unserve",))

    def adopt_goal(self, entry):
        if entry.goal_id in self.refuse:
            return None
        self.events.append(("adopt", entry.goal_id))
        return lambda outcome: self.events.append(("end", entry.goal_id, outcome))

    def log(self, level, text) -> None:
        self.lines.append((level, text))

    def heartbeat(self, goal_id, robot_id) -> None:
        self.events.append(("heartbeat", goal_id, robot_id))

    def raise_link_counter(self, counter) -> None:
        self.events.append(("counter", counter))


def role(standby: bool = False, term: int = 1, fenced: list | None = None):
    clock, node, link, service = Clock(), Node(), Link(), Service()
    rights = CancelRights(lambda: "")
    r = FailoverRole(node, rights, term=term, standby=standby, clock=clock,
                     on_fenced=(fenced.append if fenced is not None else None))
    r.set_timing(0.0, 3.0)  # takeover after half the lease: 1.5 s
    r.attach(service, link, node)
    r.lifecycle_active = True
    return r, clock, node, link, service, rights


def entry(goal_id: str, robot: str = "d1", key: str = "") -> JournalEntry:
    return JournalEntry(goal_id=goal_id, goal=GoalIn(robot, "take off"), age_s=0.5, cancel_key_sha256=key)


def test_takeover_time_is_half_the_lease_unless_set_and_never_below_half_a_second():
    r, *_ = role()
    assert r.takeover_s() == 1.5
    r.set_timing(0.0, 0.4)
    assert r.takeover_s() == 0.5
    r.set_timing(2.5, 3.0)
    assert r.takeover_s() == 2.5


def test_with_no_standby_following_the_active_planner_sends_only_a_heartbeat_every_journal_period():
    r, clock, node, link, service, _ = role()
    for _ in range(20):  # 20 ticks of 50 ms: 1 s
        r.tick()
        clock.t += 0.05
    assert set(service.takes) == {"heartbeat"}
    assert len(service.takes) == pytest.approx(1.0 / JOURNAL_PERIOD_S, abs=1)
    r.goal_accepted("g1", GoalIn("d1", "x"))  # nobody follows: nothing kept for a journal
    r.goal_ended("g1")
    r.tick()
    writes = [e[1] for e in link.events if e[0] == "write"]
    assert all(not w.entries and not w.ended and not w.snapshot for w in writes)


def test_a_standby_that_follows_gets_a_snapshot_first_then_deltas_with_the_goals_accepted_and_ended():
    r, clock, node, link, service, rights = role()
    r.tick()
    link.following = 1
    clock.t += 0.01  # a standby now follows: a snapshot at once, whatever the period
    r.tick()
    assert service.takes[-1] == "snapshot"
    # a goal the action server accepted that has not reached the core yet: journaled within
    # JOURNAL_MIN_S (not the whole period), whole, with its client's cancel key and its age
    rights.protect("g2", "a" * 64)
    r.goal_accepted("g2", GoalIn("d1", "fly"))
    clock.t += JOURNAL_MIN_S + 1e-6
    r.tick()
    out = link.events[-1][1]
    assert service.takes[-1] == "delta" and [e.goal_id for e in out.entries] == ["g2"]
    assert out.entries[0].cancel_key_sha256 == "a" * 64 and out.entries[0].age_s == pytest.approx(JOURNAL_MIN_S, abs=1e-5)
    # once in the core the service's own entries carry it; an ended goal is named once
    service.core.add("g2")
    r.goal_ended("g3")
    clock.t += JOURNAL_PERIOD_S
    r.tick()
    out = link.events[-1][1]
    assert out.entries == () and out.ended == ("g3",)
    clock.t += JOURNAL_PERIOD_S
    r.tick()
    assert link.events[-1][1].ended == ()


def test_a_planner_paused_past_a_standbys_takeover_time_is_fenced_at_its_next_tick():
    fenced: list[str] = []
    r, clock, node, link, service, _ = role(fenced=fenced)
    link.standby_seen = True
    service.accepting = True
    r.tick()
    takes = len(service.takes)
    clock.t += 1.6  # SIGSTOP for longer than takeover_s
    assert r.resumed()  # its answers are held until the tick has looked
    r.tick()
    assert r.fenced is not None and "paused for 1.6 s" in r.fenced and fenced == [r.fenced]
    assert node.events == [("unserve",)] and service.accepting is False
    r.tick()  # fenced: nothing more, ever
    assert len(service.takes) == takes and node.events == [("unserve",)]


def test_a_standby_takes_over_at_the_second_tick_past_the_silence_and_tells_the_robots_first():
    r, clock, node, link, service, rights = role(standby=True)
    link.heard = SimpleNamespace(msg=SimpleNamespace(term=4, node="/llm_planner@a:1", link_counter=77), at=0.0)
    link.heard_time = clock.t
    link.held = [entry("g1", key="b" * 64), entry("g2", robot="gone"), entry("g3")]
    node.refuse = ("g3",)  # the action server cannot hold it
    clock.t += 1.5
    r.tick()
    assert r.role == STANDBY  # first tick past the silence: the journals waiting are read first
    clock.t += 0.05
    r.tick()
    assert r.role == ACTIVE and r.term == 5  # above the last active planner's term
    kinds = [e[0] for e in node.events]
    # the link counter continues the old planner's, then heartbeats (configured robots only),
    # then the new term's snapshot, then the server, then the goals adopted
    assert node.events[:2] == [("counter", 77), ("heartbeat", "g1", "d1")]
    assert kinds[2:] == ["heartbeat", "serve", "adopt", "adopt"]  # no heartbeat for g2: "gone" is not configured
    snap = next(e[1] for e in link.events if e[0] == "publish_now")
    assert snap.snapshot and snap.term == 5 and [e.goal_id for e in snap.entries] == ["g1", "g2", "g3"]
    assert service.adopted == ["g1", "g2"] and service.accepting
    assert link.events[-1] == ("role", ACTIVE, 5, ("g1", "g2"))
    assert rights.key_of("g1") == "b" * 64
    service.ends["g1"]("done")
    assert node.events[-1] == ("end", "g1", "done")
    (t,) = r.takeovers
    assert t["term"] == 5 and t["from"] == "/llm_planner@a:1" and t["adopted"] == ["g1", "g2"]
    assert "no journal for 1.55 s" in t["why"]


def test_a_standby_that_ranks_second_waits_the_stagger_and_one_not_active_never_takes_over():
    r, clock, node, link, service, _ = role(standby=True)
    link.heard_time, link.rank_now = clock.t, 1
    clock.t += 1.5 + TAKEOVER_STAGGER_S - 0.01
    r.tick()
    r.tick()
    assert r.role == STANDBY
    clock.t += 0.02
    r.lifecycle_active = False
    r.tick()
    r.tick()
    assert r.role == STANDBY and not r.takeovers


def test_a_higher_term_fences_an_active_planner_a_tie_names_both_and_a_standby_only_follows():
    r, *_ = role(term=2)
    r.on_higher_term(2, "/p@b:2")
    assert "both took over at once" in r.fenced
    r2, *_ = role(term=2)
    r2.on_higher_term(3, "/p@b:2")
    assert r2.fenced == "planner /p@b:2 took over at term 3 (this planner's term is 2)"
    s, *_ = role(standby=True)
    s.on_higher_term(9, "/p@b:2")
    assert s.fenced is None


def test_the_role_report_says_fenced_as_an_error_and_a_standby_with_nobody_heard_as_a_warning():
    r, clock, node, link, service, _ = role()
    assert r.report("llm_planner").level == OK and r.report("llm_planner").name == "llm_planner: role"
    r.fence("planner x took over")
    rep = r.report("llm_planner")
    assert rep.level == ERROR and rep.message == "fenced: planner x took over"
    s, *_ = role(standby=True)
    rep = s.report("llm_planner")
    assert rep.level == WARN and "no active planner heard yet" in rep.message
    assert ("role", "standby") in rep.values and ("term", "1") in rep.values


def test_a_takeover_outside_configure_is_refused_with_a_sentence():
    r, *_ = role(standby=True)
    r.detach()
    with pytest.raises(RuntimeError, match="only while configured"):
        r.take_over("test")
