"""The mission language: how a model writes a fleet instruction that needs several tasks.

One task per line, then a line ``end``::

    t1: drone "look for the cat"
    t2: base_1 after t1 uses t1 "go to where the cat was seen"
    t3: any uses t1,t2 "say in one sentence what was found"
    end

A line is ``t<k>: PERFORMER[ after REFS][ uses REFS] "INSTRUCTION"`` and a newline:

- ``t<k>``: the task's name, numbered 1, 2, ... in order, at most :data:`MAX_TASKS` tasks;
- ``PERFORMER``: a robot id of the fleet, a robot kind present in the fleet, or ``any`` (the
  allocator chooses among the robots able to do it);
- ``after REFS``: the task starts when those tasks ended; ``uses REFS``: it gets their answers
  (and so also starts after them). ``REFS`` is a comma-separated list of EARLIER tasks in
  increasing order, each once (``t1,t3``): every edge points back, so the tasks form a DAG by
  construction, and one canonical spelling keeps grammar and parser the same language;
- ``"INSTRUCTION"``: the task's own instruction, 1 to :data:`MAX_INSTRUCTION_CHARS` characters of
  printable ASCII, no double quote inside, not starting with a space.

Single spaces separate the parts. :func:`mission_grammar` is this language over one fleet as
xgrammar EBNF (vLLM's structured outputs), :func:`parse_task_line` / :func:`parse_mission_plan`
read it with one sentence for what is wrong, :class:`TaskLineReleaser` hands out each task the
moment its line is complete while the rest is still generated, :func:`critical_path_deadlines`
gives each task its latest finish, and :func:`decomposition_prompt` asks a model for a plan.

Pure code: no ROS, no engine. Nothing here runs a mission; the coordinator runs one task per
mission (:mod:`.missions`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from timely_robot.perceivable import COCO_LABELS
from llm_planner_node.config.params import RobotParams, perceivable_objects
from llm_planner_node.prompts.grammar import Chars, Lit, Node, PlanGrammar, Ref, Rep, alt, opt, seq

__all__ = ["MAX_TASKS", "MAX_INSTRUCTION_CHARS", "ANY", "END", "TaskSpec", "mission_grammar", "parse_task_line",
           "parse_mission_plan", "TaskLineReleaser", "critical_path_deadlines", "decomposition_prompt",
           "max_line_chars"]

#: tasks a mission plan may have
MAX_TASKS = 8
#: characters of a task's own instruction
MAX_INSTRUCTION_CHARS = 160
#: the performer that leaves the choice of robot to the allocator
ANY = "any"
#: the line that ends a mission plan
END = "end"
#: words of the language, never a performer's name
_RESERVED = frozenset({ANY, END, "after", "uses"})
#: what a robot id or kind may be spelled with to be a performer (no space, quote or comma)
_PERFORMER_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_NAME_RE = re.compile(r"t([1-9][0-9]*)")
#: instruction characters: printable ASCII but the double quote; the first is no space
_ICHAR = Chars(((" ", "!"), ("#", "~")))
_ICHAR_FIRST = Chars((("!", "!"), ("#", "~")))


@dataclass(frozen=True)
class TaskSpec:
    """One task of a mission plan, as its line says."""

    name: str                    # "t1", "t2", ...
    performer: str               # a robot id, a robot kind, or "any"
    after: tuple[str, ...] = ()  # tasks that must have ended before it starts
    uses: tuple[str, ...] = ()   # tasks whose answers it gets (it starts after them too)
    instruction: str = ""

    @property
    def waits_for(self) -> tuple[str, ...]:
        """The tasks it starts after: those of ``after`` and ``uses``, each once, in order."""
        return tuple(dict.fromkeys(sorted((*self.after, *self.uses), key=_number)))

    def line(self) -> str:
        """The task's line in the mission language (without its newline)."""
        parts = [f"{self.name}: {self.performer}"]
        if self.after:
            parts.append("after " + ",".join(self.after))
        if self.uses:
            parts.append("uses " + ",".join(self.uses))
        return " ".join(parts) + f' "{self.instruction}"'


def _number(name: str) -> int:
    m = _NAME_RE.fullmatch(name)
    return int(m.group(1)) if m else 0


