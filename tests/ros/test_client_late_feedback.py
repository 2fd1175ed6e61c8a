"""GoalClient keeps a goal's feedback that arrives after its result (topic and service are not
ordered; rclpy drops feedback for a goal whose result it has): the goal is done when every
dispatched segment's feedback is in, or after FEEDBACK_GRACE_S."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.ros


def test_feedback_sent_after_the_result_still_reaches_the_goal_handle(ros_context):
    from rclpy.action import GoalResponse
    from rclpy.node import Node
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import SegmentReport

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.ros.action_server import FinishLaterActionServer
    from llm_planner_node.ros.messages import action_qos_kwargs

    server_node = Node("late_feedback_server", context=ros_context)

    def execute(handle):
        handle.publish_feedback(PlanTask.Feedback(index=0, text="takeoff();"))
        handle.succeed()
        server.finish_goal(handle, PlanTask.Result(status=0, message="done",
                                                   segments=[SegmentReport(), SegmentReport()]))
        # segment 1's feedback leaves after the result
        threading.Timer(0.3, lambda: handle.publish_feedback(PlanTask.Feedback(index=1, text="land();"))).start()

    server = FinishLaterActionServer(server_node, PlanTask, "plan_task", execute_callback=execute,
                                     goal_callback=lambda _g: GoalResponse.ACCEPT, **action_qos_kwargs("server"))
    client = GoalClient(ros_context)
    try:
        with spinning(server_node, ros_context), spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            h = client.send("r1", "look for the cat")
            res = h.result(10)
            assert res.status == 0 and len(res.segments) == 2
            assert [f.index for f in h.feedback] == [0, 1]
            assert h.feedback_times[1] - h.feedback_times[0] >= 0.2  # it really came after the result
    finally:
        client.destroy()
        server.destroy()
        server_node.destroy_node()
