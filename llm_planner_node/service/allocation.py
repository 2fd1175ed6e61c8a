"""Choosing robots for tasks without trusting the model: capable by declaration, available now,
the best expected completion, and the parallel tasks of one mission assigned jointly.

A mission's decomposition (the model) may say which kind of robot a task needs or name a robot;
it never decides alone which robot runs it. A robot is *capable* of a task (:func:`incapable`)
when what it declares covers what the task needs: its kind and id where the task names them, the
skills the task calls, every thing the task must perceive among the classes the robot can
perceive (a robot whose perception is unknown is capable of no perception task: "refuse nothing"
is no declaration), every object it acts on among its workspace's objects, every place it goes
to among its places. It is *available* (:func:`unavailable`) when it is idle or reserved for this
mission, its link is fresh and its battery holds what the task needs. Among the capable and
available robots each task goes to the one that completes it soonest by the scheduler's own
predictions (:attr:`RobotOffer.expected_s`: queue, generation and execution) plus its travel
to where the task's thing was last seen, when both that place and the robot's position are
known (:func:`expected_completion`), and the tasks of one mission that run in parallel are assigned jointly,
one task per robot, by a minimum-cost assignment (:func:`allocate`: scipy's
``linear_sum_assignment``): first as many tasks as can be served at once, then the least total
expected completion, so the robot a greedy choice would spend on the first task is left for the
task only it can do.

No ROS and no state of its own: the caller builds the offers from the fleet's declarations and
its state (:mod:`llm_planner_node.service.robot_offers`) and acts on the choices (a task with no
robot says why, robot by robot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from timely_robot.budgets import NOMINAL_NAV_MPS
from timely_robot.execution_time import TELLO_SPEED_CM_S

#: a robot unheard for longer than this (s) is not offered new work (its link may be down)
LINK_FRESH_S = 3.0
#: how fast each kind of robot travels to a task (m/s): a drone at its moves' effective speed, a
#: base at its nominal driving speed (the budget's); a kind without one (an arm) does not travel
TRAVEL_MPS: dict[str, float] = {"drone": TELLO_SPEED_CM_S / 100.0, "sim": TELLO_SPEED_CM_S / 100.0,
                                "base": NOMINAL_NAV_MPS}
#: battery a robot keeps in reserve beyond what a task needs (percent)
BATTERY_RESERVE_PCT = 10.0


def _name(thing: str) -> str:
    """A thing's or place's name as declarations spell it ("Cell phone" -> "cell_phone")."""
    return "_".join(thing.strip().lower().replace("-", " ").split())


@dataclass(frozen=True)
class TaskNeed:
    """What a task needs of its robot (empty: anything will do)."""

    task: str                          # the task's name in its mission ("t1")
    kinds: tuple[str, ...] = ()        # robot kinds that may do it
    robot_ids: tuple[str, ...] = ()    # only these robots (a task or a selector naming robots)
    skills: tuple[str, ...] = ()       # the skills it calls, by name
    perceive: tuple[str, ...] = ()     # things it must perceive
    objects: tuple[str, ...] = ()      # objects it acts on (an arm's workspace)
    places: tuple[str, ...] = ()       # places it goes to (a base's places)
    battery_pct: float = 0.0           # battery it uses (percent), by the execution-time model
    #: where the task's thing was last seen (fleet frame, m); None: not known
    near: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class RobotOffer:
    """A robot as the allocator sees it: its declarations and its state now."""

    robot_id: str
    kind: str
    skills: frozenset[str]
    perceivable: frozenset[str] | None  # the classes it can perceive; None: unknown
    objects: frozenset[str] = frozenset()  # its workspace's objects
    places: frozenset[str] = frozenset()   # its named places
    busy_with: str = ""                    # the goal or mission it serves now ("": idle)
    #: since its last report (None: not measured: a robot that reports only during goals; a
    #: silent one is then found by the goal's own silence timeout)
    link_age_s: float | None = 0.0
    battery_pct: float | None = None       # None: no battery to mind (an arm) or not reported
    expected_s: float = 0.0                # a task's predicted completion here (s)
    #: where the robot is (fleet frame, m; :class:`~.poses.RobotPoses`); None: not known
    position: tuple[float, float, float] | None = None


def distance_m(need: TaskNeed, robot: RobotOffer) -> float | None:
    """How far ``robot`` is from where ``need``'s thing was last seen (m), None when either is unknown."""
    if need.near is None or robot.position is None:
        return None
    return math.dist(robot.position, need.near)


def travel_s(need: TaskNeed, robot: RobotOffer) -> float:
    """Seconds ``robot`` needs to reach where ``need``'s thing was last seen, in a straight line at
    its kind's :data:`TRAVEL_MPS`. 0 when the robot's position or the thing's is unknown (no
    travel term: an unknown distance is not guessed, so such a robot is neither favoured nor
    penalised by it) and for a kind that does not travel."""
    d = distance_m(need, robot)
    speed = TRAVEL_MPS.get(robot.kind)
    return d / speed if d is not None and speed else 0.0


def expected_completion(need: TaskNeed, robot: RobotOffer) -> float:
    """``need``'s expected completion on ``robot`` (s): the scheduler's prediction
    (:attr:`RobotOffer.expected_s`) plus its travel to the task (:func:`travel_s`)."""
    return robot.expected_s + travel_s(need, robot)


