"""Untrusted strings on their way to logs and messages: bounded and escaped (one place); and an
instruction's own words, the names the planner offers its model and its grammar for the things
an instruction names (:func:`instruction_names`: the prompt builders and grounding/objects.py read
them, so both live below those layers)."""

from __future__ import annotations

import re
from functools import lru_cache

#: Robot ids quoted in a refusal that lists the fleet ("unknown robot ...; known: a, b, ...").
KNOWN_ROBOTS_LISTED = 20


def safe_text(text: str, limit: int = 80) -> str:
    """An untrusted string for a log line or message: bounded, control characters escaped."""
    t = text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit} chars)"
    return t if t.isprintable() else t.encode("unicode_escape").decode("ascii")


#: an instruction's word or pair of words longer than this is not offered (prompt or grammar)
MAX_NAME_CHARS = 24
#: at most this many of an instruction's names are offered (words first, then pairs)
MAX_NAMES = 16

_WORDS = re.compile(r"[a-z]+")

#: English function words (articles, pronouns, prepositions, conjunctions, auxiliaries, indefinite
#: pronouns such as "something"): they name no thing, so they are not offered to the model or the
#: grammar as object names. A closed class of the language, not a list of things; a library's stop-word
#: lists (scikit-learn's) also drop nouns such as "fire" and "computer".
FUNCTION_WORDS: frozenset[str] = frozenset("""
    a an the this that these those my your his her its our their me you him them it us we they
    i he she mine yours some any every each all no of in on at to from into onto over under
    above below behind near by with without for about around through between and or but nor so
    then if is are was were be been am do does did can could will would should may might must
    please there here where what which who whom whose how when up down out off again just very
    too also not than as something anything everything nothing somewhere anywhere everywhere
    someone anyone everyone somebody anybody
""".split())


@lru_cache(maxsize=4096)
def content_words(instruction: str) -> tuple[tuple[str, ...], ...]:
    """The instruction's runs of adjacent content words (lower case, function words and numbers
    dropped): "find my fire extinguisher" -> (("find",), ("fire", "extinguisher"))."""
    stop = FUNCTION_WORDS
    runs: list[list[str]] = [[]]
    for w in _WORDS.findall(instruction.lower()):
        if w in stop or len(w) < 2:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append(w)
    return tuple(tuple(r) for r in runs if r)


@lru_cache(maxsize=4096)
def instruction_names(instruction: str) -> tuple[str, ...]:
    """The names a plan may give the things ``instruction`` names, in its own words: each
    content word, then each pair of adjacent content words joined by ``_`` (``fire_extinguisher``),
    at most :data:`MAX_NAMES` of :data:`MAX_NAME_CHARS` characters or fewer."""
    runs = content_words(instruction)
    words = [w for r in runs for w in r]
    pairs = [f"{a}_{b}" for r in runs for a, b in zip(r, r[1:])]
    out = [n for n in dict.fromkeys(words + pairs) if len(n) <= MAX_NAME_CHARS]
    return tuple(out[:MAX_NAMES])
