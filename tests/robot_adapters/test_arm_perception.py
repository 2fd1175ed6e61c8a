"""An arm with a declared object source, over the real neuromeka IndyDCP3 client against the fake
IndyDCP3 servicer (loopback): map pick and place, the workspace box, missed grasps, and how
`timely-fleet up` refuses a real arm it cannot run."""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time

import pytest

pytest.importorskip("neuromeka")

from timely_robot.config import ParamError
from llm_planner_node.config.params import parse_params  # noqa: E402
from timely_robot.skills import INDY7_ARM as A  # noqa: E402
from robot_adapters.arm_executor import IndyArmExecutor  # noqa: E402
from robot_adapters.executor import SkillExecutionError  # noqa: E402
from robot_adapters.sim.indy_sim import FakeIndy  # noqa: E402
from robot_adapters.perception.arm_sources import DetectionsSource, WorkspaceMap  # noqa: E402
from robot_adapters.perception.types import Detection  # noqa: E402
from robot_adapters.scene import Scene  # noqa: E402

SCALE = 0.1
# loopback addresses of their own, so that other test runs on this machine never share a fake arm
_hosts = (f"127.77.{os.getpid() % 250 + 1}.{i}" for i in itertools.count(2))
MAP = {"apple": [400, 0, 60], "bowl": [300, -200, 60], "far": [750, 0, 60], "edge": [680, 0, 60]}


def _go(ex, name, *args):
    return ex.execute(A.validate(name, list(args)), threading.Event())


@pytest.fixture()
def cell():
    """The physical cell (the fake arm's scene) and the arm's declared map of it."""
    scene = Scene.from_dict({"objects": {n: {"pos": p} for n, p in MAP.items()}})
    fake = FakeIndy(next(_hosts), time_scale=SCALE, scene=scene).start()
    workspace = WorkspaceMap(MAP)
    ex = IndyArmExecutor(fake.host, workspace, time_scale=SCALE)
    ex.connect()
    try:
        yield fake, ex, workspace, scene
    finally:
        fake.stop()


def test_a_workspace_map_arm_picks_and_places(cell):
    fake, ex, workspace, scene = cell
    _go(ex, "pick", "apple")
    assert ex.held == "apple" and scene.held == "apple"
    _go(ex, "place", "apple", "bowl")
    assert ex.held is None and scene.held is None
    targets = [t[:3] for _k, t, _d in fake.state.motions]
    assert targets == [[400, 0, 160], [400, 0, 60], [400, 0, 160], [300, -200, 190], [300, -200, 90], [300, -200, 190]]
    assert fake.state.do_log == [(0, False), (0, True), (0, False)]
    # the map followed the arm: the apple is in the bowl, where the arm let go of it
    assert workspace.position("apple") == (300.0, -200.0, 90.0)
    assert scene.position("apple") == pytest.approx([300, -200, 90])
    # a halt after a pick puts the object back, from the executor's own record (no simulator)
    _go(ex, "pick", "bowl")
    assert ex.halt() == "stopped, put 'bowl' back where it was picked, gripper empty"
    assert ex.held is None and workspace.position("bowl") == (300.0, -200.0, 60.0)


def test_targets_outside_the_workspace_box_are_refused_before_any_motion(cell):
    fake, ex, _workspace, _scene = cell
    with pytest.raises(SkillExecutionError) as e:
        _go(ex, "pick", "far")
    assert str(e.value) == ("'far' at (750, 0, 60) mm is outside the arm's workspace box x -700..700, y -700..700, "
                            "z 50..800 mm: refused before any motion")
    # a derived waypoint: pushing 'edge' 100 mm along +x ends the tool at x 720
    with pytest.raises(SkillExecutionError, match=r"^'edge' at \(680, 0, 60\) mm needs the waypoint \(720, 0, 60\), "
                                                  r"outside the arm's workspace box .*: refused before any motion$"):
        _go(ex, "push", "edge", 100)
    with pytest.raises(SkillExecutionError, match="^'pear' not found in the workspace map"):
        _go(ex, "pick", "pear")
    assert fake.state.motions == [] and fake.state.do_log == []  # nothing was sent to the arm


