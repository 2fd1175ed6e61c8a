"""MiniSpec interpreter over the segmenter's AST, with a scene model answering perception."""

from __future__ import annotations

import threading

import pytest

from timely_robot.skills import TELLO_MINISPEC, SkillError
from robot_adapters.drone_executor import TelloExecutor
from timely_robot.minispec_interpreter import MiniSpecInterpreter, MiniSpecRuntimeError
from robot_adapters.scene import Scene


class FakeTello:
    """Stands in for djitellopy.Tello: records commands, answers ok (no network)."""

    def __init__(self):
        self.cmds = []
        self._udp = {"responses": []}

    def connect(self):
        pass

    def send_command_with_return(self, cmd, timeout=7):
        self.cmds.append(cmd)
        return "ok"

    def send_command_without_return(self, cmd):
        self.cmds.append(cmd)

    def get_own_udp_object(self):
        return self._udp

    def end(self):
        pass


def _drone(scene_dict):
    scene = Scene.from_dict(scene_dict)
    fake = FakeTello()
    ex = TelloExecutor("sim", scene, client_factory=lambda: fake)
    ex.connect()
    calls = []

    def call_skill(c):
        calls.append(c)
        return ex.execute(c, threading.Event())

    return MiniSpecInterpreter(TELLO_MINISPEC, call_skill), fake, calls, scene


def test_sequence_loop_and_aliases():
    it, fake, calls, _ = _drone({})
    it.run_text("to;mf,100;3{tc,30};lnd;")
    assert fake.cmds == ["takeoff", "forward 100", "cw 30", "cw 30", "cw 30", "land"]
    assert [c.name for c in calls][:2] == ["takeoff", "move_forward"]


def test_scan_conditional_goto_with_scene():
    # the cat is behind-right of the drone: scan must turn until it is in view
    it, fake, _calls, scene = _drone({"objects": {"cat": {"pos": [-100, 250, 50]}}})
    it.run_text("to;_1=s,cat;?_1==True{g,cat;_2=iv,cat;->_2};lnd;")
    assert fake.cmds[0] == "takeoff"
    assert fake.cmds.count("cw 30") >= 3  # scan turned towards the cat
    assert any(c.startswith("forward") for c in fake.cmds)  # goto flew towards it
    assert "land" not in fake.cmds  # '->' ended the plan before land
    assert it.returned and it.return_value is True
    assert scene.object_dis("cat") < 150
    # a later segment of the same goal executes nothing
    it.run_text("lnd;")
    assert "land" not in fake.cmds


def test_else_branch_and_variable_persistence_across_segments():
    it, fake, _c, _s = _drone({"objects": {"cup": {"pos": [300, 0, 80]}}})
    it.run_text("to;_1=iv,dog;")
    it.run_text("?_1==True{mf,50}:{mb,50};_2=ox,cup;?_2>0.4&_2<0.6{mu,20};")
    assert fake.cmds == ["takeoff", "back 50", "up 20"]


def test_unsafe_literal_refused_before_any_command():
    it, fake, _c, _s = _drone({})
    with pytest.raises(SkillError):
        it.run_text("to;mf,100;mf,900;")  # 900 cm is above the SDK's 500 cm
    with pytest.raises(SkillError):
        it.run_text("to;fly_away,1;")
    assert fake.cmds == []


def test_unsafe_variable_argument_refused_at_run_time():
    it, fake, _c, _s = _drone({"answers": {"how far": "900"}})
    with pytest.raises(SkillError):
        it.run_text("to;_1=p,'how far';mf,_1;")
    assert fake.cmds == ["takeoff"]  # the bad move never left the adapter


def test_step_limit_and_undefined_variable():
    it, _f, _c, _s = _drone({})
    it.max_steps = 5
    with pytest.raises(MiniSpecRuntimeError):
        it.run_text("10{d,1}")
    it2, _f2, _c2, _s2 = _drone({})
    with pytest.raises(MiniSpecRuntimeError):
        it2.run(it2.parse("mf,_9;"))
