"""`GoalClient`: a small thread-safe wrapper over the ``plan_task`` action for programs (the
`goal` and `demo` commands, the MCP front end, the benchmarks and the tests): ``send(...)``
returns a handle whose ``result(timeout)`` waits for the end. The `goal` command itself is
:mod:`llm_planner_node.cli.goal`.

A planner that takes over from one that died (a standby, docs/guides/failover.md) holds the
goals it adopted under their own ids, but a result request sent to the dead planner is never
answered: the client follows ``planner/active`` (timely_fleet/PlannerRole) and asks the new
active planner for the result of every goal it adopted, and ends every other goal it waits for
as lost (:meth:`GoalClient._on_role`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from timely_robot.outcomes import STATUS_NAMES  # noqa: F401 (programs that print results import them here)

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
#: While a standby planner is known, how long the action server may be unseen before the planner
#: counts as gone (:meth:`GoalClient.planner_gone_after_s`): a standby takes over within the
#: robots' lease (security.lease_s, 3 s by default), then its action server must be discovered.
TAKEOVER_WAIT_S = 10.0



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
    _when_done: list[Callable[[], None]] = field(default_factory=list)
    _done_lock: threading.Lock = field(default_factory=threading.Lock)

    def when_done(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once when the goal's result arrives (at once if it has): in the thread
        that delivers it, before :meth:`result` returns to waiters."""
        with self._done_lock:
            if not self._done.is_set():
                self._when_done.append(fn)
                return
        fn()

    def _finish(self) -> None:
        """The result arrived (or the goal was refused): run the ``when_done`` callbacks, wake waiters."""
        with self._done_lock:
            if self._done.is_set():
                return
            callbacks, self._when_done = self._when_done, []
        for fn in callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001 - a caller's callback must not lose the result
                pass
        self._done.set()

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

    @property
    def last_result(self) -> Any:
        """The result if it has arrived, else None (never waits)."""
        return self._result if self._done.is_set() else None

    @property
    def accepted_stamp(self) -> float | None:
        """When the action server accepted the goal, in seconds of the server's clock (its
        ``GoalInfo`` stamp); None until accepted."""
        stamp = getattr(self._ros_handle, "stamp", None)
        return None if stamp is None else stamp.sec + stamp.nanosec * 1e-9

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


def request_result(action_client: Any, goal_uuid: bytes) -> tuple[Any, Any]:
    """Ask the action server for the result of goal ``goal_uuid`` (whoever sent it): (a client
    goal handle for that id, a future of the GetResult response). rclpy asks only through the
    handle its goal response made, so one is built here for the id."""
    from rclpy.action.client import ClientGoalHandle
    from unique_identifier_msgs.msg import UUID

    response = action_client._action_type.Impl.SendGoalService.Response(accepted=True)
    handle = ClientGoalHandle(action_client, UUID(uuid=list(goal_uuid)), response)
    return handle, handle.get_result_async()


def forget_result_request(action_client: Any, future: Any) -> None:
    """Stop waiting for the answer to a result request (one sent to a planner that died): rclpy
    keeps every unanswered request until its answer, which will not come. A late answer is then
    dropped by rclpy with a warning. Also forgets the goal's feedback callback (rclpy's own
    clean-up at a result), which the caller re-registers if it still wants feedback."""
    action_client._remove_pending_result_request(future)  # noqa: SLF001 - rclpy has no API for it


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


