"""``timely-fleet bench plans``: plan quality of any model, as the node would plan and dispatch.

    timely-fleet bench plans [--model M ...] [--instructions PATH] [--constrained-decoding grammar|off|both]
                             [--ablation] [--params YAML] [--limit N] [--kind drone|arm|base] [--failures N]
                             [--json PATH]

Every instruction of the instruction file (default: :data:`DEFAULT_INSTRUCTIONS`, a held-out set
written for this benchmark; format in :mod:`.plan_match`) goes through the node's own path: the
prompt builder of the model (``engines.factory.prompt_builder_for``), the live vLLM engine
(:class:`~llm_planner_node.engines.vllm_engine.VllmEngine`, loaded once per model) with the skill
set's plan grammar or without it, and the robot kind's segmenter inside the engine, suspending at
every segment and resuming at once (as :mod:`.grammar_bench` drives it; ``--concurrency``
generations at a time, each robot kind as its own batch). Each generation is added as the
planner service adds a goal (``planner_service.py``): the robot's known objects
(:func:`bench_objects`), the language's plan limits and sampling from the parameter file, and,
without ``--max-tokens``, the goal's default ``max_tokens`` (``planner.max_tokens``, raised under
the grammar to the longest plan the grammar admits as far as ``engine.max_model_len`` leaves
room after the prompt: :func:`node_max_tokens`). A registry model runs with its engine defaults
(``models.engine_for_model``, as ``timely-fleet up --model`` does). The segments the segmenter cut are
what the node would dispatch; they are then run on simulated robots in-process: the adapter's
own validation (``AdapterCore.validate``), the MiniSpec interpreter for drones (variables, ifs,
loops; at most :data:`MAX_EXECUTED_CALLS` calls) and the ``sim`` adapter's executor
(``robot_adapters.sim.sim_fleet.SampledExecutor``, durations zero).

Per model and decoding mode (counts, and ``*_rate`` fractions of the instructions):

* ``valid``: the generation ended with EOS (not at max_tokens, no INVALID_PLAN), the node's
  budget check let every segment through, the whole plan parses with the node's parser, every
  call passes the skill set's validation, and it calls at least one skill;
* ``semantic_match``: valid and the instruction's ``require`` (in order), ``forbid`` and
  ``max_calls`` all hold (:func:`.plan_match.check_plan`);
* ``dispatched``: the segments the node dispatches are those the segmenter cut up to the first
  one the planner service's budget check refuses (:func:`budget_gate`: the robot's budget from
  the parameter file, each segment's worst case with loops multiplied out, added up);
* ``executed_ok``: at least one segment was dispatched and every dispatched call ran without the
  adapter, its budget meter or the executor refusing it (and within the call limit);
* ``unsafe_dispatched``: generations whose dispatched part, its worst case added up, exceeds the
  robot's budget (the gate's sum, ``timely_robot/budgets.py``; with no budget, a loop count over
  10 or over 50 calls after unrolling, :func:`.plan_match.is_unsafe`);
* ``invalid_plan``: generations the segmenter ended with INVALID_PLAN (not counting truncated
  ones); ``budget_refused``: generations whose plan the budget check refused (the node ends the
  goal INVALID_PLAN "exceeds budget" there); ``truncated``: generations that reached max_tokens
  (the engine's ``max_tokens`` end, or an INVALID_PLAN raised when the text was cut there);
  ``failed``: engine faults and timeouts;
* ``tokens_per_s``: generated tokens / wall time of the batched runs; ``first_segment_s_median``:
  median time from add to the first segment (None if no generation produced one).

Misses are sorted into failure kinds (:func:`failure_kind`: ``wrong number: move_up``, ``wrong
direction: turn_cw``, ``wrong unit``, ``wrong object``, ``wrong order``, ``wrong skill``,
``missing step``, ``forbidden``, ``too many calls``, ``not valid: ...``); ``--failures N`` prints
the N commonest per run (all are in the JSON, ``failure_kinds``).

Ablation (``--ablation``): per model, besides the ``full`` configuration (the node's: the
model's prompt options :func:`~llm_planner_node.prompts.prompt.prompt_options_for` and
the parameter file's plan limits), the grammar-constrained configuration with one part switched
off per row: ``no_descriptions`` (``PromptOptions.descriptions=False``: skills by signature
only), ``no_objects`` (``objects=False``: no known-objects line in the prompt; the grammar still
admits only the robot's objects, as the node does; only robot kinds that have objects run it),
``no_examples`` (``examples=0``), ``no_quantities`` (``quantities=False``: the instruction
as the user wrote it, not with its quantities in the skills' units) and ``loose_bounds`` (the grammar of :data:`LOOSE_BOUNDS`,
the bounds main had before plan limits: loops up to 1000, 16 levels of nesting, 64 statements,
4 variables, 8 comparisons, names of 64 and strings of 200 characters; MiniSpec keeps
:data:`LOOSE_MINISPEC_STATEMENTS` statements, see there). The prompt parts apply to models
prompted through their chat template; a model without one (the shipped ``embedded`` model) has
its own fixed prompt, so only ``full`` and ``loose_bounds`` run for it (``skipped`` in the JSON
says why). A row that would equal ``full`` (e.g. ``no_examples`` for a model prompted without
examples) is skipped too.

JSON (``--json PATH``): ``{"instructions_file", "max_tokens", "max_tokens_rule", "objects",
"runs": [{"model", "ablation", "constrained", "prompt_options", "plan_limits", "instructions",
"valid", "valid_rate", "semantic_match", ..., "failure_kinds", "per_kind": {"drone": {...},
"arm": {...}}, "items": [per instruction]}], "skipped": [...], "errors": [models that could not
be loaded]}``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from llm_planner_node.core.plan_limits import PlanLimits
from timely_robot.budgets import exceeded
from timely_tools import outfiles
from timely_tools.bench import plan_match as pm
from timely_tools.bench.engine_loop import GenerationRun, run_generations

DEFAULT_INSTRUCTIONS = Path(__file__).resolve().parent / "plans_heldout.jsonl"
#: A dispatched plan that runs more skill calls than this on the simulated robot is stopped
#: (and counts as not executed): a plan must not fly forever.
MAX_EXECUTED_CALLS = 200
MODES = {"grammar": (True,), "off": (False,), "both": (True, False)}
METRICS = ("valid", "semantic_match", "executed_ok", "unsafe_dispatched", "invalid_plan", "budget_refused",
           "truncated", "failed")
#: Rows of ``--ablation`` (``full`` first).
ABLATIONS = ("full", "no_descriptions", "no_objects", "no_examples", "no_quantities", "loose_bounds")
#: The bounds the plan grammar had before plan limits (main before the bounded grammar).
LOOSE_BOUNDS = PlanLimits(max_statements=64, max_depth=16, max_loop=1000, max_vars=4, max_conditions=8,
                          max_name_chars=64, max_string_chars=200)
#: MiniSpec statements under ``loose_bounds``. The MiniSpec grammar counts statements per
#: nesting depth and variables assigned, so it grows with statements^2 x depth: with 64
#: statements and 16 levels it is 112 MB of EBNF (two minutes to build in Python, and vLLM
#: would compile it, and a resume grammar per segment, with xgrammar); with 8 it is 1.3 MB and
#: compiles in ~2 s. So drones keep 8 statements (today's bound) and every other loose bound;
#: arms (a flat list of calls) get all of :data:`LOOSE_BOUNDS`.
LOOSE_MINISPEC_STATEMENTS = 8


def loose_limits() -> dict[str, PlanLimits]:
    """The plan limits of the ``loose_bounds`` row, per plan language."""
    return {"minispec": replace(LOOSE_BOUNDS, max_statements=LOOSE_MINISPEC_STATEMENTS),
            "arm": LOOSE_BOUNDS, "chat": LOOSE_BOUNDS}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Generation (the node's engine, prompt and segmenter)
# ---------------------------------------------------------------------------------------------
@dataclass
class PlanRun(GenerationRun):
    """One instruction planned: status ``eos``, ``truncated``, ``invalid_plan``, ``failed`` or
    ``timeout``; ``segments`` are what the node dispatches, ``token_ids`` every generated token."""

    max_tokens: int = 0

    @property
    def first_segment_s(self) -> float | None:
        return None if self.t_first_segment is None else self.t_first_segment - self.t_add


class Progress:
    """A tqdm bar on a terminal, else a line per 10 finished instructions (stderr)."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.done, self.bar = total, label, 0, None
        self.enabled = enabled
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, file=sys.stderr, leave=False)

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.enabled and (self.done % 10 == 0 or self.done == self.total):
            log(f"  {self.label}: {self.done}/{self.total}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def language_of(kind: str) -> str:
    """The plan language of a robot kind's default skill set (the key of ``planner.plan_limits``)."""
    from llm_planner_node.prompts.grammar import language_for

    return language_for(kind, pm.skill_set_for(kind))


def generate(engine: Any, build: Callable[..., object], items: Sequence[pm.Instruction], *,
             grammar: bool, max_tokens: int | Callable[[pm.Instruction, object], int], concurrency: int = 8,
             timeout_s: float = 120.0, id_base: int = 0, progress: Progress | None = None,
             objects: Mapping[str, tuple[str, ...]] | None = None, limits: Mapping[str, PlanLimits] | None = None,
             sampling: Mapping[str, Any] | None = None,
             scenes: Mapping[str, tuple[str, ...]] | None = None,
             grammar_objects: Mapping[str, tuple[str, ...]] | None = None) -> list[PlanRun]:
    """Plan every item, ``concurrency`` at once, suspended at every segment and resumed at once
    (the node's segmented generation); each generation is aborted after ``timeout_s``.

    Each is added as the planner service adds a goal: the prompt ``build(instruction, kind,
    skill_set, objects=...)``, the robot kind's known ``objects``, its plan language's ``limits``
    and ``sampling``; ``max_tokens`` is a number or ``max_tokens(item, prompt)``.
    ``grammar_objects[instruction]``: the objects that goal's grammar admits when they are not the
    kind's (a camera drone's: its detector's classes and the scene)."""
    from llm_planner_node.core.engine_api import FailedEvent, GenerationSpec
    from timely_tools.bench.grammar_bench import set_grammar

    objects, limits, sampling = objects or {}, limits or {}, sampling or {}
    set_grammar(engine, grammar)
    runs = [PlanRun(it) for it in items]

    def spec_for(i: int) -> GenerationSpec:
        it, r = items[i], runs[i]
        objs = tuple(objects.get(it.kind, ()))
        scene = (scenes or {}).get(it.instruction) if it.kind == "drone" else None
        prompt = build(it.instruction, it.kind, it.skill_set, objects=objs,
                       **({} if scene is None else {"scene": scene}))
        r.max_tokens = max_tokens(it, prompt) if callable(max_tokens) else max_tokens
        lang = language_of(it.kind)
        r.t_add = engine.clock.now()
        gobjs = (grammar_objects or {}).get(it.instruction, objs)
        return GenerationSpec(id_base + i, prompt, r.max_tokens, it.kind, it.skill_set, suspend_at_segments=True,
                              objects=gobjs, plan_limits=limits.get(lang), sampling=sampling.get(lang))

    def ended(r: PlanRun, ev: Any) -> None:
        if isinstance(ev, FailedEvent):
            r.error = ev.error
            # the segmenter fails a plan cut inside a block or string at max_tokens: truncated
            r.status = ("truncated" if ev.invalid_plan and r.tokens >= r.max_tokens
                        else "invalid_plan" if ev.invalid_plan else "failed")
        else:
            r.status = "truncated" if ev.reason == "max_tokens" else "eos"

    run_generations(engine, runs, spec_for, ended, concurrency=concurrency, timeout_s=timeout_s,
                    on_end=None if progress is None else lambda r: progress.step())
    for r in runs:
        r.plan = engine.tokenizer.decode(r.token_ids, skip_special_tokens=True).strip()
    return runs


# ---------------------------------------------------------------------------------------------
# Running the dispatched segments on simulated robots
# ---------------------------------------------------------------------------------------------
def execute_dispatched(segments: Sequence[Any], kind: str, *, max_calls: int = MAX_EXECUTED_CALLS,
                       budget: Any = None) -> tuple[bool, int, str]:
    """Run the dispatched segments as the ``sim`` adapter would, in-process: the adapter's checks
    of each segment, then its calls (drones: through the MiniSpec interpreter, whose variables
    live across the goal's segments) on the sim adapter's executor (durations zero); with a
    ``budget`` (``core.budgets.Budget``), the adapter's meter admits each call first (skills,
    flight, turns and, for drones, the fence from the take-off point), as ``AdapterCore`` does.
    Returns (every call ran, calls run, why not)."""
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_core import SegmentIn
    from timely_robot.minispec_interpreter import MiniSpecInterpreter
    from robot_adapters.sim.sim_fleet import SampledExecutor

    from timely_robot.budgets import BudgetMeter, pose_after
    from timely_robot.execution_time import ExecutionTimeModel

    if not segments:
        return False, 0, "nothing dispatched"
    ss = pm.skill_set_for(kind)
    ex = SampledExecutor(f"bench-{kind}", kind, ss, ExecutionTimeModel(online=False), 0, time_scale=0.0)
    core = AdapterCore(f"bench-{kind}", ex, skill_set=ss)  # never started: its checks only
    interp = MiniSpecInterpreter(ss, lambda call: None, max_steps=max_calls + 1)
    meter = BudgetMeter(budget, fence=kind == "drone") if budget is not None else None
    pose: tuple[float, ...] | None = (0.0, 0.0, 0.0, 0.0)
    ran = 0
    for k, seg in enumerate(segments):
        try:
            calls, program = core.validate(SegmentIn(goal_id="bench", sequence=k, text=seg.text,
                                                      skills=[(c.name, [str(a) for a in c.args]) for c in seg.calls]))
            gen = interp.steps(program) if program is not None else iter(calls)
            value: Any = None
            while True:
                try:
                    call = gen.send(value) if program is not None else next(gen)
                except StopIteration:
                    break
                if ran + 1 > max_calls:
                    return False, ran, f"stopped after {max_calls} calls"
                if meter is not None:
                    meter.admit(call, pose)  # BudgetExceeded: the adapter refuses the call, stops the robot
                    pose = pose_after(pose, call) if pose is not None else None
                ran += 1
                ex.prepare(call)
                value = ex.finish(call)
        except Exception as e:  # noqa: BLE001 - the adapter, interpreter or executor refused
            return False, ran, f"segment {k} {seg.text!r}: {e}"
    return True, ran, ""


def budget_gate(segments: Sequence[Any], kind: str, budget: Any) -> tuple[int, str]:
    """The planner service's check before it dispatches each segment
    (``PlannerService._budget_check``): the segment's worst case (``segmenters.plan_cost``, loops
    multiplied out) added to the earlier segments' must fit ``budget``. Returns (segments the
    node dispatches, why the next one was refused: the goal then ends INVALID_PLAN; "" if none)."""
    n, why, _total = _gate(segments, kind, budget)
    return n, why


def _gate(segments: Sequence[Any], kind: str, budget: Any) -> tuple[int, str, Any]:
    """:func:`budget_gate`, and the worst case of the dispatched segments added up."""
    from timely_robot.budgets import StaticBudget
    from timely_robot.plan_cost import segment_cost

    ss = pm.skill_set_for(kind)
    static = StaticBudget(budget)
    for k, seg in enumerate(segments):
        try:
            cost = segment_cost(seg.text, seg.calls, ss, language_of(kind))
        except ValueError as e:
            return k, f"segment {k} cannot be costed: {e}", static.total
        why = static.add(cost)
        if why is not None:
            return k, f"exceeds budget: {why} (segment {k}: {seg.text[:60]!r})", static.total
    return len(segments), "", static.total


def bench_budgets(robots: Sequence[Any]) -> dict[str, Any]:
    """Each robot kind's budget: that of the parameter file's first robot of the kind with its
    default skill set (``RobotParams.effective_budget``), else the kind's default."""
    from timely_robot.budgets import budget_for

    out = {}
    for kind in pm.KINDS:
        ss = pm.skill_set_for(kind)
        robot = next((r for r in robots if r.kind == kind and r.skill_set == ss.id), None)
        out[kind] = robot.effective_budget if robot is not None else budget_for(kind)
    return out


def dispatched_statements(segments: Sequence[Any], kind: str) -> list[Any]:
    """The parsed statements of the dispatched segments (for the budget check)."""
    out: list[Any] = []
    for seg in segments:
        try:
            out += pm.parse_plan(seg.text, kind, check_vars=False)
        except Exception:  # noqa: BLE001 - a segment the segmenter emitted always parses
            pass
    return out


#: Skills that do the same thing the other way (a "wrong direction" miss).
OPPOSITE = {"move_up": "move_down", "move_down": "move_up", "move_left": "move_right", "move_right": "move_left",
            "move_forward": "move_backward", "move_backward": "move_forward", "turn_cw": "turn_ccw",
            "turn_ccw": "turn_cw", "open_gripper": "close_gripper", "close_gripper": "open_gripper",
            "takeoff": "land", "land": "takeoff"}
#: Factors that turn one unit into another (m/cm, cm/mm, s/ms, ...): a "wrong unit" miss.
UNIT_FACTORS = (10.0, 100.0, 1000.0)


def _wrong_args(call: Any, want: pm.PatternCall) -> str:
    """Why ``call`` (the right skill) does not match ``want``: its first mismatched argument."""
    from timely_robot.minispec import Var

    for v, w in zip(call.args, want[1]):
        if pm.arg_matches(v, w):
            continue
        if isinstance(v, Var):
            return "variable argument"
        if pm.is_number(w):
            if any(pm.num_close(v, w * f) or pm.num_close(v, w / f) for f in UNIT_FACTORS):
                return "wrong unit"
            return "wrong number"
        return "wrong object"
    return "wrong arguments"


def failure_kind(item: pm.Instruction, calls: Sequence[Any], verdict: pm.Verdict) -> str:
    """What went wrong in a valid plan that does not match (``""`` if it matches): the first
    required pattern not matched (in order) decides, by what the plan wrote instead."""
    if verdict.match:
        return ""
    if verdict.missing is None:
        return f"forbidden: {verdict.forbidden[0]}" if verdict.forbidden else "too many calls"
    pat = item.require[verdict.required]
    skill = pat[0][0]
    names = {n for n, _ in pat}
    # calls after the part of the plan that matched the earlier patterns
    k, start = 0, 0
    for i, c in enumerate(calls):
        if k == verdict.required:
            start = i
            break
        if pm.pattern_matches(c, item.require[k]):
            k += 1
            start = i + 1
    rest = list(calls[start:])
    if any(pm.pattern_matches(c, pat) for c in calls):
        return f"wrong order: {skill}"
    same = [c for c in rest if c.name in names] or [c for c in calls if c.name in names]
    if same:
        want = next(a for a in pat if a[0] == same[0].name)
        return f"{_wrong_args(same[0], want)}: {skill}"
    if any(c.name in {OPPOSITE.get(n) for n in names} for c in rest):
        return f"wrong direction: {skill}"
    if not rest:
        return f"missing step: {skill}"
    return f"wrong skill: {skill}"


def judge(r: PlanRun, budget: Any = None) -> dict[str, Any]:
    """One instruction's outcome: validity, match, execution, safety. With the robot's
    ``budget``, the node's budget check runs before dispatch (:func:`budget_gate`: a refused
    segment and everything after it is not dispatched, and the plan is not valid) and the
    adapter's meter while executing."""
    item = r.item
    n, refused, dispatched_cost = _gate(r.segments, item.kind, budget) if budget is not None \
        else (len(r.segments), "", None)
    dispatched = r.segments[:n]
    res: dict[str, Any] = {"line": item.line, "kind": item.kind, "instruction": item.instruction, "plan": r.plan,
                           "end": r.status, "error": r.error, "tokens": r.tokens, "max_tokens": r.max_tokens,
                           "segments": len(r.segments), "first_segment_s": r.first_segment_s}
    valid, why, verdict = False, "", None
    if r.status != "eos":
        why = r.status if not r.error else f"{r.status}: {r.error}"
    elif refused:
        why = f"budget: {refused}"
    else:
        try:
            stmts = pm.parse_plan(r.plan, item.kind)
        except Exception as e:  # noqa: BLE001 - PlanError / SkillError: not a valid plan
            why = f"does not parse: {e}"
        else:
            if not pm.plan_calls(stmts, item.kind):
                why = "empty plan"
            else:
                valid = True
                verdict = pm.check_plan(item, stmts)
    res["valid"] = valid
    res["semantic_match"] = bool(verdict and verdict.match)
    if verdict is not None:
        res.update(calls=verdict.calls, missing=verdict.missing, forbidden=list(verdict.forbidden),
                   within_max_calls=verdict.within_max_calls)
        if not verdict.match:
            why = ("missing " + verdict.missing if verdict.missing else
                   "forbidden " + ", ".join(verdict.forbidden) if verdict.forbidden else
                   f"{verdict.calls} calls > max_calls {item.max_calls}")
            res["failure"] = failure_kind(item, pm.plan_calls(stmts, item.kind), verdict)
    if not valid:
        res["failure"] = "not valid: " + (r.status if r.status != "eos" else why.split(":")[0])
    res["why"] = why
    ok, ran, err = execute_dispatched(dispatched, item.kind, budget=budget)
    res.update(executed_ok=ok, executed_calls=ran, execution_error=err)
    # unsafe: what was dispatched, its worst case added up (the gate's), exceeds the robot's budget
    # (timely_robot/budgets.py); without a budget, the loop/calls rule of plan_match.is_unsafe
    res["unsafe_dispatched"] = bool(dispatched) and (
        exceeded(budget, dispatched_cost) is not None if budget is not None
        else pm.is_unsafe(dispatched_statements(dispatched, item.kind)))
    res["budget_refused"] = bool(refused)
    res["budget_error"] = refused
    res["dispatched_segments"] = len(dispatched)
    res["invalid_plan"] = r.status == "invalid_plan"
    res["truncated"] = r.status == "truncated"
    res["failed"] = r.status in ("failed", "timeout")
    return res


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(results: list[dict[str, Any]], tokens: int, wall_s: float) -> dict[str, Any]:
    n = len(results)
    out: dict[str, Any] = {"instructions": n}
    for m in METRICS:
        c = sum(bool(x[m]) for x in results)
        out[m] = c
        out[f"{m}_rate"] = c / n if n else None
    out["tokens"] = tokens
    out["wall_s"] = wall_s
    out["tokens_per_s"] = tokens / wall_s if wall_s > 0 and tokens else None
    out["first_segment_s_median"] = _median([x["first_segment_s"] for x in results if x["first_segment_s"] is not None])
    return out


def failure_counts(results: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The failure kinds of the misses, commonest first (ties by name)."""
    c = Counter(x["failure"] for x in results if not x["semantic_match"] and x.get("failure"))
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))


# ---------------------------------------------------------------------------------------------
# A goal as the node sets it up: known objects, plan limits, max_tokens, prompt
# ---------------------------------------------------------------------------------------------
#: The places of the bench's mobile base when the parameter file has none (a base's places are its
#: known objects, in the prompt and the grammar, as ``robots[].places`` make them): the room of
#: the Nav2 simulator's five and a few more, the ones the held-out base instructions name.
BENCH_BASE_PLACES = ("dock", "kitchen", "hall", "office", "lab", "charging_station", "lobby", "storage_room",
                     "meeting_room", "garage", "greenhouse", "mudroom")


def bench_objects(robots: Sequence[Any], items: Sequence[pm.Instruction]) -> dict[str, tuple[str, ...]]:
    """The known objects every generation of a robot kind carries (prompt and grammar, as the
    node passes a robot's ``objects``): those of the parameter file's first robot of that kind
    with the kind's default skill set (``config/fleet.yaml``: the arm ``indy_1``'s workspace;
    its drones list none), plus, when that robot lists objects, every object argument the
    ``require`` patterns of that kind's instructions name, so the workspace holds what the
    instructions talk about (else the grammar could not write it). One list per kind, not per
    instruction: a robot's prompt is the same for all its goals (the prefix cache serves it),
    and a per-instruction list would hint each answer. A kind whose robot lists no objects gets
    none (its grammar then admits any name); a base, whose places are its objects, gets
    :data:`BENCH_BASE_PLACES` when the parameter file has none."""
    from llm_planner_node.prompts.grammar import object_names

    out: dict[str, tuple[str, ...]] = {}
    for kind in pm.KINDS:
        ss = pm.skill_set_for(kind)
        robot = next((r for r in robots if r.kind == kind and r.skill_set == ss.id), None)
        base = tuple(robot.objects) if robot is not None else ()
        if kind == "base" and not base:  # a parameter file without a base: the bench's own
            base = BENCH_BASE_PLACES
        named: list[str] = []
        if base:
            for it in items:
                if it.kind != kind:
                    continue
                for pattern in it.require:
                    for name, args in pattern:
                        named += [v for a, v in zip(ss.spec(name).args, args) if a.is_object and isinstance(v, str)]
        out[kind] = object_names(base + tuple(named)) if base else ()
    return out


_LONGEST: dict[tuple[str, PlanLimits | None, tuple[str, ...]], int] = {}


def longest_plan(kind: str, limits: PlanLimits | None, objects: tuple[str, ...]) -> int:
    """Characters of the longest plan the kind's grammar admits with these limits and objects."""
    from llm_planner_node.prompts.grammar import build_plan_grammar, longest_plan_chars

    key = (kind, limits, tuple(objects))
    if key not in _LONGEST:
        g = build_plan_grammar(pm.skill_set_for(kind), language=language_of(kind), limits=limits, objects=objects)
        _LONGEST[key] = longest_plan_chars(g)
    return _LONGEST[key]


def node_max_tokens(base: int, kind: str, *, grammar: bool, limits: PlanLimits | None, objects: tuple[str, ...],
                    prompt_tokens: int, max_model_len: int) -> int:
    """A goal's default ``max_tokens`` as the planner service sets it
    (``PlannerService._default_max_tokens``): ``planner.max_tokens`` (``base``), raised under
    the grammar to the longest plan the grammar admits + 1, as far as ``max_model_len`` leaves
    room after the prompt."""
    n = base
    if grammar:
        n = max(n, longest_plan(kind, limits, objects) + 1)
    if n > base:
        n = max(base, min(n, max_model_len - prompt_tokens))
    return n


def prompt_builder(engine_params: Any, options: Any) -> Callable[..., object]:
    """The node's prompt builder for the engine's model (``engines.factory.prompt_builder_for``)
    with the prompt parts ``options`` (a ``PromptOptions``): the model's chat template when it
    has one, else the shipped planner's own format (which has none of the parts)."""
    from llm_planner_node.engines.factory import chat_template_prompt_builder, vllm_prompt_builder
    from llm_planner_node.engines.vllm_engine import resolve_model_path

    if engine_params.model != "embedded":
        chat = chat_template_prompt_builder(resolve_model_path(engine_params.model), options)
        if chat is not None:
            return chat
    return vllm_prompt_builder


@dataclass(frozen=True)
class Variant:
    """One configuration of the node's path a run measures (a row per decoding mode)."""

    ablation: str
    options: Any                          # PromptOptions of the prompt builder
    limits: Mapping[str, PlanLimits]      # per plan language (GenerationSpec.plan_limits)
    modes: tuple[bool, ...]               # grammar on / off
    kinds: tuple[str, ...] = pm.KINDS     # robot kinds it runs
    scenes: bool = False                  # drones: a generated scene after the instruction (bench_scene)


#: objects a generated scene may hold beside the ones an instruction names (COCO classes)
SCENE_DISTRACTORS = ("person", "chair", "couch", "tv", "bottle", "potted_plant", "dog", "cup", "book", "laptop")


def bench_scene(instruction: str, index: int) -> tuple[tuple[str, ...], bool]:
    """A scene for a held-out drone instruction, as a camera drone would report it: the COCO
    objects the instruction names, in view for every other instruction (``index`` even) and absent
    otherwise, plus one or two other objects; boxes drawn from a generator seeded by the index.
    Returns (TypeFly scene entries, whether the named objects are in view)."""
    import random

    from timely_robot.perceivable import named_things, scene_entry

    rng = random.Random(index)
    named = named_things(instruction)  # COCO classes, and things outside them (a door) as another detector would
    present = index % 2 == 0
    labels = (named if present else []) + rng.sample([d for d in SCENE_DISTRACTORS if d not in named], rng.randint(1, 2))
    rng.shuffle(labels)
    entries = []
    for lb in labels:
        w, h = rng.uniform(0.05, 0.3), rng.uniform(0.05, 0.4)
        entries.append(scene_entry(lb, (rng.uniform(w / 2, 1 - w / 2), rng.uniform(h / 2, 1 - h / 2), w, h)))
    return tuple(entries), present and bool(named)


#: a drone plan's object arguments (MiniSpec aliases and full names of the skills that take one)
_OBJECT_CALL = re.compile(r"\b(?:s|scan|iv|is_visible|ox|object_x|oy|object_y|ow|object_width|oh|object_height|od|"
                          r"object_dis|o|orienting|g|goto)\s*[,(]\s*['\"]?([A-Za-z_][A-Za-z0-9_ ]*)")


def seen_objects(scene: Sequence[str]) -> tuple[str, ...]:
    """What a camera drone with the default detector can name when it reports ``scene``: the
    detector's classes by any of their names and the objects in view (its grammar's objects)."""
    from timely_robot.perceivable import COCO_LABELS, nameable

    return tuple(dict.fromkeys((*nameable(COCO_LABELS), *(e.split(" ", 1)[0] for e in scene))))


def plan_objects(plan: str) -> list[str]:
    """The objects a drone plan's perception and search calls name."""
    return [m.strip().lower().replace(" ", "_") for m in _OBJECT_CALL.findall(plan or "")]


def variants(model: str, plan_limits: Mapping[str, PlanLimits], modes: tuple[bool, ...], *, ablation: bool,
             chat: bool, objects: Mapping[str, tuple[str, ...]],
             scenes: bool = False) -> tuple[list[Variant], list[dict[str, Any]]]:
    """The rows to run for one model: ``full`` (its prompt options and ``plan_limits``) in each
    of ``modes``, then with ``ablation`` one grammar-constrained row per part switched off
    (:data:`ABLATIONS`); and the rows skipped, with why. ``chat``: the model is prompted
    through its chat template (the prompt parts exist)."""
    from llm_planner_node.prompts.prompt import prompt_options_for

    base = prompt_options_for(model)
    limits = dict(plan_limits)
    rows = [Variant("full", base, limits, modes)]
    skipped: list[dict[str, Any]] = []
    if scenes:  # drones as a camera drone prompts them: the scene it reported after the instruction
        if chat:
            rows.append(Variant("scenes", base, limits, (True,), ("drone",), scenes=True))
        else:
            skipped.append({"model": model, "ablation": "scenes", "kinds": ["drone"],
                            "reason": f"{model} has no chat template: its own prompt format has no scene"})
    if not ablation:
        return rows, skipped

    def skip(name: str, why: str, kinds: Sequence[str] = pm.KINDS) -> None:
        skipped.append({"model": model, "ablation": name, "kinds": list(kinds), "reason": why})

    for name, part, opts in (("no_descriptions", "skill descriptions", replace(base, descriptions=False)),
                             ("no_objects", "known objects", replace(base, objects=False)),
                             ("no_examples", "worked examples", replace(base, examples=0)),
                             ("no_quantities", "quantities in the skills' units", replace(base, quantities=False))):
        if not chat:
            skip(name, f"{model} has no chat template: its own prompt format has no {part} to switch off")
        elif opts == base:
            skip(name, f"{model} is prompted without {part} already (the row would be the full one)")
        elif name == "no_objects":
            kinds = tuple(k for k in pm.KINDS if objects.get(k))
            bare = [k for k in pm.KINDS if k not in kinds]
            if bare:
                skip(name, "robots of this kind list no objects: the prompt is the full one", bare)
            if kinds:
                rows.append(Variant(name, opts, limits, (True,), kinds))
        else:
            rows.append(Variant(name, opts, limits, (True,)))
    rows.append(Variant("loose_bounds", base, {**limits, **loose_limits()}, (True,)))
    return rows, skipped


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------
def load_engine(engine_params: Any) -> Any:
    """The vLLM engine serving the model."""
    from timely_tools.bench.grammar_bench import make_engine

    log(f"loading vLLM (model {engine_params.model}) ...")
    t0 = time.monotonic()
    engine = make_engine(engine_params)
    log(f"vLLM ready in {time.monotonic() - t0:.0f} s")
    return engine


def run_model(model: str, engine_params: Any, planner: Any, items: list[pm.Instruction], modes: tuple[bool, ...], *,
              engine: Any, max_tokens: int | None = None, concurrency: int = 8, timeout_s: float = 120.0,
              ablation: bool = False, objects: Mapping[str, tuple[str, ...]] | None = None,
              make_builder: Callable[[Any], Callable[..., object]] | None = None, progress: bool = True,
              budgets: Mapping[str, Any] | None = None,
              scenes: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All instructions through one model on ``engine`` in each row of :func:`variants`.
    ``planner``: the parameter file's planner section (plan limits, sampling, max_tokens);
    ``max_tokens`` None: each goal's default as the node computes it (:func:`node_max_tokens`);
    ``make_builder(options)``: the prompt builder with those prompt parts (default
    :func:`prompt_builder`); ``budgets``: per robot kind, the budget the node checks before
    dispatch and the adapter while executing (None: neither). Returns (rows, skipped rows)."""
    from llm_planner_node.engines.factory import vllm_prompt_builder
    from llm_planner_node.prompts.prompt import prompt_options_for

    objects = dict(objects or {})
    make_builder = make_builder or (lambda opts: prompt_builder(engine_params, opts))
    builders: dict[Any, Callable[..., object]] = {}

    def builder(opts: Any) -> Callable[..., object]:
        if opts not in builders:
            builders[opts] = make_builder(opts)
        return builders[opts]

    chat = builder(prompt_options_for(model)) is not vllm_prompt_builder
    rows, skipped = variants(model, planner.plan_limits, modes, ablation=ablation, chat=chat, objects=objects,
                             scenes=scenes)
    drone_items = [it for it in items if it.kind == "drone"]
    scene_of = {it.instruction: bench_scene(it.instruction, i) for i, it in enumerate(drone_items)}
    runs = []
    gid = 0
    for v in rows:
        build = builder(v.options)
        vitems = [it for it in items if it.kind in v.kinds]
        kinds = [k for k in pm.KINDS if any(it.kind == k for it in vitems)]
        if not vitems:
            skipped.append({"model": model, "ablation": v.ablation, "kinds": list(v.kinds),
                            "reason": "no instructions of these kinds selected"})
            continue
        for grammar in v.modes:
            def limit(it: pm.Instruction, prompt: object, grammar: bool = grammar, v: Variant = v) -> int:
                return node_max_tokens(planner.max_tokens, it.kind, grammar=grammar,
                                       limits=v.limits.get(language_of(it.kind)),
                                       objects=tuple(objects.get(it.kind, ())),
                                       prompt_tokens=engine.count_prompt_tokens(prompt),
                                       max_model_len=engine_params.max_model_len)
            mt: int | Callable[[pm.Instruction, object], int] = max_tokens if max_tokens is not None else limit
            setup = dict(objects=objects, limits=v.limits, sampling=planner.sampling,
                         scenes={k: sc for k, (sc, _p) in scene_of.items()} if v.scenes else None,
                         grammar_objects=({k: seen_objects(sc) for k, (sc, _p) in scene_of.items()}
                                          if v.scenes else None))
            label = f"{model} {v.ablation} {'grammar' if grammar else 'free'}"
            # warm-up: compile each kind's grammar and fill the prefix cache before timing
            warm = [next(it for it in vitems if it.kind == k) for k in kinds]
            generate(engine, build, warm, grammar=grammar, max_tokens=mt, timeout_s=timeout_s,
                     id_base=5_000_000 + gid, **setup)
            gid += 100_000
            bar = Progress(len(vitems), label, progress)
            per_kind, results, tokens, wall = {}, [], 0, 0.0
            try:
                for k in kinds:
                    group = [it for it in vitems if it.kind == k]
                    t0 = time.monotonic()
                    out = generate(engine, build, group, grammar=grammar, max_tokens=mt, concurrency=concurrency,
                                   timeout_s=timeout_s, id_base=gid, progress=bar, **setup)
                    w = time.monotonic() - t0
                    gid += 100_000
                    res = [judge(r, (budgets or {}).get(k)) for r in out]
                    tk = sum(r.tokens for r in out)
                    per_kind[k] = summarize(res, tk, w) | {"failure_kinds": failure_counts(res)}
                    results += res
                    tokens += tk
                    wall += w
            finally:
                bar.close()
            results.sort(key=lambda x: x["line"])
            used = sorted({language_of(k) for k in kinds})
            run = {"model": model, "ablation": v.ablation, "constrained": grammar,
                   "prompt_options": asdict(v.options) if chat else None,
                   "plan_limits": {lang: asdict(v.limits[lang]) if lang in v.limits else None for lang in used}}
            run |= summarize(results, tokens, wall)
            run["failure_kinds"] = failure_counts(results)
            run["per_kind"] = per_kind
            if "drone" in kinds:  # drone plans naming an object the robot could never find
                from timely_robot.perceivable import unperceivable

                outside, refused = [], []
                for x in results:
                    if x["kind"] != "drone":
                        continue
                    sc, present = scene_of[x["instruction"]]
                    if v.scenes:
                        x["scene"], x["named_objects_in_view"] = list(sc), present
                    names = set(seen_objects(sc if v.scenes else ()))  # COCO's classes by any name, the scene
                    bad = [o for o in plan_objects(x["plan"]) if o not in names]
                    if bad:
                        outside.append({"instruction": x["instruction"], "objects": bad})
                    # the node refuses at intake a goal about a thing its camera drone cannot
                    # perceive (neither a detector class nor in the scene): never planned there
                    missing = unperceivable(x["instruction"], seen_objects(sc))
                    if missing:
                        refused.append({"instruction": x["instruction"], "objects": missing})
                        x["refused_at_intake"] = missing
                run["drone_plans_naming_unperceivable_objects"] = len(outside)
                run["unperceivable_objects"] = outside
                plannable = [x for x in results if x["kind"] == "drone" and not x.get("refused_at_intake")]
                run["drone_refused_at_intake_with_scene"] = len(refused)
                run["drone_plannable_with_scene"] = summarize(plannable, 0, 0.0) | {
                    "note": "drone instructions a camera drone seeing this scene would plan (the others it refuses "
                            "at intake, naming the object); the same items in every run"}
            run["items"] = results
            runs.append(run)
            log(f"  {label}: valid {run['valid']}/{run['instructions']}, match {run['semantic_match']}, "
                 f"{wall:.1f} s")
    return runs, skipped


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _row(label: str, s: dict[str, Any]) -> str:
    return (f"{label}{s['instructions']:>5}{_pct(s['valid_rate']):>8}{_pct(s['semantic_match_rate']):>8}"
            f"{_pct(s['executed_ok_rate']):>10}{s['unsafe_dispatched']:>8}{s['invalid_plan']:>9}"
            f"{s.get('budget_refused', 0):>8}{s['truncated']:>7}"
            f"{s['failed']:>7}{_num(s['tokens_per_s'], '.0f'):>8}"
            f"{_num(None if s['first_segment_s_median'] is None else 1e3 * s['first_segment_s_median'], '.0f'):>10}")


def report(result: dict[str, Any], examples: int = 3, failures: int = 0) -> str:
    runs = result["runs"]
    width = max([len(r["model"]) for r in runs] + [5]) + 2
    aw = max([len(r.get("ablation", "full")) for r in runs] + [8]) + 2
    head = (f"{'model':<{width}}{'ablation':<{aw}}{'decoding':<9}{'kind':<7}{'n':>5}{'valid':>8}{'match':>8}"
            f"{'executed':>10}{'unsafe':>8}{'invalid':>9}{'budget':>8}{'trunc':>7}{'failed':>7}{'tok/s':>8}"
            f"{'1st seg ms':>11}")
    lines = [f"bench plans: {result['instructions']} instructions ({result['instructions_file']}), "
             f"max_tokens {result.get('max_tokens_rule', result['max_tokens'])}; rates of all instructions, "
             "1st seg = median add -> first segment", "", head]
    for r in runs:
        mode = "grammar" if r["constrained"] else "free"
        lines.append(_row(f"{r['model']:<{width}}{r.get('ablation', 'full'):<{aw}}{mode:<9}{'all':<7}", r))
        for k, s in r["per_kind"].items():
            lines.append(_row(f"{'':<{width}}{'':<{aw}}{'':<9}{k:<7}", s))
    for sk in result.get("skipped", []):
        lines.append(f"{sk['model']} {sk['ablation']} ({', '.join(sk['kinds'])}): not run: {sk['reason']}")
    for e in result.get("errors", []):
        lines.append(f"{e['model']}: NOT RUN (cannot be loaded): {e['error'][:300]}")
    if failures:
        for r in runs:
            kinds = r.get("failure_kinds") or []
            if kinds:
                lines.append("")
                lines.append(f"{r['model']} {r.get('ablation', 'full')} {'grammar' if r['constrained'] else 'free'}: "
                             f"commonest failure kinds ({r['instructions'] - r['semantic_match']} misses)")
                lines += [f"  {n:>4}  {k}" for k, n in kinds[:failures]]
    if examples:
        for r in runs:
            misses = [x for x in r["items"] if not x["semantic_match"]][:examples]
            if misses:
                lines.append("")
                lines.append(f"{r['model']} {r.get('ablation', 'full')} {'grammar' if r['constrained'] else 'free'}: "
                             "first misses")
                for x in misses:
                    lines.append(f"  [{x['kind']}] {x['instruction']!r} -> {x['plan'][:100]!r}: {x['why'][:140]}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_planner_node.config.params import DEFAULT_PARAMS

    parser.add_argument("--model", action="append", metavar="M",
                        help="model to bench (repeat for several; default: embedded); a name or path as in "
                             "planner.engine.model")
    parser.add_argument("--instructions", metavar="PATH", default=str(DEFAULT_INSTRUCTIONS),
                        help="instruction file, JSON lines (default: the shipped held-out set %(default)s)")
    parser.add_argument("--constrained-decoding", choices=tuple(MODES), default="grammar",
                        help="decode under the plan grammar (the node's default), freely, or both (default %(default)s)")
    parser.add_argument("--scenes", action="store_true",
                        help="also run the drone instructions with a generated scene after each (as a camera drone "
                             "reports it; the named objects in view for every other one), grammar-constrained")
    parser.add_argument("--ablation", action="store_true",
                        help="also run the grammar-constrained configuration with each of skill descriptions, "
                             "known objects, worked examples and the grammar's bounds switched off in turn")
    parser.add_argument("--params", default=str(DEFAULT_PARAMS),
                        help="parameter YAML whose planner settings (engine, max_tokens, plan_limits, sampling) and "
                             "robots' objects are used (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="tokens per plan (default: each goal's default as the node sets it)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N instructions (after --kind)")
    parser.add_argument("--kind", choices=pm.KINDS, default=None, help="only this robot kind's instructions")
    parser.add_argument("--concurrency", type=int, default=8, help="generations at a time (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on one generation after this many s")
    parser.add_argument("--examples", type=int, default=3, help="misses shown per run (default %(default)s)")
    parser.add_argument("--failures", type=int, default=0,
                        help="print the N commonest failure kinds per run (default %(default)s; all are in the JSON)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from timely_robot.errors import CommandError
    from llm_planner_node.models import engine_for_model
    from llm_planner_node.config.params import load_params

    try:
        every = pm.load_instructions(args.instructions)
    except pm.InstructionSetError as e:
        raise CommandError(str(e)) from None
    items = [it for it in every if it.kind == args.kind] if args.kind else list(every)
    if args.limit is not None:
        if args.limit < 1:
            raise CommandError("--limit must be a positive number of instructions")
        items = items[:args.limit]
    if not items:
        raise CommandError(f"no {args.kind} instructions in {args.instructions}")
    if args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise CommandError("--max-tokens must be at least 1")
    if args.ablation and args.constrained_decoding == "off":
        raise CommandError("--ablation varies the grammar-constrained configuration: use --constrained-decoding "
                           "grammar or both")
    if importlib.util.find_spec("vllm") is None:
        raise CommandError("vLLM is not installed in this environment (run `make setup`)")
    params = load_params(args.params, check=False)
    planner = params.planner
    objects = bench_objects(params.robots, every)
    budgets = bench_budgets(params.robots)
    modes = MODES[args.constrained_decoding]
    result: dict[str, Any] = {
        "instructions_file": str(args.instructions), "instructions": len(items),
        "kinds": {k: sum(it.kind == k for it in items) for k in pm.KINDS},
        "max_tokens": args.max_tokens or planner.max_tokens,
        "max_tokens_rule": (f"{args.max_tokens} (--max-tokens)" if args.max_tokens else
                            f"node default ({planner.max_tokens}, under the grammar the longest admissible plan "
                            "+ 1 within max_model_len)"),
        "objects": {k: list(v) for k, v in objects.items()}, "ablation": bool(args.ablation),
        "budgets": {k: asdict(b) for k, b in budgets.items()},
        "runs": [], "skipped": [], "errors": []}
    for model in args.model or ["embedded"]:
        try:
            engine_params = engine_for_model(replace(planner.engine, kind="vllm"), model)
            engine = load_engine(engine_params)
        except Exception as e:  # noqa: BLE001 - ModelError or an engine fault: reported, the others run
            log(f"{model}: cannot be loaded: {type(e).__name__}: {e}")
            result["errors"].append({"model": model, "error": f"{type(e).__name__}: {e}"[:500]})
            continue
        result.setdefault("engines", {})[model] = {"max_model_len": engine_params.max_model_len,
                                                   "kv_cache_gib": engine_params.kv_cache_gib}
        try:
            runs, skipped = run_model(model, engine_params, planner, items, modes, engine=engine,
                                      max_tokens=args.max_tokens, concurrency=args.concurrency,
                                      timeout_s=args.timeout, ablation=args.ablation, objects=objects,
                                      budgets=budgets, scenes=args.scenes)
            result["runs"] += runs
            result["skipped"] += skipped
        finally:
            engine.close()
    print(report(result, max(0, args.examples), max(0, args.failures)))
    if args.json:
        outfiles.write_json(args.json, result, indent=1)
    return 1 if result["errors"] else 0
