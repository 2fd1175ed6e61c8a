"""Per-robot budgets: how much one goal's plan may make a robot do, whatever the model wrote.

A :class:`Budget` bounds a goal's skill calls (loops unrolled), its total translation and
rotation (drones, bases), its duration (a factor of the execution-time model's prediction, with a
floor) and a geofence: for drones a box relative to the take-off point, for bases a polygon in
the ``map`` frame (metres) that every planned path must stay in and the measured pose is watched
against while the base moves, with a speed limit. Plan-language bounds
(loop counts, nesting, statements) are the grammar's (:mod:`.plan_limits`).

The same budget is checked twice, by two parties that do not trust each other's code:

* the planner, statically, before it dispatches a segment: the segment's worst case (loops
  multiplied out, the longer branch of an if) is added to what the goal's earlier segments may
  do (:class:`StaticBudget`); a plan that cannot fit ends ``INVALID_PLAN: exceeds budget: ...``;
* the adapter, while executing (:class:`BudgetMeter`): it counts what actually ran, so a plan cut
  into many small segments cannot add up past the budget, and it refuses a call the moment it
  would exceed one (the robot is stopped) and any move that would leave the fence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from timely_robot.overrides import with_overrides
from timely_robot.skills import SkillCall, SkillSet

#: Drone moves: skill -> unit vector in the body frame (forward, right, up).
_MOVES = {"move_forward": (1, 0, 0), "move_backward": (-1, 0, 0), "move_right": (0, 1, 0),
          "move_left": (0, -1, 0), "move_up": (0, 0, 1), "move_down": (0, 0, -1)}
_TURNS = {"turn_cw": 1, "turn_ccw": -1}
#: Height of a Tello after ``takeoff`` (cm; SDK 2.0: about 80 cm to 1 m), the fence checks it.
TAKEOFF_HEIGHT_CM = 80.0
#: Distance ``approach`` flies (cm: "fly ~1 m towards the object in view").
APPROACH_CM = 100.0
#: A base's nominal driving speed (m/s): what a drive is expected to take (its route's length at
#: this speed: the base adapter's :meth:`BudgetMeter.expect`) and what the planner counts for a
#: base's travel to a task when it chooses a robot.
NOMINAL_NAV_MPS = 0.25


class BudgetExceeded(Exception):
    """A call or plan that would exceed its robot's budget (the message says which and by how much)."""


@dataclass(frozen=True)
class Budget:
    """What one goal may make its robot do (``None``: unbounded)."""

    max_calls: int = 50
    max_translation_cm: float | None = None
    max_rotation_deg: float | None = None
    #: plan duration: at most ``duration_factor`` x the execution-time model's prediction of the
    #: dispatched calls, never less than ``duration_floor_s`` nor than the sum of the calls' worst
    #: cases (``ExecutionTimeModel.worst_case_calls``: a drive's longest profiled route)
    duration_factor: float = 3.0
    duration_floor_s: float = 60.0
    #: drones: the box the robot must stay in, cm relative to the take-off point (x forward, y
    #: right, z up at take-off): (x_min, x_max, y_min, y_max, z_min, z_max)
    fence_cm: tuple[float, float, float, float, float, float] | None = None
    #: bases: the polygon the robot must stay in, metres in the ``map`` frame, [[x, y], ...] (at
    #: least 3 corners): every planned path is checked against it before the base moves, and the
    #: measured pose while it moves
    fence_map_m: tuple[tuple[float, float], ...] | None = None
    #: bases: the fastest the measured speed may be (m/s); faster, the base is stopped
    max_speed_mps: float | None = None

    def __post_init__(self) -> None:
        if self.max_calls < 1:
            raise ValueError(f"budget max_calls must be >= 1, got {self.max_calls}")
        for name in ("max_translation_cm", "max_rotation_deg"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"budget {name} must be > 0, got {v}")
        if self.duration_factor <= 0 or self.duration_floor_s <= 0:
            raise ValueError("budget duration_factor and duration_floor_s must be > 0")
        if self.fence_cm is not None:
            f = self.fence_cm
            if len(f) != 6 or not (f[0] < f[1] and f[2] < f[3] and f[4] < f[5]):
                raise ValueError(f"budget fence_cm must be [x_min, x_max, y_min, y_max, z_min, z_max] "
                                 f"with each min < max, got {list(f)}")
        if self.fence_map_m is not None:
            pts = self.fence_map_m
            if len(pts) < 3 or any(len(p) != 2 for p in pts) or polygon_area(pts) == 0.0:
                raise ValueError(f"budget fence_map_m must be a polygon of at least 3 corners [[x, y], ...] "
                                 f"(metres, map frame) enclosing an area, got {[list(p) for p in pts]}")
        if self.max_speed_mps is not None and self.max_speed_mps <= 0:
            raise ValueError(f"budget max_speed_mps must be > 0, got {self.max_speed_mps}")

    def merged(self, overrides: Mapping[str, Any] | None) -> "Budget":
        """This budget with some fields replaced (unknown names raise ValueError)."""
        kw = dict(overrides or {})
        if kw.get("fence_cm") is not None:  # a YAML list; the dataclass holds a tuple
            kw["fence_cm"] = tuple(float(v) for v in kw["fence_cm"])
        if kw.get("fence_map_m") is not None:  # a YAML list of [x, y]
            try:
                kw["fence_map_m"] = tuple((float(x), float(y)) for x, y in kw["fence_map_m"])
            except (TypeError, ValueError):
                raise ValueError(f"budget fence_map_m must be a list of [x, y] corners in metres, "
                                 f"got {kw['fence_map_m']!r}") from None
        return with_overrides(self, kw, "budget setting", "settings")

    def duration_limit_s(self, predicted_s: float, worst_s: float = 0.0) -> float:
        """The plan's duration budget for a predicted execution time and the sum of its calls'
        worst cases (seconds)."""
        return max(self.duration_floor_s, self.duration_factor * predicted_s, worst_s)


