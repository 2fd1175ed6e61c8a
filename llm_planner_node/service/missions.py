"""Missions: one instruction for the fleet; the robot chosen by the allocator, not by the model;
its task run as an ordinary goal; another robot when the first is refused or fails.

A mission here is one task. What it needs of its robot is read from the instruction against the
fleet's own declarations, without the model (:func:`mission_need`): the things it names that a
robot of the fleet declares it can perceive or holds in its workspace (COCO's classes by any of
their names, a base's detector classes, an arm's objects), the places it names that a base
declares, the action skills it names by their own names ("land", "go to", "pick"; a perception
skill's name, "look", is what the things to perceive already ask for), narrowed by the mission's
selector (robot ids, kinds). A mission whose instruction names none of these and whose selector
names no robot is refused (the fleet cannot tell who should do it). The allocator
(:mod:`.allocation`) then picks a capable, available robot with the least expected completion,
and the task goes to the planner service as a goal (:meth:`PlannerService.submit`), with every
check a goal has (intake, grammar, object check, budgets, fence, approvals, stop, lease).

When the goal is refused at intake because its robot is busy, low or unheard, or ends
ROBOT_FAILED (its adapter reported the failure: the robot stopped), the task goes to the next
capable robot, at most ``max_reallocations`` times; a goal that ended in a timeout (the robot
silent: whether it stopped is not known) is not moved, so two robots never act on one task at
once. Any other end is the mission's: its status says what the task's goal did.

Where the fleet memory last saw the thing a task looks for is the task's ``near``: among able
robots, the allocator prefers the one with less travel to it (a remembered position only weighs
the choice; the robot's plan passes every check a goal's does).

Not yet: decomposition into several tasks, answers carried between tasks, and a mission surviving
a takeover (its task's goal is journaled and adopted like any goal, but the mission is not).
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Callable, Protocol, Sequence

from timely_robot.outcomes import RejectReason, Rejection
from timely_robot.perceivable import named_things
from timely_robot.skills import ROBOT_KINDS, skill_set_of
from llm_planner_node.config.params import FleetParams, RobotParams, perceivable_objects
from llm_planner_node.core.task_model import EndKind, Request
from llm_planner_node.core.tuf import tuf_problem
from llm_planner_node.service.allocation import Choice, TaskNeed, allocate
from llm_planner_node.service.ports import GoalIn
from llm_planner_node.service.robot_offers import fleet_offers

#: skills every robot kind has or that name no robot ("stop", "delay"): never a reason to pick one
_GENERIC_SKILLS = frozenset({"stop", "delay", "log", "re_plan", "rp"})
#: intake refusals a task moves on from (another robot may take it)
MOVABLE_REFUSALS = frozenset({RejectReason.ROBOT_BUSY, RejectReason.BATTERY, RejectReason.LINK,
                              RejectReason.UNPERCEIVABLE, RejectReason.WRONG_ROBOT})
_WORD = re.compile(r"[a-z0-9]+")


class MissionStatus(str, Enum):
    """How a mission ended (``PlanMission`` result constants by name)."""

    SUCCEEDED = "succeeded"      # its task's goal SUCCEEDED
    FAILED = "failed"            # its task's goal ended otherwise (the task says how)
    IMPOSSIBLE = "impossible"    # no robot of the fleet (or of the selector) can do it
    UNAVAILABLE = "unavailable"  # robots can, but none is free (busy, battery, link) now
    REJECTED = "rejected"        # the mission itself is not acceptable (empty, names nothing)
    CANCELLED = "cancelled"      # its client cancelled it


#: PlanMission.Result.STATUS_* by code: the members above in the action's order (tests check)
MISSION_STATUS_NAMES: dict[int, str] = {i: s.name for i, s in enumerate(MissionStatus)}


@dataclass(frozen=True)
class MissionIn:
    """A mission as the service sees it (the node converts the action goal)."""

    instruction: str
    robot_ids: tuple[str, ...] = ()
    robot_kinds: tuple[str, ...] = ()
    ert_s: float = 1.0
    alpha: float = -2.0
    beta: float = 1.0


@dataclass
class TaskRun:
    """One task of a mission: the robots tried, and its goal's outcome on the last of them."""

    name: str
    need: TaskNeed
    robot_id: str | None = None
    goal_id: str = ""
    why: str = ""                                    # why the robot was chosen (or none)
    tried: list[tuple[str, str]] = field(default_factory=list)  # (robot, why it was left)
    outcome: Request | Rejection | None = None


