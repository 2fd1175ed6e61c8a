"""A goal that ends other than by success stops its robot, over real ROS.

The engine writes an invalid second segment (or dies) after the first segment reached the robot:
the planner must tell the adapter to stop, the adapter must drop the goal's queued segments,
bring the robot to idle and report it on ``/robot_status``; no further segment of that goal
runs, and the robot's next goal succeeds. Counted from ``/robot_status`` by an independent
subscriber. Also: 20 concurrent goals for one robot -> exactly one runs (item 9).
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)


def fleet_params():
    from llm_planner_node.config.params import parse_params

    return parse_params({
        "planner": {"policy": "timelyllm", "engine": {"kind": "sim"}, "robot_timeout_s": 5.0},
        "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"},
                   {"id": "a1", "kind": "arm", "adapter": "sim"}],
    })


def breaking_engine(kind: str):
    """A simulated engine whose first generation fails when its segment 1 is complete:
    ``invalid`` -> the model 'wrote an invalid plan'; ``engine`` -> the engine faults."""
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.core.engine_api import FailedEvent, SegmentEvent
    from llm_planner_node.engines.sim_engine import RealtimeSimEngine

    class Breaks(RealtimeSimEngine):
        broke = False

        def step(self):
            events = super().step()
            if Breaks.broke:
                return events
            out = []
            for ev in events:
                if isinstance(ev, SegmentEvent) and ev.index == 1:
                    Breaks.broke = True
                    self.abort(ev.gen_id)
                    if kind == "invalid":
                        out.append(FailedEvent(ev.gen_id, ev.t, "invalid plan text at 'place(corner);'",
                                               invalid_plan=True))
                    else:
                        raise RuntimeError("CUDA error: device lost")
                    break
                out.append(ev)
            return out

    return Breaks(WallClock())


def record(node, msg_type, topic, qos=None):
    from timely_robot.link.ros import STATUS_QOS

    got: list = []
    node.create_subscription(msg_type, topic, lambda m: got.append(m), qos or STATUS_QOS)
    return got


@pytest.mark.parametrize("kind, status", [("invalid", 3), ("engine", 5)])
def test_goal_ending_early_stops_the_robot_and_the_next_goal_succeeds(ros_context, kind, status):
    from timely_fleet.msg import RobotStatus

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    # time scale 0.2: the arm's first segment is still executing when segment 1 fails
    with running_fleet(fleet_params(), time_scale=0.2, context=ros_context,
                       engine=breaking_engine(kind)) as f:
        client = GoalClient(ros_context)
        statuses = record(client.node, RobotStatus, "/robot_status")
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            h = client.send("a1", "desk cleaning", tuf=NORMAL, task_type="arm")
            res = h.result(30)
            assert res.status == status, res.message
            assert len(h.feedback) == 1, "exactly the first segment was dispatched before the failure"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(
                    m.goal_id == h.goal_id and m.state == RobotStatus.STATE_IDLE for m in statuses):
                time.sleep(0.05)
            mine = [m for m in statuses if m.goal_id == h.goal_id]
            stopped = [m for m in mine if m.state == RobotStatus.STATE_IDLE]
            assert stopped and stopped[0].error.startswith("stopped"), [(m.state, m.error) for m in mine]
            time.sleep(1.0)  # anything the robot would still do for that goal shows up by now
            mine = [m for m in statuses if m.goal_id == h.goal_id]
            executed = {m.sequence for m in mine if m.state in (RobotStatus.STATE_EXECUTING,
                                                                 RobotStatus.STATE_DONE)}
            assert executed <= {0}, f"segments {sorted(executed)} of the ended goal ran"
            assert f.planner.counters["robot_stops"] == 1
            assert f.planner.service.delivery.stops_pending() == 0, "the stop was confirmed by the adapter"
            again = client.send("a1", "stack the red, blue and green boxes", tuf=NORMAL, task_type="arm").result(60)
            assert again.status == 0, again.message
        client.destroy()


def test_twenty_concurrent_goals_for_one_robot_exactly_one_runs(ros_context):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet_params(), time_scale=0.05, context=ros_context) as _f:
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            handles = [client.send("d1", "look for the cat", tuf=NORMAL) for _ in range(20)]
            results = [h.result(60) for h in handles]
        client.destroy()
    ran = [r for r in results if r.status == 0]
    busy = [r for r in results if r.status == 1 and "still executing goal" in r.message]
    assert len(ran) == 1, [(r.status, r.message) for r in results]
    assert len(busy) == 19
