"""Execution-time model of robot skills (TimelyLLM 4.3 and 5.2 "Execution time model").

What it does
------------
* ``predict(robot_id, robot_kind, calls)``: seconds a robot needs to execute a segment. Simple
  skills use the *mean* time for their parameter (distance, angle, word count); scene-dependent
  skills (``scan``, ``goto``, ``pick`` ...) use the *minimum* plausible time, so the scheduler
  resumes the next segment early enough even in the best case for the robot (paper 4.3).
* ``sample(robot_id, robot_kind, calls, rng)``: a realistic duration for simulated robots: mean
  times with log-normal noise; scene-dependent skills drawn from their profiled table
  ("search-like skills sampled from profiled data").
* ``observe(robot_id, robot_kind, call, duration_s)``: online update from the measured per-skill
  durations that adapters report on ``/robot_status``.

Model of one skill
------------------
``duration = base_s + per_unit_s * x`` where ``x`` is the skill's driving parameter (cm, degrees,
mm, words, seconds) or 0. ``base_s`` holds the command round trip, acceleration and settling;
``per_unit_s`` is 1/speed. Scene-dependent skills instead carry a profiled table of durations
(one row per scene situation, e.g. the number of 30-degree turns a scan needs) and their minimum.

Online update (per robot and skill)
-----------------------------------
A two-parameter Kalman filter (recursive least squares with a random-walk drift) on
``theta = (base_s, per_unit_s)`` starts at the profiled values. It is made robust and fast to
re-converge after a speed change:

* *outliers*: an innovation beyond ``OUTLIER_Z`` standard deviations is clipped (Huber-style), so
  one spurious duration (a retried command, a stalled status message) moves the estimate only by
  a bounded amount;
* *change detection*: ``CHANGE_RUN`` consecutive outliers on the same side mean the robot really
  changed (speed setting, battery, payload): the covariance is reset to the prior's and the
  buffered recent observations are replayed unclipped, so the model re-converges within a few
  executions instead of tens.

Skills a robot has not executed yet use the profile times multiplied by that robot's robust
overall speed ratio (median of its recent observed/predicted log-ratios), so a robot that became
slower is predicted slower for all its skills at once. Scene-dependent skills keep a window of
observations; with enough of them the prediction is a low quantile (``SCENE_QUANTILE``) of the
window (a robust minimum).

Sources of the default profiles (documented assumptions; replace with measured tables)
-----------------------------------------------------------------------------------------
* Tello (Ryze Tech Tello, SDK 2.0 User Guide): moves take 20-500 cm, rotations 1-360 degrees; the
  ``speed x`` command sets 10-100 cm/s. The paper's profiled tables are not published, so the
  defaults here are an assumed profile consistent with those limits: 60 cm/s effective linear
  speed plus 1.2 s for acceleration, braking and the ``ok`` round trip; 90 deg/s yaw plus 0.8 s;
  takeoff 5 s and land 4 s (the SDK answers ``ok`` once hovering / on the ground). TypeFly's
  ``scan`` turns in 30-degree steps until the object is visible (0-11 turns; uniform over the
  object's bearing); ``orienting`` turns up to 180 degrees; ``approach`` flies ~100 cm.
* Indy7-class arm (Neuromeka Indy7 datasheet: 6 axes, reach 800 mm, 7 kg payload, joint speed
  limits 150-180 deg/s, TCP up to ~1 m/s): programs run at collaborative speed, assumed
  250 mm/s task-space speed plus 0.6 s per motion for acceleration/settling; gripper actuation
  0.7 s; ``pick``/``place`` = approach motion (scene-dependent distance 100-600 mm) + descend,
  grip, lift.
* Chat: 300 words per minute reading speed (TimelyLLM 5.5).

Only stdlib + numpy (``core`` rule). Thread-safe (adapters report from ROS callbacks while the
scheduler predicts).
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS, SkillCall, SkillError, SkillSet

class ExecutionTimeEstimator(Protocol):
    """Predicts how long a robot takes to execute a segment (TimelyLLM 4.3, execution-time model).

    ``predict`` is what the scheduler uses for W(s_k; t), k > 0: for scene-dependent skills it
    returns the *minimum* plausible time, so a resumed generation is never late. ``sample``
    draws a realistic duration for simulated robots. ``observe`` feeds measured durations
    reported on ``/robot_status`` back into the model (online update).
    """

    def predict(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall]) -> float: ...

    def sample(
        self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], rng: np.random.Generator
    ) -> float: ...

    def observe(self, robot_id: str, robot_kind: str, call: SkillCall, duration_s: float) -> None: ...


__all__ = [
    "ExecutionTimeEstimator",
    "SkillProfile",
    "ExecutionTimeModel",
    "default_profiles",
    "scaled_profiles",
    "TimeScaledEstimator",
    "TELLO_SPEED_CM_S",
    "TELLO_YAW_DEG_S",
    "ARM_TCP_SPEED_MM_S",
    "ARM_HOME_POSE",
]

# --------------------------------------------------------------------------- default constants
TELLO_SPEED_CM_S = 60.0  # effective linear speed (SDK range 10-100 cm/s)
TELLO_MOVE_BASE_S = 1.2  # acceleration + braking + "ok" round trip
TELLO_YAW_DEG_S = 90.0
TELLO_TURN_BASE_S = 0.8
TELLO_TAKEOFF_S = 5.0
TELLO_LAND_S = 4.0
TELLO_DETECT_S = 0.3  # one detection pass on a fresh frame (scan step check)
SCAN_STEP_DEG = 30

ARM_TCP_SPEED_MM_S = 250.0
ARM_MOVE_BASE_S = 0.6
ARM_GRIPPER_S = 0.7
ARM_HOME_POSE = (350.0, 0.0, 400.0)  # mm, tool position of the home joint configuration
ARM_LIFT_MM = 100.0  # descend / lift height of pick and place

CHAT_WORDS_PER_S = 300.0 / 60.0


@dataclass(frozen=True)
class SkillProfile:
    """Profiled execution time of one skill.

    ``param`` selects what drives the duration: ``None`` (constant), an argument index (numeric
    value), ``"words"`` (word count of argument 0), or ``"arm_distance"`` (tool travel in mm from
    the arm's previous pose, computed by the model while walking the segment).
    ``scene`` (if set) is a profiled table of durations for scene-dependent skills: ``predict``
    uses its minimum, ``sample`` draws from it.
    """

    skill: str
    base_s: float
    per_unit_s: float = 0.0
    param: int | str | None = None
    unit: str = ""
    noise_cv: float = 0.05
    scene: tuple[float, ...] | None = None
    source: str = ""

    @property
    def scene_dependent(self) -> bool:
        return self.scene is not None

    def mean(self, x: float) -> float:
        if self.scene is not None:
            return float(np.mean(self.scene))
        return max(0.0, self.base_s + self.per_unit_s * x)

    def minimum(self, x: float) -> float:
        if self.scene is not None:
            return float(min(self.scene))
        return self.mean(x)


def _move(skill: str, src: str = "assumed 60 cm/s + 1.2 s (Tello SDK 2.0 range 10-100 cm/s)") -> SkillProfile:
    return SkillProfile(skill, TELLO_MOVE_BASE_S, 1.0 / TELLO_SPEED_CM_S, 0, "cm", 0.05, source=src)


def _turn(skill: str) -> SkillProfile:
    return SkillProfile(skill, TELLO_TURN_BASE_S, 1.0 / TELLO_YAW_DEG_S, 0, "deg", 0.05,
                        source="assumed 90 deg/s + 0.8 s (Tello SDK 2.0: 1-360 deg)")


def _tello_turn_s(deg: float) -> float:
    return TELLO_TURN_BASE_S + deg / TELLO_YAW_DEG_S


def _tello_profiles() -> dict[str, SkillProfile]:
    # scan: k = 0..11 turns of 30 degrees, each followed by a detection pass.
    scan = tuple(TELLO_DETECT_S + k * (_tello_turn_s(SCAN_STEP_DEG) + TELLO_DETECT_S) for k in range(12))
    # orienting: turn towards an object somewhere within +-180 degrees (15-degree bins).
    orient = tuple(TELLO_DETECT_S + (0.0 if b == 0 else _tello_turn_s(b)) for b in range(0, 181, 15))
    approach = TELLO_MOVE_BASE_S + 100.0 / TELLO_SPEED_CM_S
    probe = (1.0, 1.2, 1.5, 1.8, 2.2, 2.8, 3.5)  # VLM query latency table
    p = {
        "takeoff": SkillProfile("takeoff", TELLO_TAKEOFF_S, noise_cv=0.08,
                                source="assumed: SDK answers ok once hovering (~5 s)"),
        "land": SkillProfile("land", TELLO_LAND_S, noise_cv=0.08, source="assumed ~4 s"),
        "move_forward": _move("move_forward"),
        "move_backward": _move("move_backward"),
        "move_left": _move("move_left"),
        "move_right": _move("move_right"),
        "move_up": _move("move_up"),
        "move_down": _move("move_down"),
        "turn_cw": _turn("turn_cw"),
        "turn_ccw": _turn("turn_ccw"),
        "delay": SkillProfile("delay", 0.0, 0.001, 0, "ms", 0.01, source="exact"),
        "scan": SkillProfile("scan", 0.0, scene=scan, noise_cv=0.05,
                             source="TypeFly scan: 30-degree turns until visible, 0-11 turns"),
        "scan_abstract": SkillProfile("scan_abstract", 0.0, scene=tuple(s + 1.0 for s in scan),
                                      source="scan + one VLM query (min 1 s)"),
        "orienting": SkillProfile("orienting", 0.0, scene=orient,
                                  source="turn towards object within +-180 deg"),
        "approach": SkillProfile("approach", approach, noise_cv=0.05, source="forward ~100 cm"),
        "goto": SkillProfile("goto", 0.0, scene=tuple(o + approach for o in orient),
                             source="orienting + approach"),
        "is_visible": SkillProfile("is_visible", 0.05, noise_cv=0.2, source="reads latest detections"),
        "object_x": SkillProfile("object_x", 0.05, noise_cv=0.2),
        "object_y": SkillProfile("object_y", 0.05, noise_cv=0.2),
        "object_width": SkillProfile("object_width", 0.05, noise_cv=0.2),
        "object_height": SkillProfile("object_height", 0.05, noise_cv=0.2),
        "object_dis": SkillProfile("object_dis", 0.05, noise_cv=0.2),
        "probe": SkillProfile("probe", 0.0, scene=probe, source="VLM query latency table"),
        "take_picture": SkillProfile("take_picture", 0.5, noise_cv=0.1),
        "log": SkillProfile("log", 0.0, noise_cv=0.0),
        "re_plan": SkillProfile("re_plan", 0.0, noise_cv=0.0),
    }
    return p


def _arm_move_s(dist_mm: float) -> float:
    return ARM_MOVE_BASE_S + dist_mm / ARM_TCP_SPEED_MM_S


def _arm_profiles() -> dict[str, SkillProfile]:
    lift = 2 * _arm_move_s(ARM_LIFT_MM)  # descend + lift
    # pick/place: approach motion over 100..600 mm (object position unknown to the planner).
    approach = tuple(_arm_move_s(d) for d in range(100, 601, 50))
    pick = tuple(a + lift + ARM_GRIPPER_S for a in approach)
    place = tuple(a + lift + ARM_GRIPPER_S for a in approach)
    wipe = tuple(4.0 + 2.0 * k for k in range(6))  # 4-14 s depending on the area
    src = "assumed 250 mm/s TCP + 0.6 s (Indy7: joints 150-180 deg/s, TCP <= ~1 m/s)"
    return {
        "home": SkillProfile("home", ARM_MOVE_BASE_S, 1.0 / ARM_TCP_SPEED_MM_S, "arm_distance", "mm",
                             0.04, source=src),
        "move_to": SkillProfile("move_to", ARM_MOVE_BASE_S, 1.0 / ARM_TCP_SPEED_MM_S, "arm_distance",
                                "mm", 0.04, source=src),
        "pick": SkillProfile("pick", 0.0, scene=pick, source="approach 100-600 mm + descend/grip/lift"),
        "place": SkillProfile("place", 0.0, scene=place, source="approach 100-600 mm + descend/release/lift"),
        "push": SkillProfile("push", ARM_MOVE_BASE_S + 1.0, 1.0 / 100.0, 1, "mm", 0.05,
                             source="push at 100 mm/s + 1.6 s approach/retract"),
        "open_gripper": SkillProfile("open_gripper", ARM_GRIPPER_S, noise_cv=0.05),
        "close_gripper": SkillProfile("close_gripper", ARM_GRIPPER_S, noise_cv=0.05),
        "wipe": SkillProfile("wipe", 0.0, scene=wipe, source="area-dependent 4-14 s"),
        "look": SkillProfile("look", 0.4, noise_cv=0.15, source="camera capture + detection"),
        "wait": SkillProfile("wait", 0.0, 1.0, 0, "s", 0.01, source="exact"),
    }


#: A Nav2 base's priors (learned online from its measured durations): driving at 0.5 m/s and
#: turning at 1 rad/s, as the Nav2 simulator's defaults and a small indoor base's.
BASE_SPEED_M_S = 0.5
BASE_TURN_DEG_S = 57.3
BASE_START_S = 0.5  # a behaviour's or a navigation's start (goal accepted, path planned)


def _base_profiles() -> dict[str, SkillProfile]:
    drive = tuple(BASE_START_S + 1.0 + d / BASE_SPEED_M_S for d in (2, 4, 6, 8, 10, 14, 18, 24))
    turn = 1.0 / BASE_TURN_DEG_S
    scan = tuple(0.3 + k * (45 * turn + 0.3) for k in range(9))  # 45-degree steps, 0-8 of them
    src = f"assumed {BASE_SPEED_M_S} m/s, {BASE_TURN_DEG_S:.0f} deg/s (the Nav2 simulator's defaults)"
    return {
        "go_to": SkillProfile("go_to", 0.0, scene=drive, source=f"route of 2-24 m at {BASE_SPEED_M_S} m/s"),
        "go_to_pose": SkillProfile("go_to_pose", 0.0, scene=drive, source=f"route of 2-24 m at {BASE_SPEED_M_S} m/s"),
        "move_forward": SkillProfile("move_forward", BASE_START_S, 0.01 / 0.25, 0, "cm", 0.05,
                                     source="DriveOnHeading at 0.25 m/s"),
        "move_backward": SkillProfile("move_backward", BASE_START_S, 0.01 / 0.25, 0, "cm", 0.05,
                                      source="BackUp at 0.25 m/s"),
        "turn_cw": SkillProfile("turn_cw", BASE_START_S, turn, 0, "degrees", 0.05, source=src),
        "turn_ccw": SkillProfile("turn_ccw", BASE_START_S, turn, 0, "degrees", 0.05, source=src),
        "stop": SkillProfile("stop", 0.2, noise_cv=0.1, source="cancel + zero velocity"),
        "scan": SkillProfile("scan", 0.0, scene=scan, source="45-degree Spin steps until seen, 0-8 of them"),
        "is_visible": SkillProfile("is_visible", 0.05, noise_cv=0.2, source="reads latest detections"),
        "delay": SkillProfile("delay", 0.0, 0.001, 0, "ms", 0.01, source="exact"),
        "log": SkillProfile("log", 0.0, noise_cv=0.0),
        "re_plan": SkillProfile("re_plan", 0.0, noise_cv=0.0),
    }


def _chat_profiles() -> dict[str, SkillProfile]:
    return {"say": SkillProfile("say", 0.0, 1.0 / CHAT_WORDS_PER_S, "words", "words", 0.15,
                                source="300 words/min (TimelyLLM 5.5)")}


def default_profiles() -> dict[str, dict[str, SkillProfile]]:
    """Profiles per robot kind ("sim" robots fly MiniSpec with the drone's profile)."""
    drone = _tello_profiles()
    return {"drone": drone, "sim": dict(drone), "arm": _arm_profiles(), "base": _base_profiles(),
            "chat": _chat_profiles()}


def scaled_profiles(
    profiles: Mapping[str, Mapping[str, SkillProfile]], speed_factor: float
) -> dict[str, dict[str, SkillProfile]]:
    """Profiles of a robot whose motions run ``speed_factor`` times as fast (0.5 = half speed):
    per-unit times and scene tables are divided by it (used for ground truth in benchmarks)."""
    out: dict[str, dict[str, SkillProfile]] = {}
    for kind, table in profiles.items():
        out[kind] = {}
        for name, p in table.items():
            if p.unit in ("ms", "s", "words"):  # waits and reading do not depend on robot speed
                out[kind][name] = p
            elif p.scene is not None:
                out[kind][name] = replace(p, scene=tuple(v / speed_factor for v in p.scene))
            else:
                out[kind][name] = replace(p, per_unit_s=p.per_unit_s / speed_factor)
    return out


# ------------------------------------------------------------------------------ online estimators
OUTLIER_Z = 3.0
CHANGE_RUN = 3
SCENE_WINDOW = 64
SCENE_MIN_OBS = 8
SCENE_QUANTILE = 0.05
ROBOT_RATIO_WINDOW = 16


@dataclass
class _LinearEstimator:
    """Robust Kalman filter on theta = (base_s, per_unit_s) for one (robot, skill)."""

    prior: np.ndarray
    prior_cov: np.ndarray
    noise_cv: float
    theta: np.ndarray = field(init=False)
    cov: np.ndarray = field(init=False)
    n: int = 0
    outlier_run: int = 0
    outlier_sign: int = 0
    changes: int = 0
    changes_at_update_start: int = 0
    unit_free: bool = False  # waits / reading: independent of the robot's speed
    recent: deque = field(default_factory=lambda: deque(maxlen=CHANGE_RUN))

    def __post_init__(self) -> None:
        self.theta = self.prior.astype(float).copy()
        self.cov = self.prior_cov.astype(float).copy()

    def predict(self, x: float) -> float:
        return max(0.0, float(self.theta[0] + self.theta[1] * x))

    def _r(self, y_hat: float) -> float:
        return (max(self.noise_cv, 0.02) * max(y_hat, 0.1)) ** 2 + 0.03**2

    def _step(self, x: float, y: float, robust: bool) -> bool:
        """One filter update; returns True when the observation was an outlier."""
        phi = np.array([1.0, x])
        # random-walk drift: lets the filter follow slow changes
        q = np.diag((0.01 * np.abs(self.theta) + np.array([1e-3, 1e-6])) ** 2)
        cov = self.cov + q
        y_hat = float(phi @ self.theta)
        s = float(phi @ cov @ phi) + self._r(max(y_hat, 0.0))
        e = y - y_hat
        bound = OUTLIER_Z * math.sqrt(s)
        outlier = abs(e) > bound
        if robust and outlier:
            e = math.copysign(bound, e)
        k = cov @ phi / s
        self.theta = self.theta + k * e
        self.cov = cov - np.outer(k, phi @ cov)
        self.cov = 0.5 * (self.cov + self.cov.T)
        return outlier

    def update(self, x: float, y: float) -> int:
        """Returns +1/-1 when the observation was an outlier above/below the prediction, else 0."""
        self.n += 1
        self.recent.append((x, y))
        before = self.predict(x)
        outlier = self._step(x, y, robust=True)
        sign = 0
        if outlier:
            sign = 1 if y > before else -1
            self.outlier_run = self.outlier_run + 1 if sign == self.outlier_sign else 1
            self.outlier_sign = sign
        else:
            self.outlier_run, self.outlier_sign = 0, 0
        if self.outlier_run >= CHANGE_RUN:
            # the robot changed: forget the old estimate, re-fit on the recent run
            self.changes += 1
            self.cov = self.prior_cov * 4.0
            for xr, yr in self.recent:
                self._step(xr, yr, robust=False)
            self.outlier_run, self.outlier_sign = 0, 0
        return sign

    def rebase(self, theta: np.ndarray) -> None:
        """Robot-level change: restart from ``theta`` with an uncertain covariance."""
        self.theta = theta.astype(float).copy()
        self.cov = self.prior_cov.copy()
        self.outlier_run, self.outlier_sign = 0, 0
        self.recent.clear()
        self.changes += 1


@dataclass
class _SceneEstimator:
    """Window of observed durations of a scene-dependent skill for one robot; its prediction is
    the window's ``SCENE_QUANTILE`` quantile, computed once per observation (it is read at every
    estimate: np.quantile's set-up cost was a quarter of the simulated robots' thread in a
    64-goal burst)."""

    window: deque = field(default_factory=lambda: deque(maxlen=SCENE_WINDOW))
    _minimum: float | None = None

    def add(self, d: float) -> None:
        self.window.append(d)
        self._minimum = None

    def minimum(self) -> float | None:
        if len(self.window) < SCENE_MIN_OBS:
            return None
        if self._minimum is None:
            self._minimum = _quantile(sorted(self.window), SCENE_QUANTILE)
        return self._minimum


def _quantile(xs: list[float], q: float) -> float:
    """``np.quantile(xs, q)`` (method ``linear``) of sorted ``xs``, with numpy's interpolation."""
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    a, b = xs[lo], xs[min(lo + 1, len(xs) - 1)]
    t = h - lo
    return float(b - (b - a) * (1 - t)) if t >= 0.5 else float(a + (b - a) * t)


class TimeScaledEstimator:
    """An :class:`ExecutionTimeEstimator` for robots whose time runs ``time_scale``
    times as fast as real time (simulated robots under ``timely-fleet up --time-scale``): the
    inner model stays in real seconds, predictions and samples are multiplied by ``time_scale``
    and observed durations divided by it, as the simulated adapters do with their own model.
    Without it the planner predicts a robot action 50x too long at ``--time-scale 0.02`` and
    resumes each segment's generation too late for its robot."""

    def __init__(self, inner: ExecutionTimeEstimator, time_scale: float) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.inner, self.time_scale = inner, float(time_scale)

    def predict(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall]) -> float:
        return self.inner.predict(robot_id, robot_kind, calls) * self.time_scale

    def sample(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], rng: np.random.Generator) -> float:
        return self.inner.sample(robot_id, robot_kind, calls, rng) * self.time_scale

    def observe(self, robot_id: str, robot_kind: str, call: SkillCall, duration_s: float) -> None:
        self.inner.observe(robot_id, robot_kind, call, duration_s / self.time_scale)


