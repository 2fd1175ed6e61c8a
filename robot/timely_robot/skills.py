"""Robot skills: the vocabulary shared by segmenters, the execution-time model and adapters.

A *skill set* is what a robot kind can execute. Every skill has typed arguments with safe
ranges. Nothing the LLM writes reaches a robot unless :meth:`SkillSet.validate` accepts it:
unknown skills and out-of-range arguments raise :class:`SkillError` with a clear message.

Skill sets are stored server-side (TimelyLLM 3.2: "users pre-store the fixed components of
requests like robot skill sets"); goals refer to them by id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

ArgType = Literal["int", "float", "str", "bool"]
SkillKind = Literal["action", "perception", "control"]


class SkillError(ValueError):
    """A skill call that must not reach a robot (unknown skill, bad or unsafe argument)."""


@dataclass(frozen=True)
class ArgSpec:
    """One typed skill argument with its safe range (inclusive) or allowed choices."""

    name: str
    type: ArgType
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    optional: bool = False
    unit: str = ""

    #: Argument names that name a thing in the robot's scene (an arm wipes an area it finds in its
    #: workspace, as it picks objects; a base goes to a named place of its map): with a list of
    #: known objects, the plan grammar admits only those names there
    #: (``llm_planner_node/prompts/grammar.py``).
    OBJECT_ARGS = ("object", "target", "area", "place")

    @property
    def is_object(self) -> bool:
        return self.type == "str" and self.choices is None and self.name in self.OBJECT_ARGS

    def coerce(self, skill: str, value: Any) -> Any:
        """Return ``value`` converted to this argument's type, or raise SkillError."""
        try:
            if self.type == "int":
                if isinstance(value, bool):
                    raise ValueError
                if isinstance(value, float):
                    if not value.is_integer():
                        raise ValueError
                    value = int(value)
                v: Any = int(str(value).strip()) if not isinstance(value, int) else value
            elif self.type == "float":
                if isinstance(value, bool):
                    raise ValueError
                v = float(value)
                if v != v or v in (float("inf"), float("-inf")):
                    raise ValueError
            elif self.type == "bool":
                if isinstance(value, bool):
                    v = value
                elif str(value).strip().lower() in ("true", "1"):
                    v = True
                elif str(value).strip().lower() in ("false", "0"):
                    v = False
                else:
                    raise ValueError
            else:
                v = str(value).strip().strip("'\"")
                if not v:
                    raise ValueError
        except (TypeError, ValueError):
            raise SkillError(
                f"skill '{skill}': argument '{self.name}' must be {self.type}, got {value!r}"
            ) from None
        if self.type in ("int", "float"):
            if self.min is not None and v < self.min:
                raise SkillError(
                    f"skill '{skill}': argument '{self.name}'={v} is below the safe minimum {self.min:g}"
                )
            if self.max is not None and v > self.max:
                raise SkillError(
                    f"skill '{skill}': argument '{self.name}'={v} is above the safe maximum {self.max:g}"
                )
        if self.choices is not None and v not in self.choices:
            raise SkillError(
                f"skill '{skill}': argument '{self.name}'={v!r} is not one of {list(self.choices)}"
            )
        return v


@dataclass(frozen=True)
class SkillSpec:
    """A skill a robot can execute. ``alias`` is the short MiniSpec name (e.g. ``mf``)."""

    name: str
    args: tuple[ArgSpec, ...] = ()
    kind: SkillKind = "action"
    alias: str | None = None
    returns: ArgType | None = None
    description: str = ""
    #: Hard per-call time limit in seconds (real robot time). When set, an adapter stops the
    #: skill after this long; when unset, the limit comes from the profiled worst case
    #: (``ExecutionTimeModel.worst_case_calls``).
    max_s: float | None = None
    #: Set on an action skill whose boolean answer says whether it did its action (``goto``
    #: answers False when the object was never in view): what False means. A plan that ran
    #: through but had such a call answer False did not do what it was asked (NOT_ACHIEVED).
    #: Empty for searches and perception, whose False is a finding ("not found"), not a failure.
    achieves: str = ""
    #: What the call makes the robot do, for its budget, when its name does not say it (a skill
    #: declared in the YAML): (quantity, argument index, scale) with quantity ``translation_cm``
    #: or ``rotation_deg``: the argument's absolute value times the scale (timely_robot/budgets.py)
    motion: tuple[tuple[str, int, float], ...] = ()

    @property
    def min_args(self) -> int:
        return sum(1 for a in self.args if not a.optional)

    def check_arity(self, n: int) -> None:
        """Raise SkillError unless the skill takes ``n`` arguments."""
        if not (self.min_args <= n <= len(self.args)):
            want = str(len(self.args)) if self.min_args == len(self.args) else f"{self.min_args}-{len(self.args)}"
            raise SkillError(f"skill '{self.name}' takes {want} argument(s), got {n}")


