"""The pose the adapters report on their statuses (SkillExecutor.measured_pose, StatusEvent.pose):
the simulated robots' where their calls put them, in the status link's axes (x forward, y left,
z up, yaw counter-clockwise; metres, radians), hand-computed; none where the robot has none."""

from __future__ import annotations

import math

import pytest

from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.skills import NAV2_BASE
from robot_adapters.adapter_core import STATE_DONE, STATE_EXECUTING, AdapterCore, SegmentIn
from robot_adapters.executor import takeoff_pose
from robot_adapters.sim.sim_fleet import SampledExecutor, SimFleet

from testkit import wait_until

SCALE = 0.002


def run(core, *segments):
    """Submit ``segments`` (lists of MiniSpec calls) as one goal; the statuses once its last is done."""
    events = []
    core.publish = events.append
    core.start()
    try:
        for i, skills in enumerate(segments):
            core.submit(SegmentIn("g", i, skills=skills, final=i == len(segments) - 1))
        assert wait_until(lambda: any(e.state == STATE_DONE and e.sequence == len(segments) - 1 for e in events), 20)
    finally:
        core.shutdown(timeout=1)
    return events


def done(events, seq):
    return next(e for e in events if e.state == STATE_DONE and e.sequence == seq)


def test_the_sim_drone_reports_where_its_moves_put_it():
    [core] = SimFleet(drones=1, time_scale=SCALE, seed=2).build(lambda _r: lambda _e: None)
    # turn right 90 degrees, fly 1 m forward and 50 cm up: 1 m to the right of the take-off point
    events = run(core, [("tc", ["90"])], [("mf", ["100"]), ("mu", ["50"])])
    first = next(e for e in events if e.state == STATE_EXECUTING)
    assert first.pose == (0.0, 0.0, 0.0, 0.0)  # at its take-off point before it moved
    assert done(events, 0).pose == pytest.approx((0.0, 0.0, 0.0, -math.pi / 2))
    assert done(events, 1).pose == pytest.approx((0.0, -1.0, 0.5, -math.pi / 2), abs=1e-9)


def test_a_sim_base_is_nowhere_known_until_it_drives_to_a_place_then_follows_its_drives():
    ex = SampledExecutor("base1", "base", NAV2_BASE, ExecutionTimeModel(online=False), 0, time_scale=SCALE,
                         places={"kitchen": [16.0, 3.0, 90.0]})
    core = AdapterCore("base1", ex, time_scale=SCALE)
    events = run(core, [("tc", ["90"])], [("gt", ["kitchen"]), ("mf", ["100"])])
    assert done(events, 0).pose is None  # it turned, but from where?
    # at the kitchen facing +y (90 degrees in map), then 1 m forward: (16, 4)
    assert done(events, 1).pose == pytest.approx((16.0, 4.0, 0.0, math.pi / 2))


def test_an_arm_reports_no_pose():
    [core] = SimFleet(arms=1, time_scale=SCALE, seed=1).build(lambda _r: lambda _e: None)
    events = run(core, [("move_to", ["300", "0", "200"]), ("pick", ["cup"])])
    assert events and all(e.pose is None for e in events)


def test_the_geofence_pose_in_the_links_axes():
    # x forward 100 cm, 50 cm to the right, 80 cm up, heading 30 degrees clockwise
    assert takeoff_pose([100.0, 50.0, 80.0, 30.0]) == pytest.approx((1.0, -0.5, 0.8, -math.radians(30)))
    assert takeoff_pose([0.0, 0.0, 0.0, 270.0])[3] == pytest.approx(math.pi / 2)  # 270 cw is 90 ccw
