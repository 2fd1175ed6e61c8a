"""The action's status array is published coalesced (action_server.py FinishLaterActionServer): at most
~10 arrays per second plus one per round of goal requests, instead of rclpy's one per state
change of every goal (3 per goal), each holding every goal of the last result_timeout. Seen by an
independent subscriber of ``plan_task/_action/status``; every goal still ends SUCCEEDED there."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ros

N = 40


def test_a_burst_of_goals_gets_few_status_arrays_and_every_final_state(ros_context):
    from action_msgs.msg import GoalStatusArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.up import running_fleet

    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                           "robots": [{"id": f"d{i}", "kind": "drone", "adapter": "sim"} for i in range(N)]})
    with running_fleet(params, time_scale=0.02, context=ros_context) as fleet:
        client = GoalClient(ros_context)
        arrays: list[tuple[float, GoalStatusArray]] = []
        client.node.create_subscription(GoalStatusArray, "/plan_task/_action/status",
                                        lambda m: arrays.append((time.monotonic(), m)),
                                        # every array, not only the latest (the default depth 1)
                                        QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                                                   durability=DurabilityPolicy.TRANSIENT_LOCAL))
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            time.sleep(0.5)
            arrays.clear()
            t0 = time.monotonic()
            handles = [client.send(f"d{i}", "look for the cat") for i in range(N)]
            results = [h.result(60) for h in handles]
            elapsed = time.monotonic() - t0
            assert [r.status for r in results] == [0] * N, [r.message for r in results if r.status]
            assert all(h.action_status() == 4 for h in handles)  # SUCCEEDED on the status array
            # neither end registers its request futures with the executor (node.py, client.py), so
            # an executor round costs the same with 0 or N goals in flight
            assert fleet.planner._server._futures == [] and client.client._futures == []
        client.destroy()
    ids = {h.goal_id for h in handles}
    last = {}
    for _, m in arrays:
        for st in m.status_list:
            last[bytes(st.goal_info.goal_id.uuid).hex()] = st.status
    assert {g: last.get(g) for g in ids} == {g: 4 for g in ids}
    # rclpy would have published 3 arrays per goal (accepted, executing, succeeded): 120
    assert len(arrays) < 2 * N, len(arrays)
    assert len(arrays) <= 10 * elapsed + 15, (len(arrays), elapsed)


def test_result_requests_known_and_unknown_goals(ros_context):
    """The action server's own result-request handler (node.py, rclpy's without its eager debug
    formatting): an outside rclpy ActionClient gets a finished goal's result, and status UNKNOWN
    for a goal id the planner never saw."""
    import uuid

    import rclpy
    from rclpy.action import ActionClient
    from rclpy.action.client import ClientGoalHandle
    from timely_fleet.action import PlanTask
    from unique_identifier_msgs.msg import UUID

    from llm_planner_node.ros.goal_client import spinning
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.ros.messages import action_qos_kwargs
    from llm_planner_node.up import running_fleet

    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                           "robots": [{"id": "d0", "kind": "drone", "adapter": "sim"}]})
    with running_fleet(params, time_scale=0.02, context=ros_context):
        node = rclpy.create_node("outside_result_client", context=ros_context)
        client = ActionClient(node, PlanTask, "plan_task", **action_qos_kwargs())
        with spinning(node, ros_context):
            assert client.wait_for_server(30)
            goal = PlanTask.Goal(robot_id="d0", instruction="look for the cat", ert_s=1.0, alpha=-2.0, beta=1.0)
            sent = client.send_goal_async(goal)
            deadline = time.monotonic() + 30
            while not sent.done() and time.monotonic() < deadline:
                time.sleep(0.01)
            handle = sent.result()
            assert handle.accepted
            known = handle.get_result_async()
            # the result of a goal id nobody sent, asked the way rclpy asks for any goal's result
            stranger = ClientGoalHandle(client, UUID(uuid=list(uuid.uuid4().bytes)),
                                        PlanTask.Impl.SendGoalService.Response(accepted=True))
            fut = stranger.get_result_async()
            while not (known.done() and fut.done()) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert known.result().status == 4 and known.result().result.status == 0
            assert fut.result().status == 0  # action_msgs GoalStatus.STATUS_UNKNOWN
        client.destroy()
        node.destroy_node()


def test_finished_goals_expire_result_timeout_after_their_end(ros_context, monkeypatch):
    """A goal's end re-arms the server's expiry timer at the next coalesced flush (not on the
    scheduler's thread, once per goal): finished goals are kept, then forgotten about
    ``result_timeout`` after their end (a result asked for after that is UNKNOWN: see
    test_result_requests_known_and_unknown_goals)."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.ros.action_server import FinishLaterActionServer
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.up import running_fleet

    monkeypatch.setattr(FinishLaterActionServer, "RESULT_TIMEOUT_S", 1)
    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                           "robots": [{"id": f"d{i}", "kind": "drone", "adapter": "sim"} for i in range(4)]})
    with running_fleet(params, time_scale=0.02, context=ros_context) as fleet:
        server = fleet.planner._server
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            handles = [client.send(f"d{i}", "look for the cat") for i in range(4)]
            assert [h.result(60).status for h in handles] == [0] * 4
            ended = time.monotonic()
            assert len(server._goal_handles) == 4  # results are kept for result_timeout after the goal's end
            deadline = ended + 10
            while server._goal_handles and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not server._goal_handles and not server._result_futures, "finished goals never expired"
            assert time.monotonic() - ended >= 0.5  # not dropped at once either
        client.destroy()
