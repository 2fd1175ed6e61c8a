"""Synthetic training data for the ``smollm2-135m-planner`` LoRA adapter.

:func:`generate` is a deterministic (seeded) generator of :class:`PlanSample` (robot kind,
instruction, plan, known objects) from the plan skill sets (``tello_minispec`` for the drone,
``indy7_arm`` for the arm and, with ``base_fraction``, ``nav2_base`` for a mobile base: named places
from a pool of indoor place names that only the instruction gives, so the plan copies its words as
``go_to(charging_station);``, poses ``go_to_pose(3.5, 2);`` in metres, moves in cm, scans, conditions and
routes). Plans are written in the form the instruct prompt teaches
(:mod:`.prompt`): full skill names, ``name(args);`` with no spaces between statements, a space
after the comma between arm arguments; drone distances in cm (20-500), turns in degrees, delays
in ms; arm distances and positions in mm (1 cm = 10 mm).

Instructions come from templates with synonyms, numbers in digits and in words, several units,
and compositions of 2-4 steps. The generator never emits an instruction that equals (after
:func:`normalise`) one of the plan benchmark's held-out instructions
(``timely_tools/bench/plans_heldout.jsonl``, when present), the shipped planner's held-out
set (``planner_model/heldout.jsonl``) or the prompt's worked examples (:mod:`.examples`).

Every plan is accepted by the project's plan grammar (``tests/timely_tools/training/test_plan_data.py``).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import llm_planner_node
from typing import Callable, Iterable

from llm_planner_node.prompts.examples import EXAMPLES
from timely_tools.training.coco_uses import SUPERCATEGORIES, USES

_PKG = Path(__file__).resolve().parent
PLANNER_DIR = Path(llm_planner_node.__file__).resolve().parent
BENCH_HELDOUT_PATH = _PKG.parent / "bench" / "plans_heldout.jsonl"
MODEL_HELDOUT_PATH = PLANNER_DIR / "planner_model" / "heldout.jsonl"
#: the substitution bench's held-out instructions and the object check's calibration set
SUBSTITUTION_PATHS = (_PKG.parent / "bench" / "substitution_heldout.jsonl",
                      PLANNER_DIR / "grounding" / "calibration.jsonl")


#: the skill set each kind's samples are written for
SKILL_SET_OF_KIND = {"drone": "tello_minispec", "arm": "indy7_arm", "base": "nav2_base"}


@dataclass(frozen=True)
class PlanSample:
    robot_kind: str  # "drone", "arm" or "base"
    instruction: str
    plan: str
    objects: tuple[str, ...] = ()  # known objects given in the prompt (empty: none)
    scene: tuple[str, ...] | None = None  # TypeFly scene entries after the instruction (None: no scene line)
    done: str | None = None  # a re-plan: the plans already run (the target is the rest)

    @property
    def skill_set(self) -> str:
        return SKILL_SET_OF_KIND[self.robot_kind]


# ------------------------------------------------------------------------------------------
# exclusion
# ------------------------------------------------------------------------------------------
def normalise(text: str) -> str:
    """Lowercase, punctuation to spaces, spaces collapsed."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _jsonl_instructions(path: Path) -> list[str]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(str(json.loads(line)["instruction"]))
                except (ValueError, KeyError, TypeError):
                    continue
    return out


def excluded_instructions() -> set[str]:
    """Normalised instructions the generator must never emit."""
    out = {normalise(i) for lib in EXAMPLES.values() for i, _ in lib}
    for p in (BENCH_HELDOUT_PATH, MODEL_HELDOUT_PATH, *SUBSTITUTION_PATHS):
        out |= {normalise(i) for i in _jsonl_instructions(p)}
    return out


