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
    ("touch down", "land();"),
    ("take off and climb 80 cm", "takeoff();move_up(80);"),
    ("go forward half a meter", "move_forward(50);"),
    ("fly backward 2 meters and land", "move_backward(200);land();"),
    ("move 70 centimeters to the left", "move_left(70);"),
    ("shift right by 1.5 m", "move_right(150);"),
    ("descend 60 cm", "move_down(60);"),
    ("rotate 20 degrees clockwise", "turn_cw(20);"),
    ("turn left 75 degrees", "turn_ccw(75);"),
    ("spin around", "turn_cw(360);"),
    ("turn to face the other way", "turn_cw(180);"),
    ("snap a photo", "take_picture();"),
    ("hover for three seconds", "delay(3000);"),
    ("fly to the sofa and take a picture", "goto(sofa);take_picture();"),
    ("search for a helmet", "_1=scan(helmet);?_1==True{goto(helmet);};->_1;"),
    ("find the suitcase and photograph it", "_1=scan(suitcase);?_1==True{goto(suitcase);take_picture();};"),
    ("is there a plant in view?", "_1=is_visible(plant);->_1;"),
    ("fly to the lamp", "goto(lamp);"),
    ("take off, go up 1 m, then turn right 135 degrees", "takeoff();move_up(100);turn_cw(135);"),
    ("fly forward 60 cm three times", "3{move_forward(60);};"),
    ("turn around in four quarter turns, taking a photo after each", "4{turn_cw(90);take_picture();};"),
    ("rise 50 cm then land", "move_up(50);land();"),
    ("fly a triangle with 2 m sides", "3{move_forward(200);turn_cw(120);};"),
    ("look for something to sit on", "_1=scan_abstract('something to sit on');?_1!=False{goto(_1);};->_1;"),
    ("take off and look around for the cat", "takeoff();_1=scan(cat);?_1==True{goto(cat);};->_1;"),
    ("back off 1 meter and go down 30 cm", "move_backward(100);move_down(30);"),
    ("wait one second then take a photo", "delay(1000);take_picture();"),
    ("go left 2 m, then right 2 m", "move_left(200);move_right(200);"),
    ("take off, snap a picture, and land", "takeoff();take_picture();land();"),
    ("fly forward 4 meters", "move_forward(400);"),
    ("go down 1.5 m", "move_down(150);"),
    ("fly right 3.5 meters and then go up 40 cm", "move_right(350);move_up(40);"),
    ("turn to the right by 50 degrees", "turn_cw(50);"),
    ("rotate counterclockwise 100 degrees", "turn_ccw(100);"),
    ("turn left 20 degrees, then turn right 20 degrees", "turn_ccw(20);turn_cw(20);"),
    ("wait 6 seconds", "delay(6000);"),
    ("hold position for 1.5 seconds and then land", "delay(1500);land();"),
    ("go to the table", "goto(table);"),
    ("head over to the printer and land there", "goto(printer);land();"),
    ("go forward 1 m and come back", "move_forward(100);move_backward(100);"),
    ("climb 30 cm and photograph the shelf", "move_up(30);take_picture();"),
)

ARM_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("go back to the start pose", "home();"),
    ("pick up the towel", "look(towel);pick(towel);"),
    ("put the fork in the cupboard", "home();look(fork);pick(fork);place(fork, cupboard);home();"),
    ("place the mug on the tray", "look(mug);pick(mug);place(mug, tray);"),
    ("move the calculator to the shelf", "home();look(calculator);pick(calculator);place(calculator, shelf);home();"),
    ("push the notebook 8 cm", "push(notebook, 80);"),
    ("slide the box 150 mm", "push(box, 150);"),
    ("clean the whiteboard", "wipe(whiteboard);"),
    ("clean the counter", "home();wipe(counter);home();"),
    ("release what you are holding", "open_gripper();"),
    ("grab what is in front of you", "close_gripper();"),
    ("move the tool to x 150, y -250, z 350", "move_to(150, -250, 350);"),
    ("move to x -200 y 300 z 120 with yaw 45", "move_to(-200, 300, 120, 45);"),
    ("wait four seconds", "wait(4);"),
    ("check whether the keys are on the desk", "look(keys);"),
    ("put the pear and the plum in the crate",
     "home();pick(pear);place(pear, crate);pick(plum);place(plum, crate);home();"),
    ("stack the small crate on the big crate",
     "look(small_crate);pick(small_crate);place(small_crate, big_crate);"),
    ("tidy up: put the ruler in the cup and wipe the bench",
     "home();pick(ruler);place(ruler, cup);wipe(bench);home();"),
    ("hand the screwdriver to the operator", "pick(screwdriver);place(screwdriver, operator_hand);"),
    ("lift the jar, wait 1 second, and put it back on the table",
     "pick(jar);wait(1);place(jar, table);"),
    ("drop the coin into the jar", "pick(coin);place(coin, jar);"),
    ("put the glove on the chair", "pick(glove);place(glove, chair);"),
    ("move the torch from the bench to the drawer", "pick(torch);place(torch, drawer);"),
    ("push the crate 12 cm", "push(crate, 120);"),
    ("wipe the shelf", "wipe(shelf);"),
    ("wipe down the kitchen counter", "wipe(kitchen_counter);"),
    ("move the arm home", "home();"),
    ("open the gripper, then go home", "open_gripper();home();"),
    ("go home and close the gripper", "home();close_gripper();"),
)

CHAT_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("say hello", "Hello there! It is nice to meet you."),
    ("tell a tiny story about a seed",
     "A seed slept in the ground. Rain woke it up. It grew into a tall tree."),
    ("tell me something about the moon",
     "The moon circles the Earth about once a month. Its light is sunlight bouncing off its surface."),
    ("give me a fun fact about bees", "Bees talk to each other by dancing. The dance shows where the flowers are."),
)

BASE_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("drive to the dock", "go_to(dock);"),
    ("go to the office and then come back to the dock", "go_to(office);go_to(dock);"),
    ("move ahead one meter", "move_forward(100);"),
    ("back up 30 cm", "move_backward(30);"),
    ("turn right 90 degrees", "turn_cw(90);"),
    ("turn around", "turn_cw(180);"),
    ("go to the point x 4 y 6 on the map", "go_to_pose(4, 6);"),
    ("stop right there", "stop();"),
    ("go to the lab and look for a chair", "go_to(lab);_1=scan(chair);->_1;"),
    ("is there a person in front of you?", "_1=is_visible(person);->_1;"),
)

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "minispec": DRONE_EXAMPLES, "arm": ARM_EXAMPLES, "base": BASE_EXAMPLES, "chat": CHAT_EXAMPLES,
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