@dataclass(frozen=True)
class SkillCall:
    """A validated call of a registered skill (canonical name, typed arguments)."""

    name: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True)
class SkillSet:
    """The skills one robot kind may execute, looked up by name or MiniSpec alias."""

    id: str
    robot_kind: str
    skills: tuple[SkillSpec, ...]
    description: str = ""
    _index: Mapping[str, SkillSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, SkillSpec] = {}
        for s in self.skills:
            for key in (s.name, s.alias):
                if key is None:
                    continue
                if key in index:
                    raise ValueError(f"skill set '{self.id}': duplicate skill name or alias '{key}'")
                index[key] = s
        object.__setattr__(self, "_index", index)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def names(self) -> list[str]:
        return [s.name for s in self.skills]

    def spec(self, name: str) -> SkillSpec:
        try:
            return self._index[name]
        except KeyError:
            raise SkillError(
                f"skill '{name}' is not in skill set '{self.id}' (registered: {', '.join(self.names())})"
            ) from None

    def validate(self, name: str, args: Iterable[Any] = ()) -> SkillCall:
        """Return the canonical, type-checked call, or raise SkillError (unknown/unsafe)."""
        spec = self.spec(name)
        args = list(args)
        spec.check_arity(len(args))
        return SkillCall(spec.name, tuple(a.coerce(spec.name, v) for a, v in zip(spec.args, args)))

    def unachieved(self, call: str, value: str) -> str | None:
        """What a call's answer means when it says the skill did not do its action (a skill with
        ``achieves`` that answered False), else None. ``call`` is the call as the robot reports
        it (``goto(person)``); a skill not in this set is None."""
        name = call.split("(", 1)[0].strip()
        spec = self._index.get(name)
        if spec is None or not spec.achieves or spec.returns != "bool":
            return None
        return spec.achieves if value.strip() == "False" else None

    def prompt_text(self) -> str:
        """Skill list as it appears in the planner prompt (one skill per line)."""
        lines = []
        for s in self.skills:
            sig = ", ".join(f"{a.name}:{a.type}" for a in s.args)
            head = f"{s.alias or s.name}"
            lines.append(f"{head}: {s.name}({sig}){' -> ' + s.returns if s.returns else ''}")
        return "\n".join(lines)


def _a(name: str, type_: ArgType, lo: float | None = None, hi: float | None = None, **kw: Any) -> ArgSpec:
    return ArgSpec(name, type_, lo, hi, **kw)


