"""Quantities in an instruction, rewritten in the units of the robot's skills.

A small instruct model copies numbers well and converts units badly: asked to "go up one meter" it
writes ``move_up(1)`` or ``move_up(10)``; asked for "half a second" it writes ``delay(1)``. Before
the instruction reaches such a model, :func:`normalise_quantities` rewrites each quantity into the
unit its skill takes, deterministically:

- number words to digits ("twenty" -> 20, "one hundred fifty" -> 150, "two and a half" -> 2.5,
  "half a" -> 0.5, "a" / "an" before a unit -> 1);
- distances to the skill set's unit (drone cm, arm mm): "1.5 meters" -> "150 cm";
- durations to the skill set's unit (drone ms, arm s): "two seconds" -> "2000 ms";
- turns to degrees: "a quarter turn" -> "a 90 degree turn", "turn around" -> "turn around
  180 degrees", "a 360" -> "a 360 degree turn".

Everything else is left as it was. The prompt uses it when :attr:`PromptOptions.quantities` is on
(the instruct model's default; the ablation of ``timely-fleet bench plans`` turns it off).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SMALL = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i >= 2}


@dataclass(frozen=True)
class Units:
    """The units a skill set's arguments take."""

    distance: str  # "cm" or "mm"
    duration: str  # "ms" or "s"


#: Units per plan language (``prompt.language_key``); chat has none.
UNITS = {"minispec": Units("cm", "ms"), "arm": Units("mm", "s")}

_DIST = {"m": 1000.0, "meter": 1000.0, "meters": 1000.0, "metre": 1000.0, "metres": 1000.0,
         "cm": 10.0, "centimeter": 10.0, "centimeters": 10.0, "centimetre": 10.0, "centimetres": 10.0,
         "mm": 1.0, "millimeter": 1.0, "millimeters": 1.0, "millimetre": 1.0, "millimetres": 1.0}
_TIME = {"s": 1000.0, "sec": 1000.0, "secs": 1000.0, "second": 1000.0, "seconds": 1000.0,
         "ms": 1.0, "millisecond": 1.0, "milliseconds": 1.0, "minute": 60000.0, "minutes": 60000.0}
_MM_PER = {"cm": 10.0, "mm": 1.0}
_MS_PER = {"ms": 1.0, "s": 1000.0}

_NUM = r"\d+(?:\.\d+)?"
_UNIT_RE = "|".join(sorted(map(re.escape, list(_DIST) + list(_TIME)), key=len, reverse=True))
_QTY = re.compile(rf"(?<![\w.])({_NUM})\s?({_UNIT_RE})(?![\w°])", re.IGNORECASE)
_DEG = re.compile(rf"(?<![\w.])({_NUM})\s?(?:°|deg\b|degs\b|degree\b)", re.IGNORECASE)


def _words_to_number(words: list[str]) -> float | None:
    """``["one", "hundred", "fifty"]`` -> 150; None when the words are not one number."""
    total, cur, seen = 0, 0, False
    for w in words:
        w = w.lower()
        if w in _SMALL:
            cur += _SMALL[w]
        elif w in _TENS:
            cur += _TENS[w]
        elif "-" in w and all(p in _SMALL or p in _TENS for p in w.split("-")):
            cur += sum(_SMALL.get(p, _TENS.get(p, 0)) for p in w.split("-"))
        elif w == "hundred":
            cur = (cur or 1) * 100
        elif w == "thousand":
            total += (cur or 1) * 1000
            cur = 0
        elif w == "and":
            continue
        else:
            return None
        seen = True
    return float(total + cur) if seen else None


_NUMBER_WORD = r"(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|" \
               r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|" \
               r"ninety|hundred|thousand)(?:-(?:one|two|three|four|five|six|seven|eight|nine))?"
_WORDS_RE = re.compile(rf"\b{_NUMBER_WORD}(?:\s+(?:and\s+)?{_NUMBER_WORD})*\b", re.IGNORECASE)
_HALF_RE = re.compile(rf"\b(\d+(?:\.\d+)?) and a half\b", re.IGNORECASE)


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:g}"


def _digits(text: str) -> str:
    """Number words to digits; "N and a half" -> N.5; "half a" / "a" / "an" before a unit."""
    def words(m: re.Match[str]) -> str:
        n = _words_to_number(m.group(0).split())
        return m.group(0) if n is None else _fmt(n)

    text = _WORDS_RE.sub(words, text)
    text = _HALF_RE.sub(lambda m: _fmt(float(m.group(1)) + 0.5), text)
    unit = _UNIT_RE
    text = re.sub(rf"\bhalf an? ({unit})\b", r"0.5 \1", text, flags=re.IGNORECASE)
    text = re.sub(rf"\ba quarter(?: of an?)? ({unit})\b", r"0.25 \1", text, flags=re.IGNORECASE)
    text = re.sub(rf"\ban? ({unit})\b", r"1 \1", text, flags=re.IGNORECASE)
    return text


_TURNS = (
    (re.compile(r"\b(a |one )?quarter[- ]turn\b", re.IGNORECASE), "a 90 degree turn"),
    (re.compile(r"\b(a |one )?half[- ]turn\b", re.IGNORECASE), "a 180 degree turn"),
    (re.compile(r"\b(a )?u-?turn\b", re.IGNORECASE), "a 180 degree turn"),
    (re.compile(r"\b(a )?full (?:circle|turn|rotation|spin)\b", re.IGNORECASE), "a 360 degree turn"),
    (re.compile(r"\ba 360\b(?! ?deg)", re.IGNORECASE), "a 360 degree turn"),
    (re.compile(r"\b(turn|spin|rotate) around\b(?! \d)", re.IGNORECASE), r"\1 around 180 degrees"),
)


def normalise_quantities(text: str, language: str) -> str:
    """``text`` with each distance, duration and turn in the units of ``language``'s skills
    (``"minispec"``: cm, ms, degrees; ``"arm"``: mm, s, degrees). Other languages: unchanged."""
    units = UNITS.get(language)
    if units is None:
        return text
    out = _DEG.sub(lambda m: f"{m.group(1)} degrees", _digits(text))
    for pat, rep in _TURNS:
        out = pat.sub(rep, out)

    def qty(m: re.Match[str]) -> str:
        value, unit = float(m.group(1)), m.group(2).lower()
        if unit in _DIST:
            return f"{_fmt(value * _DIST[unit] / _MM_PER[units.distance])} {units.distance}"
        return f"{_fmt(value * _TIME[unit] / _MS_PER[units.duration])} {units.duration}"

    return _QTY.sub(qty, out)