@dataclass(frozen=True)
class MissionEvent:
    """What a mission's client hears as it goes: a task allocated, refused, moved, ended."""

    kind: str  # "allocated" | "refused" | "moved" | "ended"
    task: str
    robot_id: str
    goal_id: str
    text: str


@dataclass
class MissionEnd:
    status: MissionStatus
    message: str
    tasks: list[TaskRun]


def parse_selector(text: str) -> tuple[list[str], list[str]]:
    """A mission's robot selector as ``--robots`` and the MCP tool take it, comma-separated: (the
    robot ids, the robot kinds) it names. A known robot kind is a kind, anything else an id."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    kinds = [n for n in names if n in ROBOT_KINDS]
    return [n for n in names if n not in kinds], kinds


def _words(text: str) -> list[str]:
    """The instruction's words and pairs of words as declarations spell names ("go_to", "red_box")."""
    ws = _WORD.findall(text.lower())
    return ws + [f"{a}_{b}" for a, b in zip(ws, ws[1:])]


def _said(word: str, words: set[str]) -> bool:
    return word in words or f"{word}s" in words or (word.endswith("s") and word[:-1] in words)


def mission_need(m: MissionIn, robots: Sequence[RobotParams]) -> TaskNeed | Rejection:
    """What the mission's one task needs of its robot, read from the fleet's declarations (module
    docstring), or why the mission cannot be given to anyone."""
    if not m.instruction.strip():
        return Rejection(RejectReason.FIELD, "the mission has no instruction")
    bad_tuf = tuf_problem(m.ert_s, m.alpha, m.beta)  # before allocation: no robot is tried for a goal every one refuses
    if bad_tuf is not None:
        return Rejection(RejectReason.TUF, bad_tuf)
    known = {r.id for r in robots}
    unknown = [rid for rid in m.robot_ids if rid not in known]
    if unknown:
        return Rejection(RejectReason.UNKNOWN_ROBOT, f"no robot {', '.join(unknown)} in the fleet "
                                                     f"(robots: {', '.join(sorted(known))})")
    kinds = {r.kind for r in robots}
    odd = [k for k in m.robot_kinds if k not in kinds]
    if odd:
        return Rejection(RejectReason.WRONG_ROBOT, f"no robot of kind {', '.join(odd)} in the fleet "
                                                   f"(kinds: {', '.join(sorted(kinds))})")
    words = set(_words(m.instruction))
    perceivable: set[str] = set()
    places: set[str] = set()
    skills: set[str] = set()
    for r in robots:
        perceivable |= set(perceivable_objects(r) or ()) | set(r.objects)
        places |= set(r.places or {})
        ss = skill_set_of(r.skill_set, r.kind)
        skills |= {s.name for s in ss.skills if s.kind == "action"} if ss is not None else set()
    things = list(dict.fromkeys([*named_things(m.instruction), *sorted(t for t in perceivable if _said(t, words))]))
    said_places = sorted(p for p in places if _said(p, words))
    things = [t for t in things if t not in said_places]
    said_skills = sorted(s for s in skills - _GENERIC_SKILLS if s in words)
    if not (things or said_places or said_skills or m.robot_ids or m.robot_kinds):
        return Rejection(RejectReason.FIELD, "the instruction names nothing a robot of the fleet declares (a thing "
                                             "it perceives, a place, a skill): say which robots should do it")
    return TaskNeed("t1", kinds=tuple(m.robot_kinds), robot_ids=tuple(m.robot_ids), skills=tuple(said_skills),
                    perceive=tuple(things), places=tuple(said_places))


class Submitter(Protocol):
    """What a mission needs of the planner service (``PlannerService`` has these)."""

    def submit(self, goal_id: str, g: GoalIn, on_end: Callable[[Request | str], None]) -> Rejection | None: ...
    def cancel(self, goal_id: str) -> None: ...
    def active_goals(self) -> dict[str, str]: ...