def _performers(robot_ids: Iterable[str], kinds: Iterable[str]) -> tuple[str, ...]:
    """The fleet's performers, ids then kinds then ``any``, each once; a name the language cannot
    carry (a space, a quote, a reserved word) is refused: the grammar would not be the parser's."""
    names = list(dict.fromkeys([*robot_ids, *kinds]))
    for n in names:
        if not _PERFORMER_RE.fullmatch(n) or n in _RESERVED:
            raise ValueError(f"{n!r} cannot be a performer of the mission language (letters, digits, '_', '.', '-' "
                             f"only, and none of {', '.join(sorted(_RESERVED))})")
    return (*names, ANY)


# ---------------------------------------------------------------------------------------------
# The grammar
# ---------------------------------------------------------------------------------------------
def mission_grammar(robot_ids: Iterable[str], kinds: Iterable[str], max_tasks: int = MAX_TASKS) -> str:
    """The mission language over one fleet as xgrammar EBNF (root rule ``root``).

    One rule per position, ``task_k``: its line must be named ``t<k>`` and may refer only to
    ``t1`` .. ``t<k-1>``, then comes ``task_<k+1>`` or ``end`` (after ``task_<max_tasks>`` only
    ``end``), so numbering, back references and the task count are the grammar's. A list of
    references is ``refs_j_m``: ``t<j>`` then, optionally, a comma and a list starting at a
    higher number up to ``m`` (increasing, each once). Performers are literal alternations of
    the fleet's ids and kinds and ``any``. Every plan it admits is finite and ASCII."""
    if max_tasks < 1:
        raise ValueError(f"max_tasks must be >= 1, not {max_tasks}")
    performers = _performers(robot_ids, kinds)
    g = PlanGrammar(language="mission", skill_set_id="fleet")
    g.add("root", Ref("task_1"))
    g.add("performer", alt(*(Lit(p) for p in performers)))
    g.add("instruction", seq(Lit('"'), _ICHAR_FIRST, Rep(_ICHAR, 0, MAX_INSTRUCTION_CHARS - 1), Lit('"')))
    for m in range(1, max_tasks):
        for j in range(m, 0, -1):
            more = [Ref(f"refs_{i}_{m}") for i in range(j + 1, m + 1)]
            g.add(f"refs_{j}_{m}", seq(Lit(f"t{j}"), opt(seq(Lit(","), alt(*more)))) if more else Lit(f"t{j}"))
        g.add(f"refs_{m}", alt(*(Ref(f"refs_{j}_{m}") for j in range(1, m + 1))))
    # the line's end, then the next task or "end" (an optional newline after "end")
    g.add("end", seq(Lit(END), opt(Lit("\n"))))
    for k in range(1, max_tasks + 1):
        head: list[Node] = [Lit(f"t{k}: "), Ref("performer")]
        if k > 1:
            head += [opt(seq(Lit(" after "), Ref(f"refs_{k - 1}"))), opt(seq(Lit(" uses "), Ref(f"refs_{k - 1}")))]
        nxt = alt(Ref(f"task_{k + 1}"), Ref("end")) if k < max_tasks else Ref("end")
        g.add(f"task_{k}", seq(*head, Lit(" "), Ref("instruction"), Lit("\n"), nxt))
    body = g.ebnf().split("\n", 1)[1]
    return (f"# mission plan grammar (at most {max_tasks} tasks; performers: {', '.join(performers)}), "
            f"generated by llm_planner_node.service.mission_plan\n{body}")


