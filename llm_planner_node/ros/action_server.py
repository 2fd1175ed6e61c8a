"""The ``plan_task`` action server: rclpy's :class:`~rclpy.action.ActionServer` with goals
finished later from any thread, a coalesced status array, batched request taking and
"cancel every goal" refused; goals taken over from another planner (:meth:`adopt_goal`).

It overrides private methods of rclpy's ActionServer (kilted, jazzy); each override says what it
replaces and the cost it removes, as measured in this project. This module and
:mod:`.goal_client` are the only places that use rclpy's private names, each behind a named
function here (:func:`mark_cancelling`, :func:`rcutils_log_emitter`); :data:`RCLPY_CHECKED`
lists the rclpy versions they were checked against (``tests/ros/test_rclpy_internals.py`` fails
on another).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from action_msgs.msg import GoalInfo, GoalStatus
from rclpy.action import ActionServer, GoalResponse
from rclpy.action.server import GoalEvent, ServerGoalHandle
from rclpy.executors import await_or_execute
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.task import Future


#: rclpy versions whose private names this module and goal_client.py were checked against
#: (kilted; jazzy's rclpy 7.1 has the same names).
RCLPY_CHECKED = ("9.1.2",)


def mark_cancelling(handle: Any) -> bool:
    """Move an executing goal to CANCELING, as rclpy does when it accepts a standard cancel
    request, so the goal ends CANCELED (a cancel through ``planner/cancel_goal`` or an
    operator's stop); False if it is no longer active or already cancelling."""
    if not handle.is_active or handle.is_cancel_requested:
        return False
    try:
        handle._update_state(GoalEvent.CANCEL_GOAL)  # noqa: SLF001 - rclpy's cancel path, no public API
    except Exception:  # noqa: BLE001 - it ended meanwhile
        return False
    return True


def rcutils_log_emitter() -> Callable[..., None] | None:
    """rclpy's C logging call, ``(severity, logger name, message, function, file, line)``: a log
    line without rclpy's per-call caller lookup (``RcutilsLogger.log`` inspects the stack on
    every call: 12% of the planner's goal thread in a 200-goal burst); None on an rclpy without it."""
    try:
        from rclpy.impl.implementation_singleton import rclpy_implementation

        return rclpy_implementation.rclpy_logging_rcutils_log
    except (ImportError, AttributeError):
        return None


def settle(handle: Any, succeeded: bool, cancelled: bool) -> None:
    """Put an executing goal handle in its terminal state: SUCCEEDED, CANCELED for a cancel its
    client asked for, else ABORTED."""
    if succeeded:
        handle.succeed()
    elif cancelled and handle.is_cancel_requested:
        handle.canceled()
    else:
        handle.abort()


class _CoalescedGoalHandle(ServerGoalHandle):
    """A goal handle whose state changes mark the server's status array for the next coalesced
    publication (:meth:`FinishLaterActionServer.flush_status`) instead of publishing it; a goal's
    end marks the server's expiry timer for re-arming there too."""

    def _update_state(self, event: Any) -> None:
        with self._lock:
            if self._goal_handle is None:  # already destroyed
                return
            self._goal_handle.update_goal_state(event)
            self._action_server.status_changed(done=not self._goal_handle.is_active())


class FinishLaterActionServer(ActionServer):
    """An rclpy ActionServer whose execute callback starts a goal and returns at once; the goal
    is finished later, from any thread, with :meth:`finish_goal`.

    rclpy's own ``_execute_goal`` awaits the execute callback, so every goal in flight keeps a
    pending coroutine in the executor, which rclpy's MultiThreadedExecutor re-scans at every
    wake-up (ros2/rclpy issue 1452; with 64 goals in flight the spin thread used 40% of a core
    running no planner code). Here no coroutine outlives the goal's start. Results go out the
    way rclpy sends them: through the server's per-goal result future, under its lock."""

    async def _execute_goal(self, execute_callback: Any, goal_handle: Any) -> None:
        execute_callback(goal_handle)

    # -- coalesced status array ------------------------------------------------------------------
    # rclpy publishes the whole GoalStatusArray (every goal of the last ``result_timeout`` s) at
    # every state change of every goal: three per goal. Every action client deserialises each
    # array into Python objects under its GIL: with 64 goals in a burst the project's own client
    # spent 27% of its spin thread there and took up to 4.3 s to send the next 64 goals. Here a
    # state change only marks the array; it goes out at the end of each executor round (the
    # round's accepted goals in one array) and otherwise within STATUS_PERIOD_S (the node's
    # timer): at most ~10 arrays per second plus one per round of goal requests, whatever the
    # goal rate. A goal's terminal status may now reach a client up to 100 ms after its result
    # (ROS 2 never ordered the status topic against the result service). 100 ms rather than 50:
    # each array holds every goal of the last 10 s, and deserialising them was still a third of
    # the client's spin thread in back-to-back 64-goal bursts (client CPU per burst, A/B in one
    # hour: 0.25-0.38 s at 100 ms, 0.35-0.38 s at 50 ms).
    #
    # A goal's end re-arms the server's expiry timer (rcl_action's ``notify_goal_done``: a pass
    # over every goal of the last ``result_timeout`` s, under the server's lock) at that flush
    # too, once for the goals that ended since, not once per goal on the scheduler's thread: a
    # result expires up to STATUS_PERIOD_S later than ``result_timeout`` after its goal's end.
    STATUS_PERIOD_S = 0.1
    #: How long a finished goal's result is kept for clients that ask for it late (rclpy's
    #: ``result_timeout``, its default).
    RESULT_TIMEOUT_S = 10
    _status_dirty = False
    _goal_done = False

    def status_changed(self, done: bool = False) -> None:
        self._status_dirty = True
        if done:
            self._goal_done = True

    def flush_status(self) -> None:
        """Publish the status array if a goal changed state since the last publication (and
        re-arm the expiry timer if a goal ended)."""
        if self._status_dirty:
            self._status_dirty = False
            self._handle.publish_status()
        if self._goal_done:
            self._goal_done = False
            self.notify_goal_done()

    async def _execute_goal_request(self, request_header_and_message: Any) -> None:
        """rclpy's ``_execute_goal_request`` (kilted, jazzy), with a coalescing goal handle and
        the "accepted" status marked instead of published."""
        request_header, goal_request = request_header_and_message
        goal_uuid = goal_request.goal_id
        goal_info = GoalInfo()
        goal_info.goal_id = goal_uuid
        with self._lock:
            goal_id_exists = self._handle.goal_exists(goal_info)
        accepted = False
        if not goal_id_exists:
            response = await await_or_execute(self._goal_callback, goal_request.goal)
            accepted = isinstance(response, GoalResponse) and response == GoalResponse.ACCEPT
        goal_handle = None
        if accepted:
            goal_info.stamp = self._node.get_clock().now().to_msg()
            try:
                with self._lock:
                    goal_handle = _CoalescedGoalHandle(self, goal_info, goal_request.goal)
            except RuntimeError as e:
                self._logger.error(f"failed to accept new goal {bytes(goal_uuid.uuid).hex()}: {e}")
                accepted = False
            else:
                self._goal_handles[bytes(goal_uuid.uuid)] = goal_handle
                self._result_futures[bytes(goal_uuid.uuid)] = Future()  # untracked: see add_future
        response_msg = self._action_type.Impl.SendGoalService.Response()
        response_msg.accepted = accepted
        response_msg.stamp = goal_info.stamp
        try:
            with self._lock:
                self._handle.send_goal_response(request_header, response_msg)
        except _rclpy.RCLError:
            self._logger.warning("failed to send a goal response (the client may have gone away)")
            return
        if not accepted:
            return
        self.status_changed()
        await await_or_execute(self._handle_accepted_callback, goal_handle)

    async def _execute_get_result_request(self, request_header_and_message: Any) -> None:
        """rclpy's ``_execute_get_result_request`` without its debug line, which formats the
        goal id's numpy array (``'...{0}'.format(uuid)``) whatever the log level: a fifth of the
        action server's thread in a 64-goal burst."""
        request_header, result_request = request_header_and_message
        goal_id = bytes(result_request.goal_id.uuid)
        future = self._result_futures.get(goal_id)
        if future is None:  # unknown or expired: the answer is status UNKNOWN
            response = self._action_type.Impl.GetResultService.Response()
            response.status = GoalStatus.STATUS_UNKNOWN
            with self._lock:
                self._handle.send_result_response(request_header, response)
            return
        future.add_done_callback(functools.partial(self._send_result_response, request_header))

    #: Goal and result requests taken per executor round (rclpy takes one of each per round,
    #: rebuilding the wait set in between: a burst of 200 goals cost 200 rounds).
    DRAIN = 32

    def take_data(self) -> Any:
        data = super().take_data()
        for key, ready, take, request in (
                ("goal", "_is_goal_request_ready", self._handle.take_goal_request,
                 self._action_type.Impl.SendGoalService.Request),
                ("result", "_is_result_request_ready", self._handle.take_result_request,
                 self._action_type.Impl.GetResultService.Request)):
            if key not in data or not getattr(self, ready):
                continue
            more = []
            for _ in range(self.DRAIN - 1):
                with self._lock:
                    taken = take(request)
                if not taken[0]:  # nothing more waiting: (None, None)
                    break
                more.append(taken)
            data["more_" + key] = more
        return data

    #: Set by the node: does a goal fail its field checks (it will be rejected at once)? Such
    #: goals are served first among those taken in one round, so a bad goal's rejection does not
    #: wait behind a burst of good ones.
    rejects_at_once: Callable[[Any], bool] | None = None

    #: Set by the node: True while the planner may have been replaced without knowing it yet (it was
    #: paused past a standby's takeover time): requests taken now are dropped unanswered (clients
    #: ask again), so a stale planner never answers "unknown goal" for a goal its successor holds.
    answers_held: Callable[[], bool] | None = None

    async def execute(self, taken_data: Any) -> None:
        if self.answers_held is not None and self.answers_held():
            return
        goals = ([taken_data.pop("goal")] if "goal" in taken_data else []) + taken_data.pop("more_goal", [])
        if self.rejects_at_once is not None and len(goals) > 1:
            goals.sort(key=lambda g: not self.rejects_at_once(g[1].goal))  # stable: good ones keep their order
        # result requests first: each is a look-up (answered at once for a goal that has ended,
        # e.g. a rejected one), and must not wait behind this round's goals
        results = ([taken_data.pop("result")] if "result" in taken_data else []) + taken_data.pop("more_result", [])
        for result in results:
            await self._execute_get_result_request(result)
        for goal in goals:
            await self._execute_goal_request(goal)
        await super().execute(taken_data)
        self.flush_status()  # this round's accepted / started / ended goals, in one array

    #: Set by the node: may a "cancel every goal" request (all-zero goal id) be honoured?
    allow_cancel_all = False
    refused_cancel_all = 0

    async def _execute_cancel_request(self, request_header_and_message: Any) -> None:
        """Refuse "cancel every goal" (and "every goal before a stamp"): an all-zero goal id
        would let any node on the domain end every goal in flight (ROS action semantics); it is
        answered ERROR_REJECTED unless ``security.allow_cancel_all``."""
        request_header, cancel_request = request_header_and_message
        if not self.allow_cancel_all and not any(cancel_request.goal_info.goal_id.uuid):
            self.refused_cancel_all += 1
            response = self._action_type.Impl.CancelGoalService.Response()
            response.return_code = response.ERROR_REJECTED
            with self._lock:
                self._handle.send_cancel_response(request_header, response)
            return
        await super()._execute_cancel_request(request_header_and_message)

    # -- result futures the executor does not track -----------------------------------------------
    # rclpy registers each goal's result future with the server until the goal expires
    # (``result_timeout``, 10 s after its end), and its executor re-binds every registered future
    # (``Future._set_executor``) each time the server executes anything: with bursts of 64 goals
    # that is a few hundred calls per goal request, result request and cancel. Untracked, a
    # result future runs its done callback (rclpy's ``_send_result_response``, under the server's
    # lock) at once in the thread that sets the result (:meth:`finish_goal`), or in the executor's
    # thread for a result requested after the goal ended: one executor wake-up less per goal.
    def add_future(self, future: Any) -> None:
        pass

    def remove_future(self, future: Any) -> None:
        pass

    # -- goals taken over from another planner ----------------------------------------------------
    def adopt_goal(self, goal_id: bytes, request: Any, accepted_stamp: Any) -> Any:
        """Hold a goal another server accepted (a takeover, docs/guides/failover.md) under its
        own id, executing: a result request for that id is answered when the goal ends
        (:meth:`finish_goal`), a cancel request reaches the cancel callback, and feedback goes out
        under it. What rclpy's ``_execute_goal_request`` does for an accepted goal, without the
        goal request (the client sent it to the planner that died). Returns the goal handle
        (None if the server already holds the id)."""
        goal_info = GoalInfo()
        goal_info.goal_id.uuid = list(goal_id)
        goal_info.stamp = accepted_stamp
        with self._lock:
            if self._handle.goal_exists(goal_info):
                return None
            goal_handle = _CoalescedGoalHandle(self, goal_info, request)
        self._goal_handles[bytes(goal_id)] = goal_handle
        self._result_futures[bytes(goal_id)] = Future()  # untracked: see add_future
        goal_handle._update_state(GoalEvent.EXECUTE)  # executing, without the execute callback (it runs already)
        return goal_handle

    def finish_goal(self, goal_handle: Any, result: Any) -> None:
        """Send ``result`` for a goal whose handle is already in its terminal state."""
        if goal_handle.is_active:  # never leave a goal without a terminal state
            goal_handle.abort()
        response = self._action_type.Impl.GetResultService.Response()
        response.status = goal_handle.status
        response.result = result
        future = self._result_futures.get(bytes(goal_handle.goal_id.uuid))
        if future is not None and not future.done():
            future.set_result(response)