class MissionCoordinator:
    """Runs missions on a planner service. ``fleet()``: the fleet's current parameters;
    ``battery_pct(robot)`` and ``link_age_s(robot)``: what the robot last reported (None: not
    measured); ``expected_s(robot)``: a task's predicted completion there; ``position(robot)``:
    where it is in the fleet frame (the service's :meth:`.poses.RobotPoses.fleet_position`; None:
    not known), so a robot far from the task's thing pays for its travel; ``goal_ended(goal_id,
    request)``: a task's goal ended (every one, a moved task's first goals too), for the record
    every goal's end gets (the node publishes it on ``planner/results``); ``last_seen(thing)``: where
    the fleet memory last saw a thing (:meth:`.memory.FleetMemory.last_position`; None: never, or
    not where), the task's ``near``. Missions' ends and
    events are called back from the thread that ends their goal (the service's scheduler thread)
    or the caller's; a task moves to its next robot on the coordinator's own worker thread."""

    def __init__(self, service: Submitter, fleet: Callable[[], FleetParams], *,
                 battery_pct: Callable[[str], float | None] = lambda _r: None,
                 link_age_s: Callable[[str], float | None] = lambda _r: None,
                 expected_s: Callable[[RobotParams], float] = lambda _r: 0.0,
                 position: Callable[[str], tuple[float, float, float] | None] = lambda _r: None,
                 goal_ended: Callable[[str, Request], None] = lambda _g, _r: None,
                 last_seen: Callable[[str], tuple[float, float, float] | None] = lambda _t: None,
                 max_reallocations: int = 2, new_goal_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self.service = service
        self._goal_ended = goal_ended
        self._fleet = fleet
        self._battery, self._link, self._expected = battery_pct, link_age_s, expected_s
        self._position = position
        self._last_seen = last_seen
        self.max_reallocations = max_reallocations
        self._new_goal_id = new_goal_id
        self._lock = threading.Lock()
        self._missions: dict[str, "_Mission"] = {}

    def start(self, mission_id: str, m: MissionIn, on_event: Callable[[MissionEvent], None],
              on_end: Callable[[MissionEnd], None]) -> None:
        """Allocate the mission's task and send its goal; ``on_end`` is called exactly once."""
        mission = _Mission(mission_id, m, on_event, on_end)
        need = mission_need(m, self._fleet().robots)
        if isinstance(need, Rejection):
            mission.finish(MissionStatus.REJECTED, str(need))
            return
        near = next((p for p in map(self._last_seen, need.perceive) if p is not None), None)
        if near is not None:  # where the fleet last saw the thing: the nearer robot travels less
            need = replace(need, near=near)
        mission.task = TaskRun("t1", need)
        with self._lock:
            self._missions[mission_id] = mission
        self._send(mission)

    def cancel(self, mission_id: str) -> bool:
        """Cancel a mission: its task's goal is cancelled (its robot stops); False if unknown."""
        with self._lock:
            mission = self._missions.get(mission_id)
        if mission is None:
            return False
        mission.cancelled = True
        if mission.task is not None and mission.task.goal_id:
            self.service.cancel(mission.task.goal_id)
        return True

    def in_flight(self) -> list[str]:
        with self._lock:
            return list(self._missions)

    # -- the task's robot -------------------------------------------------------------------------
    def _choose(self, mission: "_Mission") -> Choice:
        task = mission.task
        assert task is not None
        params = self._fleet()
        left = {rid for rid, _ in task.tried}
        offers = [o for o in fleet_offers(params.robots, self.service.active_goals(), self._link, self._battery,
                                          self._expected, self._position) if o.robot_id not in left]
        [choice] = allocate([task.need], offers, mission=mission.mission_id)
        return choice

    def _send(self, mission: "_Mission") -> None:
        task = mission.task
        assert task is not None
        if mission.cancelled:
            self._finish(mission, MissionStatus.CANCELLED, "cancelled before its task started")
            return
        choice = self._choose(mission)
        if choice.robot_id is None:
            tried = "; ".join(f"{rid}: {why}" for rid, why in task.tried)
            status = (MissionStatus.IMPOSSIBLE if choice.why.startswith("no robot can") and not task.tried
                      else MissionStatus.UNAVAILABLE if not task.tried else MissionStatus.FAILED)
            task.why = choice.why
            self._finish(mission, status, choice.why + (f" (tried: {tried})" if tried else ""))
            return
        robot = next(r for r in self._fleet().robots if r.id == choice.robot_id)
        task.robot_id, task.why, task.goal_id = robot.id, choice.why, self._new_goal_id()
        mission.on_event(MissionEvent("allocated", task.name, robot.id, task.goal_id, choice.why))
        m = mission.m
        goal = GoalIn(robot.id, m.instruction, robot_kind=robot.kind, task_type="mission", ert_s=m.ert_s,
                      alpha=m.alpha, beta=m.beta, skill_set=robot.skill_set)
        goal_id = task.goal_id
        refused = self.service.submit(goal_id, goal, lambda outcome: self._ended(mission, goal_id, outcome))
        if refused is not None:
            self._ended(mission, goal_id, refused)

    def _ended(self, mission: "_Mission", goal_id: str, outcome: Request | str) -> None:
        task = mission.task
        assert task is not None
        if isinstance(outcome, Request):
            self._goal_ended(goal_id, outcome)
        if goal_id != task.goal_id:
            return
        task.outcome = outcome if isinstance(outcome, (Request, Rejection)) else Rejection(RejectReason.CORE, str(outcome))
        robot = task.robot_id or ""
        if isinstance(outcome, Rejection):
            why = f"refused: {outcome}"
            movable = outcome.reason in MOVABLE_REFUSALS
        elif isinstance(outcome, Request):
            why = f"{outcome.end.value if outcome.end else 'ended'}: {outcome.end_reason}"
            movable = outcome.end == EndKind.ROBOT_FAILED
            if outcome.end == EndKind.SUCCEEDED:
                mission.on_event(MissionEvent("ended", task.name, robot, goal_id, "succeeded"))
                self._finish(mission, MissionStatus.SUCCEEDED, f"{task.name} on {robot}: succeeded")
                return
        else:
            why, movable = f"refused: {outcome}", False
        mission.on_event(MissionEvent("ended" if not movable else "refused", task.name, robot, goal_id, why))
        if movable and not mission.cancelled and len(task.tried) < self.max_reallocations:
            task.tried.append((robot, why))
            threading.Thread(target=self._move, args=(mission, robot, why), name="mission-move", daemon=True).start()
            return
        bad_input = isinstance(outcome, Rejection) and outcome.reason in (RejectReason.FIELD, RejectReason.TUF)
        status = (MissionStatus.CANCELLED if mission.cancelled else
                  MissionStatus.REJECTED if bad_input else MissionStatus.FAILED)
        self._finish(mission, status, f"{task.name} on {robot}: {why}")

    def _move(self, mission: "_Mission", robot: str, why: str) -> None:
        task = mission.task
        assert task is not None
        mission.on_event(MissionEvent("moved", task.name, robot, task.goal_id, f"{robot} {why}; another robot"))
        try:
            self._send(mission)
        except Exception as e:  # noqa: BLE001 - the mission ends with the reason, never hangs
            self._finish(mission, MissionStatus.FAILED, f"{task.name}: could not move to another robot: {e}")

    def _finish(self, mission: "_Mission", status: MissionStatus, message: str) -> None:
        with self._lock:
            self._missions.pop(mission.mission_id, None)
        mission.finish(status, message)


class _Mission:
    def __init__(self, mission_id: str, m: MissionIn, on_event: Callable[[MissionEvent], None],
                 on_end: Callable[[MissionEnd], None]) -> None:
        self.mission_id, self.m, self.on_event, self._on_end = mission_id, m, on_event, on_end
        self.task: TaskRun | None = None
        self.cancelled = False
        self._ended = False
        self._lock = threading.Lock()

    def finish(self, status: MissionStatus, message: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._on_end(MissionEnd(status, message, [self.task] if self.task is not None else []))