def max_line_chars(robot_ids: Iterable[str], kinds: Iterable[str], max_tasks: int = MAX_TASKS) -> int:
    """The longest task line of the language over this fleet, without its newline: a line still
    unfinished beyond it is malformed, whatever follows."""
    longest = max(len(p) for p in _performers(robot_ids, kinds))
    refs = len(",".join(f"t{j}" for j in range(1, max_tasks)))
    return len(f"t{max_tasks}: ") + longest + 2 * (len(" after ") + refs) + 3 + MAX_INSTRUCTION_CHARS


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------
def _refs(name: str, word: str, text: str, earlier: Sequence[str]) -> tuple[str, ...]:
    """The references of ``after``/``uses``: earlier tasks, increasing, each once."""
    refs = text.split(",")
    if any(not r for r in refs):
        raise ValueError(f"{name}: '{word} {text}' has an empty name: write task names separated by commas "
                         "without spaces (t1,t2)")
    position = {t: i for i, t in enumerate(earlier)}
    for r in refs:
        if r not in position:
            where = f"earlier: {', '.join(earlier)}" if earlier else "there is none"
            raise ValueError(f"{name}: '{word}' names {r}, which is not an earlier task ({where})")
    for a, b in zip(refs, refs[1:]):
        if position[b] <= position[a]:
            raise ValueError(f"{name}: '{word} {text}' must list earlier tasks in increasing order, each once")
    return tuple(refs)


def parse_task_line(line: str, robot_ids: Iterable[str], kinds: Iterable[str], earlier: Sequence[str], *,
                    max_tasks: int = MAX_TASKS) -> TaskSpec:
    """The task of one line (a trailing newline is allowed), given the names of the tasks before
    it (``earlier``, in order); ``ValueError`` with one sentence naming what is wrong."""
    if line.endswith("\n"):
        line = line[:-1]
    name = f"t{len(earlier) + 1}"
    if len(earlier) >= max_tasks:
        raise ValueError(f"a mission plan has at most {max_tasks} tasks: {name} is one too many")
    prefix = f"{name}: "
    if not line.startswith(prefix):
        m = re.match(r"(t[0-9]+)(?::|$)", line)
        if m is not None and m.group(1) != name:
            raise ValueError(f"the task named {m.group(1)} comes where {name} is due: tasks are named t1, t2, ... "
                             "in order, then a line 'end'")
        raise ValueError(f"{line[:40]!r} is not a task line: expected '{prefix}PERFORMER \"INSTRUCTION\"' or 'end'")
    rest = line[len(prefix):]
    quote = rest.find('"')
    if quote < 0:
        raise ValueError(f"{name}: the instruction is missing: write it in double quotes at the end of the line")
    head, instruction = rest[:quote], rest[quote + 1:]
    if not instruction.endswith('"') or '"' in instruction[:-1]:
        raise ValueError(f"{name}: the instruction must end with a double quote at the end of the line and "
                         "contain no double quote inside")
    instruction = instruction[:-1]
    if not head.endswith(" ") or not head.strip() or "  " in head or head.startswith(" "):
        raise ValueError(f"{name}: the performer, 'after', 'uses' and the quoted instruction are separated by "
                         "single spaces")
    words = head[:-1].split(" ")
    performer, words = words[0], words[1:]
    performers = _performers(robot_ids, kinds)
    if performer not in performers:
        raise ValueError(f"{name}: {performer!r} is no performer of this fleet (a robot id, a robot kind or any: "
                         f"{', '.join(performers)})")
    after: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    if words[:1] == ["after"]:
        if len(words) < 2:
            raise ValueError(f"{name}: 'after' names no task")
        after, words = _refs(name, "after", words[1], earlier), words[2:]
    if words[:1] == ["uses"]:
        if len(words) < 2:
            raise ValueError(f"{name}: 'uses' names no task")
        uses, words = _refs(name, "uses", words[1], earlier), words[2:]
    if words:
        raise ValueError(f"{name}: {' '.join(words)!r} is not understood: after the performer come only "
                         "'after TASKS' then 'uses TASKS', then the quoted instruction")
    if not instruction.strip():
        raise ValueError(f"{name}: the instruction is empty")
    if instruction.startswith(" "):
        raise ValueError(f"{name}: the instruction starts with a space")
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        raise ValueError(f"{name}: the instruction has {len(instruction)} characters, at most "
                         f"{MAX_INSTRUCTION_CHARS} are allowed")
    if any(not " " <= c <= "~" for c in instruction):
        raise ValueError(f"{name}: the instruction has a character that is not printable ASCII")
    return TaskSpec(name, performer, after, uses, instruction)