# Tello SDK 2.0 limits: "forward x" / "back x" / ... with x in 20-500 cm, "cw x" / "ccw x" with
# x in 1-360 degrees (Tello SDK 2.0 User Guide, "Control Commands").
TELLO_MINISPEC = SkillSet(
    id="tello_minispec",
    robot_kind="drone",
    description="DJI Tello drone skills in TypeFly's MiniSpec (short aliases)",
    skills=(
        SkillSpec("takeoff", alias="to", description="take off and hover"),
        SkillSpec("land", alias="lnd", description="land"),
        SkillSpec("move_forward", (_a("distance", "int", 20, 500, unit="cm"),), alias="mf", description="fly forward"),
        SkillSpec("move_backward", (_a("distance", "int", 20, 500, unit="cm"),), alias="mb", description="fly backward"),
        SkillSpec("move_left", (_a("distance", "int", 20, 500, unit="cm"),), alias="ml", description="fly to the left"),
        SkillSpec("move_right", (_a("distance", "int", 20, 500, unit="cm"),), alias="mr", description="fly to the right"),
        SkillSpec("move_up", (_a("distance", "int", 20, 500, unit="cm"),), alias="mu", description="fly up (climb, rise)"),
        SkillSpec("move_down", (_a("distance", "int", 20, 500, unit="cm"),), alias="md", description="fly down (descend)"),
        SkillSpec("turn_cw", (_a("degrees", "int", 1, 360, unit="degrees"),), alias="tc", description="turn clockwise (to the right)"),
        SkillSpec("turn_ccw", (_a("degrees", "int", 1, 360, unit="degrees"),), alias="tu", description="turn counter-clockwise (to the left)"),
        SkillSpec("delay", (_a("milliseconds", "int", 0, 10000, unit="ms"),), alias="d", kind="control", description="wait (hover in place)"),
        SkillSpec("scan", (_a("object", "str"),), alias="s", returns="bool",
                  description="rotate until the object is visible; scene-dependent duration"),
        SkillSpec("scan_abstract", (_a("question", "str"),), alias="sa", returns="str", description="rotate until something matching a description is visible; returns its name"),
        SkillSpec("orienting", (_a("object", "str"),), alias="o", returns="bool", description="turn to face the object",
                  achieves="did not face it (not in view)"),
        SkillSpec("approach", alias="a", description="fly ~1 m towards the object in view"),
        SkillSpec("goto", (_a("object", "str"),), alias="g", returns="bool", description="fly to the object",
                  achieves="did not reach it (not in view)"),
        SkillSpec("is_visible", (_a("object", "str"),), alias="iv", kind="perception", returns="bool", description="whether the object is in view now"),
        SkillSpec("object_x", (_a("object", "str"),), alias="ox", kind="perception", returns="float", description="horizontal position of the object in view (0-1)"),
        SkillSpec("object_y", (_a("object", "str"),), alias="oy", kind="perception", returns="float", description="vertical position of the object in view (0-1)"),
        SkillSpec("object_width", (_a("object", "str"),), alias="ow", kind="perception", returns="float", description="width of the object in view (0-1)"),
        SkillSpec("object_height", (_a("object", "str"),), alias="oh", kind="perception", returns="float", description="height of the object in view (0-1)"),
        SkillSpec("object_dis", (_a("object", "str"),), alias="od", kind="perception", returns="float", description="distance to the object in cm"),
        SkillSpec("probe", (_a("question", "str"),), alias="p", kind="perception", returns="str", description="answer a question about the view"),
        SkillSpec("take_picture", alias="tp", description="take a photo"),
        SkillSpec("log", (_a("text", "str"),), alias="l", kind="control", description="write a message to the operator"),
        SkillSpec("re_plan", alias="rp", kind="control", description="ask for a new plan"),
    ),
)

# Indy7 workspace: reach 800 mm; poses are x, y, z in mm inside a conservative box over the
# table, yaw in degrees. Objects are named by the perception system (snake_case labels).
INDY7_ARM = SkillSet(
    id="indy7_arm",
    robot_kind="arm",
    description="Neuromeka Indy7-class arm pick-and-place skills",
    skills=(
        SkillSpec("home", description="move to the home joint configuration"),
        SkillSpec("move_to", (_a("x", "float", -700, 700, unit="mm"), _a("y", "float", -700, 700, unit="mm"),
                              _a("z", "float", 50, 800, unit="mm"),
                              _a("yaw", "float", -180, 180, optional=True, unit="degrees")),
                  description="linear move of the tool to a pose (mm, degrees)"),
        SkillSpec("pick", (_a("object", "str"),), description="grasp an object"),
        SkillSpec("place", (_a("object", "str"), _a("target", "str")),
                  description="put the held object on/in a target"),
        SkillSpec("push", (_a("object", "str"), _a("distance", "float", 10, 300, unit="mm")),
                  description="push an object by a distance in mm"),
        SkillSpec("open_gripper", description="open the gripper (release)"),
        SkillSpec("close_gripper", description="close the gripper (grasp)"),
        SkillSpec("wipe", (_a("area", "str"),), description="wipe a named area of the desk"),
        SkillSpec("look", (_a("object", "str"),), kind="perception", returns="bool",
                  description="find the object with the camera; returns whether it is seen"),
        SkillSpec("wait", (_a("seconds", "float", 0, 30, unit="s"),), kind="control", description="wait"),
    ),
)

