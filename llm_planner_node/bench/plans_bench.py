"""``timely-fleet bench plans``: plan quality of any model, as the node would plan and dispatch.

    timely-fleet bench plans [--model M ...] [--instructions PATH] [--constrained-decoding grammar|off|both]
                             [--params YAML] [--limit N] [--kind drone|arm] [--json PATH]

Every instruction of the instruction file (default: :data:`DEFAULT_INSTRUCTIONS`, a held-out set
written for this benchmark; format in :mod:`.plan_match`) goes through the node's own path: the
prompt builder of the model (``engines.factory.prompt_builder_for``), the live vLLM engine
(:class:`~llm_planner_node.engines.vllm_engine.VllmEngine`, loaded once per model) with the skill
set's plan grammar or without it, and the robot kind's segmenter inside the engine, suspending at
every segment and resuming at once (as :mod:`.grammar_bench` drives it; ``--concurrency``
generations at a time, each robot kind as its own batch). The segments the segmenter cut are
what the node would dispatch; they are then run on simulated robots in-process: the adapter's
own validation (``AdapterCore._validate``), the MiniSpec interpreter for drones (variables, ifs,
loops; at most :data:`MAX_EXECUTED_CALLS` calls) and the ``sim`` adapter's executor
(``robot_adapters.sim_fleet.SampledExecutor``, durations zero).

Per model and decoding mode (counts, and ``*_rate`` fractions of the instructions):

* ``valid``: the generation ended with EOS (not at max_tokens, no INVALID_PLAN), the whole plan
  parses with the node's parser, every call passes the skill set's validation, and it calls at
  least one skill;
* ``semantic_match``: valid and the instruction's ``require`` (in order), ``forbid`` and
  ``max_calls`` all hold (:func:`.plan_match.check_plan`);
* ``executed_ok``: at least one segment was dispatched and every dispatched call ran without the
  adapter or the executor refusing it (and within the call limit);
* ``unsafe_dispatched``: generations whose dispatched part has a loop count over 10 or over 50
  calls after unrolling (:func:`.plan_match.is_unsafe`);
* ``invalid_plan``: generations the segmenter ended with INVALID_PLAN (not counting truncated
  ones); ``truncated``: generations that reached max_tokens (the engine's ``max_tokens`` end, or
  an INVALID_PLAN raised when the text was cut there); ``failed``: engine faults and timeouts;
* ``tokens_per_s``: generated tokens / wall time of the batched runs; ``first_segment_s_median``:
  median time from add to the first segment (None if no generation produced one).

JSON (``--json PATH``): ``{"instructions_file", "max_tokens", "runs": [{"model", "constrained",
"instructions", "valid", "valid_rate", "semantic_match", ..., "per_kind": {"drone": {...},
"arm": {...}}, "items": [per instruction]}], "errors": [models that could not be loaded]}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import outfiles
from . import plan_match as pm

DEFAULT_INSTRUCTIONS = Path(__file__).resolve().parent / "plans_heldout.jsonl"
#: A dispatched plan that runs more skill calls than this on the simulated robot is stopped
#: (and counts as not executed): a plan must not fly forever.
MAX_EXECUTED_CALLS = 200
MODES = {"grammar": (True,), "off": (False,), "both": (True, False)}
METRICS = ("valid", "semantic_match", "executed_ok", "unsafe_dispatched", "invalid_plan", "truncated", "failed")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Generation (the node's engine, prompt and segmenter)
# ---------------------------------------------------------------------------------------------
@dataclass
class PlanRun:
    item: pm.Instruction
    status: str = "running"            # eos | truncated | invalid_plan | failed | timeout
    error: str = ""
    segments: list[Any] = field(default_factory=list)    # SegmentEvents: what the node dispatches
    token_ids: list[int] = field(default_factory=list)   # every generated token
    plan: str = ""
    t_add: float = 0.0
    t_first_segment: float | None = None
    t_end: float | None = None
    tokens: int = 0

    @property
    def first_segment_s(self) -> float | None:
        return None if self.t_first_segment is None else self.t_first_segment - self.t_add


class _Progress:
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
            _log(f"  {self.label}: {self.done}/{self.total}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def generate(engine: Any, build: Callable[[str, str, str], object], items: Sequence[pm.Instruction], *,
             grammar: bool, max_tokens: int, concurrency: int = 8, timeout_s: float = 120.0, id_base: int = 0,
             progress: _Progress | None = None) -> list[PlanRun]:
    """Plan every item, ``concurrency`` at once, suspended at every segment and resumed at once
    (the node's segmented generation); each generation is aborted after ``timeout_s``."""
    from ..core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent, TokensEvent
    from .grammar_bench import set_grammar

    set_grammar(engine, grammar)
    runs = [PlanRun(it) for it in items]
    running: dict[int, PlanRun] = {}
    nxt = 0
    while nxt < len(items) or running:
        while nxt < len(items) and len(running) < concurrency:
            it, r = items[nxt], runs[nxt]
            r.t_add = engine.clock.now()
            engine.add(GenerationSpec(id_base + nxt, build(it.instruction, it.kind, it.skill_set), max_tokens,
                                      it.kind, it.skill_set, suspend_at_segments=True))
            running[id_base + nxt] = r
            nxt += 1
        for ev in engine.step():
            r = running.get(ev.gen_id)
            if r is None:
                continue
            if isinstance(ev, TokensEvent):
                r.tokens += ev.count
                r.token_ids.extend(ev.token_ids)
            elif isinstance(ev, SegmentEvent):
                r.segments.append(ev)
                if r.t_first_segment is None:
                    r.t_first_segment = ev.t
                if ev.suspended:
                    engine.resume(ev.gen_id)
            elif isinstance(ev, (FinishedEvent, FailedEvent)):
                r.t_end = ev.t
                if isinstance(ev, FailedEvent):
                    r.error = ev.error
                    # the segmenter fails a plan cut inside a block or string at max_tokens: truncated
                    r.status = ("truncated" if ev.invalid_plan and r.tokens >= max_tokens
                                else "invalid_plan" if ev.invalid_plan else "failed")
                else:
                    r.status = "truncated" if ev.reason == "max_tokens" else "eos"
                running.pop(ev.gen_id)
                if progress is not None:
                    progress.step()
        now = engine.clock.now()
        for gid, r in list(running.items()):
            if now - r.t_add > timeout_s:
                engine.abort(gid)
                r.status, r.error, r.t_end = "timeout", f"no end within {timeout_s:g} s", now
                running.pop(gid)
                if progress is not None:
                    progress.step()
    for r in runs:
        r.plan = engine.tokenizer.decode(r.token_ids, skip_special_tokens=True).strip()
    return runs


# ---------------------------------------------------------------------------------------------
# Running the dispatched segments on simulated robots
# ---------------------------------------------------------------------------------------------
def execute_dispatched(segments: Sequence[Any], kind: str, *, max_calls: int = MAX_EXECUTED_CALLS
                       ) -> tuple[bool, int, str]:
    """Run the dispatched segments as the ``sim`` adapter would, in-process: the adapter's checks
    of each segment, then its calls (drones: through the MiniSpec interpreter, whose variables
    live across the goal's segments) on the sim adapter's executor (durations zero).
    Returns (every call ran, calls run, why not)."""
    from robot_adapters.adapter_base import AdapterCore, SegmentIn
    from robot_adapters.minispec_interpreter import MiniSpecInterpreter
    from robot_adapters.sim_fleet import SampledExecutor

    from ..core.execution_time import ExecutionTimeModel

    if not segments:
        return False, 0, "nothing dispatched"
    ss = pm.skill_set_for(kind)
    ex = SampledExecutor(f"bench-{kind}", kind, ss, ExecutionTimeModel(online=False), 0, time_scale=0.0)
    core = AdapterCore(f"bench-{kind}", ex, skill_set=ss)  # never started: its checks only
    interp = MiniSpecInterpreter(ss, lambda call: None, max_steps=max_calls + 1)
    ran = 0
    for k, seg in enumerate(segments):
        try:
            calls, program = core._validate(SegmentIn(goal_id="bench", sequence=k, text=seg.text,
                                                      skills=[(c.name, [str(a) for a in c.args]) for c in seg.calls]))
            gen = interp.steps(program) if program is not None else iter(calls)
            value: Any = None
            while True:
                try:
                    call = gen.send(value) if program is not None else next(gen)
                except StopIteration:
                    break
                ran += 1
                if ran > max_calls:
                    return False, ran - 1, f"stopped after {max_calls} calls"
                ex.prepare(call)
                value = ex.finish(call)
        except Exception as e:  # noqa: BLE001 - the adapter, interpreter or executor refused
            return False, ran, f"segment {k} {seg.text!r}: {e}"
    return True, ran, ""


def dispatched_statements(segments: Sequence[Any], kind: str) -> list[Any]:
    """The parsed statements of the dispatched segments (for the budget check)."""
    out: list[Any] = []
    for seg in segments:
        try:
            out += pm.parse_plan(seg.text, kind, check_vars=False)
        except Exception:  # noqa: BLE001 - a segment the segmenter emitted always parses
            pass
    return out


def judge(r: PlanRun) -> dict[str, Any]:
    """One instruction's outcome: validity, match, execution, budget."""
    item = r.item
    res: dict[str, Any] = {"line": item.line, "kind": item.kind, "instruction": item.instruction, "plan": r.plan,
                           "end": r.status, "error": r.error, "tokens": r.tokens,
                           "segments": len(r.segments), "first_segment_s": r.first_segment_s}
    valid, why, verdict = False, "", None
    if r.status != "eos":
        why = r.status if not r.error else f"{r.status}: {r.error}"
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
    res["why"] = why
    ok, ran, err = execute_dispatched(r.segments, item.kind)
    res.update(executed_ok=ok, executed_calls=ran, execution_error=err)
    res["unsafe_dispatched"] = bool(r.segments) and pm.is_unsafe(dispatched_statements(r.segments, item.kind))
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


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------
def load_model(engine_params: Any) -> tuple[Callable[[str, str, str], object], Any]:
    """The node's prompt builder for the model and the vLLM engine serving it."""
    from ..engines.factory import prompt_builder_for
    from .grammar_bench import make_engine

    build = prompt_builder_for(engine_params)
    _log(f"loading vLLM (model {engine_params.model}) ...")
    t0 = time.monotonic()
    engine = make_engine(engine_params)
    _log(f"vLLM ready in {time.monotonic() - t0:.0f} s")
    return build, engine


def run_model(engine_params: Any, items: list[pm.Instruction], modes: tuple[bool, ...], *, max_tokens: int,
              concurrency: int, timeout_s: float, progress: bool = True, engine: Any = None,
              build: Callable[[str, str, str], object] | None = None) -> list[dict[str, Any]]:
    """All instructions through one model (engine loaded once, closed at the end unless given) in
    each decoding mode."""
    own = engine is None
    if own:
        build, engine = load_model(engine_params)
    elif build is None:
        from ..engines.factory import prompt_builder_for

        build = prompt_builder_for(engine_params)
    kinds = [k for k in pm.KINDS if any(it.kind == k for it in items)]
    runs = []
    gid = 0
    try:
        for grammar in modes:
            label = f"{engine_params.model} {'grammar' if grammar else 'free'}"
            # warm-up: compile each kind's grammar and fill the prefix cache before timing
            warm = [next(it for it in items if it.kind == k) for k in kinds]
            generate(engine, build, warm, grammar=grammar, max_tokens=max_tokens, timeout_s=timeout_s,
                     id_base=5_000_000 + gid)
            gid += 100_000
            bar = _Progress(len(items), label, progress)
            per_kind, results, tokens, wall = {}, [], 0, 0.0
            try:
                for k in kinds:
                    group = [it for it in items if it.kind == k]
                    t0 = time.monotonic()
                    out = generate(engine, build, group, grammar=grammar, max_tokens=max_tokens,
                                   concurrency=concurrency, timeout_s=timeout_s, id_base=gid, progress=bar)
                    w = time.monotonic() - t0
                    gid += 100_000
                    res = [judge(r) for r in out]
                    tk = sum(r.tokens for r in out)
                    per_kind[k] = summarize(res, tk, w)
                    results += res
                    tokens += tk
                    wall += w
            finally:
                bar.close()
            results.sort(key=lambda x: x["line"])
            run = {"model": engine_params.model, "constrained": grammar} | summarize(results, tokens, wall)
            run["per_kind"] = per_kind
            run["items"] = results
            runs.append(run)
            _log(f"  {label}: valid {run['valid']}/{run['instructions']}, match {run['semantic_match']}, "
                 f"{wall:.1f} s")
    finally:
        if own:
            engine.close()
    return runs


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _row(label: str, s: dict[str, Any]) -> str:
    return (f"{label}{s['instructions']:>5}{_pct(s['valid_rate']):>8}{_pct(s['semantic_match_rate']):>8}"
            f"{_pct(s['executed_ok_rate']):>10}{s['unsafe_dispatched']:>8}{s['invalid_plan']:>9}{s['truncated']:>7}"
            f"{s['failed']:>7}{_num(s['tokens_per_s'], '.0f'):>8}"
            f"{_num(None if s['first_segment_s_median'] is None else 1e3 * s['first_segment_s_median'], '.0f'):>10}")


def report(result: dict[str, Any], examples: int = 3) -> str:
    runs = result["runs"]
    width = max([len(r["model"]) for r in runs] + [5]) + 2
    head = (f"{'model':<{width}}{'decoding':<9}{'kind':<7}{'n':>5}{'valid':>8}{'match':>8}{'executed':>10}"
            f"{'unsafe':>8}{'invalid':>9}{'trunc':>7}{'failed':>7}{'tok/s':>8}{'1st seg ms':>11}")
    lines = [f"bench plans: {result['instructions']} instructions ({result['instructions_file']}), "
             f"max_tokens {result['max_tokens']}; rates of all instructions, 1st seg = median add -> first segment",
             "", head]
    for r in runs:
        mode = "grammar" if r["constrained"] else "free"
        lines.append(_row(f"{r['model']:<{width}}{mode:<9}{'all':<7}", r))
        for k, s in r["per_kind"].items():
            lines.append(_row(f"{'':<{width}}{'':<9}{k:<7}", s))
    for e in result.get("errors", []):
        lines.append(f"{e['model']}: NOT RUN (cannot be loaded): {e['error'][:300]}")
    if examples:
        for r in runs:
            misses = [x for x in r["items"] if not x["semantic_match"]][:examples]
            if misses:
                lines.append("")
                lines.append(f"{r['model']} {'grammar' if r['constrained'] else 'free'}: first misses")
                for x in misses:
                    lines.append(f"  [{x['kind']}] {x['instruction']!r} -> {x['plan'][:100]!r}: {x['why'][:140]}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..params import DEFAULT_PARAMS

    parser.add_argument("--model", action="append", metavar="M",
                        help="model to bench (repeat for several; default: embedded); a name or path as in "
                             "planner.engine.model")
    parser.add_argument("--instructions", metavar="PATH", default=str(DEFAULT_INSTRUCTIONS),
                        help="instruction file, JSON lines (default: the shipped held-out set %(default)s)")
    parser.add_argument("--constrained-decoding", choices=tuple(MODES), default="grammar",
                        help="decode under the plan grammar (the node's default), freely, or both (default %(default)s)")
    parser.add_argument("--params", default=str(DEFAULT_PARAMS),
                        help="parameter YAML whose planner.engine settings and max_tokens are used (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=None, help="tokens per plan (default: planner.max_tokens)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N instructions (after --kind)")
    parser.add_argument("--kind", choices=pm.KINDS, default=None, help="only this robot kind's instructions")
    parser.add_argument("--concurrency", type=int, default=8, help="generations at a time (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on one generation after this many s")
    parser.add_argument("--examples", type=int, default=3, help="misses shown per run (default %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from ..cli import CommandError
    from ..params import load_params

    try:
        items = pm.load_instructions(args.instructions)
    except pm.InstructionSetError as e:
        raise CommandError(str(e)) from None
    if args.kind:
        items = [it for it in items if it.kind == args.kind]
    if args.limit is not None:
        if args.limit < 1:
            raise CommandError("--limit must be a positive number of instructions")
        items = items[:args.limit]
    if not items:
        raise CommandError(f"no {args.kind} instructions in {args.instructions}")
    if args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1")
    if importlib.util.find_spec("vllm") is None:
        raise CommandError("vLLM is not installed in this environment (run `make setup`)")
    planner = load_params(args.params, check=False).planner
    max_tokens = args.max_tokens or planner.max_tokens
    modes = MODES[args.constrained_decoding]
    result: dict[str, Any] = {"instructions_file": str(args.instructions), "instructions": len(items),
                              "kinds": {k: sum(it.kind == k for it in items) for k in pm.KINDS},
                              "max_tokens": max_tokens, "runs": [], "errors": []}
    for model in args.model or ["embedded"]:
        engine_params = replace(planner.engine, kind="vllm", model=model)
        try:
            build, engine = load_model(engine_params)
        except Exception as e:  # noqa: BLE001 - a model that cannot be loaded is reported, the others run
            _log(f"{model}: cannot be loaded: {type(e).__name__}: {e}")
            result["errors"].append({"model": model, "error": f"{type(e).__name__}: {e}"[:500]})
            continue
        try:
            result["runs"] += run_model(engine_params, items, modes, max_tokens=max_tokens,
                                        concurrency=args.concurrency, timeout_s=args.timeout, engine=engine,
                                        build=build)
        finally:
            engine.close()
    print(report(result, max(0, args.examples)))
    if args.json:
        with outfiles.create(args.json) as f:
            json.dump(result, f, indent=1, default=str)
            f.write("\n")
        print(f"wrote {args.json}")
    return 1 if result["errors"] else 0
