"""Plan corpus: instruction -> plan pairs for the 11 LRTrace tasks (TimelyLLM Table 2).

Each task has a canonical instruction and plan (what the workload generators send) and a
template that generates variations over objects, furniture, distances, angles and colours.
Drone plans are MiniSpec (v1 comma dialect, ~20 tokens); arm plans use the arm skill language
(~10 statements). Every plan in the corpus parses and passes the skill whitelist
(:func:`validate_corpus`, and a test).

    >>> from llm_planner_node.planner_model.corpus import canonical_examples, generate_corpus
    >>> canonical_examples()[0].plan
    '_1=s,cat;?_1==True{g,cat;tp};->_1;'
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Callable, Literal

RobotKind = Literal["drone", "arm", "chat"]
TufClass = Literal["normal", "urgent"]


@dataclass(frozen=True)
class TaskInfo:
    task_id: int
    name: str
    robot_kind: RobotKind
    tuf_class: TufClass
    instruction: str
    plan: str


@dataclass(frozen=True)
class PlanExample:
    task_id: int
    task_name: str
    robot_kind: RobotKind
    tuf_class: TufClass
    instruction: str
    plan: str
    canonical: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Slot vocabularies
# ---------------------------------------------------------------------------------------------
ANIMALS = ["cat", "dog", "rabbit", "parrot", "hamster", "puppy", "kitten", "bird", "turtle"]
ROOMS = ["kitchen", "living room", "bedroom", "hallway", "office", "garage", "bathroom", "attic"]
SMALL_ITEMS = ["keys", "wallet", "phone", "glasses", "remote", "purse", "watch", "charger", "card"]
FURNITURE_TOP = ["cabinet", "shelf", "table", "desk", "dresser", "fridge", "counter", "bookcase"]
TOP_OBJECTS = ["book", "vase", "box", "lamp", "plant", "clock", "cup", "bottle", "laptop"]
FURNITURE_UNDER = ["bed", "sofa", "table", "desk", "chair", "couch", "bench"]
TOYS = ["toy", "ball", "doll", "teddy", "car", "robot", "puzzle", "block"]
PURPOSES = [
    "cutting paper", "writing notes", "opening cans", "fixing screws", "measuring length",
    "drinking water", "cleaning the floor", "lighting the room", "holding papers",
]
PEOPLE = ["person", "child", "worker", "cyclist", "man", "woman", "runner"]
OBSTACLES = ["drone", "ball", "bird", "door", "wall", "pole", "branch"]
DIRECTIONS = {  # obstacle comes from -> evasive MiniSpec move
    "front": "mb", "left": "mr", "right": "ml", "above": "md", "below": "mu", "behind": "mf",
}
CHASERS = ["dog", "cat", "goose", "bird", "bull", "horse", "wolf", "bear"]
COLORS = ["red", "blue", "green", "yellow", "orange", "purple", "white", "black", "pink"]
DESK_ITEMS = ["cup", "pen", "paper", "book", "stapler", "phone", "mug", "notebook", "bottle", "tape"]
BINS = ["drawer", "trash_bin", "box", "shelf", "basket", "tray"]
AREAS = ["desk", "table", "left_side", "right_side", "corner"]
FRUITS = ["apple", "banana", "orange", "pear", "grape", "lemon", "mango", "peach", "kiwi"]
VEGETABLES = ["carrot", "potato", "onion", "tomato", "cabbage", "pepper", "cucumber", "broccoli"]
DISTANCES = list(range(20, 301, 10))  # cm
HEIGHTS = list(range(20, 101, 10))
STEP_ANGLES = [30, 45, 60, 90, 120]


def _us(name: str) -> str:
    return name.replace(" ", "_")


# ---------------------------------------------------------------------------------------------
# Plan builders (one per task)
# ---------------------------------------------------------------------------------------------
def plan_look_for(animal: str, step: int | None = None) -> str:
    if step is None:
        return f"_1=s,{animal};?_1==True{{g,{animal};tp}};->_1;"
    n = 360 // step
    return f"{n}{{_1=iv,{animal};?_1==True{{g,{animal};tp;->True}};tc,{step}}};->False;"


def plan_check_two(a: str, b: str) -> str:
    return f"_1=s,{a};?_1==True{{g,{a};tp}};_2=s,{b};?_2==True{{g,{b};tp}};"


def plan_check_on(obj: str, furniture: str, up: int = 50) -> str:
    return f"g,{furniture};mu,{up};_1=iv,{obj};?_1==True{{tp}};->_1;"


def plan_find_under(obj: str, furniture: str, down: int = 40) -> str:
    return f"g,{furniture};md,{down};_1=s,{obj};?_1==True{{a;tp}};->_1;"


def plan_find_tool(purpose: str) -> str:
    return f"_1=sa,'tool for {purpose}';?_1!=False{{g,_1;tp}};->_1;"


def plan_avoid_injury(who: str, dist: int = 100) -> str:
    return f"mb,{dist};mu,50;_1=iv,{who};?_1==True{{mb,{dist}}};"


def plan_avoid_collision(direction: str, obstacle: str, dist: int = 100) -> str:
    mv = DIRECTIONS[direction]
    return f"{mv},{dist};_1=iv,{obstacle};?_1==True{{{mv},{dist}}};"


def plan_evade(animal: str, up: int = 100, dist: int = 200) -> str:
    return f"mu,{up};_1=iv,{animal};?_1==True{{tc,180;mf,{dist}}};"


def plan_stack(c1: str, c2: str, c3: str) -> str:
    b1, b2, b3 = f"{c1}_box", f"{c2}_box", f"{c3}_box"
    return (
        f"home(); look({b1}); pick({b1}); place({b1}, tray); look({b2}); pick({b2}); "
        f"place({b2}, {b1}); look({b3}); pick({b3}); place({b3}, {b2}); home();"
    )


def plan_desk_clean(items: list[str], bin_: str, area: str) -> str:
    parts = ["home();"]
    for it in items:
        parts.append(f"pick({it}); place({it}, {bin_});")
    parts.append(f"wipe({area}); home();")
    return " ".join(parts)


def plan_classify(items: list[str]) -> str:
    parts = ["home();"]
    for it in items:
        basket = "fruit_basket" if it in FRUITS else "vegetable_basket"
        parts.append(f"pick({it}); place({it}, {basket});")
    parts.append("home();")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# The 11 LRTrace tasks (TimelyLLM Table 2) with canonical instruction and plan
# ---------------------------------------------------------------------------------------------
TASKS: dict[int, TaskInfo] = {
    t.task_id: t
    for t in (
        TaskInfo(1, "look for the cat", "drone", "normal", "look for the cat", plan_look_for("cat")),
        TaskInfo(2, "check for keys or wallets", "drone", "normal", "check for keys or wallets",
                 plan_check_two("keys", "wallet")),
        TaskInfo(3, "check the book on the cabinet", "drone", "normal", "check the book on the cabinet",
                 plan_check_on("book", "cabinet")),
        TaskInfo(4, "find a toy under the bed", "drone", "normal", "find a toy under the bed",
                 plan_find_under("toy", "bed")),
        TaskInfo(5, "find a tool for cutting paper", "drone", "normal", "find a tool for cutting paper",
                 plan_find_tool("cutting paper")),
        TaskInfo(6, "avoiding human injury", "drone", "urgent", "avoid injuring the person in front of you",
                 plan_avoid_injury("person")),
        TaskInfo(7, "preventing potential collision", "drone", "urgent",
                 "prevent a collision with the drone in front of you", plan_avoid_collision("front", "drone")),
        TaskInfo(8, "evading animal pursuit", "drone", "urgent", "evade the dog chasing you", plan_evade("dog")),
        TaskInfo(9, "object stacking", "arm", "normal", "stack the red, blue and green boxes",
                 plan_stack("red", "blue", "green")),
        TaskInfo(10, "desk cleaning", "arm", "normal", "clean the desk",
                 plan_desk_clean(["cup", "pen", "paper"], "drawer", "desk")),
        TaskInfo(11, "fruit and vegetable classification", "arm", "normal",
                 "sort the fruits and vegetables into baskets",
                 plan_classify(["apple", "carrot", "banana", "potato"])),
    )
}

DRONE_TASK_IDS = tuple(i for i, t in TASKS.items() if t.robot_kind == "drone")
ARM_TASK_IDS = tuple(i for i, t in TASKS.items() if t.robot_kind == "arm")


def canonical_examples() -> list[PlanExample]:
    """The 11 canonical (instruction, plan) pairs, task ids 1..11."""
    return [
        PlanExample(t.task_id, t.name, t.robot_kind, t.tuf_class, t.instruction, t.plan, canonical=True)
        for t in TASKS.values()
    ]


# ---------------------------------------------------------------------------------------------
# Variations
# ---------------------------------------------------------------------------------------------
def _v1(r: random.Random) -> tuple[str, str]:
    a = r.choice(ANIMALS)
    k = r.randrange(4)
    if k == 0:
        return f"look for the {a}", plan_look_for(a)
    if k == 1:
        return f"look for the {a} in the {r.choice(ROOMS)}", plan_look_for(a)
    if k == 2:
        return f"find the {a}", plan_look_for(a)
    step = r.choice(STEP_ANGLES)
    return f"look for the {a}, turning {step} degrees at a time", plan_look_for(a, step)


def _v2(r: random.Random) -> tuple[str, str]:
    a, b = r.sample(SMALL_ITEMS, 2)
    k = r.randrange(3)
    if k == 0:
        return f"check for {a} or {b}", plan_check_two(a, b)
    if k == 1:
        return f"check for {a} or {b} in the {r.choice(ROOMS)}", plan_check_two(a, b)
    return f"look for my {a} or {b}", plan_check_two(a, b)


def _v3(r: random.Random) -> tuple[str, str]:
    o, f = r.choice(TOP_OBJECTS), r.choice(FURNITURE_TOP)
    if r.random() < 0.5:
        return f"check the {o} on the {f}", plan_check_on(o, f)
    up = r.choice(HEIGHTS)
    return f"check the {o} on the {f}, rising {up} cm", plan_check_on(o, f, up)


def _v4(r: random.Random) -> tuple[str, str]:
    o, f = r.choice(TOYS), r.choice(FURNITURE_UNDER)
    if r.random() < 0.5:
        return f"find a {o} under the {f}", plan_find_under(o, f)
    down = r.choice(HEIGHTS)
    return f"find a {o} under the {f}, descending {down} cm", plan_find_under(o, f, down)


def _v5(r: random.Random) -> tuple[str, str]:
    p = r.choice(PURPOSES)
    if r.random() < 0.7:
        return f"find a tool for {p}", plan_find_tool(p)
    return f"find something for {p}", plan_find_tool(p)


def _v6(r: random.Random) -> tuple[str, str]:
    w = r.choice(PEOPLE)
    if r.random() < 0.5:
        return f"avoid injuring the {w} in front of you", plan_avoid_injury(w)
    d = r.choice(DISTANCES)
    return f"avoid injuring the {w}, back off {d} cm", plan_avoid_injury(w, d)


def _v7(r: random.Random) -> tuple[str, str]:
    o = r.choice(OBSTACLES)
    direction = r.choice(list(DIRECTIONS))
    where = "in front of you" if direction == "front" else (
        f"on your {direction}" if direction in ("left", "right") else f"{direction} you")
    if r.random() < 0.5:
        return f"prevent a collision with the {o} {where}", plan_avoid_collision(direction, o)
    d = r.choice(DISTANCES)
    return f"prevent a collision with the {o} {where}, move {d} cm", plan_avoid_collision(direction, o, d)


def _v8(r: random.Random) -> tuple[str, str]:
    a = r.choice(CHASERS)
    if r.random() < 0.5:
        return f"evade the {a} chasing you", plan_evade(a)
    up, d = r.choice(HEIGHTS), r.choice(DISTANCES)
    return f"evade the {a} chasing you, climb {up} cm and flee {d} cm", plan_evade(a, up, d)


def _v9(r: random.Random) -> tuple[str, str]:
    c1, c2, c3 = r.sample(COLORS, 3)
    return f"stack the {c1}, {c2} and {c3} boxes", plan_stack(c1, c2, c3)


def _v10(r: random.Random) -> tuple[str, str]:
    items = r.sample(DESK_ITEMS, 3)
    b, area = r.choice(BINS), r.choice(AREAS)
    return (
        f"clean the desk: put the {items[0]}, {items[1]} and {items[2]} in the {b}, then wipe the {area}",
        plan_desk_clean(items, b, area),
    )


def _v11(r: random.Random) -> tuple[str, str]:
    items = r.sample(FRUITS, 2) + r.sample(VEGETABLES, 2)
    r.shuffle(items)
    return (
        f"sort the {', '.join(items[:-1])} and {items[-1]} into fruit and vegetable baskets",
        plan_classify(items),
    )


VARIATIONS: dict[int, Callable[[random.Random], tuple[str, str]]] = {
    1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5, 6: _v6, 7: _v7, 8: _v8, 9: _v9, 10: _v10, 11: _v11,
}


def generate_corpus(
    n_per_task: int = 120, seed: int = 0, canonical_repeats: int = 4, task_ids: tuple[int, ...] | None = None
) -> list[PlanExample]:
    """Canonical examples (repeated ``canonical_repeats`` times) plus up to ``n_per_task``
    distinct variations per task, deterministic for a seed. Order: shuffled with the seed."""
    r = random.Random(seed)
    out: list[PlanExample] = []
    for tid in task_ids or tuple(TASKS):
        t = TASKS[tid]
        for _ in range(canonical_repeats):
            out.append(PlanExample(tid, t.name, t.robot_kind, t.tuf_class, t.instruction, t.plan, True))
        seen = {t.instruction}
        tries = 0
        while len(seen) < n_per_task + 1 and tries < n_per_task * 20:
            tries += 1
            instr, plan = VARIATIONS[tid](r)
            if instr in seen:
                continue
            seen.add(instr)
            out.append(PlanExample(tid, t.name, t.robot_kind, t.tuf_class, instr, plan, False))
    r.shuffle(out)
    return out


def held_out_variations(n_per_task: int = 10, seed: int = 12345, exclude: set[str] | None = None) -> list[PlanExample]:
    """Fresh variations (different seed) not in ``exclude`` — for generalisation checks."""
    r = random.Random(seed)
    out: list[PlanExample] = []
    exclude = exclude or set()
    for tid, t in TASKS.items():
        got, tries = 0, 0
        while got < n_per_task and tries < 1000:
            tries += 1
            instr, plan = VARIATIONS[tid](r)
            if instr in exclude:
                continue
            exclude.add(instr)
            out.append(PlanExample(tid, t.name, t.robot_kind, t.tuf_class, instr, plan, False))
            got += 1
    return out


def segmenter_for(kind: RobotKind) -> str:
    return {"drone": "minispec", "sim": "minispec", "chat": "chat-sentence"}.get(kind, "arm")


def validate_corpus(examples: list[PlanExample]) -> None:
    """Raise PlanError if any plan does not parse or fails the skill whitelist."""
    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS
    from llm_planner_node.segmenters import get_segmenter, segment_all

    for ex in examples:
        ss = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[ex.robot_kind]]
        segment_all(get_segmenter(segmenter_for(ex.robot_kind), ss), [ex.plan])



# ---------------------------------------------------------------------------------------------
# Chat task family (WritingPrompts-style short stories for the chat robot; TimelyLLM 7.4.2)
# ---------------------------------------------------------------------------------------------
# "tell a <mood> story about <a subject> [in <the place>]" -> a 3-5 sentence story of ~40-70 words.
# The mood selects the template (so the story is a function of the instruction, which a tiny model
# can learn exactly); subject and place are copied into it. Chat examples are kept apart from the
# 11 LRTrace tasks: ``canonical_examples()``/``generate_corpus()`` are unchanged; use
# ``canonical_chat_examples()``/``generate_chat_corpus()``. Segmentation: ``get_segmenter("chat")``.
CHAT_TASK_ID = 12
CHAT_TASK_NAME = "short story"
CHAT_SUBJECTS = [
    "fox", "owl", "robot", "dragon", "cat", "rabbit", "bear", "turtle", "mouse", "penguin", "elephant",
    "lion", "duck", "frog", "squirrel", "wolf", "tiger", "horse", "goat", "puppy", "kitten", "snail",
    "bee", "whale", "unicorn", "octopus", "hedgehog", "badger", "camel", "parrot", "monkey", "dolphin",
]
CHAT_PLACES = [
    "forest", "village", "city", "desert", "garden", "castle", "library", "kitchen", "harbor", "jungle",
    "meadow", "school", "museum", "farm", "island", "park", "valley", "lighthouse",
]
CHAT_DEFAULT_PLACE = "village"
CHAT_VERBS = ["tell a", "tell me a", "write a"]
CHAT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "short": (
        "Once upon a time, {a_subj} lived in the {place}.",
        "Every morning the {subj} watched the sky and dreamed of a long journey.",
        "One day a strong wind carried an old map to its feet.",
        "The {subj} followed the map and found a hidden garden full of light.",
        "From then on, the {subj} shared the garden with every friend it met.",
    ),
    "funny": (
        "{A_subj} in the {place} decided to learn how to dance.",
        "The first lesson ended with the {subj} tangled in a curtain.",
        "The second lesson ended with a broken teapot and a very surprised cat.",
        "By the third lesson, the {subj} had invented a brand new dance that everyone in the {place} still does today.",
    ),
    "sad": (
        "The old {subj} sat alone in the {place} as the cold rain began to fall.",
        "Its best friend had moved far away last spring.",
        "Each evening the {subj} left a small light burning in the window and waited.",
        "No one came, but the {subj} kept the light on, just in case.",
    ),
    "happy": (
        "{A_subj} found a shiny golden key in the {place}.",
        "The key opened a tiny door under an old tree.",
        "Behind the door was a party with music, cake and dozens of new friends.",
        "The {subj} danced until the stars came out and walked home with a big smile.",
    ),
    "bedtime": (
        "As night fell over the {place}, a sleepy {subj} curled up under a warm blanket.",
        "The moon sang a gentle song through the window.",
        "The {subj} dreamed of flying over mountains, rivers and sleeping towns.",
        "In the morning, the {subj} woke up happy and ready for a new day.",
    ),
}
CHAT_MOODS = tuple(CHAT_TEMPLATES)
#: The three canonical chat instructions (greedy generation is tested on these).
CHAT_CANONICAL_SUBJECTS = ("fox", "robot", "dragon")


def _article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def chat_story(subject: str, mood: str = "short", place: str | None = None) -> str:
    """The story for one chat instruction (sentences joined by single spaces)."""
    a = _article(subject)
    slots = {"subj": subject, "a_subj": a, "A_subj": a[0].upper() + a[1:], "place": place or CHAT_DEFAULT_PLACE}
    return " ".join(s.format(**slots) for s in CHAT_TEMPLATES[mood])


def chat_instruction(subject: str, mood: str = "short", place: str | None = None, verb: str = "tell a") -> str:
    text = f"{verb} {mood} story about {_article(subject)}"
    return f"{text} in the {place}" if place else text


def _chat_example(instr: str, story: str, canonical: bool = False) -> PlanExample:
    return PlanExample(CHAT_TASK_ID, CHAT_TASK_NAME, "chat", "normal", instr, story, canonical)


def canonical_chat_examples() -> list[PlanExample]:
    """Three canonical chat goals: "tell a short story about a fox/robot/dragon"."""
    return [_chat_example(chat_instruction(s), chat_story(s), True) for s in CHAT_CANONICAL_SUBJECTS]


def _vchat(r: random.Random) -> tuple[str, str]:
    subj, mood, verb = r.choice(CHAT_SUBJECTS), r.choice(CHAT_MOODS), r.choice(CHAT_VERBS)
    place = r.choice(CHAT_PLACES) if r.random() < 0.6 else None
    return chat_instruction(subj, mood, place, verb), chat_story(subj, mood, place)


def generate_chat_corpus(n: int = 400, seed: int = 0, canonical_repeats: int = 4) -> list[PlanExample]:
    """Canonical chat examples (repeated) plus up to ``n`` distinct variations, shuffled, deterministic."""
    r = random.Random(seed + 7919)
    out = [ex for ex in canonical_chat_examples() for _ in range(canonical_repeats)]
    seen = {ex.instruction for ex in out}
    tries = 0
    while len(seen) < n + len(CHAT_CANONICAL_SUBJECTS) and tries < n * 20:
        tries += 1
        instr, story = _vchat(r)
        if instr in seen:
            continue
        seen.add(instr)
        out.append(_chat_example(instr, story))
    r.shuffle(out)
    return out


def held_out_chat_variations(n: int = 10, seed: int = 12345, exclude: set[str] | None = None) -> list[PlanExample]:
    r = random.Random(seed)
    exclude = set(exclude or ())
    out: list[PlanExample] = []
    tries = 0
    while len(out) < n and tries < 1000:
        tries += 1
        instr, story = _vchat(r)
        if instr not in exclude:
            exclude.add(instr)
            out.append(_chat_example(instr, story))
    return out