def incapable(need: TaskNeed, robot: RobotOffer) -> str | None:
    """Why ``robot``'s declarations do not cover ``need`` (one sentence), or None."""
    if need.robot_ids and robot.robot_id not in need.robot_ids:
        return f"not among the robots named ({', '.join(need.robot_ids)})"
    if need.kinds and robot.kind not in need.kinds:
        return f"a {robot.kind}, the task needs a {' or '.join(need.kinds)}"
    missing = [s for s in need.skills if s not in robot.skills]
    if missing:
        return f"has no skill {', '.join(missing)}"
    if need.perceive:
        if robot.perceivable is None:
            return "declares nothing it can perceive"
        lacking = [t for t in need.perceive if _name(t) not in robot.perceivable]
        if lacking:
            return f"cannot perceive {', '.join(repr(t) for t in lacking)}"
    absent = [o for o in need.objects if _name(o) not in robot.objects]
    if absent:
        return f"has no {', '.join(repr(o) for o in absent)} in its workspace"
    unknown = [p for p in need.places if _name(p) not in robot.places]
    if unknown:
        return f"knows no place {', '.join(repr(p) for p in unknown)}"
    return None


def unavailable(need: TaskNeed, robot: RobotOffer, mission: str = "",
                link_fresh_s: float = LINK_FRESH_S) -> str | None:
    """Why ``robot`` cannot take ``need`` now (busy, link stale, battery), or None. A robot
    reserved for ``mission`` is available to it."""
    if robot.busy_with and robot.busy_with != mission:
        return f"busy with {robot.busy_with}"
    if robot.link_age_s is not None and robot.link_age_s > link_fresh_s:
        return f"unheard for {robot.link_age_s:.1f} s"
    if robot.battery_pct is not None and robot.battery_pct < need.battery_pct + BATTERY_RESERVE_PCT:
        return (f"battery {robot.battery_pct:.0f}% < the {need.battery_pct:.0f}% the task needs "
                f"+ {BATTERY_RESERVE_PCT:.0f}% reserve")
    return None


@dataclass(frozen=True)
class Choice:
    """The allocator's answer for one task: its robot (None: none now) and why."""

    task: str
    robot_id: str | None
    expected_s: float | None
    why: str
    #: every robot not chosen that could not take the task, with its reason
    refused: Mapping[str, str] = field(default_factory=dict)


def allocate(needs: Sequence[TaskNeed], robots: Sequence[RobotOffer], mission: str = "",
             expected: Callable[[TaskNeed, RobotOffer], float] | None = None,
             link_fresh_s: float = LINK_FRESH_S) -> list[Choice]:
    """One :class:`Choice` per task of ``needs`` (tasks that run in parallel), in their order:
    each robot at most one task; as many tasks served as the capable, available robots allow;
    among those assignments the least sum of expected completion (``expected(need, robot)``,
    default :func:`expected_completion`: the prediction plus travel where both the robot's
    position and the task's place are known). A task left without a robot says whether none is
    capable or available (each robot's reason) or all of them went to the mission's other tasks."""
    cost_of = expected or expected_completion
    refused: list[dict[str, str]] = []
    cost: list[list[float | None]] = []
    for need in needs:
        why: dict[str, str] = {}
        row: list[float | None] = []
        for robot in robots:
            reason = incapable(need, robot) or unavailable(need, robot, mission, link_fresh_s)
            if reason is None:
                row.append(max(0.0, float(cost_of(need, robot))))
            else:
                why[robot.robot_id] = reason
                row.append(None)
        refused.append(why)
        cost.append(row)
    pairs = _assignment(cost)
    out = []
    for i, need in enumerate(needs):
        j = pairs.get(i)
        if j is not None:
            robot = robots[j]
            able = sum(1 for c in cost[i] if c is not None)
            expected = f", expected done in {cost[i][j]:.1f} s" if cost[i][j] else ""  # 0: not predicted
            far = distance_m(need, robot)
            expected += f", {far:.1f} m away" if far is not None else ""
            why = (f"{robot.robot_id} ({robot.kind}): able and free{expected} "
                   + (f"({able} robots were able)" if able > 1 else "(the only robot able)"))
            out.append(Choice(need.task, robot.robot_id, cost[i][j], why, refused[i]))
        elif any(c is not None for c in cost[i]):
            out.append(Choice(need.task, None, None, "every robot able to do it is taken by another task of "
                              "this mission", refused[i]))
        elif not robots:
            out.append(Choice(need.task, None, None, "the fleet has no robot", refused[i]))
        else:
            capable = [r.robot_id for r in robots if incapable(need, r) is None]
            head = ("no robot is available: " if capable else "no robot can do it: ")
            out.append(Choice(need.task, None, None, head + "; ".join(f"{rid} {reason}" for rid, reason
                                                                       in sorted(refused[i].items())), refused[i]))
    return out


def _assignment(cost: Sequence[Sequence[float | None]]) -> dict[int, int]:
    """Rows (tasks) to columns (robots): a maximum number of allowed pairs (None: not allowed),
    then their least total cost. Forbidden pairs cost more than every allowed pair together, so
    a minimum-cost assignment never trades a served task for cheaper ones."""
    if not cost or not cost[0]:
        return {}
    allowed = [c for row in cost for c in row if c is not None]
    if not allowed:
        return {}
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    big = (sum(allowed) + 1.0) * (len(cost) + 1)
    matrix = np.array([[big if c is None else c for c in row] for row in cost], dtype=float)
    rows, cols = linear_sum_assignment(matrix)
    return {int(i): int(j) for i, j in zip(rows, cols) if cost[i][j] is not None}
