"""Chat stories of the simulated engine: the chat workload's prompts, a story composed from a
seeded generator, and a story cut into sentences as the chat segmenter cuts them (runtime data:
the simulated engine tells them live; the evaluation's chat workload uses the same)."""

from __future__ import annotations

import math

import numpy as np

from timely_robot.skills import CHAT
from llm_planner_node.engines.sim_engine import SimSegment

TOKENS_PER_WORD = 1.3
#: shared system prompt of the chat agent (pre-stored, like a robot's skill set)
CHAT_PREFIX_TOKENS = 64

CHAT_PROMPTS = (
    "You wake up with the ability to hear the thoughts of houseplants.",
    "The last lighthouse keeper on Earth receives a letter from the sea.",
    "A robot butler realises its family has been replaced by very polite strangers.",
    "Every night at 3 a.m. your phone shows a map to a place that does not exist.",
    "The dragon under the city finally pays its rent.",
    "You are the only person who remembers that the moon used to be blue.",
    "A time traveller keeps arriving five minutes too late to stop the same small accident.",
    "Your reflection starts giving you advice, and it is surprisingly good.",
)
_OPENERS = ("It started on a Tuesday.", "Nobody believed me at first.", "The rain had not stopped for days.",
            "I should have known something was wrong.", "The town was quiet, as always.")
_SUBJECTS = ("the old man", "my sister", "the robot", "a stranger in a grey coat", "the cat",
             "the mayor", "the voice", "everyone in the room", "the machine", "the child")
_VERBS = ("looked at", "whispered to", "walked past", "laughed at", "waited for", "followed",
          "ignored", "remembered", "pointed at", "stared at")
_OBJECTS = ("the window", "the empty street", "the letter", "the clock on the wall", "the door",
            "the map", "the sea", "the garden", "the photograph", "the lights of the city")
_TAILS = ("and nothing happened.", "as if it had always been there.", "for a very long time.",
          "without saying a word.", "while the clock ticked on.", "and I felt the floor shift.",
          "but the answer never came.", "and then it happened again.")
_QUESTIONS = ("What was I supposed to do?", "Was it real?", "Who else knew?", "Why now?")


def _sentence(rng: np.random.Generator) -> str:
    r = rng.random()
    if r < 0.1:
        return str(rng.choice(_QUESTIONS))
    s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
    return s[0].upper() + s[1:]


def compose_story(rng: np.random.Generator) -> tuple[str, str]:
    """(prompt, story) with 4-7 paragraphs of 3-6 sentences, paragraphs separated by blank lines."""
    prompt = str(rng.choice(CHAT_PROMPTS))
    paras = []
    for p in range(int(rng.integers(4, 8))):
        sents = [str(rng.choice(_OPENERS))] if p == 0 else []
        sents += [_sentence(rng) for _ in range(int(rng.integers(3, 7)))]
        paras.append(" ".join(sents))
    return prompt, "\n\n".join(paras)


def chat_segments(story: str, mode: str) -> tuple[SimSegment, ...]:
    """The story cut by the project's chat segmenter (``sentence``/``paragraph``/``none``).

    ``none`` (no segmentation: what vLLM produces) yields one segment with the whole story.
    Tokens = ceil(1.3 x words), plus one end-of-sequence token on the last segment.
    """
    if mode == "none":
        texts = [story]
    else:
        from llm_planner_node.segmenters import get_segmenter, segment_all

        seg = get_segmenter(f"chat-{mode}", CHAT)
        # feed in ~4-character pieces, as a detokenizer would
        texts = [s.text for s in segment_all(seg, [story[i:i + 4] for i in range(0, len(story), 4)])]
    out = []
    for i, text in enumerate(texts):
        words = len(text.split())
        eos = 1 if i == len(texts) - 1 else 0
        out.append(SimSegment(text, max(1, math.ceil(TOKENS_PER_WORD * words)) + eos,
                              (CHAT.validate("say", (text,)),)))
    return tuple(out)
