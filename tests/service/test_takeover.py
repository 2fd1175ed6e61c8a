"""A standby's takeover without ROS (llm_planner_node/service/takeover.py, GoalIntake.adopt,
core Planner.adopt): the journal of one planner service adopted by another continues each goal's
generation from its token ids, sends again only what the robot has not finished, keeps the goal's
time-utility clock, and ends it with the whole plan."""

from __future__ import annotations

import time

from llm_planner_node.config.params import parse_params
from llm_planner_node.core.clock import WallClock
from llm_planner_node.core.task_model import EndKind
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.service.planner_service import DONE, EXECUTING, GoalIn, PlannerService, StatusIn
from tests.service.test_planner_service import wait

PLAN = "tc,90;mf,50;tc,90;mf,50;"
SEGMENTS = ["tc,90;", "mf,50;", "tc,90;", "mf,50;"]
GID = "b" * 32


class Ports:
    def __init__(self):
        self.sent = []  # (index, text, feedback)

    def segment(self, goal_id, req, index, final, feedback=True):
        self.sent.append((req.seq_base + index, req.segments[index].text, feedback))
        return ("seg", goal_id, index)

    def stop(self, goal_id, robot_id, sequence):
        return ("stop", goal_id)

    def publish(self, robot_id, msg):
        pass

    def goal_started(self, goal_id, req):
        pass

    def log(self, level, text):
        pass


def service(policy: str) -> tuple[PlannerService, Ports]:
    params = parse_params({"planner": {"engine": {"kind": "scripted"}, "robot_timeout_s": 30.0, "policy": policy},
                           "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]})
    ports = Ports()
    svc = PlannerService(params, ports, engine=RealtimeSimEngine(WallClock()))
    svc.accepting = True
    svc.start()
    return svc, ports


def journal(svc: PlannerService) -> list:
    out: list = []
    svc.journal(lambda entries: out.append(entries))
    assert wait(lambda: out)
    return out[0]


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