# A mobile base driven by Nav2: places and poses in the ``map`` frame (metres, degrees); short
# motions through Nav2's behaviours (Spin, DriveOnHeading, BackUp), which keep its collision
# checking. MiniSpec-style aliases, so its plans read as the drones' (conditionals, perception).
NAV2_BASE = SkillSet(
    id="nav2_base",
    robot_kind="base",
    description="mobile base over Nav2: named places, poses in the map frame, short motions",
    skills=(
        SkillSpec("go_to", (_a("place", "str"),), alias="gt", description="drive to a named place"),
        SkillSpec("go_to_pose", (_a("x", "float", -100, 100, unit="m"), _a("y", "float", -100, 100, unit="m"),
                                 _a("yaw", "float", -180, 180, optional=True, unit="degrees")),
                  alias="gp", description="drive to a pose in the map frame (m, degrees)"),
        SkillSpec("move_forward", (_a("distance", "int", 10, 300, unit="cm"),), alias="mf", description="drive straight forward"),
        SkillSpec("move_backward", (_a("distance", "int", 10, 100, unit="cm"),), alias="mb", description="back up"),
        SkillSpec("turn_cw", (_a("degrees", "int", 1, 360, unit="degrees"),), alias="tc", description="turn in place clockwise (to the right)"),
        SkillSpec("turn_ccw", (_a("degrees", "int", 1, 360, unit="degrees"),), alias="tu", description="turn in place counter-clockwise (to the left)"),
        SkillSpec("stop", alias="st", description="stop where it is"),
        SkillSpec("scan", (_a("object", "str"),), alias="s", returns="bool",
                  description="turn in place until the object is seen; scene-dependent duration"),
        SkillSpec("is_visible", (_a("object", "str"),), alias="iv", kind="perception", returns="bool", description="whether the object is seen now"),
        SkillSpec("delay", (_a("milliseconds", "int", 0, 10000, unit="ms"),), alias="d", kind="control", description="wait in place"),
        SkillSpec("log", (_a("text", "str"),), alias="l", kind="control", description="write a message to the operator"),
        SkillSpec("re_plan", alias="rp", kind="control", description="ask for a new plan"),
    ),
)

# A chat robot "executes" text by speaking/showing it; reading at 300 words per minute
# (TimelyLLM 5.5). The only skill is saying a sentence or paragraph.
CHAT = SkillSet(
    id="chat",
    robot_kind="chat",
    description="chat agent: segments are sentences or paragraphs read by a person",
    skills=(SkillSpec("say", (_a("text", "str"),)),),
)

#: the skill sets this package defines; the fleet YAML may register more (:func:`register_skill_set`)
BUILT_IN_SKILL_SETS: tuple[SkillSet, ...] = (TELLO_MINISPEC, INDY7_ARM, NAV2_BASE, CHAT)
DEFAULT_SKILL_SETS: dict[str, SkillSet] = {s.id: s for s in BUILT_IN_SKILL_SETS}

#: Which skill set a robot kind uses when a goal names none. ``sim`` robots fly MiniSpec.
DEFAULT_SKILL_SET_FOR_KIND: dict[str, str] = {
    "drone": "tello_minispec",
    "sim": "tello_minispec",
    "arm": "indy7_arm",
    "base": "nav2_base",
    "chat": "chat",
}

ROBOT_KINDS = tuple(DEFAULT_SKILL_SET_FOR_KIND)

#: The plan language of each robot kind: drones, simulated robots and bases write MiniSpec (the
#: planner's grammar and segmenter, the adapter's interpreter), arms skill calls, chat robots text.
KIND_LANGUAGE: dict[str, str] = {"drone": "minispec", "sim": "minispec", "arm": "arm", "base": "minispec",
                                 "chat": "chat"}


def register_skill_set(skill_set: SkillSet) -> SkillSet:
    """Store a skill set the fleet YAML declares (``adapter: ros``) beside the built-in ones, so
    goals, the planner and the adapters find it by its id; the same set again is a no-op, another
    set under a taken id a ValueError."""
    known = DEFAULT_SKILL_SETS.get(skill_set.id)
    if known is not None and known != skill_set:
        raise ValueError(f"skill set id {skill_set.id!r} is taken by another skill set")
    DEFAULT_SKILL_SETS[skill_set.id] = skill_set
    return skill_set


def skill_set_of(skill_set_id: str | None, robot_kind: str) -> SkillSet | None:
    """The registered skill set a goal runs (its own id, else its robot kind's default); None
    if neither is registered."""
    return DEFAULT_SKILL_SETS.get(skill_set_id or DEFAULT_SKILL_SET_FOR_KIND.get(robot_kind, ""))


#: the skill (and its MiniSpec alias) by which a plan asks for a new plan for the same goal
REPLAN_SKILLS = frozenset({"re_plan", "rp"})
