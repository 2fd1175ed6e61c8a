"""Goals the robot itself cannot see through are refused at intake, with the reason: a drone whose
measured battery would end below its reserve, a drone whose telemetry went silent, an instruction about a thing the robot cannot
perceive (a detector class it lacks: an arm's map has no scissors); a plan about a thing it cannot
perceive is refused before its segment is dispatched (a Tello's COCO detector has no keys)."""

from __future__ import annotations

import time

from llm_planner_node.config.params import parse_params
from llm_planner_node.core.clock import WallClock
from timely_robot.outcomes import RejectReason
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.service.planner_service import GoalIn, PlannerService

from test_planner_service import Ports  # the service tests' recording ports

ROBOTS = [
    {"id": "tello_cam", "kind": "drone", "adapter": "tello-sim"},  # sees through the default detector
    {"id": "tello_vlm", "kind": "drone", "adapter": "tello-sim",
     "perception": {"source": "camera", "vlm": {"url": "http://127.0.0.1:9", "model": "vlm"}}},
    {"id": "d_sim", "kind": "drone", "adapter": "sim"},
    {"id": "arm", "kind": "arm", "adapter": "indy-sim",
     "perception": {"source": "map", "objects": {"apple": [400, 0, 60], "basket": [380, 220, 60]}}},
]


def _service():
    params = parse_params({"planner": {"engine": {"kind": "sim"}}, "robots": ROBOTS})
    svc = PlannerService(params, Ports(), engine=RealtimeSimEngine(WallClock()))
    svc.accepting = True
    return svc


def test_a_thing_the_robot_cannot_perceive_is_refused_naming_it():
    svc = _service()
    try:
        assert svc.intake.validate(GoalIn("tello_cam", "look for the cat")) is None
        arm = svc.intake.validate(GoalIn("arm", "put the scissors in the basket"))
        assert arm.reason is RejectReason.UNPERCEIVABLE
        assert arm.startswith("arm has no 'scissors' among its objects (apple, basket)")
        assert svc.intake.validate(GoalIn("arm", "put the apple in the basket")) is None
    finally:
        svc.close()


def test_a_battery_that_cannot_see_the_goal_through_is_refused():
    svc = _service()
    try:
        svc.on_vitals("tello_cam", (18.0, 61.0, 0.0, 0.1))
        why = svc.intake.validate(GoalIn("tello_cam", "look for the cat"))
        assert why.reason is RejectReason.BATTERY and why.startswith("tello_cam's battery is at 18%")
        svc.on_vitals("tello_cam", (80.0, 61.0, 0.0, 0.1))  # a fresh battery
        assert svc.intake.validate(GoalIn("tello_cam", "look for the cat")) is None
        svc.on_vitals("arm", (5.0, -1.0, -1.0, -1.0))  # arms do not fly: not checked
        assert svc.intake.validate(GoalIn("arm", "put the apple in the basket")) is None
    finally:
        svc.close()


def test_a_robot_whose_telemetry_went_silent_is_refused():
    svc = _service()
    try:
        svc.on_vitals("tello_cam", (80.0, 61.0, 0.0, 0.1))  # state packets arriving: goals taken
        assert svc.intake.validate(GoalIn("tello_cam", "look for the cat")) is None
        svc.on_vitals("tello_cam", (-1.0, -1.0, -1.0, 12.4))  # its adapter: no state packet for 12 s
        why = svc.intake.validate(GoalIn("tello_cam", "look for the cat"))
        assert why.reason is RejectReason.LINK
        assert why == ("tello_cam has sent no telemetry for 12 s: check that it is on and within radio range "
                       "of its adapter's host")
        svc.on_vitals("tello_cam", (79.0, 61.0, 0.0, 0.2))  # back in range
        assert svc.intake.validate(GoalIn("tello_cam", "look for the cat")) is None
        svc.on_vitals("d_sim", (-1.0, -1.0, -1.0, 2.5))  # a moment's silence, under 3 s: not refused
        assert svc.intake.validate(GoalIn("d_sim", "look for the cat")) is None
    finally:
        svc.close()


def test_the_scene_a_robot_reported_goes_into_its_goal_prompt():
    from llm_planner_node.engines.sim_prompts import sim_prompt_builder

    seen = []

    def builder(instruction, kind, skill_set, objects=(), scene=None):
        seen.append(scene)
        return sim_prompt_builder(instruction, kind, skill_set, objects, scene)

    params = parse_params({"planner": {"engine": {"kind": "sim"}, "scene_in_prompt": True}, "robots": ROBOTS})
    svc = PlannerService(params, Ports(), engine=RealtimeSimEngine(WallClock()), prompt_builder=builder)
    svc.accepting = True
    svc.start()
    try:
        svc.on_vitals("tello_cam", (80.0, 60.0, 0.0, 0.1), scene=["cat x:0.28 y:0.52 width:0.10 height:0.12"])
        assert svc.submit("a" * 32, GoalIn("tello_cam", "look for the cat"), lambda _: None) is None
        assert svc.submit("b" * 32, GoalIn("d_sim", "look for the cat"), lambda _: None) is None
        # (the engine's warm-up builds prompts first) d_sim reported no scene
        assert seen[-2:] == [("cat x:0.28 y:0.52 width:0.10 height:0.12",), None]
    finally:
        svc.close()


def test_a_plan_about_a_thing_the_robot_cannot_perceive_is_refused_before_it_is_dispatched():
    """A plan may name the instruction's own words (the scripted engine's plan is its
    instruction): scan(wristwatch) on a drone whose detector has no wristwatch ends the goal
    before any segment reaches the robot, naming the wristwatch and what the drone perceives; the
    same plan on a simulated drone (no perception to check) runs."""
    from llm_planner_node.core.task_model import EndKind

    params = parse_params({"planner": {"engine": {"kind": "scripted"}}, "robots": ROBOTS})
    ports = Ports()
    svc = PlannerService(params, ports, engine=RealtimeSimEngine(WallClock()))
    svc.accepting = True
    svc.start()
    try:
        ended: list = []
        assert svc.submit("c" * 32, GoalIn("tello_cam", "tu(90);_1=s(wristwatch);->_1;"), ended.append) is None
        deadline = time.monotonic() + 10
        while not ended and time.monotonic() < deadline:
            time.sleep(0.01)
        (req,) = ended
        assert req.end is EndKind.INVALID_PLAN
        assert req.end_reason.reason is RejectReason.UNPERCEIVABLE
        assert req.end_reason.startswith("tello_cam cannot perceive 'wristwatch' (the closest it knows: clock, ")
        assert "its detector knows 80 classes" in req.end_reason
        assert [s for s in ports.segments if s[0] == "c" * 32] == [(("c" * 32), 0, req.segments[0].calls)]
        assert [c.name for c in req.segments[0].calls] == ["turn_ccw"]  # the turn went; the search never did
    finally:
        svc.close()
