"""Whether a plan's objects are what its instruction asks for, and things the robot can perceive.

No grammar forces a substitute: a camera drone's admits any name, an arm's its objects and the
instruction's own words (:func:`grammar_objects`, :func:`instruction_names`, in core/text.py); a
robot that declares no objects is prompted with the instruction's own words as its known objects
(prompts/builders.py), so its planner names what it was asked about. Before a segment is
dispatched, every object one of its calls looks for, goes to or acts on (``ArgSpec.is_object``)
is checked (:meth:`ObjectCheck.problem`), trusting neither the model nor a word list:

1. **The instruction's thing.** The object is one the instruction names (:func:`literally_named`:
   a word or two adjacent words of it, singular or plural, another name of the same detector
   class, "kitty" and ``cat``, or the head of a compound, a red block is a block), or its meaning
   is close enough (:func:`relatedness` with :class:`~.meaning.Meaning`: a synonym, a kind of
   it, a thing that serves the stated purpose, "scissors" for "a tool for cutting paper") to
   reach the calibrated threshold (:data:`THRESHOLD_FILE`, fitted on :data:`CALIBRATION_FILE`
   only by ``timely-fleet bench substitution --calibrate``; the bench evaluates on instructions
   kept apart). Else the plan is about something else: refused, ``RejectReason.SUBSTITUTED``,
   naming both things. Where an arm puts an object (:data:`WHERE_ARGS`) is exempt: instructions
   seldom say where ("stack the boxes" puts the first on the table's centre).
2. **A thing the robot can perceive.** The object is one of the robot's perceivable classes or
   objects by any of its names (``config.params.perceivable_objects``; None there: anything).
   Else refused, ``RejectReason.UNPERCEIVABLE``, naming it (and the instruction's word for it),
   the closest things the robot knows and what it can perceive (:func:`unperceivable_refusal`,
   the message the intake gives for a class the robot lacks).

Function words ("the", "my", "for": :data:`FUNCTION_WORDS`) are offered neither to the grammar nor
in the prompt.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from timely_robot.outcomes import RejectReason, Rejection
from timely_robot.perceivable import COCO_LABELS, SYNONYMS, nameable
from timely_robot.skills import SkillCall, SkillSet
from llm_planner_node.core.text import (FUNCTION_WORDS, MAX_NAME_CHARS, MAX_NAMES, content_words,  # noqa: F401
                                        instruction_names, safe_text)
from llm_planner_node.grounding.meaning import Meaning, MeaningUnavailable

#: the calibrated threshold and how it was fitted (written by ``bench substitution --calibrate``)
THRESHOLD_FILE = Path(__file__).resolve().parent / "threshold.json"
#: the calibration set (instructions, the thing each asks about, the classes a plan may look for)
CALIBRATION_FILE = Path(__file__).resolve().parent / "calibration.jsonl"
_WORDS = re.compile(r"[a-z]+")


def grammar_objects(known: Sequence[str], instruction: str) -> tuple[str, ...]:
    """A goal's plan-grammar objects: the robot's (``known``; empty: any name, and so stays) and
    the instruction's own names."""
    if not known:
        return ()
    return tuple(dict.fromkeys((*known, *instruction_names(instruction))))


def word_forms(word: str) -> set[str]:
    """A word and its singular or plural (cat/cats, box/boxes, battery/batteries)."""
    out = {word, word + "s", word + "es"}
    if word.endswith("ies"):
        out.add(word[:-3] + "y")
    if word.endswith("es"):
        out.add(word[:-2])
    if word.endswith("s"):
        out.add(word[:-1])
    if word.endswith("y"):
        out.add(word[:-1] + "ies")
    return out


def names_of(obj: str) -> set[str]:
    """Every name of ``obj``: itself, and when it is a detector class or a common name of one,
    the class and all its common names (``kitty`` -> cat, kitten, kitty, ...)."""
    cls = SYNONYMS.get(obj, obj)
    return {obj, cls} | {w for w, c in SYNONYMS.items() if c == cls}


def literally_named(obj: str, instruction: str) -> bool:
    """True if the instruction names ``obj`` itself: one of its names (:func:`names_of`), or
    the head (last word) of a name of several words (a red block is a block: "red_block" in
    "stack the blocks"), is a word or a pair of adjacent words of the instruction, singular or
    plural; a head naming another detector class does not count (a hot dog is no dog)."""
    said = _said(instruction) | set(_WORDS.findall(instruction.lower()))  # "push the can": a noun, too
    names = names_of(obj)
    cls = SYNONYMS.get(obj, obj)
    # a hot dog is no dog: a head that names another detector class does not count
    heads = {h for h in (n.rsplit("_", 1)[1] for n in names if "_" in n)
             if SYNONYMS.get(h, h) == cls or SYNONYMS.get(h, h) not in COCO_LABELS}
    return any(f in said for n in names | heads for f in word_forms(n))


