"""GoalClient after a planner takeover (GoalClient._on_role): a goal the new active planner adopted
gets its result from the new planner, once; a goal it did not adopt ends at once with an error
naming the goal and the new planner.

Two action servers for ``plan_task`` in one process stand in for the two planners: A accepts the
goal and is destroyed (as if killed); B starts, adopts the goal under its id (or not) and
publishes its PlannerRole with a higher term."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

import pytest

pytestmark = pytest.mark.ros


def _wait(cond: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class _Planner:
    """A node with a FinishLaterActionServer for ``plan_task`` (its execute callback records the
    handle) and a publisher of its PlannerRole; counts the result requests per goal id."""

    def __init__(self, ctx: Any, name: str) -> None:
        from rclpy.action import GoalResponse
        from rclpy.node import Node
        from timely_fleet.action import PlanTask
        from timely_fleet.msg import PlannerRole

        from llm_planner_node.ros.action_server import FinishLaterActionServer
        from llm_planner_node.ros.messages import LATCHED_QOS, ROLE_TOPIC, action_qos_kwargs

        outer = self
        self.handles: dict[str, Any] = {}
        self.result_requests: dict[str, int] = {}

        class Server(FinishLaterActionServer):
            async def _execute_get_result_request(self, req: Any) -> None:
                gid = bytes(req[1].goal_id.uuid).hex()
                outer.result_requests[gid] = outer.result_requests.get(gid, 0) + 1
                await super()._execute_get_result_request(req)

        def execute(handle: Any) -> None:
            self.handles[bytes(handle.goal_id.uuid).hex()] = handle

        self.node = Node(name, context=ctx)
        self.server = Server(self.node, PlanTask, "plan_task", execute_callback=execute,
                             goal_callback=lambda _g: GoalResponse.ACCEPT, **action_qos_kwargs("server"))
        self.role_pub = self.node.create_publisher(PlannerRole, ROLE_TOPIC, LATCHED_QOS)
        self.PlannerRole = PlannerRole

    def publish_role(self, term: int, adopted: list[str] = ()) -> None:
        self.role_pub.publish(self.PlannerRole(
            stamp=self.node.get_clock().now().to_msg(), node=self.node.get_fully_qualified_name(), role="active",
            term=term, adopted_goal_ids=list(adopted)))

    def close(self) -> None:
        self.server.destroy()
        self.node.destroy_node()


@contextlib.contextmanager
def _takeover(ctx: Any, adopt: bool) -> Iterator[tuple[Any, Any, _Planner, float]]:
    """A goal accepted by planner A, A gone, planner B active at term 2 (adopting the goal if
    ``adopt``): (client, goal handle, B, when B's role was published), everything spinning."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning

    with contextlib.ExitStack() as stack:
        client = GoalClient(ctx)
        stack.callback(client.destroy)
        stack.enter_context(spinning(client.node, ctx))
        a = _Planner(ctx, "planner_a")
        with spinning(a.node, ctx):
            a.publish_role(1)
            assert client.wait_for_server(20), client.wait_problem
            _wait(lambda: client.planner_term == 1, 10, "planner A's role")
            h = client.send("r1", "look for the cat")
            assert h.accepted.wait(10)
            _wait(lambda: h.goal_id in a.handles, 5, "planner A to execute the goal")
        request, stamp = a.handles[h.goal_id].request, a.handles[h.goal_id]._goal_info.stamp  # noqa: SLF001
        a.close()  # planner A died: the client's result request is never answered
        b = _Planner(ctx, "planner_b")
        stack.callback(b.close)
        stack.enter_context(spinning(b.node, ctx))
        if adopt:
            b.handles[h.goal_id] = b.server.adopt_goal(bytes.fromhex(h.goal_id), request, stamp)
        b.publish_role(2, [h.goal_id] if adopt else [])
        yield client, h, b, time.monotonic()


def test_an_adopted_goal_gets_the_new_planners_result_once(ros_context):
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import SegmentReport

    with _takeover(ros_context, adopt=True) as (client, h, b, _t):
        _wait(lambda: b.result_requests.get(h.goal_id, 0) >= 1, 10, "the client to ask planner B for the result")
        handle = b.handles[h.goal_id]
        # feedback under the goal's own id, and the result right after it (the result's answer may
        # be taken before the feedback: the client keeps listening for it)
        handle.publish_feedback(PlanTask.Feedback(index=0, text="takeoff();"))
        handle.succeed()
        b.server.finish_goal(handle, PlanTask.Result(status=0, message="finished by planner B",
                                                     segments=[SegmentReport()]))
        res = h.result(10)
        assert (res.status, res.message) == (0, "finished by planner B")
        assert [f.text for f in h.feedback] == ["takeoff();"]
        assert client.takeovers == 1 and client.planner_term == 2
        time.sleep(0.3)  # nothing else arrives for it
        assert h.result(0) is res and b.result_requests[h.goal_id] == 1


def test_a_goal_the_new_planner_did_not_adopt_ends_at_once_with_an_error(ros_context):
    from timely_fleet.action import PlanTask

    with _takeover(ros_context, adopt=False) as (_client, h, _b, t_role):
        res = h.result(5)
        assert time.monotonic() - t_role < 2.0
        assert res.status == PlanTask.Result.STATUS_REJECTED
        assert h.goal_id in res.message and "/planner_b" in res.message and "term 2" in res.message, res.message
        assert ". " not in res.message  # one sentence
