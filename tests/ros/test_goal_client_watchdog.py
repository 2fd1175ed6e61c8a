"""GoalClient recovers a goal whose request or answer is lost or late, and never reports a goal
REJECTED that the planner is running (client.py, GoalClient._watch_loop).

A scripted action server over real rclpy stands in for a loaded or lossy planner: it can drop
a goal request (as DDS does to a sample it could not deliver), hold one back and let a later
one overtake it, or answer a result query late. The client must end every goal with the
server's real result, and the server must run each goal once."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.ros


class _Scripted:
    """A FinishLaterActionServer whose n-th goal request is ``drop``ped, ``hold``-en back until the
    next request arrives, or served; result queries can be answered ``late_query_s`` late.
    Spin ``node`` to serve."""

    def __init__(self, ctx, script: dict[int, str], late_query_s: float = 0.0) -> None:
        from rclpy.action import GoalResponse
        from rclpy.node import Node
        from timely_fleet.action import PlanTask

        from llm_planner_node.ros.action_server import FinishLaterActionServer
        from llm_planner_node.ros.messages import action_qos_kwargs

        outer = self
        self.requests = 0
        self.executed: list[str] = []
        self.held: list = []
        self.queries = 0

        class Server(FinishLaterActionServer):
            async def _execute_goal_request(self, req):
                n, outer.requests = outer.requests, outer.requests + 1
                what = script.get(n, "serve")
                if what == "drop":
                    return
                if what == "hold":
                    outer.held.append(req)
                    return
                while outer.held:  # the held request gets there first, then this one
                    await super()._execute_goal_request(outer.held.pop(0))
                await super()._execute_goal_request(req)

            async def _execute_get_result_request(self, req):
                outer.queries += 1
                if late_query_s and outer.queries == 1:
                    time.sleep(late_query_s)  # a server busy elsewhere: this answer leaves late
                await super()._execute_get_result_request(req)

        def execute(handle):
            self.executed.append(bytes(handle.goal_id.uuid).hex())
            handle.succeed()
            self.server.finish_goal(handle, PlanTask.Result(status=0, message="done"))

        self.node = Node("scripted_server", context=ctx)
        self.server = Server(self.node, PlanTask, "plan_task", execute_callback=execute,
                             goal_callback=lambda _g: GoalResponse.ACCEPT, **action_qos_kwargs("server"))

    def close(self) -> None:
        self.server.destroy()
        self.node.destroy_node()


def _run(ctx, script: dict[int, str], late_query_s: float = 0.0):
    from llm_planner_node.ros.goal_client import GoalClient, spinning

    server = _Scripted(ctx, script, late_query_s)
    client = GoalClient(ctx)
    try:
        with spinning(server.node, ctx), spinning(client.node, ctx):
            assert client.wait_for_server(30), client.wait_problem
            h = client.send("r1", "look for the cat")
            res = h.result(30)
            time.sleep(1.0)  # any late answer (a refused re-send) has arrived by now
            return h, res, server
    finally:
        client.destroy()
        server.close()


def test_a_lost_goal_request_is_sent_again_and_runs_once(ros_context):
    h, res, server = _run(ros_context, {0: "drop"})
    assert (res.status, res.message) == (0, "done")
    assert server.requests == 2 and server.executed == [h.goal_id]


def test_a_late_unknown_answer_is_not_taken_for_the_result(ros_context):
    """The request is lost and the server's UNKNOWN answer to the client's query comes after the
    client stopped waiting for it: the goal is sent again, not ended "no record"."""
    h, res, server = _run(ros_context, {0: "drop"}, late_query_s=4.0)
    assert (res.status, res.message) == (0, "done")
    assert server.executed == [h.goal_id]


def test_a_refused_resend_of_a_late_request_is_not_a_rejection(ros_context):
    """The first request is overtaken by the client's query (UNKNOWN) and arrives just before the
    re-send: the server runs the first and refuses the duplicate; the client reports the result."""
    h, res, server = _run(ros_context, {0: "hold"})
    assert (res.status, res.message) == (0, "done")
    assert server.requests == 2 and server.executed == [h.goal_id]
    assert h.result(0).status == 0  # still the result, after the refused answer arrived


def test_goals_that_fail_their_field_checks_are_served_before_a_burst(ros_context):
    """FinishLaterActionServer.rejects_at_once: of the goal requests taken in one round, the ones
    that will be rejected at once go first; the others keep their order."""
    from rclpy.action import GoalResponse
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.action import PlanTask

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.ros.action_server import FinishLaterActionServer
    from llm_planner_node.ros.messages import action_qos_kwargs

    order: list[str] = []
    node = Node("priority_server", context=ros_context)

    def execute(handle):
        order.append(handle.request.robot_id)
        handle.succeed()
        server.finish_goal(handle, PlanTask.Result(status=0, message="done"))

    server = FinishLaterActionServer(node, PlanTask, "plan_task", execute_callback=execute,
                                     goal_callback=lambda _g: GoalResponse.ACCEPT, **action_qos_kwargs("server"))
    server.rejects_at_once = lambda g: g.robot_id.startswith("bad")
    client = GoalClient(ros_context)
    try:
        with spinning(client.node, ros_context):
            with spinning(node, ros_context):
                assert client.wait_for_server(30), client.wait_problem
            # the server stops taking requests: a burst queues up, then it takes them here
            ex = SingleThreadedExecutor(context=ros_context)
            ex.add_node(node)
            sent = [f"good{i}" if i % 4 else f"bad{i}" for i in range(12)]
            handles = [client.send(r, "look for the cat") for r in sent]
            time.sleep(1.0)
            for _ in range(200):
                ex.spin_once(timeout_sec=0.02)
                if len(order) == len(sent) and all(h.done for h in handles):
                    break
        assert sorted(order) == sorted(sent)
        bad = [r for r in sent if r.startswith("bad")]
        assert order[:len(bad)] == bad and order[len(bad):] == [r for r in sent if r.startswith("good")]
    finally:
        client.destroy()
        server.destroy()
        node.destroy_node()


def test_a_slow_goal_answer_is_not_taken_for_a_lost_goal(ros_context, monkeypatch):
    """GoalClient against a loaded action server: a goal request that waits in the
    server's queue longer than GOAL_ANSWER_S makes the client ask for the goal's result by id; the
    server, not knowing the goal yet, answers UNKNOWN. That answer must not end the goal as
    "no record" (REJECTED) while the request itself is still unanswered: at 1,000 robots this
    turned a quarter of the goals into false rejections whose plans still ran."""
    from rclpy.action import ActionServer, GoalResponse
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.action import PlanTask

    from llm_planner_node.ros import goal_client as client_mod
    from llm_planner_node.ros.messages import action_qos_kwargs

    monkeypatch.setattr(client_mod, "GOAL_ANSWER_S", 0.3)
    server_node = Node("slow_server", context=ros_context)
    slow = threading.Event()

    def goal_callback(_goal):
        if slow.is_set():
            time.sleep(1.5)  # the goal request waits, result requests are answered meanwhile
        return GoalResponse.ACCEPT

    def execute(goal_handle):
        goal_handle.succeed()
        return PlanTask.Result(status=0, message="done")

    ActionServer(server_node, PlanTask, "plan_task", execute_callback=execute, goal_callback=goal_callback,
                 callback_group=ReentrantCallbackGroup(), **action_qos_kwargs("server"))
    client = client_mod.GoalClient(ros_context)
    ex = MultiThreadedExecutor(num_threads=4, context=ros_context)
    ex.add_node(server_node)
    ex.add_node(client.node)
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [ex.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)],
                               daemon=True)
    spinner.start()
    # the client lags too (its executor busy with a thousand goals): the UNKNOWN answer to its
    # by-id request reaches it after GOAL_ANSWER_S, while the goal request is still unanswered
    from rclpy.task import Future

    by_id = client.result_of

    def late_result_of(goal_uuid):
        handle, fut = by_id(goal_uuid)
        late = Future()
        fut.add_done_callback(lambda f: threading.Timer(0.5, lambda: late.set_result(f.result())).start())
        return handle, late

    monkeypatch.setattr(client, "result_of", late_result_of)
    try:
        assert client.wait_for_server(20), client.wait_problem
        slow.set()
        h = client.send("d1", "look for the cat")
        res = h.result(20)
        assert res.status == 0 and res.message == "done", res.message
    finally:
        stop.set()
        spinner.join(5)
        client.destroy()
        ex.shutdown()
        server_node.destroy_node()
