"""LRTrace-like plans (TimelyLLM Table 2) for the simulator.

Eight drone traces (1-5 normal, 6-8 urgent; ~20-token MiniSpec plans of 3-5 segments) and three
arm traces (9-11; ~100-token pick-and-place plans). The paper's plans are not published, so
these are written in the same style; token counts are estimated at ~2 characters per token (a
Llama-3 tokenizer on MiniSpec code), plus one end-of-sequence token on the last segment.

Prompts: the paper's robot-control context is 170.35 MB of Llama3-8B KV = ~1,300 tokens, mostly
the skill set, guidance and examples pre-stored on the server (the shared prefix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from timely_robot.skills import INDY7_ARM, NAV2_BASE, TELLO_MINISPEC, SkillSet
from llm_planner_node.core.tuf import NORMAL, URGENT, TUFParams
from llm_planner_node.engines.sim_engine import SimPrompt, SimSegment

DRONE_PREFIX_TOKENS = 1250
ARM_PREFIX_TOKENS = 1500
BASE_PREFIX_TOKENS = 1100
TASK_TOKENS = 50


@dataclass(frozen=True)
class Trace:
    """One LRTrace task: which robot kind, task type and TUF, and the plan the LLM writes."""

    id: int
    description: str
    robot_kind: str
    task_type: str
    tuf: TUFParams
    prompt: SimPrompt
    max_tokens: int


def _tokens(text: str) -> int:
    return max(3, math.ceil(len(text) / 2))


def _plan(skills: SkillSet, statements: list[tuple[str, str, tuple[Any, ...]]],
          prefix_tokens: int) -> SimPrompt:
    segs = []
    for i, (text, skill, args) in enumerate(statements):
        eos = 1 if i == len(statements) - 1 else 0
        segs.append(SimSegment(text, _tokens(text) + eos, (skills.validate(skill, args),)))
    return SimPrompt(prefix_tokens, TASK_TOKENS, tuple(segs), skills.id)


def _drone(tid: int, desc: str, urgent: bool, statements: list[tuple[str, str, tuple[Any, ...]]]) -> Trace:
    return Trace(tid, desc, "drone", "drone-urgent" if urgent else "drone-normal",
                 URGENT if urgent else NORMAL, _plan(TELLO_MINISPEC, statements, DRONE_PREFIX_TOKENS), 64)


def _arm(tid: int, desc: str, statements: list[tuple[str, str, tuple[Any, ...]]]) -> Trace:
    return Trace(tid, desc, "arm", "arm", NORMAL, _plan(INDY7_ARM, statements, ARM_PREFIX_TOKENS), 192)


def _pick_place(obj: str, target: str, x: int, y: int) -> list[tuple[str, str, tuple[Any, ...]]]:
    return [(f"move_to({x},{y},150);", "move_to", (x, y, 150)), (f"pick({obj});", "pick", (obj,)),
            (f"place({obj},{target});", "place", (obj, target))]


TRACES: dict[int, Trace] = {t.id: t for t in (
    _drone(1, "look for the cat", False, [
        ("tc(90);", "tc", (90,)), ("s('cat');", "s", ("cat",)), ("g('cat');", "g", ("cat",)),
        ("tp();", "tp", ())]),
    _drone(2, "check for keys or wallets", False, [
        ("s('keys');", "s", ("keys",)), ("s('wallet');", "s", ("wallet",)), ("a();", "a", ()),
        ("tp();", "tp", ()), ("l('found');", "l", ("found",))]),
    _drone(3, "check the book on the cabinet", False, [
        ("mu(50);", "mu", (50,)), ("o('cabinet');", "o", ("cabinet",)), ("a();", "a", ()),
        ("p('book title');", "p", ("book title",))]),
    _drone(4, "find a toy under the bed", False, [
        ("md(40);", "md", (40,)), ("s('toy');", "s", ("toy",)), ("g('toy');", "g", ("toy",)),
        ("tp();", "tp", ())]),
    _drone(5, "find a tool for cutting paper", False, [
        ("s('scissors');", "s", ("scissors",)), ("g('scissors');", "g", ("scissors",)),
        ("tp();", "tp", ())]),
    _drone(6, "avoiding human injury", True, [
        ("mb(100);", "mb", (100,)), ("mu(50);", "mu", (50,)), ("d(500);", "d", (500,)),
        ("lnd();", "lnd", ())]),
    _drone(7, "preventing potential collision", True, [
        ("mu(80);", "mu", (80,)), ("tc(90);", "tc", (90,)), ("mf(50);", "mf", (50,))]),
    _drone(8, "evading animal pursuit", True, [
        ("mu(150);", "mu", (150,)), ("mb(200);", "mb", (200,)), ("tu(180);", "tu", (180,)),
        ("s('animal');", "s", ("animal",))]),
    _arm(9, "object stacking", [
        *_pick_place("red_block", "table_center", 320, -150),
        *_pick_place("blue_block", "red_block", 280, 120),
        *_pick_place("green_block", "blue_block", 410, 60), ("look(tower);", "look", ("tower",)),
        ("home();", "home", ())]),
    _arm(10, "desk cleaning", [
        *_pick_place("cup", "shelf", 250, -300), *_pick_place("pen", "drawer", 380, 40),
        *_pick_place("plate", "shelf", 300, 260),
        ("wipe(desk_left);", "wipe", ("desk_left",)), ("wipe(desk_right);", "wipe", ("desk_right",)),
        ("home();", "home", ())]),
    _arm(11, "fruit and vegetable classification", [
        *_pick_place("apple", "fruit_bin", 300, -200), *_pick_place("carrot", "vegetable_bin", 350, 0),
        *_pick_place("banana", "fruit_bin", 420, 180), ("home();", "home", ())]),
)}


def _base(tid: int, desc: str, statements: list[tuple[str, str, tuple[Any, ...]]]) -> Trace:
    return Trace(tid, desc, "base", "base", NORMAL, _plan(NAV2_BASE, statements, BASE_PREFIX_TOKENS), 64)


#: Mobile-base tasks in the same style (not the papers'; kept apart from :data:`TRACES`, whose 11
#: tasks are the reproduction's): places of the Nav2 simulator's room, MiniSpec with its aliases.
BASE_TRACES: dict[int, Trace] = {t.id: t for t in (
    _base(12, "deliver to the kitchen and come back to the dock", [
        ("gt(kitchen);", "gt", ("kitchen",)), ("d(2000);", "d", (2000,)), ("gt(dock);", "gt", ("dock",))]),
    _base(13, "check the hall and the office for people", [
        ("gt(hall);", "gt", ("hall",)), ("s('person');", "s", ("person",)), ("gt(office);", "gt", ("office",)),
        ("s('person');", "s", ("person",))]),
    _base(14, "look for the box in the lab", [
        ("gt(lab);", "gt", ("lab",)), ("s('box');", "s", ("box",)), ("l('box checked');", "l", ("box checked",))]),
)}


def trace(trace_id: int) -> Trace:
    """The trace of ``trace_id``: one of the papers' eleven (:data:`TRACES`) or a base's
    (:data:`BASE_TRACES`); KeyError for any other id."""
    return TRACES[trace_id] if trace_id in TRACES else BASE_TRACES[trace_id]
