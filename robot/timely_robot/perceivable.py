"""What a robot can perceive by name: a detector's classes and their common names.

A robot finds only what its perception source knows: a drone's detector reports its classes (the
default detector: COCO's 80, :data:`COCO_LABELS`), an arm knows the objects of its workspace.
:data:`SYNONYMS` are the common names of COCO's classes ("kitty" is a cat, "phone" a cell phone):
the detector's own vocabulary, which the drone's perception maps back to the class. With them
:func:`unperceivable` finds, before any plan is written, an instruction that names a COCO class the
robot's detector lacks (a detector node declaring fewer classes, an arm's workspace). Whether a
plan's objects are the instruction's, and perceivable, for any word, is decided before each
segment's dispatch by :mod:`llm_planner_node.grounding.objects`.
"""

from __future__ import annotations

import re
from typing import Iterable

#: the 80 COCO classes (the default detector's, in its class order), spaces as underscores
COCO_LABELS: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic_light", "fire_hydrant", "stop_sign", "parking_meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports_ball", "kite",
    "baseball_bat", "baseball_glove", "skateboard", "surfboard", "tennis_racket", "bottle",
    "wine_glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot_dog", "pizza", "donut", "cake", "chair", "couch", "potted_plant",
    "bed", "dining_table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell_phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy_bear", "hair_drier", "toothbrush",
)

#: common names of COCO classes (and of each other) -> the class
SYNONYMS: dict[str, str] = {
    "kitty": "cat", "kitten": "cat", "cats": "cat", "puppy": "dog", "doggy": "dog", "dogs": "dog",
    "human": "person", "man": "person", "woman": "person", "people": "person", "someone": "person",
    "somebody": "person", "child": "person", "kid": "person", "persons": "person",
    "mug": "cup", "coffee": "cup", "teacup": "cup", "cups": "cup", "phone": "cell_phone",
    "smartphone": "cell_phone", "mobile": "cell_phone", "cellphone": "cell_phone", "sofa": "couch",
    "television": "tv", "plant": "potted_plant", "plants": "potted_plant", "table": "dining_table",
    "ball": "sports_ball", "bike": "bicycle", "motorbike": "motorcycle", "teddy": "teddy_bear",
    "computer": "laptop", "notebook": "laptop", "fridge": "refrigerator", "bag": "handbag",
    "purse": "handbag", "rucksack": "backpack", "books": "book", "bottles": "bottle",
    "glass": "wine_glass", "hairdryer": "hair_drier", "doughnut": "donut", "controller": "remote",
    "oranges": "orange", "apples": "apple", "bananas": "banana", "carrots": "carrot",
}

_WORDS = re.compile(r"[a-z]+")
#: at most this many objects of a scene go into a prompt (the highest-scoring first)
MAX_SCENE_OBJECTS = 12


def scene_entry(label: str, box: tuple[float, float, float, float]) -> str:
    """One object in view as TypeFly's planner prompt writes it: ``cat x:0.28 y:0.52 width:0.10
    height:0.12`` (box centre and size, normalised to the image)."""
    cx, cy, w, h = (min(1.0, max(0.0, float(v))) for v in box)
    return f"{label} x:{cx:.2f} y:{cy:.2f} width:{w:.2f} height:{h:.2f}"


def scene_line(entries: Iterable[str]) -> str:
    """The scene as the prompt's line: ``Scene: [cat x:0.28 ..., person x:0.71 ...]`` (``[]``:
    nothing in view)."""
    return "Scene: [" + ", ".join(list(entries)[:MAX_SCENE_OBJECTS]) + "]"


def _canonical(word: str, known: frozenset[str]) -> str:
    """A word as the class or object it names: itself if the robot knows it, else its synonym's
    class, or the singular of a plural the robot knows."""
    if word in known:
        return word
    w = SYNONYMS.get(word, word)
    if w not in known and w.endswith("s") and w[:-1] in known:
        return w[:-1]
    return w


def _singular(word: str) -> str:
    """A snake_case name with its last word made singular by English's regular rules (``boxes``
    -> ``box``, ``berries`` -> ``berry``, ``cars`` -> ``car``); a name that is not a plural by them
    is itself (``glass``)."""
    head, _, last = word.rpartition("_")
    if len(last) > 4 and last.endswith("ies"):
        last = last[:-3] + "y"
    elif len(last) > 3 and last.endswith(("sses", "xes", "zes", "ches", "shes")):
        last = last[:-2]
    elif len(last) > 3 and last.endswith("s") and not last.endswith(("ss", "us", "is")):
        last = last[:-1]
    return f"{head}_{last}" if head else last


def thing_name(label: str) -> str:
    """One name per thing, whatever a robot, a plan or a person calls it: snake_case lower case,
    a common name as its COCO class (``kitty`` -> ``cat``, ``cell phone`` -> ``cell_phone``), a
    plural as its singular (``cats`` -> ``cat``, ``boxes`` -> ``box``); '' for a label with no
    letters or digits. What the fleet's memory files a sighting under and looks a label up by."""
    word = "_".join(re.findall(r"[a-z0-9]+", label.lower()))
    if word in SYNONYMS:
        return SYNONYMS[word]
    if word in COCO_LABELS or not word:
        return word
    one = _singular(word)
    return SYNONYMS.get(one, one)


def nameable(classes: Iterable[str]) -> tuple[str, ...]:
    """Every name a plan may give a detector's ``classes``: the classes and their common names
    (``plant`` for ``potted_plant``), which the drone's perception maps back to the class."""
    known = tuple(dict.fromkeys(classes))
    return known + tuple(w for w, c in SYNONYMS.items() if c in known and w not in known)


def named_things(instruction: str) -> list[str]:
    """The COCO classes ``instruction`` names (by synonym too), in order."""
    return unperceivable(instruction, ())


def unperceivable(instruction: str, perceivable: Iterable[str]) -> list[str]:
    """The COCO classes ``instruction`` names (by any of their names) that a robot perceiving
    ``perceivable`` (class or object names, snake_case) cannot find, in the order they appear; []
    when it names none."""
    known = frozenset(p.lower() for p in perceivable)
    words = _WORDS.findall(instruction.lower())
    out: list[str] = []
    i = 0
    while i < len(words):
        pair = f"{words[i]}_{words[i + 1]}" if i + 1 < len(words) else ""
        if pair and _canonical(pair, known) in known | set(COCO_LABELS):  # "teddy bear", "cell phone"
            name = _canonical(pair, known)
            if name not in known and name not in out:
                out.append(name)
            i += 2
            continue
        w = words[i]
        name = _canonical(w, known)
        if name not in known and name in COCO_LABELS and name not in out:
            out.append(name)
        i += 1
    return out
