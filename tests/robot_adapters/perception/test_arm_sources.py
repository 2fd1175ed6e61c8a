"""Declared object sources of arms (ROS-free): the workspace map, 3D detections of a topic moved
to the base frame, staleness, and the one-sentence refusals of bad specs (factory and YAML)."""

from __future__ import annotations

import pytest

from timely_robot.config import ParamError
from llm_planner_node.config.params import parse_params
from robot_adapters.perception.arm_sources import (DetectionsSource, SceneSource, SourceSilent, WorkspaceMap,
                                                   object_source)
from robot_adapters.perception.types import Detection, PerceptionError
from robot_adapters.scene import Scene


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_workspace_map_answers_named_positions_and_follows_the_arm():
    src = object_source({"source": "map", "objects": {"apple": [400, 0, 60], "bowl": [300, -200, 40]}})
    assert isinstance(src, WorkspaceMap)
    assert src.position("apple") == (400.0, 0.0, 60.0)
    assert src.names() == ("apple", "bowl") and src.describe() == "workspace map (2 objects)"
    with pytest.raises(PerceptionError, match=r"^'pear' not found in the workspace map \(known: apple, bowl\)$"):
        src.position("pear")
    src.follow("apple", None)  # picked: in the gripper
    with pytest.raises(PerceptionError, match="'apple' is in the gripper"):
        src.position("apple")
    src.follow("apple", (300, -200, 70))  # placed in the bowl
    assert src.position("apple") == (300.0, -200.0, 70.0)


def test_topic_positions_are_moved_from_the_camera_frame_to_the_base_frame():
    # camera at (100, 200, 300) mm in the base frame, turned 90 degrees about z (yaw):
    # its x axis is the base's y, its y axis the base's -x
    clock = Clock()
    src = object_source({"source": "topic", "topic": "indy_1/detections_3d", "camera_to_base": [100, 200, 300, 0, 0, 90]})
    assert isinstance(src, DetectionsSource) and src.topic == "indy_1/detections_3d" and src.max_age_s == 2.0
    src._clock = clock
    src.update([Detection("apple", 0.9, position=(10.0, 0.0, 0.0)),
                Detection("cup", 0.8, position=(0.0, 10.0, 5.0)),
                Detection("cup", 0.4, position=(99.0, 99.0, 99.0)),  # the better-scored cup wins
                Detection("label_only", 0.9)], stamp=clock.t)  # no 3D position: ignored
    assert src.position("apple") == pytest.approx((100.0, 210.0, 300.0))
    assert src.position("cup") == pytest.approx((90.0, 200.0, 305.0))
    assert src.names() == ("apple", "cup")

    # a camera 600 mm above the base, looking straight down (roll 180: y and z flip)
    down = DetectionsSource("d", [400, 0, 600, 180, 0, 0], clock=clock)
    down.update([Detection("apple", 0.9, position=(20.0, 30.0, 540.0))], stamp=clock.t)
    assert down.position("apple") == pytest.approx((420.0, -30.0, 60.0))


def test_a_detection_older_than_max_age_or_never_seen_is_refused():
    clock = Clock(100.0)
    src = DetectionsSource("indy_1/detections_3d", max_age_s=2.0, clock=clock)
    with pytest.raises(SourceSilent, match=r"^no detection of 'apple' in the last 2.0 s on indy_1/detections_3d "
                                           r"\(no message on it yet"):
        src.position("apple")
    src.update([Detection("apple", 0.9, position=(400.0, 0.0, 60.0))], stamp=100.0)
    clock.t = 101.9
    assert src.position("apple") == (400.0, 0.0, 60.0)
    src.update([Detection("cup", 0.9, position=(1.0, 2.0, 3.0))], stamp=101.9)  # the topic is alive
    clock.t = 102.5
    with pytest.raises(PerceptionError) as e:
        src.position("apple")
    assert str(e.value) == "no detection of 'apple' in the last 2.0 s on indy_1/detections_3d"
    assert not isinstance(e.value, SourceSilent) and src.names() == ("cup",)
    clock.t = 110.0  # nothing on the topic for 8 s
    with pytest.raises(SourceSilent, match=r"its last message is 8.1 s old: is the detector running\?"):
        src.position("cup")


