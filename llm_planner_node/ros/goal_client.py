"""`GoalClient`: a small thread-safe wrapper over the ``plan_task`` action for programs (the
`goal` and `demo` commands, the MCP front end, the benchmarks and the tests): ``send(...)``
returns a handle whose ``result(timeout)`` waits for the end. The `goal` command itself is
:mod:`llm_planner_node.cli.goal`.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from llm_planner_node.core.outcomes import STATUS_NAMES  # noqa: F401 (programs that print results import them here)

#: The built-in TUF presets (TimelyLLM 5.1: params.DEFAULT_TUF_PRESETS) as (ert_s, alpha, beta);
#: `timely-fleet goal --urgency` reads the parameter file's planner.tuf_presets (:func:`tuf_for`).
TUF_CLASSES = {"normal": (1.0, -2.0, 1.0), "urgent": (0.2, -6.67, 2.0)}

#: Seeing the action server does not mean it has matched *our* response readers yet (DDS
#: discovery runs both ways independently): a request sent in that window is served but its
#: answer is dropped. ``wait_for_server`` therefore ends with a handshake: it asks the server to
#: cancel a random, unknown goal id (a request that changes nothing and is answered at once)
#: until an answer arrives. Any probe's answer counts (a loaded server may answer a probe after
#: the next one was sent), and probes are re-sent 0.1 s, 0.2 s, ... up to 1 s apart. A goal
#: whose answer still does not come is recovered by ``send``.
HANDSHAKE_TRY_S = 0.1
HANDSHAKE_MAX_TRY_S = 1.0
GOAL_ANSWER_S = 3.0      # no answer to a goal request after this long: find out what happened
GOAL_TRIES = 4
FEEDBACK_GRACE_S = 2.0   # how long a goal's late feedback is still taken after its result



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
    goal_id: str = ""                 # hex of the action goal's UUID (matches /robot_status goal_id)
    cancel_secret: str = ""           # proves this client's right to cancel (its SHA-256 is in the goal)

    def result(self, timeout: float | None = None) -> Any:
        if not self._done.wait(timeout):
            raise TimeoutError(f"goal did not end within {timeout} s")
        return self._result

    def result_wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the result; whether it arrived."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def action_status(self, within_s: float = 1.0) -> int:
        """The goal's ``action_msgs/GoalStatus`` as the server's status array reports it. The
        planner publishes that array coalesced (at most every 100 ms), so it may show a goal's
        terminal state a moment after its result: for an ended goal, wait up to ``within_s``
        for the array to show SUCCEEDED (4), CANCELED (5) or ABORTED (6)."""
        deadline = time.monotonic() + within_s
        status = self._ros_handle.status if self._ros_handle is not None else 0
        while self.done and status not in (4, 5, 6) and time.monotonic() < deadline:
            time.sleep(0.01)
            status = self._ros_handle.status
        return status


def probe_server(action_client: Any) -> Any:
    """One handshake request (see HANDSHAKE_TRY_S): ask the action server to cancel a random,
    unknown goal id (never the all-zero id, which means "every goal"); a future of its answer."""
    from rclpy.action.client import ClientGoalHandle
    from unique_identifier_msgs.msg import UUID

    response = action_client._action_type.Impl.SendGoalService.Response(accepted=True)
    return ClientGoalHandle(action_client, UUID(uuid=list(uuid.uuid4().bytes)), response).cancel_goal_async()


class Handshake:
    """Probes an action server until one of its answers arrives (see HANDSHAKE_TRY_S).

    ``step()`` sends a probe when the last one is older than the current interval (which
    doubles up to HANDSHAKE_MAX_TRY_S); ``answered`` is set by the first answer to any probe.
    ``probes`` counts probes sent (for error messages)."""

    def __init__(self, action_client: Any) -> None:
        self.client = action_client
        self.answered = threading.Event()
        self.probes = 0
        self._interval = HANDSHAKE_TRY_S
        self._next = 0.0

    def step(self) -> None:
        now = time.monotonic()
        if self.answered.is_set() or now < self._next:
            return
        probe_server(self.client).add_done_callback(lambda _f: self.answered.set())
        self.probes += 1
        self._next = now + self._interval
        self._interval = min(2 * self._interval, HANDSHAKE_MAX_TRY_S)


def plan_task_client(node: Any, action_name: str = "plan_task") -> Any:
    """An rclpy ``ActionClient`` for ``plan_task`` (burst-sized QoS) whose futures the executor
    does not track.

    rclpy's ActionClient registers every pending goal, result and cancel future with itself, and
    its executor re-binds each of them (``Future._set_executor``) every time the client has
    anything to execute: every feedback, status array and response costs one call per request
    in flight. With 64 goals in flight that was 80,000 calls in two bursts, a tenth of the
    client's spin thread. Untracked futures run their done callbacks at once in the thread that
    completes them, which for responses is the spin thread that ran them before."""
    from rclpy.action import ActionClient
    from timely_fleet.action import PlanTask

    from llm_planner_node.ros.messages import action_qos_kwargs

    class _UntrackedFuturesClient(ActionClient):
        def add_future(self, future: Any) -> None:
            pass

        def remove_future(self, future: Any) -> None:
            pass

    return _UntrackedFuturesClient(node, PlanTask, action_name, **action_qos_kwargs())


def answering_action_client(node: Any, action_name: str, timeout_s: float, executor: Any = None) -> tuple[Any, Any]:
    """``(client, executor)``: a ``plan_task`` ActionClient on ``node`` once its server is seen and
    has answered the handshake, spinning ``node`` on ``executor`` (a new single-threaded one if
    None) in this thread meanwhile; TimeoutError after ``timeout_s``."""
    from rclpy.executors import SingleThreadedExecutor

    ex = executor
    if ex is None:
        ex = SingleThreadedExecutor(context=node.context)
        ex.add_node(node)
    client = plan_task_client(node, action_name)
    deadline = time.monotonic() + timeout_s
    while not client.server_is_ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no '{action_name}' action server (start the node with `timely-fleet up`)")
        ex.spin_once(timeout_sec=0.1)
    hs = Handshake(client)  # the server answers us before any goal is sent
    while not hs.answered.is_set():
        hs.step()
        ex.spin_once(timeout_sec=0.02)
        if time.monotonic() > deadline and not hs.answered.is_set():
            raise TimeoutError(f"the '{action_name}' action server does not answer")
    return client, ex


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


WATCH_PERIOD_S = 0.1     # the goal watchdog's period (GoalClient._watch_loop)


class _Pending:
    """A goal whose request is not answered yet, as the watchdog sees it (GoalClient._watch_loop)."""

    def __init__(self, h: GoalHandle, goal_uuid: bytes, send_once: Callable[..., Any],
                 attach: Callable[[Any, Any], None]) -> None:
        self.h, self.goal_uuid, self.send_once, self.attach = h, goal_uuid, send_once, attach
        self.query: Any = None           # (client goal handle, future) of a result-by-id query
        self.due = 0.0
        self.tries = 1

    def step(self, now: float, guarded: Callable[[Callable[[], Any]], Any],
             result_of: Callable[[bytes], tuple[Any, Any]]) -> bool:
        """Advance; True when there is nothing left to watch."""
        if self.h.done or self.h.accepted.is_set():
            return True
        if self.query is None:
            if now < self.due:
                return False
            self.query = guarded(lambda: result_of(self.goal_uuid))
            return self.query is None  # None: the client is being destroyed
        handle, fut = self.query
        if not fut.done():
            return False
        if fut.result().status != 0:  # the goal exists: that answer is its result
            self.attach(handle, fut)
            return True
        if self.tries >= GOAL_TRIES:   # UNKNOWN every time: give up (result() times out)
            return True
        self.tries += 1                # UNKNOWN: the request never arrived; send it again
        self.query, self.due = None, now + GOAL_ANSWER_S
        return guarded(lambda: self.send_once(True)) is None  # None: the client is being destroyed


class GoalClient:
    """Action client for ``plan_task`` on its own node; spin the node in any executor."""

    def __init__(self, context: Any = None, name: str | None = None, namespace: str | None = None) -> None:
        import rclpy  # noqa: F401
        from rclpy.node import Node
        from timely_fleet.action import PlanTask

        self.PlanTask = PlanTask
        # in the planner's namespace: 'plan_task' and 'robot_status' resolve to that fleet's
        self.node = Node(name or f"goal_client_{uuid.uuid4().hex[:8]}", context=context, namespace=namespace)
        self.client = plan_task_client(self.node)
        self.wait_problem = ""  # why the last wait_for_server returned False
        from timely_fleet.srv import CancelPlan

        self.CancelPlan = CancelPlan
        self.cancel_service = self.node.create_client(CancelPlan, "planner/cancel_goal")
        self._closing = threading.Event()
        self._rclpy_lock = threading.Lock()
        self._watch_lock = threading.Lock()
        self._watched: list[_Pending] = []
        self._timers: list[tuple[float, Callable[[], None]]] = []
        self._watchdog: threading.Thread | None = None

    def wait_for_server(self, timeout_s: float = 30.0) -> bool:
        """Wait for the planner's action server and for it to answer us (handshake, see above)."""
        deadline = time.monotonic() + timeout_s
        self.wait_problem = f"no action server '{self.client._action_name}' seen within {timeout_s:g} s"
        while not self.client.server_is_ready():  # rclpy's wait_for_server polls every 0.25 s
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        hs = Handshake(self.client)
        while time.monotonic() < deadline:
            hs.step()
            if hs.answered.wait(0.01):
                self.wait_problem = ""
                return True
        self.wait_problem = (f"the action server '{self.client._action_name}' was seen but answered none of "
                             f"{hs.probes} handshake probes within {timeout_s:g} s")
        return False

    def _result_of(self, goal_uuid: bytes) -> tuple[Any, Any]:
        """Ask the server for the result of goal ``goal_uuid``: (a client goal handle for that
        id, a future of the GetResult response), answered at once with status UNKNOWN for a
        goal the server does not know, at the goal's end otherwise."""
        from rclpy.action.client import ClientGoalHandle
        from unique_identifier_msgs.msg import UUID

        response = self.PlanTask.Impl.SendGoalService.Response(accepted=True)
        handle = ClientGoalHandle(self.client, UUID(uuid=list(goal_uuid)), response)
        return handle, handle.get_result_async()

    def send(self, robot_id: str, instruction: str, *, robot_kind: str = "", task_type: str = "",
             tuf: tuple[float, float, float] = TUF_CLASSES["normal"], skill_set: str = "", max_tokens: int = 0,
             on_feedback: Callable[[Any], None] | None = None) -> GoalHandle:
        ert, alpha, beta = tuf
        goal = self.PlanTask.Goal(robot_id=robot_id, robot_kind=robot_kind, task_type=task_type,
                                  instruction=instruction, ert_s=ert, alpha=alpha, beta=beta,
                                  skill_set=skill_set, max_tokens=max_tokens)
        goal_uuid = uuid.uuid4().bytes
        h = GoalHandle(sent_at=time.monotonic(), goal_id=goal_uuid.hex(), cancel_secret=secrets.token_hex(16))
        goal.cancel_key_sha256 = hashlib.sha256(h.cancel_secret.encode()).hexdigest()

        owed: list[int] = []  # after the result: feedback messages still to come
        attached = threading.Lock()  # one result future feeds got_result, whichever path finds it

        def finish() -> None:
            self.client._feedback_callbacks.pop(goal_uuid, None)  # noqa: SLF001 - see got_result
            h._done.set()

        def feedback(msg: Any) -> None:
            h.feedback.append(msg.feedback)
            h.feedback_times.append(time.monotonic())
            if on_feedback:
                on_feedback(msg.feedback)
            if owed and len({f.index for f in h.feedback}) >= owed[0]:
                finish()

        def got_result(fut: Any) -> None:
            response = fut.result()
            if response.status == 0:  # action_msgs GoalStatus.STATUS_UNKNOWN: not a result at all
                h._result = self.PlanTask.Result(
                    status=self.PlanTask.Result.STATUS_REJECTED, response_time_s=-1.0, robot_waiting_s=-1.0,
                    message="the planner has no record of this goal (its request was lost or its result expired)")
            else:
                h._result = response.result
            expected = len(h._result.segments)  # one feedback per dispatched segment
            if len({f.index for f in h.feedback}) >= expected:
                h._done.set()
                return
            # Feedback (a topic) and the result (a service) are not ordered: under a burst the
            # result can overtake a segment's feedback, which rclpy then drops (it forgets a
            # goal's feedback callback once its result is in). Listen on for up to
            # FEEDBACK_GRACE_S; the goal is done when every segment's feedback is in.
            owed.append(expected)
            self.client._feedback_callbacks[goal_uuid] = feedback  # noqa: SLF001 - rclpy has no API for it
            self._later(FEEDBACK_GRACE_S, finish)

        def attach(ros_handle: Any, result_future: Any) -> None:
            if not attached.acquire(blocking=False):
                return
            h._ros_handle = ros_handle
            h.accepted.set()
            result_future.add_done_callback(got_result)

        def responded(fut: Any, resend: bool) -> None:
            gh = fut.result()
            if gh.accepted:
                attach(gh, gh.get_result_async())
            elif resend:
                # our server accepts every goal it does not already have, so a refused re-send
                # means the first request got there after all: its answer or a query ends the wait
                self._watch(pending)
            elif not attached.locked():
                h._result = self.PlanTask.Result(status=1, message="goal not accepted by the action server")
                h._done.set()

        def send_once(resend: bool = False) -> Any:
            from unique_identifier_msgs.msg import UUID

            fut = self.client.send_goal_async(goal, feedback_callback=feedback,
                                              goal_uuid=UUID(uuid=list(goal_uuid)))
            fut.add_done_callback(lambda f: responded(f, resend))
            return fut

        pending = _Pending(h, goal_uuid, send_once, attach)
        send_once()
        self._watch(pending)
        return h

    # -- recovery of unanswered goal requests ----------------------------------------------------
    def _watch(self, p: "_Pending") -> None:
        """Check on ``p`` from the watchdog thread until its goal request is answered."""
        p.due = time.monotonic() + GOAL_ANSWER_S
        p.query = None
        with self._watch_lock:
            self._watched.append(p)
            self._start_watchdog()

    def _later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the watchdog thread after ``delay_s`` (no thread per call)."""
        with self._watch_lock:
            self._timers.append((time.monotonic() + delay_s, fn))
            self._start_watchdog()

    def _start_watchdog(self) -> None:
        """The watchdog thread, on first use (call with ``_watch_lock`` held)."""
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch_loop, name="goal-watchdog", daemon=True)
            self._watchdog.start()

    def _watch_loop(self) -> None:
        """One thread for every goal of this client: the goal request's answer can be lost while
        discovery settles (see HANDSHAKE_TRY_S) or come late from a loaded planner. A request
        unanswered for GOAL_ANSWER_S: ask the server for the goal's result by id. An answer
        with status UNKNOWN (the server has not seen the goal) re-sends the goal under the same
        id (so it can never run twice), at most GOAL_TRIES times; any other answer is the goal's
        result. A query still unanswered is simply waited on: it is answered at the goal's end."""
        while not self._closing.wait(WATCH_PERIOD_S):
            now = time.monotonic()
            with self._watch_lock:
                due = [t for t in self._timers if t[0] <= now]
                self._timers = [t for t in self._timers if t[0] > now]
                watched, self._watched = self._watched, []
            for _, fn in due:
                fn()
            keep = [p for p in watched if not p.step(now, self._guarded, self._result_of)]
            with self._watch_lock:
                self._watched.extend(keep)

    def cancel(self, h: GoalHandle, timeout_s: float = 10.0) -> Any:
        """Cancel a goal this client sent, through the planner's ``planner/cancel_goal`` with the
        goal's secret (the plain action cancel is refused for goals that carry a cancel key);
        returns the future of the service's answer."""
        if not h.accepted.wait(timeout_s):
            raise TimeoutError("goal was never accepted")
        if not self.cancel_service.service_is_ready():  # a planner without the service
            return h._ros_handle.cancel_goal_async()
        return self.cancel_service.call_async(self.CancelPlan.Request(goal_id=h.goal_id, secret=h.cancel_secret))

    def watch_status(self, callback: Callable[[Any], None]) -> Any:
        """Subscribe ``/robot_status`` (every adapter's progress) on this client's node."""
        from timely_fleet.msg import RobotStatus

        from llm_planner_node.ros.messages import STATUS_QOS, STATUS_TOPIC

        return self.node.create_subscription(RobotStatus, STATUS_TOPIC, callback, STATUS_QOS)

    def _guarded(self, call: Callable[[], Any]) -> Any:
        """Run an rclpy call from a recovery thread, unless the client is being destroyed
        (rclpy objects must not be used while or after they are destroyed); None then."""
        with self._rclpy_lock:
            if self._closing.is_set():
                return None
            return call()

    def destroy(self) -> None:
        with self._rclpy_lock:  # no recovery thread is inside rclpy from here on
            self._closing.set()
            self.client.destroy()
            self.node.destroy_node()