@lru_cache(maxsize=4096)
def _said(instruction: str) -> frozenset[str]:
    """Every content word and adjacent pair of ``instruction`` (however long)."""
    runs = content_words(instruction)
    return frozenset([w for r in runs for w in r] + [f"{a}_{b}" for r in runs for a, b in zip(r, r[1:])])


def object_text(obj: str) -> str:
    """An object name as words (``cell_phone`` -> "cell phone")."""
    return obj.replace("_", " ").strip()


#: where an arm's objects are: an arm's instruction about its workspace ("clean the desk") is
#: about the objects on it, so an arm's object is judged as one lying there
ARM_PLACE = "on the desk"


def relatedness(meaning: Meaning, obj: str, instruction: str, robot_kind: str = "drone") -> float:
    """How close ``obj`` is in meaning to what ``instruction`` asks for: the higher cosine
    similarity of the object's words (an arm's: the object on its desk, :data:`ARM_PLACE`) with
    the whole instruction, and of the object with the instruction's closest word or pair of words
    (a kind: "apple" and "fruits")."""
    text = object_text(obj) + (f" {ARM_PLACE}" if robot_kind == "arm" else "")
    words = [object_text(n) for n in _said(instruction)]
    vs = meaning.vectors([text, instruction.strip().lower(), object_text(obj), *words])
    whole = float(vs[0] @ vs[1])
    return max([whole, *(float(vs[2] @ w) for w in vs[3:])])


def load_threshold(path: Path = THRESHOLD_FILE) -> float:
    """The calibrated similarity threshold (:data:`THRESHOLD_FILE`)."""
    return float(json.loads(path.read_text())["threshold"])


def unperceivable_refusal(robot_id: str, robot_kind: str, names: Sequence[str], known: Sequence[str],
                          near: Sequence[str] = (), as_planned: str = "") -> Rejection:
    """The refusal of a goal or plan about ``names``, which a robot perceiving ``known`` cannot
    find: it names them (and ``as_planned``, the plan's word for it, when another), the known
    things ``near`` them in meaning, what the robot can perceive, and how to give it more."""
    listed = ", ".join(f"'{safe_text(m, 40)}'" for m in names[:3])
    if as_planned:
        listed += f" (the plan's '{safe_text(as_planned, 40)}')"
    if near:
        listed += f" (the closest it knows: {', '.join(near)})"
    if robot_kind == "base" and not known:
        return Rejection(RejectReason.UNPERCEIVABLE,
                         f"{robot_id} cannot perceive {listed}: it has no perception source (a base's scan and "
                         f"is_visible need robots[{robot_id}].perception); it can go to its places")
    if robot_kind == "base":
        return Rejection(RejectReason.UNPERCEIVABLE,
                         f"{robot_id} cannot perceive {listed}: its detections topic reports {len(known)} classes "
                         f"({', '.join(known[:12])}{', ...' if len(known) > 12 else ''}); if its detector reports "
                         f"more, list them in robots[{robot_id}].perception.classes")
    if robot_kind == "arm":
        return Rejection(RejectReason.UNPERCEIVABLE,
                         f"{robot_id} has no {listed} among its objects ({', '.join(known[:12])}"
                         f"{', ...' if len(known) > 12 else ''}): add it to robots[{robot_id}].objects and "
                         "its perception, or ask about one of these")
    return Rejection(RejectReason.UNPERCEIVABLE,
                     f"{robot_id} cannot perceive {listed}: its detector knows {len(known)} classes "
                     f"({', '.join(known[:8])}, ...); set robots[{robot_id}].perception.vlm to ask "
                     "a vision-language model about anything (docs/guides/perception.md)")


@dataclass(frozen=True)
class Verdict:
    """What the check found of one object: its score (None: named literally), and the refusal."""

    obj: str
    score: float | None
    refusal: Rejection | None


