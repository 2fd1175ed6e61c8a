"""Missions on the planner service without ROS (llm_planner_node/service/missions.py): the robot
is the allocator's choice from the fleet's declarations, the task runs as a goal with the robots'
reports played by the test, and a robot that fails hands the task to the next one."""

from __future__ import annotations

import threading
import time

import pytest

from llm_planner_node.config.params import parse_params
from llm_planner_node.core.clock import WallClock
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.service.missions import MissionCoordinator, MissionIn, MissionStatus, mission_need, parse_selector
from llm_planner_node.service.planner_service import DONE, EXECUTING, FAILED, PlannerService, StatusIn
from timely_robot.outcomes import RejectReason, Rejection
from testkit import QuietPorts

ROBOTS = [{"id": "cam1", "kind": "drone", "adapter": "tello-sim"},  # COCO detector: can perceive a cat
          {"id": "cam2", "kind": "drone", "adapter": "tello-sim"},
          {"id": "sim3", "kind": "drone", "adapter": "sim"},        # perception unknown
          {"id": "arm1", "kind": "arm", "adapter": "indy-sim", "objects": ["apple", "cup"]},
          {"id": "base1", "kind": "base", "adapter": "sim", "places": {"kitchen": [1, 2], "lab": [3, 4]},
           "perception": {"source": "topic", "topic": "/base1/detections", "classes": ["person", "box"]}}]


class Ports(QuietPorts):
    def __init__(self):
        self.segments, self.lock = [], threading.Lock()

    def segment(self, goal_id, req, index, final):
        with self.lock:
            self.segments.append((goal_id, req.goal.robot_id, index, final))
        return ("seg", goal_id, index)


@pytest.fixture
def fleet():
    params = parse_params({"planner": {"engine": {"kind": "sim"}, "robot_timeout_s": 30.0}, "robots": ROBOTS})
    ports = Ports()
    svc = PlannerService(params, ports, engine=RealtimeSimEngine(WallClock()))
    svc.accepting = True
    svc.start()
    yield svc, ports, MissionCoordinator(svc, lambda: params)
    svc.close()


def wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def run(coord, mission):
    events, ends = [], []
    coord.start("m1", mission, events.append, ends.append)
    return events, ends


def play(svc, ports, robot, fail=None):
    """Report every segment ``robot`` is sent done (or ``fail``: the first failed) until its goal ends."""
    done = set()

    def step():
        with ports.lock:
            todo = [s for s in ports.segments if s[1] == robot and (s[0], s[2]) not in done]
        for goal_id, _r, index, _final in todo:
            done.add((goal_id, index))
            svc.on_status(StatusIn(robot, goal_id, index, EXECUTING))
            if fail:
                svc.on_status(StatusIn(robot, goal_id, index, FAILED, (), fail))
                return True
            svc.on_status(StatusIn(robot, goal_id, index, DONE, (0.5,)))
        return False
    return step


def test_what_a_mission_needs_is_read_from_the_fleets_declarations_not_the_model():
    robots = parse_params({"robots": ROBOTS}).robots
    need = mission_need(MissionIn("find the cat"), robots)
    assert (need.perceive, need.places, need.skills) == (("cat",), (), ())
    need = mission_need(MissionIn("go to the kitchen and look for a person"), robots)
    assert (need.perceive, need.places, need.skills) == (("person",), ("kitchen",), ("go_to",))
    need = mission_need(MissionIn("pick up the cup"), robots)
    assert need.perceive == ("cup",) and need.skills == ("pick",)
    assert mission_need(MissionIn("fly up one metre", robot_kinds=("drone",)), robots).kinds == ("drone",)
    refused = mission_need(MissionIn("fly up one metre"), robots)
    assert isinstance(refused, Rejection) and str(refused).startswith("the instruction names nothing a robot")
    assert str(mission_need(MissionIn("find the cat", robot_ids=("tello_9",)), robots)).startswith(
        "no robot tello_9 in the fleet")
    # a bad time-utility function is the mission's own refusal, before any robot is tried
    bad = mission_need(MissionIn("find the cat", ert_s=-1.0), robots)
    assert isinstance(bad, Rejection) and bad.reason is RejectReason.TUF and str(bad).startswith("ert_s must be > 0")
    assert str(mission_need(MissionIn("find the cat", alpha=0.5), robots)).startswith("alpha must be <= 0")