class TaskLineReleaser:
    """Hands out each task of a mission plan the moment its line is complete, while the rest is
    still being generated: a task that waits for nothing can be allocated and started before the
    model has written the next line (segmentation applied to tasks).

    :meth:`feed` takes the newly generated text (a chunk, a delta: the way the segmenters are
    fed), any split of it; the tasks it returns are those whose newline was in that chunk, each
    once; a line that can no longer be the next task's (a wrong name, one task too many) fails
at once. :attr:`done` turns True when the line ``end`` is seen (a newline after it is allowed,
    nothing else). A malformed line, an ``end`` before any task, text after ``end`` or an
    unfinished line longer than any task line (:func:`max_line_chars`) raises ``ValueError``
    with one sentence, and the releaser is closed: the caller ends the mission REJECTED with it.
    :meth:`close` says whether the text ended as a whole plan."""

    def __init__(self, robot_ids: Iterable[str], kinds: Iterable[str], *, max_tasks: int = MAX_TASKS) -> None:
        self.robot_ids, self.kinds = tuple(robot_ids), tuple(kinds)
        self.max_tasks = max_tasks
        self._max_line = max_line_chars(self.robot_ids, self.kinds, max_tasks)
        self.tasks: list[TaskSpec] = []
        self.done = False
        self._pending = ""
        self._newline_after_end = False
        self._failed: str | None = None

    def feed(self, new_text: str) -> list[TaskSpec]:
        """Consume newly generated text; the tasks whose lines it completed (often none)."""
        if self._failed is not None:
            raise ValueError(self._failed)
        try:
            return self._feed(new_text)
        except ValueError as e:
            self._failed = str(e)
            raise

    def _feed(self, new_text: str) -> list[TaskSpec]:
        out: list[TaskSpec] = []
        for i, c in enumerate(new_text):
            if self.done:
                if c == "\n" and not self._newline_after_end:
                    self._newline_after_end = True
                    continue
                raise ValueError(f"text after the line '{END}': {new_text[i:i + 20]!r}")
            if c != "\n":
                self._pending += c
                if self._pending == END:
                    self._end()
                elif not self._may_go_on():  # a wrong name, or one task too many: at once
                    parse_task_line(self._pending, self.robot_ids, self.kinds, [t.name for t in self.tasks],
                                    max_tasks=self.max_tasks)
                elif len(self._pending) > self._max_line:
                    raise ValueError(f"t{len(self.tasks) + 1}: the line is longer than any task line "
                                     f"({self._max_line} characters) and has not ended")
                continue
            line, self._pending = self._pending, ""
            task = parse_task_line(line, self.robot_ids, self.kinds, [t.name for t in self.tasks],
                                   max_tasks=self.max_tasks)
            self.tasks.append(task)
            out.append(task)
        return out

    def _may_go_on(self) -> bool:
        """The unfinished line may still become the next task's line or ``end``."""
        prefix, p = f"t{len(self.tasks) + 1}: ", self._pending
        return END.startswith(p) or (len(self.tasks) < self.max_tasks and (prefix.startswith(p) or p.startswith(prefix)))

    def _end(self) -> None:
        if not self.tasks:
            raise ValueError(f"the mission plan has no task before '{END}'")
        self.done = True

    def close(self) -> list[TaskSpec]:
        """The plan's tasks, once the text has ended; ``ValueError`` if it ended without ``end``."""
        if self._failed is not None:
            raise ValueError(self._failed)
        if not self.done:
            self._failed = (f"the mission plan ends inside a line: {self._pending[:40]!r}" if self._pending else
                            f"the mission plan does not end with a line '{END}'")
            raise ValueError(self._failed)
        return list(self.tasks)


def parse_mission_plan(text: str, robot_ids: Iterable[str], kinds: Iterable[str], *,
                       max_tasks: int = MAX_TASKS) -> list[TaskSpec]:
    """The tasks of a whole mission plan (its lines, then ``end``); ``ValueError`` with one
    sentence naming the first thing wrong. The same rules as :class:`TaskLineReleaser`."""
    releaser = TaskLineReleaser(robot_ids, kinds, max_tasks=max_tasks)
    releaser.feed(text)
    return releaser.close()