#: Defaults per robot kind: a drone flies at most 50 skills, 30 m and 5 full turns per goal; an
#: arm runs at most 30 skills; a base drives at most 30 skills, 100 m and 5 full turns, at most 1 m/s
#: (its map fence, ``fence_map_m``, is per robot in the YAML). A drone's geofence is set per robot in the YAML (``fence_cm``):
#: where its take-off point is, only its operator knows.
DEFAULT_BUDGETS: dict[str, Budget] = {
    "drone": Budget(max_calls=50, max_translation_cm=3000.0, max_rotation_deg=1800.0),
    "sim": Budget(max_calls=50, max_translation_cm=3000.0, max_rotation_deg=1800.0),
    "arm": Budget(max_calls=30),
    "base": Budget(max_calls=30, max_translation_cm=10000.0, max_rotation_deg=1800.0, max_speed_mps=1.0),
    "chat": Budget(max_calls=20),
}


def budget_for(kind: str) -> Budget:
    return DEFAULT_BUDGETS.get(kind, Budget())


@dataclass(frozen=True)
class Cost:
    """What a plan (part) may make a robot do: calls, translation (cm) and rotation (degrees)."""

    calls: float = 0
    translation_cm: float = 0.0
    rotation_deg: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.calls + other.calls, self.translation_cm + other.translation_cm,
                    self.rotation_deg + other.rotation_deg)

    def __mul__(self, k: float) -> "Cost":
        return Cost(self.calls * k, self.translation_cm * k, self.rotation_deg * k)

    def most(self, other: "Cost") -> "Cost":
        """The componentwise maximum (the worst of two branches)."""
        return Cost(max(self.calls, other.calls), max(self.translation_cm, other.translation_cm),
                    max(self.rotation_deg, other.rotation_deg))


def call_cost(call: SkillCall, skill_set: SkillSet | None = None) -> Cost:
    """One call's cost (moves and turns with literal arguments; a variable argument counts as
    the call's largest safe value is the caller's job: see ``segmenters.plan_cost``). A skill of
    ``skill_set`` that declares its motion (``SkillSpec.motion``) costs what it declares."""
    spec = skill_set.spec(call.name) if skill_set is not None and call.name in skill_set else None
    if spec is not None and spec.motion:
        moved = {"translation_cm": 0.0, "rotation_deg": 0.0}
        for quantity, index, scale in spec.motion:
            if index < len(call.args):
                moved[quantity] += abs(float(call.args[index])) * scale
        return Cost(1, moved["translation_cm"], moved["rotation_deg"])
    if call.name in _MOVES:
        return Cost(1, abs(float(call.args[0])), 0.0)
    if call.name in _TURNS:
        return Cost(1, 0.0, abs(float(call.args[0])))
    if call.name == "approach":
        return Cost(1, APPROACH_CM, 0.0)
    return Cost(1)