class ObjectCheck:
    """The check of a plan's objects against its instruction and its robot (module docstring)."""

    def __init__(self, meaning: Meaning | None = None, threshold: float | None = None) -> None:
        """``meaning``: the model of word meaning (default: the process's one; loaded on first use);
        ``threshold``: the similarity an object needs (default: the calibrated one)."""
        self.meaning = meaning if meaning is not None else Meaning.shared()
        self._worker: Any = None  # a ThreadPoolExecutor of one thread, made at the first prepare
        self._worker_lock = threading.Lock()
        self.threshold = load_threshold() if threshold is None else threshold

    def judge(self, obj: str, instruction: str, robot_id: str, robot_kind: str,
              known: Sequence[str] | None, extra: Iterable[str] = (), *, where: bool = False) -> Verdict:
        """The verdict on ``obj`` in a plan for ``instruction`` on a robot that perceives
        ``known`` (None: anything) and also knows ``extra`` (its declared objects, what is in view).
        ``where``: the object is where another is put (``place``'s target: "the table's centre"
        for "stack the boxes"), which instructions seldom say: it must be perceivable only."""
        score: float | None = None
        if not where and not literally_named(obj, instruction):
            try:
                score = relatedness(self.meaning, obj, instruction, robot_kind)
            except MeaningUnavailable as e:
                return Verdict(obj, None, Rejection(
                    RejectReason.SUBSTITUTED, f"cannot check that the plan's '{safe_text(obj, 40)}' is what the "
                                              f"instruction asks for: {e}"))
            if score < self.threshold:
                asked = self.asked_thing(instruction)
                about = f" asks about '{asked}'" if asked else " asks for"
                return Verdict(obj, score, Rejection(
                    RejectReason.SUBSTITUTED,
                    f"the plan names '{safe_text(obj, 40)}', but the instruction{about} "
                    f"('{safe_text(instruction, 80)}'; similarity {score:.2f} < {self.threshold:.2f}): refused "
                    "before it runs"))
        if known is not None:
            names = set(nameable(known)) | set(extra)
            if obj not in names:
                named, as_planned = obj, ""
                if score is not None and obj not in FUNCTION_WORDS:  # the plan's own word: name the instruction's too
                    asked = self.closest(obj, [w for r in content_words(instruction) for w in r], k=1)
                    if asked and asked[0] != obj:
                        named, as_planned = asked[0], obj
                why = unperceivable_refusal(robot_id, robot_kind, [named], list(known),
                                            self.closest(named, [*known, *extra]), as_planned=as_planned)
                return Verdict(obj, score, why)
        return Verdict(obj, score, None)

    def asked_thing(self, instruction: str) -> str:
        """What ``instruction`` is about, in its own words: its word or pair of words closest in
        meaning to the whole ("toolbox" in "search the room for a toolbox"); "" if none."""
        words = sorted(_said(instruction))
        if not words:
            return ""
        try:
            vs = self.meaning.vectors([instruction.strip().lower(), *map(object_text, words)])
        except MeaningUnavailable:
            return ""
        return max(zip((float(vs[0] @ v) for v in vs[1:]), words))[1]

    def prepare(self, instruction: str, robot_kind: str, known: Sequence[str] = ()) -> None:
        """Start encoding what checks of ``instruction``'s plans will read (the instruction, its
        words, the robot's ``known`` objects) on the check's own worker thread, if the model is
        loaded: neither the caller (a ROS executor's thread) nor, later, the scheduler thread
        waits for it; the checks find it in the cache."""
        if not self.meaning.loaded:
            return
        names = [object_text(n) for n in known]
        place = [f"{n} {ARM_PLACE}" for n in names] if robot_kind == "arm" else []
        texts = [instruction.strip().lower(), *map(object_text, _said(instruction)), *names, *place]
        with self._worker_lock:
            if self._worker is None:
                from concurrent.futures import ThreadPoolExecutor

                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="object-check")
            self._worker.submit(self._encode, texts)

    def _encode(self, texts: list[str]) -> None:
        try:
            self.meaning.vectors(texts)
        except MeaningUnavailable:
            pass

    def closest(self, obj: str, known: Sequence[str], k: int = 3) -> list[str]:
        """The ``k`` names of ``known`` closest in meaning to ``obj`` ([] without the meaning model):
        what the user may ask for instead ("animal": cat, dog, horse)."""
        names = list(dict.fromkeys(known))
        try:
            vs = self.meaning.vectors([object_text(obj), *map(object_text, names)])
        except MeaningUnavailable:
            return []
        scores = sorted(((float(vs[0] @ v), n) for n, v in zip(names, vs[1:])), reverse=True)
        return [n for _s, n in scores[:k]]

    def problem(self, calls: Sequence[SkillCall], skill_set: SkillSet, instruction: str, robot_id: str,
                robot_kind: str, known: Sequence[str] | None, extra: Iterable[str] = ()) -> Rejection | None:
        """The refusal of the first object of ``calls`` that fails :meth:`judge`, or None."""
        extra = tuple(extra)
        for obj, where in _objects_of(calls, skill_set):
            v = self.judge(obj, instruction, robot_id, robot_kind, known, extra, where=where)
            if v.refusal is not None:
                return v.refusal
        return None


#: the object argument that says where another object goes (``place(apple, basket)``)
WHERE_ARGS = ("target",)


def _objects_of(calls: Sequence[SkillCall], skill_set: SkillSet) -> list[tuple[str, bool]]:
    """(object argument, whether it is a :data:`WHERE_ARGS` one) of ``calls``, in order, each once."""
    out: dict[tuple[str, bool], None] = {}
    for c in calls:
        try:
            spec = skill_set.spec(c.name)
        except Exception:  # noqa: BLE001 - a call the segmenter validated always has a spec
            continue
        for a, v in zip(spec.args, c.args):
            if a.is_object and isinstance(v, str) and v and not v.startswith("_"):
                out.setdefault((v, a.name in WHERE_ARGS), None)
    return list(out)


def plan_objects_of(calls: Sequence[SkillCall], skill_set: SkillSet) -> list[str]:
    """The object arguments of ``calls`` (``ArgSpec.is_object``), in order, each once."""
    return list(dict.fromkeys(o for o, _where in _objects_of(calls, skill_set)))
