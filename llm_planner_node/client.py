"""`timely-fleet goal`: send one planning goal from a terminal and watch its segments.

Also :class:`GoalClient`, a small thread-safe wrapper over the ``plan_task`` action used by the
demo and the tests: ``send(...)`` returns a handle whose ``result(timeout)`` waits for the end.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

TUF_CLASSES = {"normal": (1.0, -2.0, 1.0), "urgent": (0.2, -6.67, 2.0)}   # TimelyLLM 5.1

#: Seeing the action server does not mean it has matched *our* response reader yet (DDS discovery
#: runs both ways independently); a goal sent in that window gets no answer. Wait this long
#: after the server first appears (a fresh client process against a running node hit this).
DISCOVERY_SETTLE_S = 1.0

STATUS_NAMES = {0: "SUCCEEDED", 1: "REJECTED", 2: "CANCELLED", 3: "INVALID_PLAN", 4: "ROBOT_FAILED",
                5: "ENGINE_FAILED", 6: "TIMEOUT"}


@dataclass
class GoalHandle:
    """One sent goal: its feedback as it arrives and, at the end, its result."""

    sent_at: float
    feedback: list[Any] = field(default_factory=list)
    feedback_times: list[float] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _result: Any = None
    _ros_handle: Any = None
    accepted: threading.Event = field(default_factory=threading.Event)

    def result(self, timeout: float | None = None) -> Any:
        if not self._done.wait(timeout):
            raise TimeoutError(f"goal did not end within {timeout} s")
        return self._result

    @property
    def done(self) -> bool:
        return self._done.is_set()


@contextlib.contextmanager
def spinning(node: Any, context: Any) -> Iterator[None]:
    """Spin ``node`` in a background thread for the duration of the block."""
    from rclpy.executors import SingleThreadedExecutor

    ex = SingleThreadedExecutor(context=context)
    ex.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ex.spin_once(timeout_sec=0.05)

    thread = threading.Thread(target=spin, name=f"spin-{node.get_name()}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)
        ex.shutdown()


class GoalClient:
    """Action client for ``plan_task`` on its own node; spin the node in any executor."""

    def __init__(self, context: Any = None, name: str | None = None) -> None:
        import rclpy  # noqa: F401
        from rclpy.action import ActionClient
        from rclpy.node import Node
        from timely_fleet.action import PlanTask

        self.PlanTask = PlanTask
        self.node = Node(name or f"goal_client_{uuid.uuid4().hex[:8]}", context=context)
        from .node import action_qos_kwargs

        self.client = ActionClient(self.node, PlanTask, "plan_task", **action_qos_kwargs())

    def wait_for_server(self, timeout_s: float = 30.0) -> bool:
        """Wait for the planner's action server, then for discovery to settle (see above)."""
        if not self.client.wait_for_server(timeout_sec=timeout_s):
            return False
        time.sleep(DISCOVERY_SETTLE_S)
        return True

    def send(self, robot_id: str, instruction: str, *, robot_kind: str = "", task_type: str = "",
             tuf: tuple[float, float, float] = TUF_CLASSES["normal"], skill_set: str = "", max_tokens: int = 0,
             on_feedback: Callable[[Any], None] | None = None) -> GoalHandle:
        ert, alpha, beta = tuf
        goal = self.PlanTask.Goal(robot_id=robot_id, robot_kind=robot_kind, task_type=task_type,
                                  instruction=instruction, ert_s=ert, alpha=alpha, beta=beta,
                                  skill_set=skill_set, max_tokens=max_tokens)
        h = GoalHandle(sent_at=time.monotonic())

        def feedback(msg: Any) -> None:
            h.feedback.append(msg.feedback)
            h.feedback_times.append(time.monotonic())
            if on_feedback:
                on_feedback(msg.feedback)

        def got_result(fut: Any) -> None:
            h._result = fut.result().result
            h._done.set()

        def responded(fut: Any) -> None:
            gh = fut.result()
            h._ros_handle = gh
            h.accepted.set()
            if not gh.accepted:
                h._result = self.PlanTask.Result(status=1, message="goal not accepted by the action server")
                h._done.set()
                return
            gh.get_result_async().add_done_callback(got_result)

        self.client.send_goal_async(goal, feedback_callback=feedback).add_done_callback(responded)
        return h

    def cancel(self, h: GoalHandle, timeout_s: float = 10.0) -> None:
        if not h.accepted.wait(timeout_s):
            raise TimeoutError("goal was never accepted")
        h._ros_handle.cancel_goal_async()

    def destroy(self) -> None:
        self.client.destroy()
        self.node.destroy_node()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("robot_id", help="robot that executes the plan (as in the parameter YAML)")
    parser.add_argument("instruction", help='the task, e.g. "look for the cat"')
    parser.add_argument("--urgency", choices=tuple(TUF_CLASSES), default="normal",
                        help="TUF preset: normal (ERT 1 s) or urgent (ERT 0.2 s)")
    parser.add_argument("--ert", type=float, help="override the TUF's ERT (s)")
    parser.add_argument("--alpha", type=float, help="override the TUF slope (<= 0)")
    parser.add_argument("--beta", type=float, help="override the TUF's maximum utility")
    parser.add_argument("--task-type", default="", help="label for reports")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.context import Context

    ert, alpha, beta = TUF_CLASSES[args.urgency]
    tuf = (args.ert if args.ert is not None else ert, args.alpha if args.alpha is not None else alpha,
           args.beta if args.beta is not None else beta)
    ctx = Context()
    rclpy.init(context=ctx)
    client = GoalClient(ctx)
    try:
        with spinning(client.node, ctx):
            return _send_and_watch(client, args, tuf)
    finally:
        client.destroy()
        rclpy.try_shutdown(context=ctx)


def _send_and_watch(client: GoalClient, args: argparse.Namespace, tuf: tuple[float, float, float]) -> int:
    if not client.wait_for_server(10.0):
        print("no planner answers on the 'plan_task' action: start one with `timely-fleet up`")
        return 1
    t0 = time.monotonic()

    def show(fb: Any) -> None:
        skills = ", ".join(f"{s.name}({', '.join(s.arg_values)})" for s in fb.skills)
        print(f"[{time.monotonic() - t0:7.3f} s] segment {fb.index}: {fb.text!r} -> {skills}"
              f" (queued {fb.queue_s * 1000:.0f} ms, generated in {fb.generation_s * 1000:.0f} ms)"
              f"{' [final]' if fb.final else ''}", flush=True)

    h = client.send(args.robot_id, args.instruction, task_type=args.task_type, tuf=tuf, on_feedback=show)
    try:
        res = h.result(args.timeout)
    except TimeoutError:
        client.cancel(h)
        print(f"no result after {args.timeout} s: goal cancelled")
        return 1
    print(f"{STATUS_NAMES.get(res.status, res.status)}: {res.message}")
    if res.status == 0:
        print(f"response {res.response_time_s:.3f} s, robot waiting {res.robot_waiting_s:.3f} s, "
              f"utility {res.time_utility:.2f} of {tuf[2]:g}")
    return 0 if res.status == 0 else 1