def exceeded(budget: Budget, total: Cost) -> str | None:
    """Why ``total`` exceeds ``budget`` (``"360000 skills > 50"``), or None."""
    if total.calls > budget.max_calls:
        return f"{_num(total.calls)} skills > {budget.max_calls}"
    if budget.max_translation_cm is not None and total.translation_cm > budget.max_translation_cm:
        return f"{_num(total.translation_cm)} cm of flight > {_num(budget.max_translation_cm)} cm"
    if budget.max_rotation_deg is not None and total.rotation_deg > budget.max_rotation_deg:
        return f"{_num(total.rotation_deg)} degrees of turns > {_num(budget.max_rotation_deg)} degrees"
    return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


class StaticBudget:
    """The planner's check: the worst case of every dispatched segment, added up per goal."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.total = Cost()

    def add(self, cost: Cost) -> str | None:
        """Add a segment's worst case; the reason the goal now exceeds its budget, or None (then
        the segment may be dispatched)."""
        total = self.total + cost
        why = exceeded(self.budget, total)
        if why is None:
            self.total = total
        return why


class BudgetMeter:
    """The adapter's count of what one goal's plan actually made the robot do, and its position
    relative to the take-off point (drones: from the moves it executed), for the fence."""

    def __init__(self, budget: Budget, *, fence: bool = False, t0: float = 0.0,
                 skill_set: SkillSet | None = None) -> None:
        self.budget = budget
        self.skill_set = skill_set  # whose declared motions a call costs (call_cost)
        self.fence = fence and budget.fence_cm is not None
        self.used = Cost()
        self.t0 = t0
        self.predicted_s = 0.0  # the execution-time model's prediction of the calls dispatched so far
        self.worst_s = 0.0  # ... and the sum of their worst cases

    def admit(self, call: SkillCall, pose: Sequence[float] | None) -> None:
        """Charge a call about to start; raise :class:`BudgetExceeded` (nothing charged) if it
        would exceed the budget or, for a move, leave the fence. ``pose``: the robot's position
        and yaw relative to its take-off point (x, y, z cm, yaw degrees), None if unknown."""
        total = self.used + call_cost(call, self.skill_set)
        why = exceeded(self.budget, total)
        if why is not None:
            raise BudgetExceeded(f"exceeds budget: {why}")
        if self.fence and pose is not None:
            after = pose_after(pose, call)
            if after is not None and not inside(self.budget.fence_cm, after):  # type: ignore[arg-type]
                raise BudgetExceeded(f"outside the geofence: {call} would reach x={after[0]:.0f} y={after[1]:.0f} "
                                     f"z={after[2]:.0f} cm, the fence is {list(self.budget.fence_cm)}")  # type: ignore[arg-type]
        self.used = total

    def route_problem(self, route_m: Sequence[Sequence[float]]) -> str | None:
        """A base's planned route (map frame, metres: its start, the path's poses, the goal): why
        it must not be driven (it leaves the map fence, or its length would take the goal past
        its distance budget), else None; the route's length is then charged."""
        fence = self.budget.fence_map_m
        if fence is not None:
            out = path_outside(fence, route_m)
            if out is not None:
                return (f"outside the geofence: the route passes x={out[0]:.2f} y={out[1]:.2f} m (map), "
                        f"the fence is {[list(p) for p in fence]}")
        cm = path_length(route_m) * 100.0
        total = self.used + Cost(0, cm, 0.0)
        why = exceeded(self.budget, total)
        if why is not None:
            return f"exceeds budget: the route is {cm / 100:.1f} m; {why}"
        self.used = total
        return None

    def expect(self, seconds: float) -> None:
        """Add to the plan's predicted time what a call is expected to take once that is known as
        it starts (a base's drive: its route's length at the base's nominal speed), so the
        duration budget covers a long drive the execution-time model could not foresee."""
        self.predicted_s += max(0.0, float(seconds))

    def watch(self, x_m: float, y_m: float, speed_mps: float) -> str | None:
        """A base's measured pose (map frame) and speed while it moves: why it must stop (outside
        the map fence, faster than the speed limit), else None."""
        fence, vmax = self.budget.fence_map_m, self.budget.max_speed_mps
        if fence is not None and not in_polygon(fence, x_m, y_m):
            return f"left the geofence at x={x_m:.2f} y={y_m:.2f} m (map)"
        if vmax is not None and speed_mps > vmax:
            return f"exceeds the speed limit: {speed_mps:.2f} m/s > {vmax:g} m/s"
        return None

    def over_time(self, now: float) -> str | None:
        """Why the plan has run longer than its duration budget, or None."""
        limit = self.budget.duration_limit_s(self.predicted_s, self.worst_s)
        if now - self.t0 > limit:
            return f"exceeds budget: plan running {now - self.t0:.1f} s > {limit:.1f} s"
        return None


