"""Goal intake: field checks, bounds, robot claiming, admission to the core and cancels."""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable

from llm_planner_node.config.params import SIM_ENGINES, FleetParams, perceivable_objects, plan_objects
from timely_robot.config import RobotParams
from llm_planner_node.core.battery import BatteryRule, battery_refusal
from timely_robot.budgets import StaticBudget
from timely_robot.outcomes import RejectReason, Rejection
from timely_robot.perceivable import unperceivable
from timely_robot.skills import DEFAULT_SKILL_SETS
from llm_planner_node.core.task_model import Goal, Request, Segment
from llm_planner_node.core.text import KNOWN_ROBOTS_LISTED, safe_text
from llm_planner_node.core.tuf import TUFParams, tuf_problem
from llm_planner_node.grounding.objects import MAX_NAME_CHARS, ObjectCheck, grammar_objects, unperceivable_refusal
from llm_planner_node.prompts.grammar import derivatives_for, language_for, longest_plan_chars
from llm_planner_node.service.commands import AdoptGoal, CancelGoal, CommandQueue, SubmitGoal
from llm_planner_node.service.ports import MAX_ID_CHARS, GoalIn
from llm_planner_node.service.registry import GoalEntry
from llm_planner_node.service.shared import ServicePart, Shared
from llm_planner_node.service.takeover import JournalEntry
from llm_planner_node.service.vitals import RobotVitals


#: a scene older than this is not what the robot sees now: the prompt goes without one
SCENE_MAX_AGE_S = 6.0
#: an idle robot reports every 2 s: a report older than this says nothing of the link now
LINK_REPORT_MAX_AGE_S = 6.0
#: telemetry silent longer than this (a Tello sends 10 state packets a second) refuses goals
LINK_SILENT_S = 3.0