def test_a_missed_grasp_fails_and_reopens_the_gripper(cell):
    fake, ex, _workspace, scene = cell
    scene.move_object("apple", [100, 300, 60])  # someone took the apple away: the map still has it
    with pytest.raises(SkillExecutionError) as e:
        _go(ex, "pick", "apple")
    assert str(e.value) == "grasp of 'apple' missed: the gripper closed fully, nothing held"
    assert fake.state.do_log == [(0, False), (0, True), (0, False)] and not fake.state.gripper_closed()
    assert ex.held is None and ex.halt() == "stopped, gripper empty"
    with pytest.raises(SkillExecutionError, match="cannot place 'apple': not holding it"):
        _go(ex, "place", "apple", "bowl")
    fake.miss_next_grasp()  # the bowl slips out of the fingers
    with pytest.raises(SkillExecutionError, match="grasp of 'bowl' missed"):
        _go(ex, "pick", "bowl")
    assert scene.held is None and ex.held is None
    _go(ex, "pick", "bowl")  # the next grasp holds it
    assert ex.held == "bowl" and scene.held == "bowl"


def test_a_detections_arm_picks_where_the_camera_saw_the_object():
    scene = Scene.from_dict({"objects": {"apple": {"pos": [400, 0, 60]}}})
    fake = FakeIndy(next(_hosts), time_scale=SCALE, scene=scene).start()
    try:
        # camera 600 mm above (400, 0), looking down (roll 180)
        src = DetectionsSource("indy_1/detections_3d", [400, 0, 600, 180, 0, 0])
        ex = IndyArmExecutor(fake.host, src, time_scale=SCALE)
        ex.connect()
        with pytest.raises(SkillExecutionError, match="is the detector running"):
            _go(ex, "look", "apple")  # a silent topic is no answer
        src.update([Detection("apple", 0.9, position=(0.0, 0.0, 540.0))], stamp=time.monotonic())
        assert _go(ex, "look", "apple") is True and _go(ex, "look", "pear") is False
        _go(ex, "pick", "apple")
        assert ex.held == "apple" and scene.held == "apple"
    finally:
        fake.stop()


def _robot(**kw):
    return parse_params({"robots": [{"id": "indy_1", "kind": "arm", **kw}]}).robots[0]


def test_up_refuses_a_real_arm_without_perception_in_one_sentence():
    from robot_adapters.executors import make_executor

    with contextlib.ExitStack() as stack, pytest.raises(ParamError) as e:
        make_executor(_robot(adapter="indy", host="10.0.0.7"), 0, 1.0, stack)
    assert str(e.value) == ("robot indy_1: a real arm needs a perception source: set robots[indy_1].perception to "
                            "{source: map, objects: {...}} or {source: topic, topic: ...} (docs/guides/perception.md)")


def test_up_names_the_host_of_an_arm_that_does_not_answer():
    from llm_planner_node.cli import CommandError, is_user_error
    from robot_adapters.executors import make_executor

    host = next(_hosts)  # nothing serves IndyDCP3 there: the connection is refused
    robot = _robot(adapter="indy", host=host, perception={"source": "map", "objects": MAP})
    with contextlib.ExitStack() as stack, pytest.raises(CommandError) as e:
        make_executor(robot, 0, 1.0, stack)
    assert str(e.value) == (f"robot indy_1: arm at {host} does not answer IndyDCP3 on port 20001 (UNAVAILABLE): "
                            "check that it is powered, on this network, and that `host:` in the fleet YAML is its "
                            "address")
    assert is_user_error(e.value)  # `timely-fleet up` prints it as its one line
    # an address that takes the TCP connection and then says nothing (loopback, a silent
    # listener on the arm's port): the connect gives up at its timeout
    silent_host = next(_hosts)
    with socket.create_server((silent_host, 20001)) as silent:
        ex = IndyArmExecutor(silent_host, WorkspaceMap(MAP), connect_timeout_s=0.5)
        with pytest.raises(SkillExecutionError, match=rf"^arm at {silent_host} does not answer IndyDCP3 on port "
                                                      r"20001 \((UNAVAILABLE|no answer in 0.5 s)\): check"):
            ex.connect()
        assert silent.fileno() >= 0


def test_up_builds_the_declared_source_of_a_simulated_arm():
    from llm_planner_node.up import workspace_scene
    from robot_adapters.executors import make_executor

    with contextlib.ExitStack() as stack:
        ex = make_executor(_robot(adapter="indy-sim", host=next(_hosts),
                                  perception={"source": "map", "objects": {"apple": [400, 0, 60]}}), 0, SCALE, stack,
                           desk=workspace_scene)
        assert isinstance(ex.source, WorkspaceMap) and ex.detections_source is None
        _go(ex, "pick", "apple")  # the fake arm's world holds what the map declares
        assert ex.held == "apple"
        ex = make_executor(_robot(adapter="indy-sim", host=next(_hosts),
                                  perception={"source": "topic", "topic": "indy_1/detections_3d"}), 1, SCALE, stack,
                           desk=workspace_scene)
        assert ex.detections_source is ex.source and ex.detections_source.topic == "indy_1/detections_3d"
