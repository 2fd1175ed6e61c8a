"""Cancel rights over real ROS: a goal is cancelled only by its own client (the secret
behind its cancel key, through planner/cancel_goal) or an operator; a rogue node's standard action
cancel and a "cancel every goal" request (all-zero goal id) are refused and counted."""

from __future__ import annotations

import hashlib
import time

import pytest

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
OPERATOR_SECRET = "operator-secret-for-tests"


def fleet():
    from llm_planner_node.config.params import parse_params

    return parse_params({
        "planner": {"engine": {"kind": "sim"}},
        "security": {"cancel_operator_keys_sha256": hashlib.sha256(OPERATOR_SECRET.encode()).hexdigest()},
        "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}, {"id": "d2", "kind": "drone", "adapter": "sim"}]})


def wait_future(fut, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not fut.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fut.done()
    return fut.result()


def test_only_the_goals_client_or_an_operator_can_cancel_it(ros_context):
    from action_msgs.msg import GoalInfo
    from action_msgs.srv import CancelGoal
    from rclpy.node import Node
    from timely_fleet.srv import CancelPlan
    from unique_identifier_msgs.msg import UUID

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet(), time_scale=0.5, context=ros_context) as f:
        owner = GoalClient(ros_context)
        rogue = Node("rogue_canceller", context=ros_context)
        cancel_srv = rogue.create_client(CancelGoal, "plan_task/_action/cancel_goal")
        plan_cancel = rogue.create_client(CancelPlan, "planner/cancel_goal")
        with spinning(owner.node, ros_context), spinning(rogue, ros_context):
            assert owner.wait_for_server(20), owner.wait_problem
            assert cancel_srv.wait_for_service(timeout_sec=10) and plan_cancel.wait_for_service(timeout_sec=10)
            a = owner.send("d1", "look for the cat", tuf=NORMAL)
            b = owner.send("d2", "check the book on the cabinet", tuf=NORMAL)
            assert a.accepted.wait(10) and b.accepted.wait(10)

            def cancel_req(uuid_bytes):
                return CancelGoal.Request(goal_info=GoalInfo(goal_id=UUID(uuid=list(uuid_bytes))))

            # a rogue's standard cancel of goal a (the id is public: goal status topics list it)
            r1 = wait_future(cancel_srv.call_async(cancel_req(bytes.fromhex(a.goal_id))))
            assert list(r1.goals_canceling) == []
            # a rogue's "cancel every goal"
            r2 = wait_future(cancel_srv.call_async(cancel_req(bytes(16))))
            assert r2.return_code == CancelGoal.Response.ERROR_REJECTED and list(r2.goals_canceling) == []
            # a rogue guessing at the planner's cancel service
            r3 = wait_future(plan_cancel.call_async(CancelPlan.Request(goal_id=a.goal_id, secret="guess")))
            assert not r3.accepted and r3.message == "refused: not the goal's client or an operator"
            # the owner cancels a; an operator cancels b
            r4 = wait_future(owner.cancel(a))
            assert r4.accepted, r4.message
            r5 = wait_future(plan_cancel.call_async(CancelPlan.Request(goal_id=b.goal_id, secret=OPERATOR_SECRET)))
            assert r5.accepted, r5.message
            ra, rb = a.result(30), b.result(30)
            assert ra.status == 2 and rb.status == 2, (ra.message, rb.message)
            assert a.action_status() == 5  # action_msgs GoalStatus.STATUS_CANCELED, as a ROS cancel ends
            assert f.planner.cancel_rights.refusals == {
                "protected goal: cancel it through planner/cancel_goal with its secret": 1,
                "wrong or missing secret": 1}
            assert f.planner._server.refused_cancel_all == 1
        owner.destroy()
        rogue.destroy_node()