def test_a_selector_names_ids_and_kinds():
    assert parse_selector("") == ([], [])
    assert parse_selector(" tello_1, drone ,tello_1,arm") == (["tello_1"], ["drone", "arm"])


def test_find_the_cat_goes_to_a_camera_drone_and_the_mission_succeeds(fleet):
    svc, ports, coord = fleet
    events, ends = run(coord, MissionIn("find the cat"))
    assert wait(lambda: events) and events[0].kind == "allocated"
    robot = events[0].robot_id
    assert robot in ("cam1", "cam2")  # never sim3 (perception unknown), the arm or the base
    step = play(svc, ports, robot)
    assert wait(lambda: step() or ends, 20)
    [end] = ends
    assert end.status is MissionStatus.SUCCEEDED and end.tasks[0].robot_id == robot and not end.tasks[0].tried


def test_a_robot_that_fails_hands_the_task_to_the_next_capable_one(fleet):
    svc, ports, _ = fleet
    goals_ended = []  # what the node records on planner/results: every goal the mission ran
    coord = MissionCoordinator(svc, lambda: svc.params, goal_ended=lambda gid, req: goals_ended.append((gid, req)))
    events, ends = run(coord, MissionIn("find the cat"))
    assert wait(lambda: events)
    first = events[0].robot_id
    fail = play(svc, ports, first, fail="motor fault")
    assert wait(fail, 20)  # its first segment reported failed
    assert wait(lambda: any(e.kind == "allocated" and e.robot_id != first for e in events), 20)
    second = [e.robot_id for e in events if e.kind == "allocated"][-1]
    assert {first, second} == {"cam1", "cam2"}
    step = play(svc, ports, second)
    assert wait(lambda: step() or ends, 20)
    [end] = ends
    assert end.status is MissionStatus.SUCCEEDED and end.tasks[0].robot_id == second
    assert end.tasks[0].tried == [(first, f"robot_failed: robot {first} failed segment 0: motor fault")]
    assert [e.kind for e in events] == ["allocated", "refused", "moved", "allocated", "ended"]
    allocated = [e.goal_id for e in events if e.kind == "allocated"]
    assert [(gid, req.goal.robot_id, req.end.value) for gid, req in goals_ended] == [
        (allocated[0], first, "robot_failed"), (allocated[1], second, "succeeded")]


def test_impossible_and_unavailable_missions_say_why(fleet):
    svc, ports, coord = fleet
    _, ends = run(coord, MissionIn("pick up the banana"))
    [end] = ends
    assert end.status is MissionStatus.IMPOSSIBLE and end.message.startswith("no robot can do it: ")
    assert "arm1 cannot perceive 'banana'" in end.message and "cam1 has no skill pick" in end.message
    _, ends = run(coord, MissionIn("find the cat", robot_ids=("sim3",)))
    assert ends[0].status is MissionStatus.IMPOSSIBLE and "sim3 declares nothing it can perceive" in ends[0].message
    _, ends = run(coord, MissionIn("say hello"))
    assert ends[0].status is MissionStatus.REJECTED


def test_the_robot_nearest_where_the_fleet_last_saw_the_cat_is_sent(fleet):
    svc, _ports, _ = fleet
    where = {"cam1": (0.0, 0.0, 1.0), "cam2": (10.0, 0.0, 1.0)}
    seen: dict = {}
    fleet_params = parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": ROBOTS})
    coord = MissionCoordinator(svc, lambda: fleet_params, position=where.get, last_seen=seen.get)
    events, ends = run(coord, MissionIn("find the cat"))  # nothing remembered: the first able robot
    assert wait(lambda: events) and events[0].robot_id == "cam1"
    coord.cancel("m1")
    assert wait(lambda: ends and not svc.active_goals())
    seen["cat"] = (10.0, 1.0, 0.0)  # the fleet saw it beside cam2, 10 m from cam1
    later: list = []
    coord.start("m2", MissionIn("find the cat"), later.append, lambda _e: None)
    assert wait(lambda: later) and later[0].robot_id == "cam2", later[0].text
