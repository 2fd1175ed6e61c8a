"""The fleet memory (llm_planner_node/service/memory.py): what robots saw, newest first by any name
of the thing, forgotten past its age, kept in a file across a restart; and the planner service
recording what a robot's perception calls found, with the robot's position, for the journal too."""

from __future__ import annotations

import threading
import time

from llm_planner_node.config.params import parse_params
from llm_planner_node.core.clock import WallClock
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.service.memory import FleetMemory, Sighting, SightingRecorder, answer, found_things
from llm_planner_node.service.planner_service import DONE, EXECUTING, GoalIn, PlannerService, StatusIn
from timely_robot.skills import DEFAULT_SKILL_SETS
from testkit import QuietPorts

TELLO = DEFAULT_SKILL_SETS["tello_minispec"]


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def seen(robot: str, label: str, t: float, pos=(1.0, 2.0, 0.5), goal: str = "g" * 32) -> Sighting:
    return Sighting(robot, label, None, pos, t, goal)


def test_last_is_newest_first_by_any_name_and_aging_forgets():
    clock = Clock()
    mem = FleetMemory(":memory:", max_age_s=100.0, clock=clock)
    t = clock.t
    assert mem.record(seen("tello_1", "cat", t - 50))
    assert mem.record(seen("base_1", "Cats", t - 10, pos=None))  # filed as cat
    assert mem.record(seen("tello_1", "cell phone", t - 5))
    assert not mem.record(seen("tello_1", "cat", t - 50))  # the same sighting again: kept once
    assert not mem.record(seen("tello_1", "dog", t - 101))  # already past its age
    got = mem.last("kitty")
    assert [(s.robot_id, s.label, s.position) for s in got] == [("base_1", "cat", None),
                                                               ("tello_1", "cat", (1.0, 2.0, 0.5))]
    assert [s.label for s in mem.last("phones")] == ["cell_phone"]
    assert len(mem.last("cat", limit=1)) == 1 and mem.labels() == ["cat", "cell_phone"]
    clock.t += 45  # the oldest cat is 95 s old, still remembered; 10 s more and it is not
    assert len(mem.last("cats")) == 2
    clock.t += 10
    assert [s.robot_id for s in mem.last("cat")] == ["base_1"]
    mem.record(seen("tello_1", "box", clock.t))  # a write removes what aged out
    assert mem._db.execute("SELECT COUNT(*) FROM sightings WHERE label = 'cat'").fetchone()[0] == 1
    assert mem.last("wristwatch") == []
    assert answer(mem, "wristwatch", 0) == ([], 'nothing remembered about "wristwatch"')
    assert answer(None, "cat", 5)[1].startswith("the fleet memory is off")


def test_a_file_store_reopened_still_answers(tmp_path):
    path = tmp_path / "state" / "memory_llm_planner.sqlite"
    clock = Clock()
    mem = FleetMemory(path, clock=clock)
    mem.record(Sighting("tello_1", "cat", 0.87, (1.2, 0.4, 1.0), clock.t - 3, "a" * 32))
    mem.close()
    again = FleetMemory(path, clock=clock)  # the planner restarted
    assert again.last("cat") == [Sighting("tello_1", "cat", 0.87, (1.2, 0.4, 1.0), clock.t - 3, "a" * 32)]
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again.close()


def test_only_perception_calls_that_found_their_thing_are_sightings():
    answers = [("scan(cat)", "False"), ("scan(dog)", "True"), ("object_dis(cup)", "-1"), ("object_x(bottle)", "0.42"),
               ("goto(person)", "True"), ("turn_cw(90)", "None"), ("probe(what is red)", "a red cup"),
               ("fly_to_mars(cat)", "True")]
    assert found_things(TELLO, answers) == ["dog", "bottle", "person"]
    assert found_things(TELLO, [("scan(cat)", "False")]) == []
    mem = FleetMemory(":memory:")
    rec = SightingRecorder(mem, lambda rid: (0.0, 0.0, 1.0), lambda level, text: None)
    rec.from_answers("tello_1", "g" * 32, TELLO, [("scan(cat)", "False")])
    assert mem.labels() == [] and rec.take_new() == ()


def test_an_idle_robots_scene_is_remembered_at_most_once_a_minute_per_thing():
    clock = Clock()
    mem = FleetMemory(":memory:", clock=clock)
    rec = SightingRecorder(mem, lambda rid: None, lambda level, text: None, clock=clock)
    rec.from_scene("tello_1", ["cat x:0.28 y:0.52 width:0.10 height:0.12"])
    clock.t += 1
    rec.from_scene("tello_1", ["cat x:0.30 y:0.52 width:0.10 height:0.12", "cup x:0.5 y:0.5 width:0.1 height:0.1"])
    assert [(s.label, s.goal_id) for s in rec.take_new()] == [("cat", ""), ("cup", "")]
    clock.t += 60
    rec.from_scene("tello_1", ["cat x:0.30 y:0.52 width:0.10 height:0.12"])
    assert len(mem.last("cat")) == 2


class Ports(QuietPorts):
    def __init__(self):
        self.segments, self.lock = [], threading.Lock()

    def segment(self, goal_id, req, index, final):
        with self.lock:
            self.segments.append((goal_id, index, req.segments[index].calls))
        return ("seg", goal_id, index)


def wait(pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not pred():
        time.sleep(0.01)
    return pred()


def test_a_scan_that_found_the_cat_lands_in_memory_with_the_robots_position_and_in_the_next_journal():
    params = parse_params({"planner": {"engine": {"kind": "sim"}, "robot_timeout_s": 30.0},
                           "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]})
    ports, mem = Ports(), FleetMemory(":memory:")
    svc = PlannerService(params, ports, engine=RealtimeSimEngine(WallClock()), memory=mem,
                         position_of=lambda rid: (1.2, 0.4, 1.0) if rid == "d1" else None)
    svc.accepting = True
    svc.start()
    try:
        gid, ended, reported = "c" * 32, [], set()
        assert svc.submit(gid, GoalIn("d1", "look for the cat"), ended.append) is None

        def play():  # the robot: every segment executed; its scan calls find the cat
            with ports.lock:
                todo = [(i, calls) for g, i, calls in ports.segments if i not in reported]
            for i, calls in todo:
                reported.add(i)
                svc.on_status(StatusIn("d1", gid, i, EXECUTING))
                answers = tuple((str(c), "True" if c.name == "scan" else "None") for c in calls)
                svc.on_status(StatusIn("d1", gid, i, DONE, (0.1,), answers=answers))
                svc.on_status(StatusIn("d1", gid, i, DONE, (0.1,), answers=answers))  # a repeated report
            return ended

        assert wait(play), "the goal did not end"
        [cat] = mem.last("cat")
        assert (cat.robot_id, cat.goal_id, cat.position, cat.confidence) == ("d1", gid, (1.2, 0.4, 1.0), None)
        assert abs(cat.wall_time - time.time()) < 30
        takes = []
        svc.journal(takes.append, "heartbeat")  # no standby follows: the sighting waits for one
        assert wait(lambda: takes) and takes[0].sightings == ()
        svc.journal(takes.append, "delta")
        assert wait(lambda: len(takes) == 2) and takes[1].sightings == (cat,)
        svc.journal(takes.append, "delta")  # carried once
        assert wait(lambda: len(takes) == 3) and takes[2].sightings == ()
    finally:
        svc.close()
