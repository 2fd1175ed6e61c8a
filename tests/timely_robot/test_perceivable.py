"""Instructions naming a detector class a robot cannot perceive (timely_robot/perceivable.py); any other
thing a plan names is checked before dispatch (tests/grounding/test_objects.py)."""

from __future__ import annotations

from timely_robot.perceivable import COCO_LABELS, unperceivable

ARM = ("apple", "banana", "carrot", "basket", "red_box", "tray", "cup", "pen", "paper", "desk", "table")


def test_a_drone_with_a_coco_detector():
    assert unperceivable("find my keys", COCO_LABELS) == []  # not a class: the plan's objects are checked
    assert unperceivable("look for the cat", COCO_LABELS) == []
    assert unperceivable("look for my kitty and the teddy bear", COCO_LABELS) == []  # synonyms and pairs
    assert unperceivable("where is my phone?", COCO_LABELS) == []  # a cell phone
    assert unperceivable("find a tool for cutting paper", COCO_LABELS) == []  # left to the plan (scissors)
    assert unperceivable("prevent a collision with the drone in front of you", COCO_LABELS) == []
    assert unperceivable("fly up one meter, turn around and land", COCO_LABELS) == []


def test_a_detector_without_some_coco_classes_and_an_arm_with_its_objects():
    assert unperceivable("look for the umbrella", ("cat", "dog")) == ["umbrella"]
    assert unperceivable("put the scissors in the basket", ARM) == ["scissors"]
    assert unperceivable("find my phone", ("cat", "dog")) == ["cell_phone"]  # a class by its common name
    assert unperceivable("put the apple in the basket", ARM) == []
    assert unperceivable("put the pen on the table", ARM) == []  # the arm's own "table", not COCO's
    assert unperceivable("put the knife in the tray", ARM) == ["knife"]
    assert unperceivable("stack the apples", ARM) == []  # a plural of a known object


def test_the_scene_is_written_as_typefly_writes_it():
    from timely_robot.perceivable import MAX_SCENE_OBJECTS, scene_entry, scene_line

    assert scene_entry("cat", (0.284, 0.5249, 0.1, 0.123)) == "cat x:0.28 y:0.52 width:0.10 height:0.12"
    assert scene_entry("cup", (1.2, -0.1, 0.0, 0.5)) == "cup x:1.00 y:0.00 width:0.00 height:0.50"  # clipped
    assert scene_line([]) == "Scene: []"
    assert scene_line(["a x:0.10 y:0.20 width:0.30 height:0.40", "b"]) == "Scene: [a x:0.10 y:0.20 width:0.30 height:0.40, b]"
    assert scene_line([f"o{i}" for i in range(40)]).count(",") == MAX_SCENE_OBJECTS - 1


def test_thing_name_is_one_name_per_thing_and_stays_put_once_given():
    from timely_robot.perceivable import thing_name

    cases = {"cats": "cat", "Kitty": "cat", "cell phones": "cell_phone", "Teddy-Bears": "teddy_bear",
             "boxes": "box", "berries": "berry", "horses": "horse", "red cups": "red_cup", "bus": "bus",
             "dress": "dress", "!!": ""}
    assert {k: thing_name(k) for k in cases} == cases
    assert all(thing_name(v) == v for v in cases.values())