def test_sees_answers_from_the_newest_message_and_says_when_the_topic_is_silent():
    clock = Clock(100.0)
    src = DetectionsSource("base_1/detections", max_age_s=1.0, clock=clock)
    with pytest.raises(SourceSilent, match=r"^no detections on base_1/detections in the last 1.0 s \(no message"):
        src.sees("person")
    src.update([Detection("person", 0.9, position=(2000.0, 0.0, 0.0))], stamp=100.0)
    assert src.sees("person") and not src.sees("box")
    clock.t = 100.2
    src.update([], stamp=100.2)  # turned away: the person is no longer in view, though seen 0.2 s ago
    assert not src.sees("person")
    assert not src.wait_newer(100.2, 0.0) and src.wait_newer(100.1, 0.0)
    clock.t = 101.5
    with pytest.raises(SourceSilent, match=r"its last message is 1.3 s old: is the detector running\?"):
        src.sees("person")
    # a 2D detector (no positions, as vision_msgs/Detection2DArray): seen all the same, no position
    src.update([Detection("chair", 0.8)], stamp=101.5)
    assert src.sees("chair") and not src.sees("person")
    with pytest.raises(PerceptionError):
        src.position("chair")


def test_the_scene_source_is_for_simulators_only():
    scene = Scene.from_dict({"objects": {"apple": {"pos": [400, 100, 50]}}})
    src = object_source({"source": "scene"}, scene=scene)
    assert isinstance(src, SceneSource) and src.position("apple") == (400.0, 100.0, 50.0)
    assert src.describe() == "simulated scene (1 objects)"
    with pytest.raises(PerceptionError, match="'pear' not found in the simulated scene"):
        src.position("pear")


@pytest.mark.parametrize("spec, message", [
    ("map", r"^perception must be a mapping"),
    ({"source": "lidar"}, r"^perception.source must be one of map, topic, scene for an arm, got 'lidar'$"),
    ({"source": "camera"}, r"an arm needs 3D positions: use map or topic\)$"),
    ({"source": "map"}, r"^perception source map needs 'objects'"),
    ({"source": "map", "objects": {"apple": [400, 0]}}, r"^perception.objects.apple must be 3 numbers"),
    ({"source": "map", "objects": {"apple": [400, 0, 60]}, "topic": "x"}, r"^perception: unknown key 'topic'"),
    ({"source": "topic"}, r"^perception source topic needs 'topic'"),
    ({"source": "topic", "topic": "t", "camera_to_base": [0, 0, 0]}, r"^perception.camera_to_base must be 6 numbers"),
    ({"source": "topic", "topic": "t", "max_age_s": 0}, r"^perception.max_age_s must be a number > 0"),
    ({"source": "scene"}, r"^perception source scene is for simulated arms only"),
])
def test_bad_specs_are_one_sentence_value_errors(spec, message):
    with pytest.raises(ValueError, match=message) as e:
        object_source(spec)
    assert "\n" not in str(e.value)


def _robot(perception, adapter="indy", kind="arm"):
    return parse_params({"robots": [{"id": "indy_1", "kind": kind, "adapter": adapter, "host": "10.0.0.7",
                                     "perception": perception}]}).robots[0]


def test_the_fleet_yaml_perception_key_is_checked():
    r = _robot({"source": "map", "objects": {"apple": [400, 0, 60]}})
    assert r.perception == {"source": "map", "objects": {"apple": [400.0, 0.0, 60.0]}}
    assert _robot({"source": "topic", "topic": "indy_1/detections_3d", "max_age_s": 1.5}).perception["topic"] \
        == "indy_1/detections_3d"
    assert _robot(None).perception is None
    assert _robot({"source": "scene"}, adapter="indy-sim").perception == {"source": "scene"}
    bad = [({"source": "lidar"}, "indy", r"robots\[0\].perception.source must be one of map, topic, scene, camera, none"),
           ({"source": "scene"}, "indy", r"robots\[0\].perception: source scene is the simulator's scene"),
           ({"source": "map", "objects": {"apple": [400, 0]}}, "indy",
            r"robots\[0\].perception.objects.apple must be 3 numbers"),
           ({"source": "map"}, "indy", r"robots\[0\].perception: source map needs objects"),
           ({"source": "topic"}, "indy", r"robots\[0\].perception: source topic needs topic"),
           ({"source": "camera"}, "indy", r"source camera gives no 3D positions, which an arm needs"),
           ({"source": "topic", "topic": "t", "rate": 5}, "indy", r"unknown parameter 'rate'"),
           ([1, 2], "indy", r"robots\[0\].perception must be a mapping")]
    for spec, adapter, message in bad:
        with pytest.raises(ParamError, match=message):
            _robot(spec, adapter=adapter)


def test_perception_round_trips_through_the_flat_ros_parameters():
    from llm_planner_node.config.schema import from_flat, to_flat

    fleet = parse_params({"planner": {"engine": {"kind": "sim"}},
                          "robots": [{"id": "indy_1", "kind": "arm", "adapter": "indy", "host": "10.0.0.7",
                                      "perception": {"source": "map", "objects": {"apple": [400, 0, 60]}}}]})
    flat = to_flat(fleet)
    assert flat["robots.indy_1.perception"] == "{source: map, objects: {apple: [400.0, 0.0, 60.0]}}"
    assert from_flat(flat) == fleet