# ------------------------------------------------------------------------------------------
# vocabularies
# ------------------------------------------------------------------------------------------
_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def num_words(n: int) -> str:
    """English words for 0 <= n < 1000 ("one hundred twenty", "forty-five")."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        t, o = divmod(n, 10)
        return _TENS[t] + ("" if o == 0 else "-" + _ONES[o])
    h, r = divmod(n, 100)
    head = _ONES[h] + " hundred"
    return head if r == 0 else head + " " + ("and " if False else "") + num_words(r)


DRONE_OBJECTS = (
    "person", "chair", "door", "window", "cat", "dog", "plant", "tv", "laptop", "bottle", "backpack",
    "ball", "couch", "sofa", "table", "lamp", "bed", "book", "cup", "clock", "car", "bicycle", "tree",
    "red box", "blue chair", "kite", "umbrella", "suitcase", "keyboard", "phone", "vase", "teddy bear",
    "bench", "fridge", "sink", "oven", "toilet", "bird", "horse", "truck", "stop sign", "fire hydrant",
    "traffic light", "water bottle", "shoe", "helmet", "basket", "painting", "mirror", "staircase",
    "trash can", "box", "desk", "monitor", "printer", "whiteboard", "flag", "balloon", "drone pad",
    "charging station", "pillow", "guitar", "toy car", "soccer ball", "red ball", "green door",
    "coffee mug", "wine glass", "banana", "apple", "orange", "pizza", "cake", "tennis racket",
    "skateboard", "surfboard", "frisbee", "remote", "microwave", "toaster", "scissors", "hair dryer",
    "toothbrush", "refrigerator", "dining table", "potted plant", "exit sign", "fan", "ladder",
    "wallet", "glasses", "headphones", "charger", "notebook", "pen", "mug", "jacket", "hat", "bag",
    "key ring", "tablet", "camera", "speaker", "router", "radiator", "bookshelf", "curtain", "rug",
    "kettle", "microphone", "poster", "red flag", "yellow ball", "blue box", "green bottle", "person in red",
    "fire extinguisher", "first aid kit", "package", "parcel", "cardboard box", "coat rack", "shelf",
    "kitchen door", "front door", "back door", "garage door", "bedroom window", "kitchen window", "kitchen table",
    "office chair", "living room", "hallway", "balcony", "garden", "stairs", "doorway", "corner",
)
ARM_OBJECTS = (
    "apple", "banana", "orange", "lemon", "pear", "peach", "plum", "grape", "strawberry", "tomato",
    "onion", "carrot", "potato", "cucumber", "pepper", "egg", "cup", "mug", "glass", "bottle", "can",
    "spoon", "fork", "knife", "plate", "bowl", "jar", "lid", "sponge", "towel", "napkin", "pen", "pencil",
    "marker", "eraser", "ruler", "stapler", "notebook", "book", "scissors", "tape", "glue stick",
    "paper clip", "usb stick", "phone", "remote", "mouse", "charger", "battery", "screwdriver", "wrench",
    "hammer", "bolt", "nut", "screw", "gear", "toy car", "teddy bear", "rubber duck", "lego brick",
    "red cube", "blue cube", "green cube", "yellow cube", "red block", "blue block", "green block",
    "small box", "big box", "tennis ball", "golf ball", "dice", "wooden block", "coffee pod",
    "tea bag", "salt shaker", "cookie", "chocolate bar", "soda can", "water bottle", "keys", "wallet",
    "watch", "glasses case", "toothbrush", "soap", "sticky notes", "calculator", "candle",
)
ARM_TARGETS = (
    "basket", "bowl", "box", "tray", "plate", "drawer", "bin", "shelf", "cup", "container", "crate",
    "table", "desk", "left side", "right side", "top shelf", "blue bin", "red bin", "green tray",
    "pencil holder", "sink", "dish rack", "cutting board", "lunch box", "toolbox", "storage box",
    "recycling bin", "trash can", "fruit bowl", "pan", "pot", "cabinet", "charging pad", "mat",
    "conveyor", "pallet", "holder", "organizer", "jar", "saucer", "napkin",
)
ARM_AREAS = (
    "table", "desk", "counter", "workbench", "tray", "shelf", "left side", "right side", "work area",
    "table top", "cutting board", "kitchen counter", "corner", "center", "surface", "stove", "mat",
)
ABSTRACT = (
    "something to sit on", "something to drink from", "something edible", "something red",
    "a place to land", "something to read", "a source of light", "something soft", "an exit",
    "something I can write with", "a toy", "a container",
)

_DRONE_EXTRA_NOUNS = DRONE_OBJECTS
_ARM_EXTRA_NOUNS = ARM_OBJECTS + ARM_TARGETS


def snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _the(rng: random.Random, noun: str) -> str:
    return rng.choice(["the ", "the ", "the ", "a ", "that ", "my "]) + noun if rng.random() < 0.9 else noun


# ------------------------------------------------------------------------------------------
# number phrases
# ------------------------------------------------------------------------------------------
def _cm_phrase(rng: random.Random, cm: int) -> str:
    forms: list[str] = [f"{cm} cm", f"{cm} centimeters", f"{cm} centimetres", f"{cm}cm",
                        f"{num_words(cm)} centimeters", f"{num_words(cm)} cm"]
    if cm % 100 == 0:
        m = cm // 100
        forms += [f"{m} m", f"{m} meters" if m > 1 else "1 meter", f"{m}m",
                  (f"{num_words(m)} meters" if m > 1 else rng.choice(["one meter", "a meter", "one metre"])),
                  f"{m} metres" if m > 1 else "1 metre"]
        forms += [forms[-2]] * 2
    elif cm % 10 == 0 and cm > 100:
        forms += [f"{cm / 100:g} m", f"{cm / 100:g} meters"]
        if cm % 50 == 0:
            whole = cm // 100
            forms += [f"{num_words(whole)} and a half meters" if whole > 1 else "one and a half meters"]
    if cm == 50:
        forms += ["half a meter", "half a metre", "0.5 m", "0.5 meters", "half a meter"]
    if cm == 25:
        forms += ["a quarter meter", "0.25 m"]
    return rng.choice(forms)


def _drone_cm(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.35:
        return rng.choice([100, 200, 300, 400, 500, 50, 150, 250])
    if r < 0.8:
        return rng.randrange(20, 501, 10)
    return rng.randrange(20, 501, 5)


def _deg_phrase(rng: random.Random, deg: int) -> str:
    forms = [f"{deg} degrees", f"{deg} degrees", f"{num_words(deg)} degrees", f"{deg} deg", f"{deg}°"]
    return rng.choice(forms)


def _seconds_phrase(rng: random.Random, s: float) -> str:
    if s == 0.5:
        return rng.choice(["half a second", "0.5 seconds", "500 milliseconds", "500 ms"])
    if s == 1:
        return rng.choice(["1 second", "one second", "a second", "1 s"])
    si = int(s) if float(s).is_integer() else s
    forms = [f"{si} seconds", f"{si} s", f"{si} secs"]
    if isinstance(si, int):
        forms += [f"{num_words(si)} seconds"]
    else:
        forms += [f"{s:g} seconds"]
    return rng.choice(forms)


# ------------------------------------------------------------------------------------------
# drone steps: each returns (text, plan statements, objects)
# ------------------------------------------------------------------------------------------
Step = tuple[str, str, tuple[str, ...]]

_MOVE_VERBS = {
    "move_forward": (["fly forward", "go forward", "move forward", "fly ahead", "go straight ahead",
                      "advance", "head forward", "move ahead", "go ahead"],
                     ["fly {d} forward", "go {d} forward", "move {d} ahead", "advance {d}", "fly {d} straight ahead"]),
    "move_backward": (["fly backward", "fly backwards", "back up", "reverse", "move back", "go backwards",
                       "go back", "move backward", "retreat"],
                      ["fly {d} backward", "back up {d}", "reverse {d}", "go {d} backwards", "move {d} back"]),
    "move_left": (["fly left", "move left", "go left", "slide left", "strafe left", "shift left",
                   "move to the left", "fly to the left"],
                  ["fly {d} to the left", "move {d} left", "go {d} to the left", "slide {d} left"]),
    "move_right": (["fly right", "move right", "go right", "slide right", "strafe right", "shift right",
                    "move to the right", "fly to the right"],
                   ["fly {d} to the right", "move {d} right", "go {d} to the right", "slide {d} right"]),
    "move_up": (["climb", "rise", "ascend", "go up", "fly up", "move up", "gain altitude", "fly higher"],
                ["climb {d}", "rise {d}", "go up {d}", "ascend {d}", "fly {d} up", "move {d} up",
                 "gain {d} of altitude", "go {d} higher"]),
    "move_down": (["descend", "drop", "go down", "fly down", "move down", "lower yourself", "sink", "fly lower"],
                  ["descend {d}", "drop {d}", "go down {d}", "fly {d} down", "move {d} down", "go {d} lower"]),
}


def _move(rng: random.Random, skill: str | None = None) -> Step:
    skill = skill or rng.choice(list(_MOVE_VERBS))
    cm = _drone_cm(rng)
    d = _cm_phrase(rng, cm)
    verbs, shaped = _MOVE_VERBS[skill]
    if rng.random() < 0.6:
        text = f"{rng.choice(verbs)} {rng.choice(['', '', 'by '])}{d}"
    else:
        text = rng.choice(shaped).format(d=d)
    return " ".join(text.split()), f"{skill}({cm});", ()


_TURN = {
    "turn_cw": ["clockwise", "to the right", "right", "cw"],
    "turn_ccw": ["counter-clockwise", "counterclockwise", "anticlockwise", "anti-clockwise", "to the left", "left",
                 "ccw"],
}


def _turn(rng: random.Random, skill: str | None = None) -> Step:
    skill = skill or rng.choice(["turn_cw", "turn_ccw"])
    verb = rng.choice(["turn", "rotate", "spin", "yaw", "turn", "rotate"])
    r = rng.random()
    if r < 0.15:
        deg = 180
        if skill == "turn_cw":
            text = rng.choice(["turn around", "do a half turn", "turn to face backwards", "rotate 180",
                               "turn around to the right", "make a u-turn", "spin around 180 degrees"])
        else:
            text = rng.choice(["turn around to the left", "do a half turn to the left",
                               "turn around counter-clockwise", "make a u-turn to the left"])
        return text, f"{skill}({deg});", ()
    if r < 0.27:
        deg = 90
        side = "right" if skill == "turn_cw" else "left"
        text = rng.choice([f"make a quarter turn to the {side}", f"do a quarter turn {rng.choice(_TURN[skill])}",
                           f"turn {side}", f"turn {side}", f"face {side}", f"{verb} 90 degrees {side}"])
        return text, f"{skill}({deg});", ()
    if r < 0.32:
        deg = 360
        text = rng.choice(["spin a full circle", "do a full rotation", "turn all the way around",
                           "rotate a full 360"]) + (" to the left" if skill == "turn_ccw" else "")
        return text, f"{skill}({deg});", ()
    deg = rng.choice([10, 15, 20, 30, 45, 60, 90, 120, 135, 150, 180, 270, 360]) if rng.random() < 0.6 \
        else rng.randrange(5, 360, 5)
    dphr = _deg_phrase(rng, deg)
    dirw = rng.choice(_TURN[skill])
    text = rng.choice([f"{verb} {dirw} {dphr}", f"{verb} {dphr} {dirw}", f"{verb} {dirw} by {dphr}",
                       f"{verb} {dphr} {dirw}"])
    return text, f"{skill}({deg});", ()


def _delay(rng: random.Random) -> Step:
    s = rng.choice([0.5, 1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 7, 8, 10, 1.5, 2.5])
    ms = int(round(s * 1000))
    verb = rng.choice(["wait", "wait", "hover for", "pause for", "hold position for", "stay still for",
                       "wait for", "hang there for", "hover there for", "stay there for"])
    if rng.random() < 0.1 and ms % 100 == 0 and ms <= 3000:
        return f"{verb} {ms} milliseconds", f"delay({ms});", ()
    return f"{verb} {_seconds_phrase(rng, s)}", f"delay({ms});", ()


def _takeoff(rng: random.Random) -> Step:
    return rng.choice(["take off", "takeoff", "lift off", "launch", "get airborne", "start flying",
                       "take off now", "go airborne", "launch the drone"]), "takeoff();", ()


def _land(rng: random.Random) -> Step:
    return rng.choice(["land", "touch down", "land the drone", "come down and land", "set down", "land now please",
                       "finish by landing", "land safely"]), "land();", ()


def _photo(rng: random.Random) -> Step:
    return rng.choice(["take a photo", "take a picture", "take a snapshot", "snap a picture", "capture an image",
                       "grab a shot", "take a pic", "shoot a photo", "snap a snapshot", "photograph the view"]), \
        "take_picture();", ()


_DRONE_FIND_VOCAB = tuple(dict.fromkeys(DRONE_OBJECTS + ARM_OBJECTS))


def _obj(rng: random.Random, vocab: Iterable[str] | None = None) -> str:
    """An object name (drone default: its vocabulary, sometimes a small household object)."""
    if vocab is None:
        vocab = DRONE_OBJECTS if rng.random() < 0.7 else _DRONE_FIND_VOCAB
    return rng.choice(tuple(vocab))


def _goto(rng: random.Random) -> Step:
    o = _obj(rng)
    text = rng.choice(["go to {o}", "fly to {o}", "head over to {o}", "navigate to {o}", "fly over to {o}",
                       "move to {o}", "head to {o}", "fly towards {o}"]).format(o=_the(rng, o))
    return text, f"goto({snake(o)});", (o,)


def _photograph(rng: random.Random) -> Step:
    o = _obj(rng)
    text = rng.choice(["photograph {o}", "take a picture of {o}", "snap a photo of {o}",
                       "fly to {o} and take a photo", "go to {o} and snap a picture",
                       "get a snapshot of {o}", "take a photo of {o}"]).format(o=_the(rng, o))
    return text, f"goto({snake(o)});take_picture();", (o,)


def _find(rng: random.Random, var: int = 1, last: bool = True) -> Step:
    o = _obj(rng)
    photo = rng.random() < 0.35
    if photo:
        text = rng.choice(["find {o} and photograph it", "look for {o} and take a picture of it",
                           "search for {o} and snap a photo of it", "locate {o} and take a photo",
                           "find {o} then take a picture of it"])
    else:
        text = rng.choice(["find {o}", "search for {o}", "look for {o}", "locate {o}", "look around for {o}",
                           "seek out {o}", "try to find {o}", "scan for {o}", "hunt for {o}"])
    text = text.format(o=_the(rng, o))
    n = snake(o)
    body = f"goto({n});take_picture();" if photo else f"goto({n});"
    plan = f"_{var}=scan({n});?_{var}==True{{{body}}};"
    if last:
        plan += f"->_{var};"
    return text, plan, (o,)


def _visible(rng: random.Random) -> Step:
    o = _obj(rng)
    text = rng.choice(["is there {o} in view?", "can you see {o}?", "check if {o} is visible",
                       "is {o} visible right now?", "do you see {o}?", "tell me whether {o} is in sight"])
    return text.format(o=_the(rng, o)), f"_1=is_visible({snake(o)});->_1;", (o,)


def _abstract(rng: random.Random) -> Step:
    q = rng.choice(ABSTRACT)
    text = rng.choice(["look for {q}", "find {q}", "search for {q}", "go find {q}"]).format(q=q)
    return text, f"_1=scan_abstract('{q}');?_1!=False{{goto(_1);}};->_1;", ()


def _an(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _asked_by_use(rng: random.Random) -> tuple[str, str]:
    """A detector class and a way of asking for it without its name: by one of its COCO
    supercategories ("a piece of furniture") or by what it is for ("something to sit down on")."""
    if rng.random() < 0.4:
        names, classes = rng.choice(list(SUPERCATEGORIES.items()))
        name = rng.choice(names)
        phrase = rng.choice([_an(name), _an(name), "any " + name, "some " + name if name in ("food", "furniture")
                             else _an(name)])
        return rng.choice(classes), phrase
    cls = rng.choice(list(USES))
    vp, prep = rng.choice(USES[cls])
    who = "someone" if cls == "person" else "something"
    if vp.startswith("has "):
        return cls, rng.choice([f"{who} that {vp}", f"the thing that {vp}", f"an animal that {vp}"
                                if cls in SUPERCATEGORIES[("animal", "creature")] else f"{who} that {vp}"])
    end = f" {prep}" if prep else ""
    phrase = rng.choice([f"{who} to {vp}" + (end if rng.random() < 0.5 else ""), f"{who} I can {vp}{end}",
                         f"{who} I could {vp}{end}", f"a thing to {vp}{end}", f"anything to {vp}{end}",
                         f"{who} for me to {vp}{end}", f"what I need to {vp}", f"{who} we can {vp}{end}"])
    return cls, phrase


def _by_use(rng: random.Random) -> Step:
    """Find, go to, photograph or check for a detector class asked for by kind or purpose: the
    plan names the class ("find something to snip a ribbon with" -> ``scan(scissors)``)."""
    cls, phrase = _asked_by_use(rng)
    form = rng.random()
    if form < 0.55:
        text = rng.choice(["find {p}", "look for {p}", "search for {p}", "locate {p}", "look around for {p}",
                           "hunt for {p}", "try to find {p}", "search the room for {p}", "go find {p}",
                           "is there {p} around here? find it", "where can I find {p}?"]).format(p=phrase)
        return text, f"_1=scan({cls});?_1==True{{goto({cls});}};->_1;", (cls,)
    if form < 0.75:
        text = rng.choice(["go to {p}", "fly to {p}", "head over to {p}", "fly towards {p}"]).format(p=phrase)
        return text, f"goto({cls});", (cls,)
    if form < 0.9:
        text = rng.choice(["is there {p} in view?", "can you see {p}?", "check if {p} is visible",
                           "do you see {p}?"]).format(p=phrase)
        return text, f"_1=is_visible({cls});->_1;", (cls,)
    text = rng.choice(["take a picture of {p}", "photograph {p}", "snap a photo of {p}"]).format(p=phrase)
    return text, f"goto({cls});take_picture();", (cls,)


def _orient(rng: random.Random) -> Step:
    o = _obj(rng)
    text = rng.choice(["face {o}", "turn towards {o}", "turn to face {o}", "point yourself at {o}"])
    return text.format(o=_the(rng, o)), f"orienting({snake(o)});", (o,)


_WORD_TIMES = {2: ["twice", "two times", "2 times"], 3: ["three times", "3 times", "thrice"],
               4: ["four times", "4 times"], 5: ["five times", "5 times"], 6: ["six times", "6 times"]}


def _loop(rng: random.Random) -> Step:
    r = rng.random()
    if r < 0.3:  # square / polygon
        cm = rng.choice([50, 100, 100, 150, 200, 60, 80, 120, 300])
        d = _cm_phrase(rng, cm)
        cw = rng.random() < 0.7
        turn = "turn_cw" if cw else "turn_ccw"
        shape, n, deg = rng.choice([("square", 4, 90), ("square", 4, 90), ("triangle", 3, 120)])
        side = "" if cw else rng.choice([" turning left", " counter-clockwise", " to the left"])
        text = rng.choice([f"fly in a {shape} with {d} sides{side}", f"fly a {shape} of {d}{side}",
                           f"trace a {shape} with sides of {d}{side}", f"make a {d} {shape}{side}"])
        return text, f"{n}{{move_forward({cm});{turn}({deg});}};", ()
    if r < 0.5:  # photos while turning
        n = rng.choice([3, 4, 6, 8])
        deg = 360 // n
        text = rng.choice([f"take {n} photos turning {deg} degrees between them",
                           f"take {num_words(n)} pictures, rotating {deg} degrees after each",
                           f"do a panorama: {n} times take a picture and turn right {deg} degrees"])
        return text, f"{n}{{take_picture();turn_cw({deg});}};", ()
    n = rng.choice([2, 3, 3, 4, 5])
    inner = rng.choice([_move, _move, _turn, _photo])(rng)
    times = rng.choice(_WORD_TIMES[n])
    if rng.random() < 0.25:
        inner2 = rng.choice([_turn, _photo, _move])(rng)
        text = f"{rng.choice(['repeat', 'do'])} {times}: {inner[0]} and {inner2[0]}"
        return text, f"{n}{{{inner[1]}{inner2[1]}}};", ()
    text = rng.choice([f"{inner[0]} {times}", f"{times}, {inner[0]}", f"repeat {times}: {inner[0]}"])
    return text, f"{n}{{{inner[1]}}};", ()


_OPPOSITE = {"move_forward": "move_backward", "move_backward": "move_forward", "move_left": "move_right",
             "move_right": "move_left", "move_up": "move_down", "move_down": "move_up"}


def _there_and_back(rng: random.Random) -> Step:
    """A move and the same move back ("fly left 1 m and come back")."""
    text, plan, _ = _move(rng)
    skill = plan.split("(")[0]
    cm = int(plan.split("(")[1].rstrip(");"))
    back = rng.choice(["come back", "come back", "return", "go back", "fly back", "return to where you started",
                       "and come back again"])
    joiner = rng.choice([" then ", " and ", ", then ", ", and "])
    return f"{text}{joiner}{back}".replace("and and", "and"), f"{skill}({cm});{_OPPOSITE[skill]}({cm});", ()


def _bare_move(rng: random.Random) -> Step:
    """A move with no distance: a little is 50 cm, otherwise 100 cm."""
    skill = rng.choice(list(_MOVE_VERBS))
    verbs, _ = _MOVE_VERBS[skill]
    if rng.random() < 0.4:
        return f"{rng.choice(verbs)} {rng.choice(['a bit', 'a little', 'slightly', 'a little bit'])}", \
            f"{skill}(50);", ()
    return rng.choice(verbs), f"{skill}(100);", ()


def _side_photo(rng: random.Random) -> Step:
    """Turn to a side, then a picture ("snap a photo of the view behind you")."""
    side, turn = rng.choice([("left", "turn_ccw(90);"), ("right", "turn_cw(90);"), ("behind you", "turn_cw(180);")])
    where = f"to your {side}" if side != "behind you" else side
    text = rng.choice([f"photograph the view {where}", f"take a picture of what is {where}",
                       f"snap a photo of the view {where}", f"show me what is {where}"])
    return text, f"{turn}take_picture();", ()


def _photo_still(rng: random.Random) -> Step:
    """A picture from where the drone is."""
    return rng.choice(["take a photo without moving", "take a photo from here", "snap a picture right here",
                       "take a photo where you are", "capture an image without moving",
                       "just take a picture"]), "take_picture();", ()


def _photos_facing(rng: random.Random) -> Step:
    """Pictures facing several ways: a picture, a turn, a picture."""
    if rng.random() < 0.5:
        text = rng.choice(["take two photos, one to the front and one to the back",
                           "take a photo in front of you and one behind you",
                           "photograph ahead, then turn around and photograph behind"])
        return text, "take_picture();turn_cw(180);take_picture();", ()
    side, turn = rng.choice([("left", "turn_ccw(90);"), ("right", "turn_cw(90);")])
    text = rng.choice([f"take a picture, then turn {side} and take another",
                       f"take one photo ahead and one to the {side}"])
    return text, f"take_picture();{turn}take_picture();", ()


def _after(rng: random.Random) -> Step:
    """Steps said in reverse order: "land after climbing 2 m" (plan: the climb, then land)."""
    first = _pick(rng, [(_move, 3.0), (_turn, 1.0), (_photo, 1.0), (_delay, 1.0)])(rng)
    second = rng.choice([_land, _photo, _turn, _move])(rng)
    first_ing = {"fly": "flying", "go": "going", "move": "moving", "climb": "climbing", "turn": "turning",
                 "take": "taking", "wait": "waiting", "rotate": "rotating", "descend": "descending",
                 "rise": "rising", "hover": "hovering", "pause": "pausing", "snap": "snapping"}
    words = first[0].split()
    if words[0] not in first_ing:
        return f"{first[0]}, then {second[0]}", first[1] + second[1], ()
    ing = " ".join([first_ing[words[0]]] + words[1:])
    return f"{second[0]} after {ing}", first[1] + second[1], ()


_DRONE_SINGLE: list[tuple[Callable[[random.Random], Step], float]] = [
    (_there_and_back, 0.5), (_bare_move, 0.4), (_side_photo, 0.3), (_photo_still, 0.2), (_photos_facing, 0.2),
    (_after, 0.5),
    (_move, 6.0), (_turn, 3.0), (_delay, 1.0), (_takeoff, 0.8), (_land, 0.8), (_photo, 1.0), (_goto, 1.2),
    (_photograph, 0.8), (lambda r: _find(r), 1.5), (_visible, 0.4), (_abstract, 0.3), (_orient, 0.3),
    (_loop, 1.2),
]
_DRONE_STEP: list[tuple[Callable[[random.Random], Step], float]] = [
    (_move, 6.0), (_turn, 3.0), (_delay, 0.8), (_photo, 1.2), (_goto, 0.8), (_photograph, 0.4), (_loop, 0.4),
    (_orient, 0.2), (_there_and_back, 0.4), (_bare_move, 0.3), (_side_photo, 0.2),
]


def _pick(rng: random.Random, table: list[tuple[Callable, float]]) -> Callable:
    fns, ws = zip(*table)
    return rng.choices(fns, weights=ws, k=1)[0]


_JOIN = [", then ", " then ", " and ", ", and then ", ", after that ", ". Then ", ", ", " and then ",
         ", next ", "; "]


def _join_text(rng: random.Random, parts: list[str]) -> str:
    if len(parts) > 2 and rng.random() < 0.4:
        # "a, b and then c" or "first a, then b, then c"
        if rng.random() < 0.5:
            return ", ".join(parts[:-1]) + rng.choice([" and ", ", and then ", " and finally ", ", then "]) + parts[-1]
        return "first " + ", then ".join(parts)
    out = parts[0]
    for p in parts[1:]:
        out += rng.choice(_JOIN) + p
    return out


def _drone_sample(rng: random.Random, use_fraction: float = 0.0) -> tuple[str, str, tuple[str, ...]]:
    if use_fraction > 0 and rng.random() < use_fraction:
        return _by_use(rng)
    if rng.random() < 0.4:
        t, p, o = _pick(rng, _DRONE_SINGLE)(rng)
        return t, p, o
    n = rng.choice([2, 2, 2, 3, 3, 4])
    steps: list[Step] = []
    start_takeoff = rng.random() < 0.35
    end_land = rng.random() < 0.3
    if start_takeoff:
        steps.append(_takeoff(rng))
    body_n = max(1, n - len(steps) - (1 if end_land else 0))
    find_at = rng.randrange(body_n) if rng.random() < 0.2 else -1
    for i in range(body_n):
        if i == find_at:
            is_last = (i == body_n - 1) and not end_land
            steps.append(_find(rng, 1, last=is_last))
        else:
            steps.append(_pick(rng, _DRONE_STEP)(rng))
    if end_land:
        steps.append(_land(rng))
    text = _join_text(rng, [s[0] for s in steps])
    plan = "".join(s[1] for s in steps)
    objs = tuple(o for s in steps for o in s[2])
    return text, plan, objs


# ------------------------------------------------------------------------------------------
# arm steps
# ------------------------------------------------------------------------------------------
def _mm_phrase(rng: random.Random, mm: int) -> str:
    if mm % 10 == 0 and rng.random() < 0.6:
        cm = mm // 10
        return rng.choice([f"{cm} cm", f"{cm} centimeters", f"{num_words(cm)} centimeters", f"{cm}cm",
                           f"{num_words(cm)} cm", f"{cm} centimetres"])
    return rng.choice([f"{mm} mm", f"{mm} millimeters", f"{mm}mm", f"{mm} millimetres"])


def _a_pick_only(rng: random.Random) -> Step:
    o = _obj(rng, ARM_OBJECTS)
    text = rng.choice(["pick up {o}", "grab {o}", "grasp {o}", "lift {o}", "take {o}", "get {o}",
                       "pick {o} up", "hold {o}"]).format(o=_the(rng, o))
    return text, f"look({snake(o)});pick({snake(o)});", (o,)


def _a_place_core(rng: random.Random, o: str, t: str) -> str:
    prep = rng.choice(["in", "into", "on", "onto", "inside"]) if rng.random() < 0.8 else "to"
    verb = rng.choice(["put", "place", "move", "drop", "set", "transfer", "bring", "put", "place", "stick", "stack"])
    if verb in ("move", "transfer", "bring"):
        prep = rng.choice(["to", "into", "onto"])
    if verb == "stack":
        prep = "on"
    return f"{verb} {_the(rng, o)} {prep} the {t}"


def _place_stmts(o: str, t: str) -> str:
    return f"look({snake(o)});pick({snake(o)});place({snake(o)}, {snake(t)});"


def _a_place(rng: random.Random) -> Step:
    o = _obj(rng, ARM_OBJECTS)
    t = _obj(rng, ARM_TARGETS)
    while snake(t) == snake(o):
        t = _obj(rng, ARM_TARGETS)
    text = _a_place_core(rng, o, t)
    if rng.random() < 0.15:
        text = rng.choice(["please ", "could you ", "now "]) + text
    return text, f"home();{_place_stmts(o, t)}home();", (o, t)


def _a_tidy(rng: random.Random) -> Step:
    n = rng.choice([2, 2, 3])
    objs = rng.sample(ARM_OBJECTS, n)
    same = rng.random() < 0.6
    t = _obj(rng, ARM_TARGETS)
    targets = [t] * n if same else [rng.choice(ARM_TARGETS) for _ in range(n)]
    if same:
        names = ", ".join(f"the {o}" for o in objs[:-1]) + f" and the {objs[-1]}"
        text = rng.choice([f"put {names} in the {t}", f"tidy up: place {names} into the {t}",
                           f"move {names} to the {t}", f"collect {names} in the {t}",
                           f"clean up by putting {names} in the {t}"])
    else:
        parts = [_a_place_core(rng, o, tt) for o, tt in zip(objs, targets)]
        text = _join_text(rng, parts)
    plan = "home();" + "".join(_place_stmts(o, tt) for o, tt in zip(objs, targets)) + "home();"
    return text, plan, tuple(objs) + tuple(dict.fromkeys(targets))


def _a_push(rng: random.Random) -> Step:
    o = _obj(rng, ARM_OBJECTS)
    mm = rng.choice([10, 20, 30, 50, 50, 80, 100, 100, 150, 200, 250, 300, 40, 60, 70, 120]) \
        if rng.random() < 0.7 else rng.randrange(10, 301, 5)
    text = rng.choice(["push {o} {d}", "push {o} by {d}", "slide {o} {d}", "nudge {o} {d}", "shove {o} {d}",
                       "push {o} forward {d}", "slide {o} over by {d}"]).format(o=_the(rng, o), d=_mm_phrase(rng, mm))
    return text, f"push({snake(o)}, {mm});", (o,)


def _a_wipe(rng: random.Random) -> Step:
    a = _obj(rng, ARM_AREAS)
    text = rng.choice(["wipe the {a}", "clean the {a}", "wipe down the {a}", "give the {a} a wipe",
                       "wipe off the {a}", "clean up the {a}"]).format(a=a)
    return text, f"wipe({snake(a)});", (a,)  # with known objects the grammar admits only those areas


def _a_move_to(rng: random.Random) -> Step:
    x = rng.randrange(-600, 601, 10 if rng.random() < 0.7 else 1)
    y = rng.randrange(-600, 601, 10 if rng.random() < 0.7 else 1)
    z = rng.randrange(60, 701, 10)
    yaw = rng.choice([None, None, None, 0, 45, 90, -90, 180, -45, 30])
    coords = rng.choice([f"x {x}, y {y}, z {z}", f"x={x} y={y} z={z}", f"({x}, {y}, {z})", f"x {x} y {y} z {z}",
                         f"position {x}, {y}, {z}"])
    text = rng.choice(["move to {c}", "move the tool to {c}", "go to {c}", "move the arm to {c}",
                       "position the gripper at {c}"]).format(c=coords)
    if yaw is None:
        return text, f"move_to({x}, {y}, {z});", ()
    text += rng.choice([f" with yaw {yaw}", f", yaw {yaw} degrees", f" rotated {yaw} degrees"])
    return text, f"move_to({x}, {y}, {z}, {yaw});", ()


def _a_gripper(rng: random.Random) -> Step:
    if rng.random() < 0.5:
        return rng.choice(["open the gripper", "open the hand", "release", "let go", "open your claw",
                           "release the gripper", "open the grip"]), "open_gripper();", ()
    return rng.choice(["close the gripper", "close the hand", "grip", "close your claw", "clamp the gripper",
                       "shut the gripper"]), "close_gripper();", ()


def _a_home(rng: random.Random) -> Step:
    return rng.choice(["go home", "return to home", "go back to the home position", "home the arm",
                       "reset to home", "move to home", "return to the home pose", "go to home"]), "home();", ()


def _a_wait(rng: random.Random) -> Step:
    s = rng.choice([0.5, 1, 1, 2, 2, 3, 4, 5, 10, 1.5])
    verb = rng.choice(["wait", "pause for", "wait for", "hold still for", "stay put for"])
    return f"{verb} {_seconds_phrase(rng, s)}", f"wait({s:g});", ()


def _a_look(rng: random.Random) -> Step:
    o = _obj(rng, ARM_OBJECTS)
    text = rng.choice(["look for {o}", "find {o}", "locate {o}", "check if {o} is there",
                       "see whether {o} is on the table", "spot {o}"]).format(o=_the(rng, o))
    return text, f"look({snake(o)});", (o,)


_ARM_SINGLE: list[tuple[Callable[[random.Random], Step], float]] = [
    (_a_place, 5.0), (_a_pick_only, 1.2), (_a_tidy, 2.0), (_a_push, 2.5), (_a_wipe, 1.2), (_a_move_to, 1.2),
    (_a_gripper, 0.8), (_a_home, 0.6), (_a_wait, 0.8), (_a_look, 0.8),
]
_ARM_STEP: list[tuple[Callable[[random.Random], Step], float]] = [
    (_a_push, 2.0), (_a_wipe, 1.5), (_a_move_to, 1.0), (_a_gripper, 0.8), (_a_wait, 0.8), (_a_look, 0.6),
    (_a_pick_only, 0.8), (_a_home, 0.4),
]


def _arm_sample(rng: random.Random) -> tuple[str, str, tuple[str, ...]]:
    if rng.random() < 0.55:
        return _pick(rng, _ARM_SINGLE)(rng)
    n = rng.choice([2, 2, 3])
    steps = []
    for i in range(n):
        if i == 0 and rng.random() < 0.5:
            o = _obj(rng, ARM_OBJECTS)
            t = _obj(rng, ARM_TARGETS)
            steps.append((_a_place_core(rng, o, t), _place_stmts(o, t), (o, t)))
        else:
            steps.append(_pick(rng, _ARM_STEP)(rng))
    text = _join_text(rng, [s[0] for s in steps])
    plan = "".join(s[1] for s in steps)
    objs = tuple(o for s in steps for o in s[2])
    if any("place(" in s[1] for s in steps):
        plan = "home();" + plan.removeprefix("home();").removesuffix("home();") + "home();"
    return text, plan, objs


# ------------------------------------------------------------------------------------------
# mobile base (nav2_base): named places, poses in the map frame, short moves, scans
# ------------------------------------------------------------------------------------------
#: Indoor places a base may be sent to by name. The prompt lists no places (a robot's own are its
#: known objects when it has them), so the plan copies the instruction's place word, snake_case.
BASE_PLACES = (
    "dock", "kitchen", "hall", "office", "lab", "charging station", "lobby", "reception", "front desk",
    "meeting room", "conference room", "break room", "storage room", "supply room", "server room",
    "mail room", "copy room", "print room", "bathroom", "restroom", "corridor", "hallway", "entrance",
    "main entrance", "back entrance", "exit", "elevator", "lift", "stairwell", "staircase", "garage",
    "workshop", "warehouse", "loading dock", "loading bay", "cafeteria", "canteen", "dining room",
    "living room", "bedroom", "guest room", "laundry room", "pantry", "library", "classroom", "gym",
    "nurse station", "waiting room", "ward", "pharmacy", "clinic", "cleanroom", "control room",
    "boiler room", "basement", "attic", "balcony", "patio", "garden", "porch", "foyer", "atrium",
    "study", "den", "closet", "utility room", "mechanical room", "electrical room", "archive",
    "records room", "lounge", "staff room", "kitchenette", "coffee corner", "water cooler",
    "printer", "shipping area", "receiving area", "packing station", "assembly line", "test bench",
    "inspection area", "parking lot", "security desk", "first aid room", "office 2", "room 101",
    "room b", "lab 3", "bay 4", "aisle 7", "zone a", "shelf area", "north wing", "south wing",
    "east corridor", "west hall", "main hall", "big hall", "small office", "manager office",
    "home", "home base", "base station", "start", "starting point", "window", "main door",
    "back door", "front door", "kitchen door", "sofa", "table", "desk", "bed", "fridge",
)
#: What a base looks for with its camera (scan / is_visible).
BASE_THINGS = (
    "person", "chair", "door", "table", "box", "cart", "package", "parcel", "bottle", "backpack", "dog",
    "cat", "laptop", "plant", "trash can", "fire extinguisher", "ladder", "suitcase", "cup", "mug",
    "keys", "phone", "umbrella", "bicycle", "pallet", "forklift", "trolley", "bag", "book", "tv",
    "red box", "blue bin", "coffee cup", "water bottle", "toolbox", "helmet", "couch", "printer",
    "monitor", "charger", "ball", "shoe", "jacket", "wheelchair", "stroller", "vase", "clock",
)
_BASE_MSGS = ("hello", "hi there", "I have arrived", "done", "the room is clear", "package delivered",
              "good morning", "coming through", "all clear", "found it", "nobody here", "on my way",
              "arrived at the destination", "task complete", "excuse me", "welcome")


def _place_np(rng: random.Random, p: str) -> str:
    r = rng.random()
    if any(c.isdigit() for c in p) or p.startswith("zone ") or p.endswith(" b"):
        return p if r < 0.7 else "the " + p
    return ("the " + p) if r < 0.8 else (("my " + p) if r < 0.85 else p)


def _b_goto(rng: random.Random, p: str | None = None) -> Step:
    p = p or rng.choice(BASE_PLACES)
    text = rng.choice(["go to {p}", "drive to {p}", "head to {p}", "navigate to {p}", "go over to {p}",
                       "move to {p}", "return to {p}", "roll over to {p}", "make your way to {p}", "get to {p}",
                       "proceed to {p}", "go back to {p}", "drive over to {p}", "head over to {p}",
                       "travel to {p}", "take yourself to {p}", "go to {p} please", "drive yourself to {p}",
                       "i need you in {p}", "come to {p}", "go down to {p}", "head back to {p}",
                       "back to {p}", "off to {p}", "straight to {p}", "over to {p}", "swing over to {p}",
                       "wander over to {p}", "get yourself to {p}", "station yourself at {p}", "report to {p}",
                       "please go to {p}", "can you go to {p}?", "would you drive to {p}?", "go into {p}",
                       "head into {p}", "pull up at {p}", "find your way to {p}", "get over to {p}"])
    text = text.format(p=_place_np(rng, p))
    if rng.random() < 0.12:  # a reason said first: "battery low: back to the dock"
        text = rng.choice(_BASE_REASONS) + rng.choice([": ", ", so ", " - ", ". "]) + text
    return text, f"go_to({snake(p)});", (p,)


#: reasons an operator gives before sending a base somewhere (the plan is the place alone)
_BASE_REASONS = ("battery is low", "your battery is running low", "time to charge", "time to top up your battery",
                 "you're done for today", "shift is over", "the meeting starts soon", "someone needs you",
                 "we need you", "all done here", "that's finished", "job's done", "charging time",
                 "you need a recharge", "nothing more to do here", "there's a delivery waiting")


def _coord(rng: random.Random, lo: float = -15, hi: float = 15) -> float:
    if rng.random() < 0.55:
        return float(rng.randint(int(lo), int(hi)))
    return round(rng.uniform(lo, hi) * 2) / 2 if rng.random() < 0.6 else round(rng.uniform(lo, hi), 1)


def _fmt(v: float) -> str:
    return f"{v:g}"


def _b_pose(rng: random.Random) -> Step:
    x, y = _coord(rng), _coord(rng)
    if x == 0 and y == 0:
        x = 1.0
    X, Y = _fmt(x), _fmt(y)
    m = rng.choice(["", "", "", " m", " meters", " metres"])
    coords = rng.choice([f"x {X} y {Y}", f"x {X}{m}, y {Y}{m}", f"x={X}, y={Y}", f"x={X} y={Y}", f"({X}, {Y})",
                         f"the point ({X}, {Y})", f"coordinates {X}, {Y}", f"position ({X}, {Y})",
                         f"the pose x {X} y {Y}", f"{X}, {Y} on the map", f"map position {X} {Y}",
                         f"x {X}{m} and y {Y}{m}", f"the coordinates ({X}, {Y})"])
    if rng.random() < 0.25:  # a unit on each coordinate, singular for one
        def unit(v: str) -> str:
            one = v in ("1", "-1")
            return rng.choice([" metre" if one else " metres", " meter" if one else " meters", " m"])
        coords = rng.choice([f"x {X}{unit(X)}, y {Y}{unit(Y)}", f"x {X}{unit(X)} and y {Y}{unit(Y)}",
                             f"{X}{unit(X)} in x and {Y}{unit(Y)} in y"])
    verb = rng.choice(["go to", "drive to", "navigate to", "move to", "head to", "go to", "drive over to",
                       "take yourself to", "travel to", "position yourself at", "put yourself at",
                       "set your goal to", "your goal is", "the target pose is", "your destination is",
                       "target:", "the goal is", "drive yourself to"])
    text = f"{verb} {coords}" + (rng.choice([" on the map", " in the map frame", " in map coordinates"])
                                 if rng.random() < 0.15 and "map" not in coords else "")
    if rng.random() < 0.3:
        yaw = rng.choice([0, 90, -90, 180, 45, -45, 135, 30, 60, -120])
        text += rng.choice([f" facing {yaw} degrees", f" with yaw {yaw}", f", heading {yaw} degrees",
                            f" and face {yaw} degrees", f", yaw {yaw}"])
        return text, f"go_to_pose({X}, {Y}, {yaw});", ()
    return text, f"go_to_pose({X}, {Y});", ()


_BASE_MOVE = {
    "move_forward": ["drive forward", "move forward", "go forward", "roll forward", "go straight", "go ahead",
                     "advance", "drive ahead", "move ahead", "go straight ahead", "inch forward", "creep forward"],
    "move_backward": ["back up", "reverse", "move back", "drive backward", "drive backwards", "go backwards",
                      "move backward", "roll back", "back off", "go back"],
}


def _b_move(rng: random.Random, skill: str | None = None) -> Step:
    skill = skill or rng.choice(["move_forward", "move_forward", "move_backward"])
    hi = 300 if skill == "move_forward" else 100
    r = rng.random()
    if r < 0.4:
        cm = rng.choice([c for c in (10, 20, 25, 30, 50, 50, 100, 100, 150, 200, 250, 300) if c <= hi])
    else:
        cm = rng.randrange(10, hi + 1, 10 if rng.random() < 0.8 else 5)
    d = _cm_phrase(rng, cm)
    verb = rng.choice(_BASE_MOVE[skill])
    text = rng.choice([f"{verb} {d}", f"{verb} {d}", f"{verb} by {d}", f"{verb} for {d}"])
    if skill == "move_backward" and rng.random() < 0.3:
        text = rng.choice([f"back up {d}", f"reverse {d}", f"drive {d} backwards", f"go back {d}"])
    if skill == "move_forward" and rng.random() < 0.3:
        text = rng.choice([f"drive {d} forward", f"go {d} forward", f"move {d} ahead", f"roll {d} forward"])
    return text, f"{skill}({cm});", ()


def _b_stop(rng: random.Random) -> Step:
    return rng.choice(["stop", "halt", "stop right there", "stop moving", "freeze", "stand still",
                       "stop where you are", "stop now", "come to a stop", "hold it, stop", "stop driving",
                       "stay where you are and stop", "don't move", "do not move", "stay put", "hold still",
                       "stop all movement", "no more driving", "that's far enough, stop", "brake now", "quit moving",
                       "stop the motion", "don't go any further", "do not drive any further", "wait, stop",
                       "stop right now", "halt immediately", "stop moving at once", "hold your position",
                       "end the motion", "no further, stop", "stop, don't drive on"]), "stop();", ()


def _b_wait(rng: random.Random) -> Step:
    s = rng.choice([0.5, 1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 8, 10, 1.5, 2.5])
    ms = int(round(s * 1000))
    verb = rng.choice(["wait", "pause for", "wait for", "stay put for", "hold on for", "wait there for",
                       "stand still for", "stay there for", "idle for"])
    return f"{verb} {_seconds_phrase(rng, s)}", f"delay({ms});", ()


def _b_say(rng: random.Random) -> tuple[str, str]:
    msg = rng.choice(_BASE_MSGS)
    text = rng.choice(["say {m}", "say '{m}'", "say \"{m}\"", "log {m}", "report '{m}'", "write '{m}' to the log",
                       "send the message '{m}'", "tell the operator '{m}'", "announce '{m}'", "greet them with {m}",
                       "greet them with '{m}'", "log the message '{m}'", "write {m} in the log",
                       "note '{m}' in the log", "put '{m}' in the log"]).format(m=msg)
    return text, f"log('{msg}');"


def _b_log(rng: random.Random) -> Step:
    text, plan = _b_say(rng)
    return text, plan, ()


def _thing_np(rng: random.Random, o: str) -> str:
    return rng.choice(["the ", "a ", "a ", "any ", "my ", "the "]) + o


def _b_scan(rng: random.Random) -> Step:
    o = rng.choice(BASE_THINGS)
    text = rng.choice(["look for {o}", "search for {o}", "scan for {o}", "find {o}", "look around for {o}",
                       "turn until you see {o}", "check for {o}", "try to spot {o}", "scan the room for {o}",
                       "search around for {o}", "watch for {o}", "be on the lookout for {o}",
                       "keep watch for {o}", "keep looking until you see {o}", "rotate until {o} comes into view",
                       "spin around until you spot {o}", "turn in place until you see {o}",
                       "look out for {o}", "search the area for {o}", "locate {o}", "is there {o} anywhere?",
                       "find out whether there is {o} around"]).format(o=_thing_np(rng, o))
    return text, f"_1=scan({snake(o)});->_1;", (o,)


def _b_visible(rng: random.Random) -> Step:
    o = rng.choice(BASE_THINGS)
    text = rng.choice(["can you see {o}?", "is {o} in view?", "do you see {o}?", "is {o} visible?",
                       "check if {o} is in sight", "tell me whether you can see {o}",
                       "is there {o} in front of you?"]).format(o=_thing_np(rng, o))
    return text, f"_1=is_visible({snake(o)});->_1;", (o,)


def _b_goto_scan(rng: random.Random) -> Step:
    p = rng.choice(BASE_PLACES)
    if rng.random() < 0.3:
        o = "person"
        text = rng.choice(["check whether anyone is in {p}", "see if somebody is in {p}", "is anyone in {p}?",
                           "go to {p} and see if anyone is there", "check {p} for people",
                           "drive to {p} and look for a person", "find out if someone is in {p}"])
        text = text.format(p=_place_np(rng, p))
    else:
        o = rng.choice(BASE_THINGS)
        text = rng.choice(["go to {p} and look for {o}", "drive to {p} and search for {o}",
                           "head to {p} and check for {o}", "is there {o} in {p}?", "check if {o} is in {p}",
                           "look for {o} in {p}", "go to {p}, then scan for {o}", "search {p} for {o}",
                           "see whether {p} has {o}", "navigate to {p} and find {o}",
                           "is there {o} anywhere in {p}?", "over in {p}, look for {o}", "in {p}, is there {o}?",
                           "drop by {p} and check it for {o}", "check {p} for {o}", "head into {p} and search it for {o}",
                           "once you are in {p}, look for {o}"])
        text = text.format(p=_place_np(rng, p), o=_thing_np(rng, o))
    return text, f"go_to({snake(p)});_1=scan({snake(o)});->_1;", (p, o)


def _b_conditional(rng: random.Random) -> Step:
    p = rng.choice(BASE_PLACES)
    o = "person" if rng.random() < 0.4 else rng.choice(BASE_THINGS)
    P, O, n = _place_np(rng, p), _thing_np(rng, o), snake(o)
    r = rng.random()
    if r < 0.4:
        say, act = _b_say(rng)
        text = rng.choice([f"if you see {O} in {P}, {say}", f"go to {P} and {say} if you find {O}",
                           f"drive to {P}; if {O} is there, {say}", f"in {P}, look for {O} and {say} when you see it",
                           f"go to {P}, and if there is {O}, {say}", f"should you see {O} in {P}, {say}",
                           f"{say} if you spot {O} in {P}", f"go into {P}; if you notice {O} there, {say}",
                           f"on spotting {O} in {P}, {say}", f"visit {P} and, when you spot {O}, {say}",
                           f"drive to {P}; should you find {O} there, {say}", f"in case {O} is in {P}, {say}",
                           f"check {P}: {say} if {O} is there"])
        return text, f"go_to({snake(p)});_1=scan({n});?_1==True{{{act}}};->_1;", (p, o)
    q = rng.choice([x for x in BASE_PLACES if x != p])
    Q = _place_np(rng, q)
    if r < 0.7:
        text = rng.choice([f"go to {P} and look for {O}; if you find it, go to {Q}",
                           f"check {P} for {O} and if it is there, head to {Q}",
                           f"drive to {P}, search for {O}, and if you see it go on to {Q}",
                           f"look in {P} for {O}; should it be there, continue to {Q}",
                           f"visit {P}, and on finding {O} move on to {Q}"])
        return text, f"go_to({snake(p)});_1=scan({n});?_1==True{{go_to({snake(q)});}};->_1;", (p, o, q)
    if r < 0.85:
        text = rng.choice([f"go to {P} and look for {O}; if you can't find it, go to {Q}",
                           f"search {P} for {O}, and if it isn't there, drive to {Q}",
                           f"drive to {P}; if there is no {o} there, head to {Q}",
                           f"check {P} for {O}; if it is missing, carry on to {Q}",
                           f"look for {O} in {P}, otherwise move on to {Q}",
                           f"search {P} for {O}; if you don't find it, continue to {Q}",
                           f"go to {P} and look for {O}; if it's not there, proceed to {Q}"])
        return text, f"go_to({snake(p)});_1=scan({n});?_1==False{{go_to({snake(q)});}};->_1;", (p, o, q)
    say, act = _b_say(rng)
    text = rng.choice([f"go to {P}; if you can't see {O}, {say}", f"look for {O} in {P} and {say} if it is not there",
                       f"check {P} for {O}; if it is missing, {say}", f"should {O} not be in {P}, {say}"])
    return text, f"go_to({snake(p)});_1=scan({n});?_1==False{{{act}}};->_1;", (p, o)


def _b_route(rng: random.Random) -> Step:
    k = rng.choice([2, 2, 3, 3, 4])
    ps = rng.sample(BASE_PLACES, k)
    names = [_place_np(rng, p) for p in ps]
    r = rng.random()
    if r < 0.35:
        text = rng.choice(["visit ", "go to ", "drive to ", "patrol ", "stop by "]) + \
            ", ".join(names[:-1]) + rng.choice([" and ", ", and ", " and then "]) + names[-1]
    elif r < 0.5:
        text = "go to " + names[0] + "".join(rng.choice([", then ", " then ", ", then to ", " and then to "]) + nm
                                             for nm in names[1:])
    elif r < 0.65:
        head = rng.choice(["swing by ", "stop by ", "pass by ", "drop by ", "call at ", "visit ", "go past "])
        end = rng.choice([", ending at ", ", finishing at ", " and end at ", ", and finally ", ", then finish at ",
                          " and wrap up at "])
        text = head + (", ".join(names[:-2]) + " and " if k > 2 else "") + names[-2] + end + names[-1] \
            if k > 2 else head + names[0] + end + names[1]
    elif r < 0.75:
        order = ["first", "second", "third", "last"]
        text = rng.choice(["make a round: ", "do a tour: ", "route: ", ""]) + ", ".join(
            f"{nm} {order[i] if i < k - 1 else 'last'}" for i, nm in enumerate(names))
    else:
        text = _join_text(rng, [_b_goto(rng, p)[0] for p in ps])
    return text, "".join(f"go_to({snake(p)});" for p in ps), tuple(ps)


_BASE_TIMES = {2: ["twice", "two times", "2 times"], 3: ["three times", "3 times"], 4: ["four times", "4 times"],
               5: ["five times", "5 times"]}


def _b_patrol(rng: random.Random) -> Step:
    a, b = rng.sample(BASE_PLACES, 2)
    n = rng.choice([2, 2, 3, 3, 4, 5])
    times = rng.choice(_BASE_TIMES[n])
    text = rng.choice([f"patrol between {_place_np(rng, a)} and {_place_np(rng, b)} {times}",
                       f"go back and forth between {_place_np(rng, a)} and {_place_np(rng, b)} {times}",
                       f"drive from {_place_np(rng, a)} to {_place_np(rng, b)} and back, {times}",
                       f"do {num_words(n)} laps between {_place_np(rng, a)} and {_place_np(rng, b)}",
                       f"do {n} rounds between {_place_np(rng, a)} and {_place_np(rng, b)}",
                       f"loop between {_place_np(rng, a)} and {_place_np(rng, b)} {times}",
                       f"shuttle between {_place_np(rng, a)} and {_place_np(rng, b)} {times}"])
    return text, f"{n}{{go_to({snake(a)});go_to({snake(b)});}};", (a, b)


def _b_go_return(rng: random.Random) -> Step:
    p, home = rng.choice(BASE_PLACES), rng.choice(["dock", "charging station", "home base", "start", "base station"])
    if p == home:
        p = "kitchen"
    text = rng.choice([f"go to {_place_np(rng, p)} and come back to {_place_np(rng, home)}",
                       f"drive to {_place_np(rng, p)}, then return to {_place_np(rng, home)}",
                       f"visit {_place_np(rng, p)} and go back to {_place_np(rng, home)}"])
    return text, f"go_to({snake(p)});go_to({snake(home)});", (p, home)


def _b_replan(rng: random.Random) -> Step:
    step_text, step_plan, objs = _pick(rng, [(_b_goto, 3.0), (_b_move, 1.0), (_b_turn, 1.0)])(rng)
    say = rng.choice(_REPLAN_SAY)
    text = rng.choice([f"{step_text}, then {say}", f"{step_text} and {say}", f"{step_text}; after that {say}"])
    return text, f"{step_plan}re_plan();", objs


def _b_turn(rng: random.Random) -> Step:
    if rng.random() < 0.1:
        return rng.choice(["face the other way", "turn to face the other way", "reverse your heading",
                           "spin round to face back", "turn back the way you came"]), "turn_cw(180);", ()
    text, plan, objs = _turn(rng)
    return text, plan, objs


_BASE_SINGLE: list[tuple[Callable[[random.Random], Step], float]] = [
    (_b_goto, 6.0), (_b_pose, 2.5), (_b_move, 2.0), (_b_turn, 1.5), (_b_stop, 0.8), (_b_wait, 0.5),
    (_b_log, 0.4), (_b_scan, 1.0), (_b_visible, 0.6), (_b_goto_scan, 2.5), (_b_conditional, 2.5),
    (_b_route, 2.0), (_b_patrol, 0.6), (_b_go_return, 0.8), (_b_replan, 0.4),
]
_BASE_STEP: list[tuple[Callable[[random.Random], Step], float]] = [
    (_b_goto, 4.0), (_b_pose, 1.5), (_b_move, 2.0), (_b_turn, 2.0), (_b_wait, 0.6), (_b_log, 0.6),
    (_b_stop, 0.2),
]


def _base_sample(rng: random.Random) -> tuple[str, str, tuple[str, ...]]:
    if rng.random() < 0.6:
        return _pick(rng, _BASE_SINGLE)(rng)
    n = rng.choice([2, 2, 2, 3, 3])
    steps = [_pick(rng, _BASE_STEP)(rng) for _ in range(n)]
    if rng.random() < 0.2:  # end with a look
        steps.append(_b_scan(rng))
    text = _join_text(rng, [s[0] for s in steps])
    plan = "".join(s[1] for s in steps)
    if plan.count("->_1;") > 0 and not plan.endswith("->_1;"):
        return _b_goto(rng)
    objs = tuple(o for s in steps for o in s[2])
    return text, plan, objs


# ------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------
# scenes and re-plans (drone)
# ------------------------------------------------------------------------------------------
def scene_for(rng: random.Random, named: Iterable[str], present: bool) -> tuple[str, ...]:
    """A scene as a camera drone reports it (TypeFly entries, highest score first): the named
    objects when ``present``, plus 0-3 other COCO classes, or nothing in view at all."""
    from timely_robot.perceivable import COCO_LABELS, scene_entry

    named = [snake(o) for o in named]
    others = rng.sample([c for c in COCO_LABELS if c not in named], rng.choice([0, 1, 1, 2, 2, 3]))
    labels = (named if present else []) + others
    rng.shuffle(labels)
    out = []
    for lb in labels:
        w, h = rng.uniform(0.04, 0.35), rng.uniform(0.04, 0.45)
        out.append(scene_entry(lb, (rng.uniform(w / 2, 1 - w / 2), rng.uniform(h / 2, 1 - h / 2), w, h)))
    return tuple(out)


_REPLAN_SAY = ["plan again", "re-plan", "replan", "think again", "make a new plan", "decide again",
               "come up with a new plan", "plan the rest"]
_TURN_BACK = [("turn around", "turn_cw(180);"), ("turn right", "turn_cw(90);"), ("turn left", "turn_ccw(90);"),
              ("turn 90 degrees", "turn_cw(90);"), ("rotate a quarter turn left", "turn_ccw(90);")]


def _replan_first(rng: random.Random) -> tuple[str, str, str, tuple[str, ...]]:
    """An instruction that asks for a re-plan, its first plan, and the object it is about:
    (text, plan, kind of continuation, objects)."""
    o = _obj(rng, DRONE_OBJECTS)
    n = snake(o)
    say = rng.choice(_REPLAN_SAY)
    r = rng.random()
    if r < 0.5:
        turn_text, turn = rng.choice(_TURN_BACK)
        text = rng.choice(["look for {o}; if you can't see it, {t} and {s}",
                           "if {o} is in view go to it, otherwise {t} and {s}",
                           "check whether you see {o}: go to it if so, else {t} and {s}",
                           "go to {o} if it's visible, if not {t} then {s}"]).format(o=_the(rng, o), t=turn_text, s=say)
        plan = f"_1=is_visible({n});?_1==True{{goto({n});}};?_1==False{{{turn}re_plan();}};"
        return text, plan, "find", (o,)
    if r < 0.8:
        step_text, step_plan, _ = _pick(rng, _DRONE_STEP)(rng)
        text = rng.choice(["{a}, then {s} to find {o}", "{a} and {s}: I want you at {o}",
                           "{a}, then look around and {s} to reach {o}"]).format(a=step_text, s=say, o=_the(rng, o))
        return text, f"{step_plan}re_plan();", "find", (o,)
    text = rng.choice(["take off, {s} and go to {o}", "take off and then {s} to get to {o}"]).format(s=say, o=_the(rng, o))
    return text, "takeoff();re_plan();", "find", (o,)


def _replan_rest(rng: random.Random, o: str, in_view: bool) -> str:
    """What a re-plan writes for a goal about ``o``: go to it when the scene shows it, else search."""
    n = snake(o)
    if in_view:
        return f"goto({n});"
    return f"_1=scan({n});?_1==True{{goto({n});}};->_1;"


def _replan_sample(rng: random.Random) -> tuple[PlanSample, PlanSample]:
    """A re-plan's two generations: the first plan (ends by asking for a re-plan) and the
    continuation, prompted with what was done and the new scene."""
    text, first, _kind, objs = _replan_first(rng)
    in_view = rng.random() < 0.5
    scene = scene_for(rng, objs, in_view)
    return (PlanSample("drone", text, first, (), scene_for(rng, objs, False) if rng.random() < 0.6 else None),
            PlanSample("drone", text, _replan_rest(rng, objs[0], in_view), (), scene, first))


def _objects_list(rng: random.Random, kind: str, used: tuple[str, ...]) -> tuple[str, ...]:
    vocab = {"drone": _DRONE_EXTRA_NOUNS, "base": BASE_PLACES}.get(kind, _ARM_EXTRA_NOUNS)
    k = rng.randint(2, 8)
    names = list(dict.fromkeys(list(used) + rng.sample(vocab, k)))
    rng.shuffle(names)
    return tuple(names)


def _tidy_text(text: str) -> str:
    text = " ".join(text.split())
    return text


@lru_cache(maxsize=4)
def _checker(skill_set_id: str):
    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.prompts.grammar import GrammarChecker, build_plan_grammar

    return GrammarChecker(build_plan_grammar(DEFAULT_SKILL_SETS[skill_set_id]))


def generate(n: int = 6000, seed: int = 0, *, arm_fraction: float = 0.4, objects_fraction: float = 0.4,
             exclude: set[str] | None = None, scene_fraction: float = 0.0,
             replan_fraction: float = 0.0, use_fraction: float = 0.0,
             base_fraction: float = 0.0) -> list[PlanSample]:
    """``n`` distinct samples (deterministic for ``seed``). ``objects_fraction`` of them carry a
    known-objects list (the plan's objects plus distractors, shuffled); the rest none.
    ``scene_fraction`` of the drone samples carry a scene after the instruction (the named objects
    in view half the time; the plan is the same either way), and ``replan_fraction`` of the drone
    draws are a re-plan's two generations (:func:`_replan_sample`), and ``use_fraction`` of the
    drone draws ask for a detector class by kind or purpose (:func:`_by_use`); ``base_fraction`` of
    the draws are a mobile base's (``nav2_base``: :func:`_base_sample`; drawn before the drone/arm
    split, so with 0 the drone and arm samples are those of before). Plans the plan grammar rejects
    (a composition over the plan limits) are skipped."""
    rng = random.Random(seed)
    excl = excluded_instructions() if exclude is None else exclude
    seen: set[str] = set()
    out: list[PlanSample] = []
    tries = 0
    while len(out) < n and tries < n * 50:
        tries += 1
        if base_fraction > 0 and rng.random() < base_fraction:
            kind = "base"
        else:
            kind = "arm" if rng.random() < arm_fraction else "drone"
        if kind == "drone" and replan_fraction > 0 and rng.random() < replan_fraction:
            pair = _replan_sample(rng)
            key = normalise(pair[0].instruction)
            if key in excl or key in seen:
                continue
            seen.add(key)
            out.extend(p for p in pair if _checker("tello_minispec").accepts(p.plan))
            continue
        text, plan, used = (_arm_sample(rng) if kind == "arm" else _base_sample(rng) if kind == "base"
                            else _drone_sample(rng, use_fraction))
        text = _tidy_text(text)
        if rng.random() < 0.08:
            text = text[0].upper() + text[1:]
        if rng.random() < 0.05 and not text.endswith("?"):
            text += rng.choice([".", "!", " please", ", please"])
        key = normalise(text)
        if key in excl or key in seen:
            continue
        if not _checker(SKILL_SET_OF_KIND[kind]).accepts(plan):
            continue
        seen.add(key)
        objs = _objects_list(rng, kind, used) if (rng.random() < objects_fraction) else ()
        scene = (scene_for(rng, used, rng.random() < 0.5)
                 if kind == "drone" and scene_fraction > 0 and rng.random() < scene_fraction else None)
        out.append(PlanSample(kind, text, plan, objs, scene))
    return out[:n]


def to_jsonl(samples: Iterable[PlanSample]) -> str:
    return "".join(json.dumps({"robot_kind": s.robot_kind, "instruction": s.instruction, "plan": s.plan,
                               "objects": list(s.objects),
                               **({} if s.scene is None else {"scene": list(s.scene)}),
                               **({} if s.done is None else {"done": s.done})}) + "\n" for s in samples)


if __name__ == "__main__":  # pragma: no cover - a quick look at the data
    import sys

    for s in generate(int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else 0):
        print(f"[{s.robot_kind}] {s.instruction!r} -> {s.plan}  objs={list(s.objects)}")