class GoalIntake(ServicePart):
    """Takes goals from any thread; what reaches the core is posted to the scheduler thread."""

    def __init__(self, shared: Shared, params: Callable[[], FleetParams], prompt_builder: Callable[..., object],
                 commands: CommandQueue, unavailable: Callable[[], Rejection | None],
                 max_pending: int, vitals: RobotVitals | None = None, objects: ObjectCheck | None = None) -> None:
        """``params``: the planner's current parameters; ``commands``: the scheduler thread's
        queue (this part handles its goals' submits, cancels and adoptions); ``unavailable``: why the planner takes no goal now (its lifecycle, its engine), or
        None; ``max_pending``: goals accepted but not yet ended beyond which new goals are refused;
        ``vitals``: what the robots last measured (a drone's battery must see a goal through);
        ``objects``: the check of a plan's objects (its meaning model loads on first use)."""
        super().__init__(shared)
        self._objects = objects if objects is not None else ObjectCheck()
        self._vitals = vitals
        self._params = params
        self._prompt_builder = prompt_builder
        self._commands = commands
        self._unavailable = unavailable
        self._max_pending = max_pending
        self._max_tokens_of: dict[str, int] = {}
        self._pending = 0  # submitted, not yet ended (back-pressure bound)
        self._pending_lock = threading.Lock()
        self._early_cancels: set[str] = set()
        #: goal id -> what reports its end, for a submit or adoption posted and not yet applied
        self._on_end: dict[str, Callable[[Request | str], None]] = {}
        commands.on(SubmitGoal, self._apply_submit)
        commands.on(CancelGoal, self._apply_cancel)
        commands.on(AdoptGoal, self._apply_adopt)

    def validate(self, g: GoalIn) -> Rejection | None:
        """Why a goal cannot be served, or None if it is fine."""
        params = self._params()
        pp = params.planner
        robot = params.robot(g.robot_id)
        if robot is None:
            ids = [r.id for r in params.robots]
            known = ", ".join(ids[:KNOWN_ROBOTS_LISTED]) + (f", ... ({len(ids)} in all)"
                                                            if len(ids) > KNOWN_ROBOTS_LISTED else "")
            return Rejection(RejectReason.UNKNOWN_ROBOT,
                             f"unknown robot '{safe_text(g.robot_id)}' (configured robots: {known})")
        if g.robot_kind and g.robot_kind != robot.kind:
            return Rejection(RejectReason.WRONG_ROBOT,
                             f"robot '{g.robot_id}' is a {robot.kind}, not a {safe_text(g.robot_kind)}")
        if g.skill_set and g.skill_set not in DEFAULT_SKILL_SETS:
            return Rejection(RejectReason.WRONG_ROBOT, f"unknown skill set '{safe_text(g.skill_set)}' "
                                                       f"(registered: {', '.join(DEFAULT_SKILL_SETS)})")
        if g.skill_set and g.skill_set != robot.skill_set:
            return Rejection(RejectReason.WRONG_ROBOT,
                             f"robot '{g.robot_id}' runs skill set '{robot.skill_set}', not '{g.skill_set}'")
        why = tuf_problem(g.ert_s, g.alpha, g.beta)
        if why is not None:
            return Rejection(RejectReason.TUF, why)
        text = g.instruction.strip()
        if not text:
            return Rejection(RejectReason.FIELD, "instruction is empty")
        if len(text) > pp.max_instruction_chars:
            return Rejection(RejectReason.FIELD,
                             f"instruction has {len(text)} characters, the limit is {pp.max_instruction_chars}")
        if g.max_tokens > 4 * pp.max_tokens:
            return Rejection(RejectReason.FIELD, f"max_tokens {g.max_tokens} exceeds the node's limit {4 * pp.max_tokens}")
        return self._link_check(robot) or self._battery_check(robot) or self._perception_check(robot, text)

    def _perception_check(self, robot: RobotParams, instruction: str) -> Rejection | None:
        """An instruction naming a detector class the robot lacks (timely_robot/perceivable.py) is refused
        before a plan is written, naming it; any other thing a plan names is checked before its
        segment is dispatched (:meth:`object_problem`)."""
        known = perceivable_objects(robot)
        if known is None:
            return None
        # a base's places are things it goes to, not things it must perceive ("go to the couch")
        missing = unperceivable(instruction, (*known, *robot.objects) if robot.kind == "base" else known)
        return unperceivable_refusal(robot.id, robot.kind, missing, known) if missing else None

    def object_problem(self, request: Request, segment: Segment) -> Rejection | None:
        """Before ``segment`` is dispatched: a base's ``go_to`` must name one of its declared places,
        and each object it looks for, goes to or acts on must be what the goal's instruction asks
        for and perceivable by its robot (grounding/objects.py), else the refusal that ends the goal."""
        goal = request.goal
        if goal.skill_set_id is None or not goal.instruction:
            return None
        robot = self._params().robot(goal.robot_id)
        if robot is None:
            return None
        places = robot.places or {}
        if robot.kind == "base" and places:
            for c in segment.calls:
                if c.name == "go_to" and c.args and c.args[0] not in places:
                    return Rejection(RejectReason.UNKNOWN_PLACE,
                                     f"the plan sends {robot.id} to '{safe_text(str(c.args[0]), 40)}', which is not one "
                                     f"of its places ({', '.join(sorted(places)[:12])}{', ...' if len(places) > 12 else ''}):"
                                     " refused before it runs")
        scene = tuple(e.split(" ", 1)[0] for e in goal.scene or ())
        return self._objects.problem(segment.calls, DEFAULT_SKILL_SETS[goal.skill_set_id], goal.instruction, robot.id, robot.kind,
                               perceivable_objects(robot), (*robot.objects, *scene))

    def _link_check(self, robot: RobotParams) -> Rejection | None:
        """A robot whose adapter last reported its telemetry silent (a drone switched off, or out
        of its Wi-Fi's range): its first command would only time out."""
        if self._vitals is None:
            return None
        silent = self._vitals.link_silent_s(robot.id, LINK_REPORT_MAX_AGE_S)
        if silent is None or silent <= LINK_SILENT_S:
            return None
        return Rejection(RejectReason.LINK, f"{robot.id} has sent no telemetry for {silent:.0f} s: check that it is "
                                            "on and within radio range of its adapter's host")

    def _battery_check(self, robot: RobotParams) -> Rejection | None:
        """A flying robot whose last measured battery cannot see a goal through (core/battery.py)."""
        if self._vitals is None or robot.kind not in ("drone", "sim"):
            return None
        rule = BatteryRule()
        pct = self._vitals.battery(robot.id, rule.max_age_s)
        if pct is None:
            return None
        why = battery_refusal(robot.id, pct, robot.effective_budget.duration_floor_s, rule)
        return None if why is None else Rejection(RejectReason.BATTERY, why)

    def precheck(self, g: GoalIn) -> Rejection | None:
        """The goal's field checks (lengths, then :meth:`validate`): why it is refused whatever
        the planner's state, or None. Reads only the fields, so a PlanTask.Goal will do."""
        if len(g.robot_id) > MAX_ID_CHARS:
            return Rejection(RejectReason.FIELD, f"robot_id has {len(g.robot_id)} characters, the limit is {MAX_ID_CHARS}")
        if len(g.skill_set) > MAX_ID_CHARS or len(g.robot_kind) > MAX_ID_CHARS or len(g.task_type) > MAX_ID_CHARS:
            return Rejection(RejectReason.FIELD, f"robot_kind, task_type and skill_set are limited to {MAX_ID_CHARS} characters")
        return self.validate(g)

    def submit(self, goal_id: str, g: GoalIn, on_end: Callable[[Request | str], None]) -> Rejection | None:
        """Take a goal; the rejection reason at once, or None and later ``on_end(request)``
        (or ``on_end(reason)`` if the core refuses it)."""
        reason = self._admit(goal_id, g, on_end)
        if reason is not None:
            self._count(reason)
        return reason

    def _count(self, why: Rejection) -> None:
        self._counters["rejected"] += 1
        self._counters[f"rejected.{why.reason.value}"] += 1

    def cancel(self, goal_id: str) -> None:
        self._commands.post(CancelGoal(goal_id))

    def _apply_cancel(self, cmd: CancelGoal) -> None:
        rid = self._goals.by_goal_id.get(cmd.goal_id)
        if rid is None:
            self._early_cancels.add(cmd.goal_id)
        else:
            self._planner.cancel(rid)

    def _admit(self, goal_id: str, g: GoalIn, on_end: Callable[[Request | str], None]) -> Rejection | None:
        reason = self.precheck(g)
        if reason is None:
            reason = self._unavailable()
        if reason is not None:
            return reason
        params = self._params()
        pp = params.planner
        robot = params.robot(g.robot_id)
        assert robot is not None
        # what the robot sees now goes into its prompt (TypeFly's Scene line); a resumed generation
        # keeps the prompt's token ids, so it keeps the scene of the goal's start
        goal = self._goal_of(g, robot, self._scene_now(robot.id, pp.scene_in_prompt))
        if isinstance(goal, Rejection):
            return goal
        if pp.engine.kind not in SIM_ENGINES and goal.skill_set_id != "chat":
            # a live model's plans name things in other words: what their checks read is encoded
            # here, on the client's thread, not on the scheduler thread at a segment's dispatch
            self._objects.prepare(goal.instruction, robot.kind, perceivable_objects(robot) or robot.objects)
        with self._pending_lock:
            if self._pending >= self._max_pending:
                return Rejection(RejectReason.OVERLOADED,
                                 f"planner overloaded: {self._pending} goals in flight (limit {self._max_pending}); "
                                 "try again later")
            busy = self._goals.claim(g.robot_id, goal_id)
            if busy is not None:
                return Rejection(RejectReason.ROBOT_BUSY, busy)
            self._pending += 1
            self._on_end[goal_id] = on_end
        self._commands.post(SubmitGoal(goal_id, goal, robot.effective_budget))
        return None

    def _ended(self, on_end: Callable[[Request | str], None]) -> Callable[[Request | str], None]:
        """``on_end``, after the goal leaves the pending count."""
        def ended(outcome: Request | str) -> None:
            with self._pending_lock:
                self._pending -= 1
            on_end(outcome)
        return ended

    def _apply_submit(self, cmd: SubmitGoal) -> None:
        """Scheduler thread: the goal reaches the core (or ends with why it cannot)."""
        goal_id, goal = cmd.goal_id, cmd.goal
        with self._pending_lock:
            ended = self._ended(self._on_end.pop(goal_id))
        try:
            rid = self._planner.submit(goal)
        except Exception as e:  # noqa: BLE001 - ValueError: why it can never run; else a fault
            self._goals.release(goal.robot_id, goal_id)
            why = Rejection(RejectReason.CORE, str(e) if isinstance(e, ValueError)
                            else f"the planner could not take the goal: {safe_text(repr(e), 300)}")
            self._count(why)
            ended(why)
            return
        self._goals.add(GoalEntry(goal_id, rid, ended, StaticBudget(cmd.budget)))
        self._delivery.open(goal_id, goal.robot_id, self._clock.now())
        self._ports.goal_started(goal_id, self._planner.requests[rid])
        if goal_id in self._early_cancels:  # cancel arrived before the goal reached the core
            self._early_cancels.discard(goal_id)
            self._planner.cancel(rid)

    def _goal_of(self, g: GoalIn, robot: RobotParams, scene: tuple[str, ...] | None, *, done: str = "",
                 prompt: object = None) -> Goal | Rejection:
        """The core's goal for ``g`` on ``robot``: its prompt (built from the instruction, the
        scene and the plans already run, unless ``prompt`` is given), plan objects, limits and
        decoding; or why the prompt was refused."""
        pp = self._params().planner
        if prompt is None:
            try:
                prompt = self._prompt_builder(g.instruction.strip(), robot.kind, robot.skill_set, objects=robot.objects,
                                              **({"done": done} if done else {}),
                                              **({} if scene is None else {"scene": scene}))
            except ValueError as e:
                return Rejection(RejectReason.PROMPT, str(e))
        lang = language_for(robot.kind, DEFAULT_SKILL_SETS[robot.skill_set])
        return Goal(robot_id=g.robot_id, robot_kind=robot.kind, task_type=g.task_type or robot.kind,
                    prompt=prompt, tuf=TUFParams(ert=g.ert_s, alpha=g.alpha, beta=g.beta),
                    max_tokens=int(g.max_tokens or self._default_max_tokens(robot, prompt)), skill_set_id=robot.skill_set,
                    instruction=g.instruction.strip(), objects=grammar_objects(plan_objects(robot), g.instruction),
                    plan_limits=pp.plan_limits.get(lang), sampling=pp.sampling.get(lang), scene=scene)

    def adopt(self, entry: JournalEntry, on_end: Callable[[Request | str], None]) -> None:
        """Take over a goal another planner had in flight (a standby's takeover, :mod:`.takeover`):
        the same goal and prompt, its time-utility clock from the same arrival, its generation's
        progress; the segments dispatched and not yet reported finished are sent again (the
        robot's sequence numbers keep each one executed once: the adapter answers a segment it
        has with its latest status for it). Posted to the scheduler thread; a goal that cannot be
        adopted ends with the reason (``on_end(rejection)``). The robot is the goal's from the
        moment it is posted, so the planner renews its lease while the adoption waits its turn
        (a takeover of a thousand goals takes seconds on the scheduler thread, longer than a
        robot's lease would wait)."""
        with self._pending_lock:
            self._on_end[entry.goal_id] = on_end
        if self._params().robot(entry.goal.robot_id) is not None:  # busy with another: _adopt says so
            self._goals.claim(entry.goal.robot_id, entry.goal_id)
        self._commands.post(AdoptGoal(entry))

    def _apply_adopt(self, cmd: AdoptGoal) -> None:
        with self._pending_lock:
            on_end = self._on_end.pop(cmd.entry.goal_id)
        why = self._adopt(cmd.entry, on_end)
        if why is not None:
            self._goals.release(cmd.entry.goal.robot_id, cmd.entry.goal_id)
            self._count(why)
            on_end(why)

    def _adopt(self, entry: JournalEntry, on_end: Callable[[Request | str], None]) -> Rejection | None:
        g = entry.goal
        robot = self._params().robot(g.robot_id)
        if robot is None:
            return Rejection(RejectReason.UNKNOWN_ROBOT, f"robot '{safe_text(g.robot_id)}' of the goal taken over is "
                                                         "not configured on this planner")
        p = entry.progress
        goal = self._goal_of(g, robot, entry.scene, done="".join(p.earlier_plans),
                             prompt=list(entry.prompt_token_ids) if entry.prompt_token_ids else None)
        if isinstance(goal, Rejection):
            return goal
        busy = self._goals.claim(g.robot_id, entry.goal_id, again=True)
        if busy is not None:
            return Rejection(RejectReason.ROBOT_BUSY, busy)
        with self._pending_lock:
            self._pending += 1

        def ended(outcome: Request | str) -> None:
            with self._pending_lock:
                self._pending -= 1
            on_end(outcome)

        now = self._clock.now()
        arrival = now - entry.age_s
        progress = entry.at(arrival)

        def registered(req: Request) -> None:
            entry_ = GoalEntry(entry.goal_id, req.id, ended, StaticBudget(robot.effective_budget))
            self._goals.add(entry_)
            self._delivery.open(entry.goal_id, g.robot_id, now)
            for seg in req.segments[:len(req.dispatched_at)]:
                if self._planner.segment_check is not None:  # the goal's budget counts what was dispatched
                    self._planner.segment_check(req, seg)
                seq = req.seq_base + seg.index
                done = req.exec_end[seg.index] is not None
                msg = self._ports.segment(entry.goal_id, req, seg.index, seg.final, feedback=False) if not done else None
                # sent an ack interval ago: re-sent at once until the robot answers (its latest status)
                self._delivery.sent(entry.goal_id, seq, msg, now - self._delivery.ack_timeout_s)
                if done:
                    self._delivery.heard(entry.goal_id, seq, now, finished=True)

        try:
            self._planner.adopt(goal, arrival, progress, registered)
        except Exception as e:  # noqa: BLE001 - ValueError: why it can never run here; else a fault
            self._goals.release(g.robot_id, entry.goal_id)
            if self._goals.by_goal_id.get(entry.goal_id) is not None:
                self._goals.pop(self._goals.by_goal_id[entry.goal_id])
            self._delivery.close(entry.goal_id)
            with self._pending_lock:
                self._pending -= 1
            return Rejection(RejectReason.CORE, str(e) if isinstance(e, ValueError)
                             else f"the planner could not take the goal over: {safe_text(repr(e), 300)}")
        return None

    def replan(self, req: Request) -> Goal | str:
        """Scheduler thread: the next generation of a goal whose robot ran ``re_plan`` (the
        core's ``replanner``): the same instruction, prompted with the plans already run and the
        scene the robot reports now; or why not (``planner.max_replans`` reached, the prompt
        refused)."""
        params = self._params()
        pp = params.planner
        done = len(req.chain) - 1  # re-plans so far
        if done >= pp.max_replans:
            return (f"the plan asked for re-plan {done + 1} of the goal; planner.max_replans is {pp.max_replans} "
                    f"(plans run: {len(req.chain)})")
        g = req.goal
        robot = params.robot(g.robot_id)
        if robot is None:
            return f"robot {g.robot_id} is no longer configured"
        scene = self._scene_now(robot.id, pp.scene_in_prompt)
        ran = "".join(seg.text for r in req.chain for seg in r.segments)
        try:
            prompt = self._prompt_builder(g.instruction, robot.kind, robot.skill_set, objects=robot.objects,
                                          done=ran, **({} if scene is None else {"scene": scene}))
        except ValueError as e:
            return f"the re-plan's prompt was refused: {e}"
        return dataclasses.replace(g, prompt=prompt, scene=scene)  # max_tokens as the goal's first plan

    def _scene_now(self, robot_id: str, in_prompt: bool) -> tuple[str, ...] | None:
        """What the robot reports seeing now, for its prompt (None: not wanted, or nothing recent)."""
        return self._vitals.scene(robot_id, SCENE_MAX_AGE_S) if self._vitals is not None and in_prompt else None

    def _default_max_tokens(self, robot: RobotParams, prompt: object) -> int:
        """A goal's max_tokens when it sets none: ``planner.max_tokens``, raised under the plan
        grammar to the longest plan the robot's grammar admits (+ the end of sequence), so every
        plan a model can write under it ends before max_tokens (plans are ASCII: bytes bound
        tokens), as far as the model's context (``engine.max_model_len``) leaves room after the
        prompt."""
        n = self._grammar_max_tokens(robot)
        pp = self._params().planner
        if n > pp.max_tokens:
            room = pp.engine.max_model_len - self._planner.engine.count_prompt_tokens(prompt)
            n = max(pp.max_tokens, min(n, room))
        return n

    def _grammar_max_tokens(self, robot: RobotParams) -> int:
        """``planner.max_tokens`` or, under the grammar, the robot's longest plan + 1 if longer
        (computed once per robot)."""
        pp = self._params().planner
        n = self._max_tokens_of.get(robot.id)
        if n is None:
            n = pp.max_tokens
            if pp.constrained_decoding == "grammar" and pp.engine.kind not in SIM_ENGINES:
                ss = DEFAULT_SKILL_SETS[robot.skill_set]
                lang = language_for(robot.kind, ss)
                # the grammar the engine decodes this robot's goals under, with a name as long as
                # any an instruction may add (grounding.objects.MAX_NAME_CHARS): built once
                objects = plan_objects(robot)
                g = derivatives_for(ss, robot.kind, limits=pp.plan_limits.get(lang),
                                    objects=(*objects, "x" * MAX_NAME_CHARS) if objects else ()).grammar
                n = max(n, longest_plan_chars(g) + 1)
            self._max_tokens_of[robot.id] = n
        return n
