"""A standby's takeover without ROS (llm_planner_node/service/takeover.py, GoalIntake.adopt,
core Planner.adopt): the journal of one planner service adopted by another continues each goal's
generation from its token ids, sends again only what the robot has not finished, keeps the goal's
time-utility clock, and ends it with the whole plan. The journal's deltas carry only the goals
that changed, and a replica that missed one notices the gap and is mended by a snapshot."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from llm_planner_node.config.params import parse_params
from llm_planner_node.core.clock import WallClock
from llm_planner_node.core.task_model import EndKind
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.service.planner_service import DONE, EXECUTING, GoalIn, PlannerService, StatusIn
from tests.service.test_planner_service import wait
from testkit import QuietPorts

PLAN = "tc,90;mf,50;tc,90;mf,50;"
SEGMENTS = ["tc,90;", "mf,50;", "tc,90;", "mf,50;"]
GID = "b" * 32


class Ports(QuietPorts):
    def __init__(self):
        self.sent = []  # (index, text, feedback)

    def segment(self, goal_id, req, index, final, feedback=True):
        self.sent.append((req.seq_base + index, req.segments[index].text, feedback))
        return ("seg", goal_id, index)


def service(policy: str, robots: tuple[str, ...] = ("d1",)) -> tuple[PlannerService, Ports]:
    params = parse_params({"planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 30.0, "policy": policy},
                           "robots": [{"id": r, "kind": "drone", "adapter": "sim"} for r in robots]})
    ports = Ports()
    svc = PlannerService(params, ports, engine=RealtimeSimEngine(WallClock()))
    svc.accepting = True
    svc.start()
    return svc, ports


def journal(svc: PlannerService, what: str = "snapshot") -> list:
    """The entries of one journal take of ``svc`` (a snapshot, a delta or a heartbeat)."""
    out: list = []
    svc.journal(out.append, what)
    assert wait(lambda: out)
    assert out[0].snapshot == (what == "snapshot")
    return list(out[0].entries)


def test_a_suspended_generation_goes_on_from_its_token_ids_on_the_standby():
    """LAMPS suspends the plan at every segment and resumes it only once its robot is done with
    the segment before: the journal holds segment 0
    (dispatched, executing) and its tokens; the standby sends segment 0 again (no new feedback),
    resumes the generation when the robot reports it done, and writes segments 1-3."""
    active, ports_a = service("lamps")
    standby, ports_b = service("lamps")
    try:
        ended_a: list = []
        assert active.submit(GID, GoalIn("d1", PLAN), ended_a.append) is None
        assert wait(lambda: ports_a.sent)
        time.sleep(0.3)  # suspended at the boundary: nothing more is generated until the robot is done
        assert [t for _, t, _ in ports_a.sent] == SEGMENTS[:1]
        active.on_status(StatusIn("d1", GID, 0, EXECUTING))
        assert wait(lambda: active.planner.requests and next(iter(active.planner.requests.values())).exec_start[0])
        (entry,) = journal(active)
        assert entry.goal_id == GID and entry.goal.instruction == PLAN
        p = entry.progress
        assert [s.text for s in p.segments] == SEGMENTS[:1] and not p.generated
        assert p.dispatched_at[0] is not None and p.exec_start[0] is not None and p.exec_end[0] is None
        assert len(p.token_ids) == len(p.segments[0].token_ids) > 0
        arrival_a = next(iter(active.planner.requests.values())).arrival
        # the active planner dies here (nothing more of it is used)
        ended: list = []
        standby.adopt([entry], lambda gid: ended.append)
        assert wait(lambda: ports_b.sent)
        assert ports_b.sent[0] == (0, SEGMENTS[0], False)  # sent again for the robot, not a new feedback
        (req,) = standby.planner.requests.values()
        assert abs(req.arrival - arrival_a) < 0.05  # the goal's time-utility clock runs on
        for k in range(4):
            assert wait(lambda k=k: len(ports_b.sent) > k), ports_b.sent
            standby.on_status(StatusIn("d1", GID, k, DONE, (0.1,)))
        assert wait(lambda: ended)
        res = ended[0]
        assert res.end is EndKind.SUCCEEDED, res.end_reason
        assert "".join(s.text for s in res.segments) == PLAN
        assert [(i, t) for i, t, _ in ports_b.sent] == list(enumerate(SEGMENTS))
        assert [f for *_, f in ports_b.sent] == [False, True, True, True]
        assert standby.planner.engine.stats.recompute_tokens > 0  # the context was prefilled anew, once
    finally:
        standby.close()
        active.close()


def test_a_complete_plan_is_adopted_without_generating_and_finished_segments_are_not_sent_again():
    active, ports_a = service("timelyllm")
    standby, ports_b = service("timelyllm")
    try:
        assert active.submit(GID, GoalIn("d1", PLAN), lambda _o: None) is None
        assert wait(lambda: len(ports_a.sent) == 4)
        active.on_status(StatusIn("d1", GID, 0, DONE, (0.1,)))
        active.on_status(StatusIn("d1", GID, 1, EXECUTING))
        assert wait(lambda: next(iter(active.planner.requests.values())).exec_start[1] is not None)
        (entry,) = journal(active)
        assert entry.progress.generated and entry.progress.exec_end[0] is not None
        ended: list = []
        standby.adopt([entry], lambda gid: ended.append)
        # segments 1-3 were dispatched and not finished: sent again; segment 0 was done: not
        assert wait(lambda: len(ports_b.sent) == 3)
        assert [(i, t, f) for i, t, f in ports_b.sent] == [(k, SEGMENTS[k], False) for k in (1, 2, 3)]
        for k in (1, 2, 3):
            standby.on_status(StatusIn("d1", GID, k, DONE, (0.1,)))
        assert wait(lambda: ended)
        assert ended[0].end is EndKind.SUCCEEDED
        assert "".join(s.text for s in ended[0].segments) == PLAN
        assert standby.planner.engine.stats.tokens == 0  # nothing generated again
    finally:
        standby.close()
        active.close()


def test_a_goal_of_a_robot_this_planner_does_not_have_ends_with_the_reason():
    active, ports_a = service("timelyllm")
    params = parse_params({"planner": {"engine": {"kind": "scripted"}},
                           "robots": [{"id": "other", "kind": "drone", "adapter": "sim"}]})
    standby = PlannerService(params, Ports(), engine=RealtimeSimEngine(WallClock()))
    standby.accepting = True
    standby.start()
    try:
        assert active.submit(GID, GoalIn("d1", PLAN), lambda _o: None) is None
        assert wait(lambda: ports_a.sent)
        (entry,) = journal(active)
        ended: list = []
        standby.adopt([entry], lambda gid: ended.append)
        assert wait(lambda: ended)
        assert "robot 'd1' of the goal taken over is not configured on this planner" in ended[0]
    finally:
        standby.close()
        active.close()


def test_a_goal_being_taken_over_holds_its_robot_from_the_moment_it_is_posted():
    # the planner renews the lease of every robot of active_goals(): a goal still waiting its turn
    # on the scheduler thread (a takeover of a thousand goals takes seconds) must be among them,
    # and one that cannot be adopted lets its robot go
    active, ports_a = service("timelyllm", robots=("d1", "d2"))
    params = parse_params({"planner": {"engine": {"kind": "scripted"}},
                           "robots": [{"id": r, "kind": "drone", "adapter": "sim"} for r in ("d1", "d2")]})
    standby = PlannerService(params, Ports(), engine=RealtimeSimEngine(WallClock()))
    standby.accepting = True
    try:
        assert active.submit(GID, GoalIn("d1", PLAN), lambda _o: None) is None
        assert active.submit("c" * 32, GoalIn("d2", PLAN), lambda _o: None) is None
        assert wait(lambda: len(ports_a.sent) >= 2)
        entries = journal(active)
        assert standby.submit("e" * 32, GoalIn("d2", PLAN), lambda _o: None) is None  # d2 is busy here
        ended: dict = {}
        standby.adopt(entries, lambda gid: (lambda outcome: ended.setdefault(gid, outcome)))
        assert standby.active_goals() == {"d1": GID, "d2": "e" * 32}  # before the scheduler thread runs
        standby.start()
        assert wait(lambda: "c" * 32 in ended)
        assert "still executing goal" in str(ended["c" * 32])  # d2's own goal stays d2's
        assert standby.active_goals()["d1"] == GID and standby.active_goals()["d2"] == "e" * 32
    finally:
        standby.close()
        active.close()


def _journal(seq: int, entries: list, snapshot: bool = False, ended: tuple[str, ...] = ()) -> SimpleNamespace:
    """A journal of planner 'a' at term 1 as the replica reads one: the fields of PlannerJournal,
    its entries as the JournalGoal messages the wire carries."""
    from llm_planner_node.ros.failover import entry_msg

    return SimpleNamespace(node="a", term=1, sequence=seq, snapshot=snapshot, goals=[entry_msg(e) for e in entries],
                           ended_goal_ids=list(ended))


@pytest.mark.ros  # the entries travel as timely_fleet/JournalGoal messages (no ROS graph)
def test_deltas_carry_what_changed_and_a_replica_that_missed_one_is_mended_by_a_snapshot():
    """Deltas hold the goals that changed since the last take and nothing else (whole when the
    goal started, its progress only after; an empty delta when nothing changed); a replica that
    misses a delta (the start of g2) notices at the next one (a sequence gap), asks for a snapshot,
    holds exactly the active planner's goals once it is applied, and a standby that adopts them
    finishes g2 with its whole plan."""
    from llm_planner_node.ros.failover import entry_of_msg
    from llm_planner_node.service.takeover import JournalReplica, aged

    g1, g2 = "1" * 32, "2" * 32
    active, ports_a = service("timelyllm", ("d1", "d2"))
    standby, ports_b = service("timelyllm", ("d1", "d2"))
    replica = JournalReplica()
    try:
        assert replica.apply(_journal(1, journal(active, "snapshot"), snapshot=True), now=0.0) is None
        assert len(replica) == 0
        assert active.submit(g1, GoalIn("d1", PLAN), lambda _o: None) is None
        assert wait(lambda: len(ports_a.sent) == 4)
        (e1,) = journal(active, "delta")
        assert e1.goal_id == g1 and not e1.progress_only and len(e1.progress.dispatched_at) == 4
        assert journal(active, "delta") == []  # nothing changed since
        active.on_status(StatusIn("d1", g1, 0, EXECUTING))  # a start changes nothing a standby needs
        active.on_status(StatusIn("d1", g1, 0, DONE, (0.1,)))
        active.on_status(StatusIn("d1", g1, 0, DONE, (0.1,)))  # a repeated report changes nothing more
        assert wait(lambda: active.planner.requests[active.goals.by_goal_id[g1]].exec_end[0] is not None)
        (e1b,) = journal(active, "delta")
        assert e1b.progress_only and e1b.progress.exec_end[0] is not None and e1b.prompt_token_ids == ()
        assert journal(active, "delta") == []
        assert replica.apply(_journal(2, [e1]), now=1.0) is None
        assert replica.apply(_journal(3, [e1b]), now=2.0) is None
        ((held1, _),) = replica.entries(now=2.0)
        whole = entry_of_msg(held1)  # the progress on the goal's whole entry
        assert whole.progress.exec_end[0] is not None and whole.goal == e1.goal and whole.scene == e1.scene

        ended: list = []
        assert active.submit(g2, GoalIn("d2", PLAN), ended.append) is None
        assert wait(lambda: len(ports_a.sent) == 8)
        lost = journal(active, "delta")  # journal 4: never reaches the replica
        assert [e.goal_id for e in lost] == [g2]
        for k in range(1, 4):
            active.on_status(StatusIn("d1", g1, k, DONE, (0.1,)))
        assert wait(lambda: g1 not in active.goals.by_goal_id)
        assert journal(active, "delta") == []  # an ended goal is no entry: its end travels as ended_goal_ids
        why = replica.apply(_journal(5, [], ended=(g1,)), now=3.0)
        assert why == "journal 5 followed journal 3: 1 missed" and replica.gaps == 1
        assert len(replica) == 0  # g1 ended; g2's start was missed
        active.on_status(StatusIn("d2", g2, 0, DONE, (0.1,)))
        assert wait(lambda: active.planner.requests[active.goals.by_goal_id[g2]].exec_end[0] is not None)
        (p2,) = journal(active, "delta")
        assert p2.progress_only
        assert replica.apply(_journal(6, [p2]), now=3.1) == why  # out of sync until a snapshot
        assert len(replica) == 0  # g2's progress alone: nothing to add it to

        snap = journal(active, "snapshot")
        assert replica.apply(_journal(7, snap, snapshot=True), now=4.0) is None
        held = replica.entries(now=4.5)
        assert [(g.goal_id, round(since, 3)) for g, since in held] == [(g2, 0.5)]
        assert entry_of_msg(held[0][0]) == snap[0]
        adopted = aged(entry_of_msg(held[0][0]), held[0][1])
        assert adopted.age_s == snap[0].age_s + 0.5  # its time-utility clock ran on while the replica held it

        # the active planner dies here; the standby takes g2 over from what the replica holds
        done: list = []
        standby.adopt([adopted], lambda gid: done.append)
        assert wait(lambda: len(ports_b.sent) == 3)  # every dispatched segment not ended is sent again
        assert [i for i, _, _ in ports_b.sent] == [1, 2, 3]
        for k in range(1, 4):
            standby.on_status(StatusIn("d2", g2, k, DONE, (0.1,)))
        assert wait(lambda: done)
        assert done[0].end is EndKind.SUCCEEDED and "".join(s.text for s in done[0].segments) == PLAN
        assert not ended  # the active planner never ended g2
    finally:
        standby.close()
        active.close()


def test_a_replica_follows_a_new_planner_from_its_snapshot():
    """Journals of another planner (a takeover) before its snapshot leave the replica out of sync;
    the snapshot makes it whole again."""
    from llm_planner_node.service.takeover import JournalReplica

    r = JournalReplica()
    g = SimpleNamespace(goal_id="x" * 32, progress_only=False)
    assert r.apply(SimpleNamespace(node="a", term=1, sequence=1, snapshot=True, goals=[], ended_goal_ids=[])) is None
    assert r.apply(SimpleNamespace(node="a", term=1, sequence=2, snapshot=False, goals=[g], ended_goal_ids=[])) is None
    assert len(r) == 1
    other = SimpleNamespace(node="b", term=2, sequence=1, snapshot=False, goals=[], ended_goal_ids=[])
    assert r.apply(other) == "a journal of planner b (term 2) before its snapshot"
    assert r.apply(SimpleNamespace(node="b", term=2, sequence=2, snapshot=True, goals=[], ended_goal_ids=[])) is None
    assert len(r) == 0 and (r.node, r.term, r.sequence, r.snapshots) == ("b", 2, 2, 2)