def plan_task_client(node: Any, action_name: str = "plan_task", action_type: Any = None) -> Any:
    """An rclpy ``ActionClient`` for ``plan_task`` (or ``action_type``'s action, e.g. PlanMission,
    under ``action_name``; burst-sized QoS) whose futures the executor does not track.

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

    return _UntrackedFuturesClient(node, action_type or PlanTask, action_name, **action_qos_kwargs())


def answering_action_client(node: Any, action_name: str, timeout_s: float, executor: Any = None,
                            action_type: Any = None) -> tuple[Any, Any]:
    """``(client, executor)``: a ``plan_task`` (or ``action_type``) ActionClient on ``node`` once its
    server is seen and has answered the handshake, spinning ``node`` on ``executor`` (a new
    single-threaded one if None) in this thread meanwhile; TimeoutError after ``timeout_s``."""
    from rclpy.executors import SingleThreadedExecutor

    ex = executor
    if ex is None:
        ex = SingleThreadedExecutor(context=node.context)
        ex.add_node(node)
    client = plan_task_client(node, action_name, action_type)
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


@dataclass
class _Awaited:
    """An accepted goal whose result the client still waits for, as a takeover sees it."""

    goal_id: str
    accepted_ns: int                  # the accepting server's stamp (0: unknown, e.g. found by a query)
    reattach: Callable[[str, int], None]   # ask the (new) server for the result again: (planner, term)
    lose: Callable[[str], None]       # end the goal with this message


class _Reattach:
    """A takeover's re-attach, run on the watchdog thread: once the new planner's action server
    answers (a handshake, see HANDSHAKE_TRY_S: a request sent before it has matched our readers
    would be served but its answer dropped), ask it for the result of each adopted goal. Goal
    requests still unanswered wait for that handshake too before the watchdog queries them."""

    def __init__(self, action_client: Any, planner: str, term: int, goals: list[_Awaited],
                 done: Callable[[str], bool], on_spin_thread: Callable[[Callable[[], None]], None]) -> None:
        self.hs = Handshake(action_client)
        self.planner, self.term, self.goals, self.done = planner, term, goals, done
        self.on_spin_thread = on_spin_thread

    def step(self, guarded: Callable[[Callable[[], Any]], Any], requests_waiting: bool) -> bool:
        """Advance; True when finished (asked, or nothing left to wait for)."""
        self.goals = [a for a in self.goals if not self.done(a.goal_id)]
        if not self.goals and not requests_waiting:
            return True
        if not self.hs.answered.is_set():
            guarded(self.hs.step)
            if not self.hs.answered.is_set():
                return False
        for a in self.goals:
            self.on_spin_thread(functools.partial(a.reattach, self.planner, self.term))
        return True


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
        # takeovers (see the module docstring): the active planner's term, every planner's last
        # role, the accepted goals still waiting for a result, and a re-attach in progress
        from timely_fleet.msg import PlannerRole

        from llm_planner_node.ros.messages import LATCHED_QOS, ROLE_TOPIC

        self._term: int | None = None     # the first PlannerRole seen sets it; a higher active one raises it
        self._roles: dict[str, str] = {}  # planner node -> its last role
        self._awaited: dict[str, _Awaited] = {}
        self._reattach: _Reattach | None = None
        self._requery = False             # a takeover: query unanswered goal requests anew
        self.takeovers = 0
        self.role_sub = self.node.create_subscription(PlannerRole, ROLE_TOPIC, self._on_role, LATCHED_QOS)
        self._spin_calls: list[Callable[[], None]] = []
        self._spin_wakeup = self.node.create_guard_condition(self._run_spin_calls)

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

    def result_of(self, goal_uuid: bytes) -> tuple[Any, Any]:
        """Ask the server for the result of goal ``goal_uuid``: (a client goal handle for that
        id, a future of the GetResult response), answered at once with status UNKNOWN for a
        goal the server does not know, at the goal's end otherwise."""
        return request_result(self.client, goal_uuid)

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
        attached = threading.Lock()  # the goal's answer or a query attaches once, whichever path finds it
        ended = threading.Lock()     # the goal ends once: the first result (or loss) wins, later ones are ignored
        asked: list[Any] = []        # the futures of its result requests (a takeover's re-attach adds one)

        def finish() -> None:
            self.client._feedback_callbacks.pop(goal_uuid, None)  # noqa: SLF001 - see got_result
            h._finish()

        def end(result: Any, answer: Any = None) -> bool:
            """Make ``result`` the goal's result, unless it has one already (False then)."""
            if not ended.acquire(blocking=False):
                return False
            with self._watch_lock:
                self._awaited.pop(h.goal_id, None)
            for f in list(asked):  # requests to a planner that died: never answered
                if f is not answer and not f.done():
                    self._guarded(lambda f=f: forget_result_request(self.client, f))
            h._result = result
            return True

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
                result = self._failed_result(
                    "the planner has no record of this goal (its request was lost or its result expired)")
            else:
                result = response.result
            if not end(result, fut):  # a second answer (the old planner's, or a re-attach's): ignored
                return
            expected = len(h._result.segments)  # one feedback per dispatched segment
            if len({f.index for f in h.feedback}) >= expected:
                h._finish()
                return
            # Feedback (a topic) and the result (a service) are not ordered: under a burst the
            # result can overtake a segment's feedback, which rclpy then drops (it forgets a
            # goal's feedback callback once its result is in). Listen on for up to
            # FEEDBACK_GRACE_S; the goal is done when every segment's feedback is in.
            owed.append(expected)
            self.client._feedback_callbacks[goal_uuid] = feedback  # noqa: SLF001 - rclpy has no API for it
            self._later(FEEDBACK_GRACE_S, finish)

        def reattach(planner: str, term: int) -> None:
            """A takeover: ask the new active planner for the result. On the spin thread, so
            the answer's callback is in place before the executor can take the answer (rclpy
            drops the goal's feedback callback at its result; got_result puts it back)."""
            if ended.locked():
                return
            got = self._guarded(lambda: self.result_of(goal_uuid))
            if got is None:
                return
            fut = got[1]
            asked.append(fut)
            fut.add_done_callback(got_result)
            self.node.get_logger().info(f"goal {h.goal_id} re-attached to planner {planner} (term {term}) after a "
                                        "takeover")

        def lose(message: str) -> None:
            if end(self._failed_result(message)):
                self.node.get_logger().warning(message)
                finish()

        def attach(ros_handle: Any, result_future: Any) -> None:
            if not attached.acquire(blocking=False):
                return
            h._ros_handle = ros_handle
            asked.append(result_future)
            stamp = ros_handle.stamp
            with self._watch_lock:
                self._awaited[h.goal_id] = _Awaited(h.goal_id, stamp.sec * 1_000_000_000 + stamp.nanosec,
                                                    reattach, lose)
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
                h._finish()

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

    def _failed_result(self, message: str) -> Any:
        """The result of a goal that ended without the planner's result: REJECTED with ``message``."""
        return self.PlanTask.Result(status=self.PlanTask.Result.STATUS_REJECTED, response_time_s=-1.0,
                                    robot_waiting_s=-1.0, message=message)

    # -- takeovers -------------------------------------------------------------------------------
    def _on_role(self, msg: Any) -> None:
        """A PlannerRole on ``planner/active`` (the spin thread). The first one seen sets the
        term; an active planner of a higher term took over. For each goal waiting for its result:

        - adopted by the new planner (in ``adopted_goal_ids``): its result is asked from the new
          planner once its action server answers (:class:`_Reattach`); the first answer, the old
          planner's or the new one's, is the result;
        - accepted before the new planner became active (its accept stamp before the message's)
          and not adopted: lost, it ends now (REJECTED, one sentence naming it and the planner);
        - accepted at or after that stamp: the new planner accepted it itself (the message
          reached us after its goal response); its result request stands.

        A first message that is already a takeover's (the client never saw the planner before)
        re-attaches the goals it adopted and ends none.
        """
        term = int(msg.term)
        with self._watch_lock:
            self._roles[msg.node] = msg.role
            first = self._term is None
            if not first and (msg.role != "active" or term <= self._term):
                return
            self._term = term
            adopted = {g.strip().lower() for g in msg.adopted_goal_ids}
            awaited = list(self._awaited.values())
            if first and not (msg.role == "active" and adopted & {a.goal_id for a in awaited}):
                return
            self.takeovers += 1
        active_ns = msg.stamp.sec * 1_000_000_000 + msg.stamp.nanosec
        follow = [a for a in awaited if a.goal_id in adopted]
        for a in awaited:
            if not first and a.goal_id not in adopted and not (active_ns and a.accepted_ns >= active_ns):
                a.lose(f"goal {a.goal_id} was lost in a planner takeover: the new active planner {msg.node} "
                       f"(term {term}) did not take it over")
        with self._watch_lock:
            self._reattach = _Reattach(self.client, msg.node, term, follow, lambda gid: gid not in self._awaited,
                                       self._on_spin_thread)
            # goal requests not yet answered: a result query sent to the planner that died is
            # never answered, so the watchdog asks the new planner once it answers
            self._requery = True
            self._start_watchdog()

    def _on_spin_thread(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the executor that spins this client's node (any thread may call this)."""
        with self._watch_lock:
            self._spin_calls.append(fn)
        self._guarded(self._spin_wakeup.trigger)

    def _run_spin_calls(self) -> None:
        with self._watch_lock:
            calls, self._spin_calls = self._spin_calls, []
        for fn in calls:
            fn()

    @property
    def planner_term(self) -> int | None:
        """The active planner's term as far as this client knows (None before any PlannerRole)."""
        return self._term

    def planner_gone_after_s(self, base_s: float) -> float:
        """How long the action server may be unseen before its planner counts as gone:
        ``base_s``, or TAKEOVER_WAIT_S while a standby planner that may take over is known
        (one whose last PlannerRole says "standby" and that still publishes on planner/active)."""
        with self._watch_lock:
            standbys = {n for n, role in self._roles.items() if role == "standby"}
        if not standbys:
            return base_s
        infos = self._guarded(lambda: self.node.get_publishers_info_by_topic(self.role_sub.topic_name)) or []
        alive = {f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in infos}
        return max(base_s, TAKEOVER_WAIT_S) if standbys & alive else base_s

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
        result. A query still unanswered is simply waited on: it is answered at the goal's end.
        After a takeover (:meth:`_on_role`) the re-attach's handshake runs here too, and the
        unanswered goal requests are queried anew once the new planner answers it."""
        while not self._closing.wait(WATCH_PERIOD_S):
            now = time.monotonic()
            with self._watch_lock:
                due = [t for t in self._timers if t[0] <= now]
                self._timers = [t for t in self._timers if t[0] > now]
                watched, self._watched = self._watched, []
            for _, fn in due:
                fn()
            with self._watch_lock:
                job, requery, self._requery = self._reattach, self._requery, False
            if requery:
                for p in watched:
                    p.query, p.due = None, 0.0
            if job is not None and job.step(self._guarded, requests_waiting=bool(watched)):
                with self._watch_lock:
                    if self._reattach is job:
                        self._reattach = None
            if job is not None and not job.hs.answered.is_set():  # no query before the new planner answers
                keep = watched
            else:
                keep = [p for p in watched if not p.step(now, self._guarded, self.result_of)]
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

        from timely_robot.link.ros import STATUS_QOS, STATUS_TOPIC

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
