"""The core's sink: each segment's budget check, its dispatch to the robot (through the
operator's hold) and each goal's end, reported once and its robot stopped or released."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from llm_planner_node.core.clock import Clock
from timely_robot.skills import DEFAULT_SKILL_SETS, REPLAN_SKILLS
from llm_planner_node.core.task_model import EndKind, GenState, Request, Segment
from llm_planner_node.core.text import safe_text
from llm_planner_node.prompts.grammar import language_for
from timely_robot.plan_cost import segment_cost
from llm_planner_node.service.commands import CommandQueue, ForgetRequest
from llm_planner_node.service.delivery import SegmentDelivery
from llm_planner_node.service.ports import PlannerPorts
from llm_planner_node.service.registry import GoalRegistry


def never_held(goal_id: str, request: Request, segment: Segment) -> bool:
    """No operator's approval holds any segment (a sink's hold before the service sets one)."""
    return False


class PortsSink:
    """The :class:`~llm_planner_node.core.planner.PlannerSink` of the service (scheduler thread)."""

    def __init__(self, goals: GoalRegistry, delivery: SegmentDelivery, ports: PlannerPorts, clock: Clock,
                 counters: Counter[str], commands: CommandQueue) -> None:
        """``commands``: the scheduler thread's queue, where an ended request is posted to be
        forgotten (:class:`ForgetRequest`, after its end is reported). :attr:`hold`: True if a
        segment waits for an operator's approval instead of going out (the service sets the
        operator's; none by default)."""
        self._goals = goals
        self._delivery = delivery
        self._ports = ports
        self._clock = clock
        self._counters = counters
        self.hold: Callable[[str, Request, Segment], bool] = never_held
        self._commands = commands

    def budget_check(self, request: Request, segment: Segment) -> str | None:
        """Before a segment is dispatched: its worst case (loops multiplied out) added to the
        goal's earlier segments must fit the robot's budget (timely_robot/budgets.py), else the reason."""
        g = self._goals.by_request.get(request.id)
        if g is None or g.budget is None or request.goal.skill_set_id is None:
            return None
        ss = DEFAULT_SKILL_SETS[request.goal.skill_set_id]
        try:
            cost = segment_cost(segment.text, segment.calls, ss, language_for(request.goal.robot_kind, ss))
        except ValueError as e:  # the segmenter passed it, so this is unexpected: refuse, do not guess
            return f"segment {segment.index} cannot be costed: {e}"
        why = g.budget.add(cost)
        if why is not None:
            self._counters["budget_refusals"] += 1
            return f"exceeds budget: {why} (segment {segment.index}: {safe_text(segment.text, 60)})"
        return None

    def dispatch(self, request: Request, segment: Segment) -> None:
        g = self._goals.by_request[request.id]
        if self.hold(g.goal_id, request, segment):  # waits for an operator's approval
            return
        final = segment.final or (request.state is GenState.GENERATED
                                  and segment.index == len(request.segments) - 1)
        if final and any(c.name in REPLAN_SKILLS for seg in request.segments for c in seg.calls):
            final = False  # the robot may run the plan's re_plan: the goal's next plan continues the sequence
        msg = self._ports.segment(g.goal_id, request, segment.index, final)
        self._delivery.sent(g.goal_id, request.seq_base + segment.index, msg, self._clock.now())
        self._goals.touch(g.goal_id)

    def done(self, request: Request) -> None:
        if request.end is EndKind.REPLANNED and request.replanned_as is not None:
            # not the goal's end: it goes on in the next generation (same client, budget, robot)
            g = self._goals.rekey(request.id, request.replanned_as)
            if g is not None:
                self._counters["replans"] += 1
                self._ports.log("info", f"goal {g.goal_id[:8]} robot {safe_text(request.goal.robot_id)}: the plan "
                                        f"asked to re-plan; writing plan {len(request.chain) + 1}")
            self._commands.post(ForgetRequest(request))
            return
        g = self._goals.pop(request.id)
        if g is None:
            return
        self._goals.release(request.goal.robot_id, g.goal_id)
        self._counters[request.end.value if request.end else "ended"] += 1
        if request.end is not EndKind.SUCCEEDED and any(r.segments for r in request.chain):
            # ended other than by success after segments reached the robot: stop it (re-sent until
            # confirmed); after a plan that ran through (TRUNCATED, NOT_ACHIEVED) the stop is harmless
            msg = self._ports.stop(g.goal_id, request.goal.robot_id, request.seq_base + len(request.segments))
            self._delivery.stop(g.goal_id, request.goal.robot_id, msg, self._clock.now())
        else:
            self._delivery.close(g.goal_id)
        g.on_end(request)
        self._commands.post(ForgetRequest(request))