# --------------------------------------------------------------------------------------- model
class ExecutionTimeModel:
    """Execution-time model implementing :class:`ExecutionTimeEstimator`.

    ``ExecutionTimeModel()`` uses :func:`default_profiles`. ``profiles`` maps robot kind ->
    skill name -> :class:`SkillProfile`; ``skill_sets`` maps robot kind -> SkillSet used to
    resolve MiniSpec aliases (``mf`` -> ``move_forward``). ``unknown_skill_s`` is the time assumed
    for a skill without profile (never raises inside the scheduler). ``online=False`` freezes the
    model (observations are counted but ignored).
    """

    def __init__(
        self,
        profiles: Mapping[str, Mapping[str, SkillProfile]] | None = None,
        skill_sets: Mapping[str, SkillSet] | None = None,
        *,
        unknown_skill_s: float = 1.0,
        online: bool = True,
    ) -> None:
        self.profiles: dict[str, dict[str, SkillProfile]] = {
            k: dict(v) for k, v in (profiles or default_profiles()).items()
        }
        if skill_sets is None:
            skill_sets = {k: DEFAULT_SKILL_SETS[s] for k, s in DEFAULT_SKILL_SET_FOR_KIND.items()}
        self.skill_sets = dict(skill_sets)
        self.unknown_skill_s = float(unknown_skill_s)
        self.online = online
        self._lock = threading.RLock()
        self._linear: dict[tuple[str, str], _LinearEstimator] = {}
        self._scene: dict[tuple[str, str], _SceneEstimator] = {}
        self._robot_ratio: dict[str, deque] = {}
        self._arm_pose: dict[str, tuple[float, float, float]] = {}
        self._speed: dict[str, float] = {}
        self._robot_run: dict[str, deque] = {}
        self.robot_changes: dict[str, int] = {}
        self.observations = 0
        self.rejected_observations = 0

    # -------------------------------------------------------------------------------- helpers
    def _canonical(self, robot_kind: str, name: str) -> str:
        ss = self.skill_sets.get(robot_kind)
        if ss is not None and name in ss:
            return ss.spec(name).name
        return name

    def profile(self, robot_kind: str, skill: str) -> SkillProfile | None:
        table = self.profiles.get(robot_kind)
        if table is None:
            return None
        return table.get(self._canonical(robot_kind, skill))

    def _param(self, p: SkillProfile, call: SkillCall, pose: tuple[float, float, float]) -> tuple[float, tuple[float, float, float]]:
        """Driving parameter of a call and the arm pose after it."""
        if p.param is None:
            return 0.0, pose
        if p.param == "words":
            return float(len(str(call.args[0]).split())) if call.args else 0.0, pose
        if p.param == "arm_distance":
            if p.skill == "home":
                target = ARM_HOME_POSE
            else:
                try:
                    target = (float(call.args[0]), float(call.args[1]), float(call.args[2]))
                except (IndexError, TypeError, ValueError):
                    return 300.0, pose
            return math.dist(pose, target), target
        try:
            return abs(float(call.args[int(p.param)])), pose
        except (IndexError, TypeError, ValueError):
            return 0.0, pose

    def _walk(self, robot_id: str, robot_kind: str, calls: Iterable[SkillCall]):
        """Yield (call, profile or None, x) along the segment, tracking the arm pose."""
        pose = self._arm_pose.get(robot_id, ARM_HOME_POSE)
        for call in calls:
            p = self.profile(robot_kind, call.name)
            if p is None:
                yield call, None, 0.0
                continue
            x, pose = self._param(p, call, pose)
            yield call, p, x

    def _robot_scale(self, robot_id: str) -> float:
        r = self._robot_ratio.get(robot_id)
        if not r:
            return 1.0
        # the median of at most ROBOT_RATIO_WINDOW floats, in Python: called for every estimate
        # and observation (per robot status), where np.median's set-up cost ~20x more
        return float(math.exp(statistics.median(r)))

    def _estimate(self, robot_id: str, p: SkillProfile, x: float, *, minimum: bool) -> float:
        key = (robot_id, p.skill)
        if p.scene is not None:
            se = self._scene.get(key)
            m = se.minimum() if se is not None else None
            if m is not None:
                return m
            base = p.minimum(x) if minimum else p.mean(x)
            return base * self._robot_scale(robot_id)
        le = self._linear.get(key)
        if le is not None and le.n > 0:
            return le.predict(x)
        if p.per_unit_s == 0.0 and p.base_s == 0.0:
            return 0.0
        if p.unit in ("ms", "s", "words"):
            return p.mean(x)
        return p.mean(x) * self._robot_scale(robot_id)

    # ------------------------------------------------------------------------------ protocol
    def predict_calls(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall]) -> list[float]:
        """Per-call predicted seconds (minimum for scene-dependent skills)."""
        with self._lock:
            out = []
            for _call, p, x in self._walk(robot_id, robot_kind, calls):
                out.append(self.unknown_skill_s if p is None else self._estimate(robot_id, p, x, minimum=True))
            return out

    def predict(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall]) -> float:
        return float(sum(self.predict_calls(robot_id, robot_kind, calls)))

    def worst_case_calls(self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall],
                         k_sigma: float = 4.0) -> list[float]:
        """Per-call upper bound on the execution time, for time budgets (never the scheduler's
        optimistic estimate): the profiled *maximum* of a scene-dependent skill (a ``scan``
        that needs all 11 turns), else the larger of the profiled and the learned mean, times
        ``1 + k_sigma * cv`` and the robot's learned slowdown when it is slower than profiled.
        A skill without a profile gets ``unknown_skill_s``."""
        with self._lock:
            out = []
            slow = max(1.0, self._robot_scale(robot_id))
            for _call, p, x in self._walk(robot_id, robot_kind, calls):
                if p is None:
                    out.append(self.unknown_skill_s)
                    continue
                if p.scene is not None:
                    se = self._scene.get((robot_id, p.skill))
                    seen = max(se.window) if se is not None and se.window else 0.0
                    base = max(float(max(p.scene)) * slow, seen)
                else:
                    base = max(p.mean(x), self._estimate(robot_id, p, x, minimum=False))
                    if p.unit not in ("ms", "s", "words"):
                        base *= slow
                out.append(base * (1.0 + k_sigma * p.noise_cv))
            return out

    def sample(
        self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], rng: np.random.Generator
    ) -> float:
        return float(sum(self.sample_calls(robot_id, robot_kind, calls, rng)))

    def sample_calls(
        self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], rng: np.random.Generator
    ) -> list[float]:
        """Per-call simulated durations: mean x log-normal noise; scene tables sampled uniformly.

        A speed factor set with :meth:`set_speed_factor` slows or speeds up motions (simulated
        robot whose speed changed); otherwise the current (learned) mean is used.
        """
        with self._lock:
            out = []
            f = None
            for _call, p, x in self._walk(robot_id, robot_kind, calls):
                if p is None:
                    out.append(self.unknown_skill_s)
                    continue
                f = self._speed.get(robot_id)
                speed_free = p.unit in ("ms", "s", "words")
                if p.scene is not None:
                    v = float(p.scene[int(rng.integers(len(p.scene)))])
                    if f is not None and not speed_free:
                        v /= f
                elif f is not None:
                    v = p.base_s + (p.per_unit_s * x if speed_free else p.per_unit_s * x / f)
                else:
                    v = self._estimate(robot_id, p, x, minimum=False)
                cv = p.noise_cv
                if cv > 0 and v > 0:
                    v *= float(np.exp(rng.normal(-0.5 * cv * cv, cv)))
                out.append(max(0.0, v))
            return out

    def observe(self, robot_id: str, robot_kind: str, call: SkillCall, duration_s: float) -> None:
        """Online update with one measured skill duration (from ``/robot_status``)."""
        with self._lock:
            self.observations += 1
            p = self.profile(robot_kind, call.name)
            try:
                d = float(duration_s)
            except (TypeError, ValueError):
                d = float("nan")
            if p is None or not math.isfinite(d) or d < 0 or d > 3600:
                self.rejected_observations += 1
                return
            x, new_pose = self._param(p, call, self._arm_pose.get(robot_id, ARM_HOME_POSE))
            if p.param == "arm_distance":
                self._arm_pose[robot_id] = new_pose
            if not self.online:
                return
            key = (robot_id, p.skill)
            if p.scene is not None:
                nominal = p.mean(x)
                self._scene.setdefault(key, _SceneEstimator()).add(d)
            else:
                nominal = p.mean(x)
                le = self._linear.get(key)
                if le is None:
                    scale = self._robot_scale(robot_id) if p.unit not in ("ms", "s", "words") else 1.0
                    prior = np.array([p.base_s * scale, p.per_unit_s * scale])
                    prior_cov = np.diag([(0.5 * p.base_s + 0.2) ** 2, (0.5 * p.per_unit_s + 1e-4) ** 2])
                    le = self._linear[key] = _LinearEstimator(prior, prior_cov, p.noise_cv)
                    le.unit_free = p.unit in ("ms", "s", "words")
                theta_before = le.theta.copy()
                le.changes_at_update_start = le.changes
                sign = le.update(x, d)
                if not le.unit_free and nominal > 0.05:
                    self._robot_change_check(robot_id, le, sign, theta_before, x, d,
                                             math.log(max(d, 1e-3) / nominal))
            if nominal > 0.05 and d > 0 and p.unit not in ("ms", "s", "words"):
                ratio = math.log(d / nominal)
                self._robot_ratio.setdefault(robot_id, deque(maxlen=ROBOT_RATIO_WINDOW)).append(ratio)

    def _robot_change_check(
        self, robot_id: str, le: _LinearEstimator, sign: int, theta_before: np.ndarray, x: float, y: float,
        log_ratio: float,
    ) -> None:
        """CHANGE_RUN consecutive same-side outliers over *any* motion skills of a robot mean
        the robot itself changed speed: every motion skill of that robot keeps its learned fixed
        part and gets its per-unit time (1/speed) scaled by the ratio measured on the run."""
        run = self._robot_run.setdefault(robot_id, deque(maxlen=CHANGE_RUN))
        if sign == 0 or (run and run[-1][0] != sign):
            run.clear()
        if sign == 0:
            return
        run.append((sign, log_ratio, float(theta_before[0]), float(theta_before[1]), x, y))
        if len(run) < CHANGE_RUN:
            return
        speed_ratios = [(yy - t0) / (t1 * xx) for _, _, t0, t1, xx, yy in run if t1 * xx > 0.05]
        if speed_ratios:
            s = float(np.clip(np.median(speed_ratios), 0.1, 10.0))
        else:
            s = math.exp(float(np.median([r for _, r, *_ in run])))
        for (rid, skill), other in self._linear.items():
            if rid != robot_id or other.unit_free:
                continue
            if other is le and le.changes > le.changes_at_update_start:
                continue  # this skill re-fitted itself on the same run already
            other.rebase(np.array([other.theta[0], other.theta[1] * s]))
        ratios = self._robot_ratio.setdefault(robot_id, deque(maxlen=ROBOT_RATIO_WINDOW))
        ratios.clear()
        ratios.extend(r for _, r, *_ in run)
        run.clear()
        self.robot_changes[robot_id] = self.robot_changes.get(robot_id, 0) + 1

    def set_arm_pose(self, robot_id: str, pose: Sequence[float] | None) -> None:
        """Tell the model where an arm's tool is (mm); ``None`` = unknown (home assumed)."""
        with self._lock:
            if pose is None:
                self._arm_pose.pop(robot_id, None)
            else:
                self._arm_pose[robot_id] = (float(pose[0]), float(pose[1]), float(pose[2]))

    # --------------------------------------------------------------------------- scheduler aids
    def predict_completion(
        self, robot_id: str, robot_kind: str, calls: Sequence[SkillCall], start_s: float
    ) -> float:
        """Predicted end of a segment's execution that starts at ``start_s`` (same clock)."""
        return float(start_s) + self.predict(robot_id, robot_kind, calls)

    def remaining(
        self,
        robot_id: str,
        robot_kind: str,
        calls: Sequence[SkillCall],
        done: int,
        elapsed_in_current_s: float = 0.0,
    ) -> float:
        """Predicted time left in a segment when ``done`` calls finished and the current call
        has run ``elapsed_in_current_s`` (never negative)."""
        per = self.predict_calls(robot_id, robot_kind, calls)
        if done >= len(per):
            return 0.0
        return max(0.0, per[done] - elapsed_in_current_s) + float(sum(per[done + 1:]))

    def tolerance(self, robot_kind: str, call: SkillCall, k: float = 3.0) -> float:
        """Acceptance band (seconds) for a measured duration of ``call``: k sigma + 0.2 s."""
        p = self.profile(robot_kind, call.name)
        if p is None:
            return self.unknown_skill_s
        x, _ = self._param(p, call, ARM_HOME_POSE)
        return k * p.noise_cv * p.mean(x) + 0.2

    def set_speed_factor(self, robot_id: str, factor: float | None) -> None:
        """Simulation only: make ``sample`` draw as if the robot moved ``factor`` x as fast."""
        with self._lock:
            if factor is None:
                self._speed.pop(robot_id, None)
            else:
                if not factor > 0:
                    raise ValueError("speed factor must be > 0")
                self._speed[robot_id] = float(factor)

    def reset_robot(self, robot_id: str) -> None:
        """Forget everything learned about one robot."""
        with self._lock:
            for d in (self._linear, self._scene):
                for key in [k for k in d if k[0] == robot_id]:
                    del d[key]
            self._robot_ratio.pop(robot_id, None)
            self._robot_run.pop(robot_id, None)
            self._arm_pose.pop(robot_id, None)

    def learned(self, robot_id: str) -> dict[str, dict[str, float]]:
        """What the model learned about a robot (for logs and the bench)."""
        with self._lock:
            out: dict[str, dict[str, float]] = {}
            for (rid, skill), le in self._linear.items():
                if rid == robot_id:
                    out[skill] = {"base_s": float(le.theta[0]), "per_unit_s": float(le.theta[1]),
                                  "n": le.n, "changes": le.changes}
            for (rid, skill), se in self._scene.items():
                if rid == robot_id:
                    m = se.minimum()
                    out[skill] = {"min_s": -1.0 if m is None else m, "n": len(se.window)}
            out["_robot_scale"] = {"scale": self._robot_scale(robot_id)}
            return out

    def validate_calls(self, robot_kind: str, names_args: Iterable[tuple[str, Sequence]]) -> list[SkillCall]:
        """Validate raw (name, args) against the kind's skill set (raises SkillError)."""
        ss = self.skill_sets.get(robot_kind)
        if ss is None:
            raise SkillError(f"no skill set for robot kind '{robot_kind}'")
        return [ss.validate(n, a) for n, a in names_args]


#: Callable type accepted where a duration sampler is needed (robot simulators).
DurationSampler = Callable[[str, str, Sequence[SkillCall], np.random.Generator], float]
