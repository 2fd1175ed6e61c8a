"""Worked examples for instruct models, one library per plan language, and their retrieval.

Each goal's prompt carries the ``k`` examples most similar to its instruction (word overlap,
TypeFly-style few-shot), after the fixed system message so the prefix cache still serves that.
Retrieval is deterministic and cheap: Jaccard overlap of normalised word sets (numbers and
number words count as one token ``<num>``), ties broken by library order.

The examples are written in the form the prompt teaches (full skill names, ``name(args);``).
They are never taken from the plan benchmark's instructions (``bench/plans_heldout.jsonl``;
a test checks the two sets do not share an instruction).
"""

from __future__ import annotations

import re
from functools import lru_cache

DRONE_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("take off", "takeoff();"),
    ("land now", "land();"),
    ("take off and climb 80 cm", "takeoff();move_up(80);"),
    ("go forward half a meter", "move_forward(50);"),
    ("fly backward 2 meters and land", "move_backward(200);land();"),
    ("move 30 centimeters to the left", "move_left(30);"),
    ("shift right by 1.5 m", "move_right(150);"),
    ("descend 40 cm", "move_down(40);"),
    ("rotate 90 degrees clockwise", "turn_cw(90);"),
    ("turn left 45 degrees", "turn_ccw(45);"),
    ("spin around", "turn_cw(360);"),
    ("turn to face the other way", "turn_cw(180);"),
    ("snap a photo", "take_picture();"),
    ("hover for three seconds", "delay(3000);"),
    ("go to the chair and take a picture", "goto(chair);take_picture();"),
    ("search for a backpack", "_1=scan(backpack);?_1==True{goto(backpack);};->_1;"),
    ("find the umbrella and photograph it", "_1=scan(umbrella);?_1==True{goto(umbrella);take_picture();};"),
    ("is there a plant in view?", "_1=is_visible(plant);->_1;"),
    ("fly to the window", "goto(window);"),
    ("take off, go up 1 m, then turn right 90 degrees", "takeoff();move_up(100);turn_cw(90);"),
    ("fly forward 60 cm three times", "3{move_forward(60);};"),
    ("turn around in four quarter turns, taking a photo after each", "4{turn_cw(90);take_picture();};"),
    ("rise 50 cm then land", "move_up(50);land();"),
    ("fly in a square with 1 m sides", "4{move_forward(100);turn_cw(90);};"),
    ("look for something to sit on", "_1=scan_abstract('something to sit on');?_1!=False{goto(_1);};->_1;"),
    ("take off and look around for the ball", "takeoff();_1=scan(ball);?_1==True{goto(ball);};->_1;"),
    ("back off 1 meter and go down 30 cm", "move_backward(100);move_down(30);"),
    ("wait one second then take a photo", "delay(1000);take_picture();"),
    ("go left 2 m, then right 2 m", "move_left(200);move_right(200);"),
    ("take off, snap a picture, and land", "takeoff();take_picture();land();"),
)

ARM_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("go to the home position", "home();"),
    ("pick up the sponge", "look(sponge);pick(sponge);"),
    ("put the spoon in the drawer", "home();look(spoon);pick(spoon);place(spoon, drawer);home();"),
    ("place the mug on the tray", "look(mug);pick(mug);place(mug, tray);"),
    ("move the stapler to the shelf", "home();look(stapler);pick(stapler);place(stapler, shelf);home();"),
    ("push the notebook 8 cm", "push(notebook, 80);"),
    ("slide the box 150 mm", "push(box, 150);"),
    ("wipe the table", "wipe(table);"),
    ("clean the counter", "home();wipe(counter);home();"),
    ("open the gripper", "open_gripper();"),
    ("grab what is in front of you", "close_gripper();"),
    ("move the tool to x 300, y -100, z 250", "move_to(300, -100, 250);"),
    ("move to x 0 y 400 z 120 with yaw 90", "move_to(0, 400, 120, 90);"),
    ("wait two seconds", "wait(2);"),
    ("check whether the scissors are on the desk", "look(scissors);"),
    ("put the lemon and the onion in the bowl",
     "home();pick(lemon);place(lemon, bowl);pick(onion);place(onion, bowl);home();"),
    ("stack the yellow cube on the purple cube",
     "look(yellow_cube);pick(yellow_cube);place(yellow_cube, purple_cube);"),
    ("tidy up: put the marker in the cup and wipe the desk",
     "home();pick(marker);place(marker, cup);wipe(desk);home();"),
    ("hand the screwdriver to the operator", "pick(screwdriver);place(screwdriver, operator_hand);"),
    ("lift the can, wait 1 second, and put it back on the table",
     "pick(can);wait(1);place(can, table);"),
)

CHAT_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("say hello", "Hello there! It is nice to meet you."),
    ("tell a tiny story about a seed",
     "A seed slept in the ground. Rain woke it up. It grew into a tall tree."),
    ("tell me something about the moon",
     "The moon circles the Earth about once a month. Its light is sunlight bouncing off its surface."),
    ("give me a fun fact about bees", "Bees talk to each other by dancing. The dance shows where the flowers are."),
)

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "minispec": DRONE_EXAMPLES, "arm": ARM_EXAMPLES, "chat": CHAT_EXAMPLES,
}

_NUMBER_WORDS = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "half",
                 "quarter", "twenty", "thirty", "fifty", "hundred"}
_STOP = {"the", "a", "an", "and", "then", "to", "of", "it", "by", "on", "in", "at", "is", "me", "please", "your"}


def words(text: str) -> frozenset[str]:
    """Normalised content words of an instruction (numbers -> ``<num>``)."""
    out = set()
    for w in re.findall(r"[a-z]+|\d+(?:\.\d+)?", text.lower()):
        if w[0].isdigit() or w in _NUMBER_WORDS:
            out.add("<num>")
        elif w not in _STOP:
            out.add(w[:-1] if len(w) > 4 and w.endswith("s") else w)
    return frozenset(out)


@lru_cache(maxsize=4096)
def retrieve(instruction: str, language: str, k: int = 4) -> tuple[tuple[str, str], ...]:
    """The ``k`` library examples of ``language`` most similar to ``instruction`` (Jaccard
    overlap of :func:`words`), most similar last (closest to the question), deterministic."""
    lib = EXAMPLES.get(language, ())
    if k <= 0 or not lib:
        return ()
    q = words(instruction)

    def score(i: int) -> tuple[float, int]:
        w = words(lib[i][0])
        union = len(q | w) or 1
        return (len(q & w) / union, -i)

    best = sorted(range(len(lib)), key=score, reverse=True)[:k]
    return tuple(lib[i] for i in reversed(best))
