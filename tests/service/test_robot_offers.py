"""The default fleet as the allocator sees it (llm_planner_node/service/robot_offers.py): each
robot's declarations from the YAML, and where the allocator then sends "find the cat"."""

from __future__ import annotations

from llm_planner_node.config.params import load_params
from llm_planner_node.service.allocation import TaskNeed, allocate
from llm_planner_node.service.robot_offers import declared_offer, fleet_offers


def _fleet():
    return {r.id: r for r in load_params().robots}  # config/fleet.yaml, as `timely-fleet up` reads it


def test_each_robot_of_the_default_fleet_offers_what_its_yaml_declares():
    fleet = _fleet()
    tello_1, tello_2 = declared_offer(fleet["tello_1"]), declared_offer(fleet["tello_2"])
    assert {"scan", "s", "goto", "g", "take_picture"} <= tello_1.skills and "cat" in tello_1.perceivable
    assert tello_2.perceivable is None  # adapter: sim, no detector declared: unknown, not "anything"
    arm = declared_offer(fleet["indy_1"])
    assert arm.kind == "arm" and {"apple", "cup", "tray"} <= arm.objects and "cat" not in arm.perceivable
    base = declared_offer(fleet["base_1"])
    assert base.places == {"dock", "kitchen", "hall", "office", "lab"}
    assert base.perceivable == {"person", "chair", "box"} and "go_to" in base.skills
    chat = declared_offer(fleet["chat_1"])
    assert chat.perceivable is None and not chat.places


def test_find_the_cat_on_the_default_fleet_goes_to_tello_1_and_a_person_in_the_kitchen_to_the_base():
    robots = list(_fleet().values())
    offers = fleet_offers(robots, busy={}, link_age_s=lambda _r: 0.1, battery_pct=lambda _r: 90.0,
                          expected_s=lambda _r: 3.0)
    [cat] = allocate([TaskNeed("t1", skills=("scan",), perceive=("cat",))], offers)
    assert cat.robot_id == "tello_1"
    assert cat.refused["tello_2"] == "declares nothing it can perceive"
    assert cat.refused["indy_1"] == "has no skill scan"
    [kitchen] = allocate([TaskNeed("t1", places=("kitchen",), perceive=("person",))], offers)
    assert kitchen.robot_id == "base_1"
    busy = fleet_offers(robots, busy={"tello_1": "goal 1"}, link_age_s=lambda _r: 0.1,
                        battery_pct=lambda _r: 90.0, expected_s=lambda _r: 3.0)
    [later] = allocate([TaskNeed("t1", skills=("scan",), perceive=("cat",))], busy)
    assert later.robot_id is None and later.why.startswith("no robot is available: ")
    assert "tello_1 busy with goal 1" in later.why