def pose_after(pose: Sequence[float], call: SkillCall) -> tuple[float, float, float, float] | None:
    """Where a drone is after a move/turn/takeoff/land from ``pose`` (x, y, z cm, yaw degrees);
    None for a call whose displacement is not known beforehand (goto, approach)."""
    x, y, z, yaw = (float(v) for v in pose)
    if call.name in _MOVES:
        fwd, right, up = _MOVES[call.name]
        d = float(call.args[0])
        rad = math.radians(yaw)
        return (x + d * (fwd * math.cos(rad) - right * math.sin(rad)),
                y + d * (fwd * math.sin(rad) + right * math.cos(rad)), z + d * up, yaw)
    if call.name in _TURNS:
        return (x, y, z, (yaw + _TURNS[call.name] * float(call.args[0])) % 360.0)
    if call.name == "takeoff":
        return (x, y, max(z, TAKEOFF_HEIGHT_CM), yaw)
    if call.name == "land":
        return (x, y, 0.0, yaw)
    if call.name in ("goto", "approach"):
        return None
    return (x, y, z, yaw)


def inside(fence: Sequence[float], p: Sequence[float]) -> bool:
    return fence[0] <= p[0] <= fence[1] and fence[2] <= p[1] <= fence[3] and fence[4] <= p[2] <= fence[5]


def polygon_area(pts: Sequence[Sequence[float]]) -> float:
    """The polygon's area (shoelace formula; m^2 for a map fence)."""
    n = len(pts)
    return abs(sum(pts[i][0] * pts[(i + 1) % n][1] - pts[(i + 1) % n][0] * pts[i][1] for i in range(n))) / 2.0


def in_polygon(pts: Sequence[Sequence[float]], x: float, y: float) -> bool:
    """Whether (x, y) is inside the polygon or on its edge (ray casting)."""
    inside_, n = False, len(pts)
    for i in range(n):
        (x1, y1), (x2, y2) = pts[i], pts[(i + 1) % n]
        if min(x1, x2) - 1e-9 <= x <= max(x1, x2) + 1e-9 and min(y1, y2) - 1e-9 <= y <= max(y1, y2) + 1e-9:
            cross = (x2 - x1) * (y - y1) - (y2 - y1) * (x - x1)
            if abs(cross) <= 1e-9 * max(1.0, math.hypot(x2 - x1, y2 - y1)):
                return True  # on the edge
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            inside_ = not inside_
    return inside_


def path_outside(fence: Sequence[Sequence[float]], path: Sequence[Sequence[float]], step_m: float = 0.05) -> tuple[float, float] | None:
    """The first point of ``path`` (map frame, metres; consecutive points joined by straight
    lines, sampled every ``step_m``) outside the fence polygon, or None: the route stays in."""
    for k, p in enumerate(path):
        if k == 0:
            pts = [p]
        else:
            q = path[k - 1]
            n = max(1, int(math.ceil(math.hypot(p[0] - q[0], p[1] - q[1]) / step_m)))
            pts = [(q[0] + (p[0] - q[0]) * j / n, q[1] + (p[1] - q[1]) * j / n) for j in range(1, n + 1)]
        for x, y in pts:
            if not in_polygon(fence, float(x), float(y)):
                return (float(x), float(y))
    return None


def path_length(path: Sequence[Sequence[float]]) -> float:
    """The length of a polyline (metres for a map path)."""
    return sum(math.hypot(path[k][0] - path[k - 1][0], path[k][1] - path[k - 1][1]) for k in range(1, len(path)))
