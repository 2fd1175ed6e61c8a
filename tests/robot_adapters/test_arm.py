"""Arm path: the real neuromeka IndyDCP3 client against the fake IndyDCP3 servicer (loopback)."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

pytest.importorskip("neuromeka")

from timely_robot.execution_time import ExecutionTimeModel  # noqa: E402
from timely_robot.skills import INDY7_ARM as A  # noqa: E402
from robot_adapters.arm_executor import IndyArmExecutor  # noqa: E402
from robot_adapters.executor import SkillCancelled, SkillExecutionError  # noqa: E402
from robot_adapters.sim.indy_sim import FakeIndy  # noqa: E402
from robot_adapters.scene import Scene  # noqa: E402

SCALE = 0.1
_hosts = itertools.count(21)


def _scene():
    return Scene.from_dict({"objects": {"apple": {"pos": [400, 100, 50]}, "bowl": {"pos": [300, -200, 40]}}})


@pytest.fixture()
def arm():
    scene = _scene()
    host = f"127.0.0.{next(_hosts)}"
    fake = FakeIndy(host, time_scale=SCALE, scene=scene).start()
    ex = IndyArmExecutor(host, scene, time_scale=SCALE)
    ex.connect()
    try:
        yield fake, ex, scene
    finally:
        fake.stop()


def test_pick_and_place_segment_via_real_client(arm):
    fake, ex, scene = arm
    model = ExecutionTimeModel()
    seg = [A.validate("move_to", [350, 0, 300]), A.validate("pick", ["apple"]),
           A.validate("place", ["apple", "bowl"]), A.validate("home", [])]
    cancel = threading.Event()
    measured = []
    for call in seg:
        t0 = time.monotonic()
        ex.execute(call, cancel)
        measured.append((time.monotonic() - t0) / SCALE)
    # the controller saw the expected motions and gripper IO
    kinds = [k for k, _t, _d in fake.state.motions]
    assert kinds == ["movel"] * 7 + ["movej"]
    targets = [t[:3] for _k, t, _d in fake.state.motions[:7]]
    assert targets[0] == [350, 0, 300]
    assert targets[1:4] == [[400, 100, 150], [400, 100, 50], [400, 100, 150]]
    assert targets[4:7] == [[300, -200, 170], [300, -200, 70], [300, -200, 170]]
    assert fake.state.do_log == [(0, False), (0, True), (0, False)]
    # the apple ended up in the bowl and the arm is home
    assert scene.held is None and scene.position("apple")[:2] == [300, -200]
    assert fake.state.p[:3] == pytest.approx([350.0, 0.0, 400.0])
    # measured durations vs the execution-time model (pick/place: at least the minimum)
    move = model.predict("arm1", "arm", seg[:1])
    assert abs(measured[0] - move) <= model.tolerance("arm", seg[0]) + 0.5
    per = model.predict_calls("arm1", "arm", seg)
    assert measured[1] >= 0.8 * per[1] and measured[2] >= 0.8 * per[2]


def test_controller_refusal_becomes_error_text(arm):
    _fake, ex, _scene = arm
    # inside the skill set's safe box but beyond the Indy7's 800 mm reach
    with pytest.raises(SkillExecutionError, match="outside the workspace"):
        ex.execute(A.validate("move_to", [650, 650, 600]), threading.Event())
    with pytest.raises(SkillExecutionError, match="not found"):
        ex.execute(A.validate("pick", ["banana"]), threading.Event())
    with pytest.raises(SkillExecutionError, match="not holding"):
        ex.execute(A.validate("place", ["apple", "bowl"]), threading.Event())


def test_cancel_stops_motion(arm):
    fake, ex, _scene = arm
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(SkillCancelled):
        ex.execute(A.validate("move_to", [-450, -300, 400]), cancel)
    assert not fake.state.moving
    assert fake.state.p[0] > -450  # stopped on the way


def test_halt_after_a_pick_puts_the_object_back_and_the_next_pick_works(arm):
    """A goal that ended early with an object in the gripper (the first-user 'gripper already
    holds' failure): halt stops, puts it back where it was picked, and reports the gripper."""
    fake, ex, scene = arm
    cancel = threading.Event()
    ex.execute(A.validate("pick", ["apple"]), cancel)
    assert scene.held == "apple"
    state = ex.halt()
    assert state == "stopped, put 'apple' back where it was picked, gripper empty"
    assert scene.held is None and scene.position("apple") == pytest.approx([400, 100, 50])
    assert ex.halt() == "stopped, gripper empty"  # idempotent: nothing held, nothing moves
    ex.execute(A.validate("pick", ["bowl"]), cancel)  # the arm's next plan starts clean
    assert scene.held == "bowl"


def test_halt_can_keep_the_object_when_configured(arm):
    fake, _ex, scene = arm
    ex = IndyArmExecutor(_ex.robot_ip, scene, time_scale=SCALE, release_on_halt=False)
    ex.connect()
    ex.execute(A.validate("pick", ["apple"]), threading.Event())
    assert ex.halt() == "stopped, gripper holds 'apple'" and scene.held == "apple"


def test_a_motion_stopped_by_a_halt_is_cancelled_not_arrived(arm):
    """The core cancels a call by setting its cancel event and stopping the robot at once. A
    stopped motion reads 'target reached' on the controller: the executor must raise
    SkillCancelled (not return as if the arm had arrived), short of its target."""
    fake, ex, _scene = arm
    cancel = threading.Event()
    target = A.validate("move_to", [-450, -300, 400])

    def halt():
        cancel.set()
        ex.stop()

    threading.Timer(0.1, halt).start()
    with pytest.raises(SkillCancelled):
        ex.execute(target, cancel)
    assert not fake.state.moving and fake.state.p[0] > -450


def test_a_pick_cancelled_after_the_grasp_is_put_back_by_the_halt(arm):
    """A cancel while the gripper closes on the object: the halt puts the object back where it
    was picked, and the next goal's pick does not fail with 'gripper already holds'."""
    fake, ex, scene = arm
    cancel = threading.Event()
    errors = []

    def pick():
        try:
            ex.execute(A.validate("pick", ["apple"]), cancel)
        except SkillCancelled as e:
            errors.append(e)

    t = threading.Thread(target=pick)
    t.start()
    deadline = time.monotonic() + 20
    while not (fake.state.do_log and fake.state.do_log[-1][1]) and time.monotonic() < deadline:
        time.sleep(0.005)  # until the gripper is told to close
    cancel.set()
    ex.stop()
    t.join(20)
    assert errors and scene.held == "apple"
    assert ex.halt() == "stopped, put 'apple' back where it was picked, gripper empty"
    assert scene.held is None and scene.position("apple") == pytest.approx([400, 100, 50])
    ex.execute(A.validate("pick", ["apple"]), threading.Event())
    assert scene.held == "apple"


def test_a_pick_cancelled_on_its_way_down_sends_no_gripper_command(arm):
    """Cancelled before the grasp: the gripper is not closed (nothing grasped mid-cancel)."""
    fake, ex, scene = arm
    cancel = threading.Event()
    n0 = len(fake.state.do_log)
    threading.Timer(0.05, lambda: (cancel.set(), ex.stop())).start()
    with pytest.raises(SkillCancelled):
        ex.execute(A.validate("pick", ["apple"]), cancel)
    assert not any(on for _addr, on in fake.state.do_log[n0:])  # only the opening, if any
    assert scene.held is None and ex.halt() == "stopped, gripper empty"


def test_an_arm_motion_over_its_budget_reports_a_timeout_not_done():
    """Over the adapter: a move whose time budget runs out is stopped, and the segment reports
    FAILED 'timeout' (the stopped arm is short of its target), never DONE."""
    from robot_adapters.adapter_core import STATE_DONE, STATE_FAILED, SegmentIn
    from robot_adapters.adapter_core import AdapterCore

    scene = _scene()
    host = f"127.0.0.{next(_hosts)}"
    fake = FakeIndy(host, time_scale=SCALE, scene=scene).start()
    ex = IndyArmExecutor(host, scene, time_scale=SCALE)
    ex.connect()
    events = []
    core = AdapterCore("a", ex, events.append, time_scale=SCALE, skill_timeout_factor=0.05,
                       skill_timeout_margin_s=0.0).start()
    try:
        core.submit(SegmentIn("g", 0, skills=[("move_to", ["-450", "-300", "400"])], final=True))
        deadline = time.monotonic() + 20
        while not any(e.state in (STATE_DONE, STATE_FAILED) for e in events) and time.monotonic() < deadline:
            time.sleep(0.01)
        ends = [(e.state, e.error) for e in events if e.state in (STATE_DONE, STATE_FAILED)]
        assert len(ends) == 1 and ends[0][0] == STATE_FAILED and ends[0][1].startswith("timeout"), ends
        assert fake.state.p[0] > -450  # stopped on the way
    finally:
        core.shutdown()
        fake.stop()