# ---------------------------------------------------------------------------------------------
# Deadlines
# ---------------------------------------------------------------------------------------------
def critical_path_deadlines(tasks: Sequence[TaskSpec], durations_s: Mapping[str, float],
                            mission_deadline_s: float) -> dict[str, float]:
    """Each task's latest finish so that the mission ends by its deadline: the classic critical
    path (latest finish) rule. A sink (no task waits for it) may finish at the mission's deadline;
    any other task must finish by the earliest of its successors' latest starts (their latest
    finish minus their duration), a successor being a task that names it in ``after`` or
    ``uses``. So a task others wait for is due earlier, by the longest chain of durations after
    it. Times are on the deadline's clock (a latest finish before now: the deadline cannot be
    met); ``ValueError`` for a reference to no earlier task, or a duration missing or negative."""
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError("task names repeat in the mission plan")
    index = {n: i for i, n in enumerate(names)}
    successors: dict[str, list[str]] = {n: [] for n in names}
    for i, t in enumerate(tasks):
        d = durations_s.get(t.name)
        if d is None or not d >= 0:
            raise ValueError(f"{t.name}: its duration must be a number >= 0, not {d!r}")
        for p in t.waits_for:
            if index.get(p, len(names)) >= i:
                raise ValueError(f"{t.name} waits for {p}, which is not an earlier task")
            successors[p].append(t.name)
    latest: dict[str, float] = {}
    for t in reversed(tasks):  # successors come later in the list: already computed
        latest[t.name] = min((latest[s] - float(durations_s[s]) for s in successors[t.name]),
                             default=float(mission_deadline_s))
    return {n: latest[n] for n in names}


# ---------------------------------------------------------------------------------------------
# The prompt
# ---------------------------------------------------------------------------------------------
#: at most this many names of a list are written in a robot's line (then "+N more")
_PROMPT_NAMES = 6

_EXAMPLES = (
    ("find the ball and bring it to the table",
     't1: drone "look for the ball"\n'
     't2: arm_x after t1 uses t1 "pick the ball and place it on the table"\nend'),
    ("check the kitchen and the lab for a person, then report",
     't1: base_x "go to the kitchen and look for a person"\n'
     't2: drone_x "look for a person in the lab"\n'
     't3: any uses t1,t2 "say in one sentence where a person was seen"\nend'),
    ("take off and land", 't1: drone "take off, then land"\nend'),
)


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_PROMPT_NAMES])
    return shown + (f" +{len(items) - _PROMPT_NAMES} more" if len(items) > _PROMPT_NAMES else "")


def _robot_line(r: RobotParams) -> str:
    seen = perceivable_objects(r)
    if seen is None:
        parts = ["perception unknown"]
    elif tuple(seen) == COCO_LABELS:
        parts = ["sees COCO's 80 classes (person, cat, dog, car, ...)"]
    elif seen:
        parts = [f"sees {_names(list(seen))}"]
    else:
        parts = ["sees nothing"]
    places = list(r.places or ())
    if places:
        parts.append(f"places {_names(places)}")
    others = [o for o in r.objects if o not in (seen or ()) and o not in places]  # each name once
    if others:
        parts.append(f"objects {_names(others)}")
    return f"- {r.id} ({r.kind}): " + "; ".join(parts)


def decomposition_prompt(instruction: str, robots: Sequence[RobotParams]) -> str:
    """A short prompt asking a model to split ``instruction`` into tasks of the mission
    language: the fleet (each robot's id, kind and what it declares), the language with three
    worked examples on generic robots (not the fleet's, so the model copies the form and not
    the names), then the instruction."""
    fleet = "\n".join(_robot_line(r) for r in robots)
    examples = "\n".join(f'"{i}":\n{plan}' for i, plan in _EXAMPLES)
    return (f"Fleet:\n{fleet}\n"
            "Split the instruction into tasks, one line each, then a line end:\n"
            't<k>: PERFORMER [after TASKS] [uses TASKS] "INSTRUCTION"\n'
            f"k counts 1,2,...; at most {MAX_TASKS} tasks. PERFORMER: a robot id, a kind, or any. after: starts "
            "when those end; uses: gets their answers. TASKS: earlier tasks, increasing (t1,t2).\n"
            f"Examples:\n{examples}\n"
            f'Instruction: "{instruction}"\n')
