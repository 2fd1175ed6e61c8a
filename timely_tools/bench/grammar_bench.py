"""``timely-fleet bench grammar``: grammar-safe generation vs free decoding on the held-out set.

With the shipped model on vLLM (one engine; structured outputs on for the grammar runs, off for
the free ones), every instruction of ``planner_model/heldout.jsonl`` (instructions no training
script saw: paraphrases, unseen objects, unseen numbers, requests outside the safe ranges) is
planned twice, segmented as the node does it (suspend at every segment, resume at once):

* ``invalid_plans``: generations the segmenter ended with INVALID_PLAN (target 0 with the grammar);
* ``exact``: plans equal to the expected plan, over the instructions that have one;
* ``adapter_rejected``: segments the robot adapter's own validation
  (``robot_adapters.adapter_core.AdapterCore.validate``, the check every adapter runs before a
  command) refuses, over all segments the generations produced;
* ``matcher``: what each kind's grammar costs vLLM's engine core per decoded token (xgrammar's
  mask fill + accept over the canonical plans, :mod:`.grammar_matcher`; ``--matcher-only``
  measures just this, without vLLM);
* timing, in one run, with vs without the grammar (each instruction alone, unsegmented, the two
  modes interleaved): per-token decode cost (time from the first token to the end / tokens
  after the first) and time to first segment (add -> first segment), medians and their ratios.

JSON (``--json PATH``): ``{"instructions": N, "grammar": {"invalid_plans", "exact", ...},
"free": {...}, "ratios": {"decode_per_token", "first_segment"}, "matcher": {kind: {"mean_us", ...}},
...}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

from timely_tools import outfiles
from timely_tools.bench.engine_loop import GenerationRun, run_generations

MAX_TOKENS = 128


class Outcome(GenerationRun):
    """One held-out instruction planned: status ``finished``, ``invalid`` (INVALID_PLAN),
    ``failed`` or ``timeout``; its plan is the text of its segments."""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_engine(engine_params: Any) -> Any:
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.vllm_engine import VllmEngine

    return VllmEngine(engine_params, WallClock(), constrained_decoding="grammar")


def set_grammar(engine: Any, on: bool) -> None:
    """Grammar runs use the skill set's plan grammar; free runs pass no structured outputs."""
    from llm_planner_node.engines.vllm_engine import default_grammar_factory

    engine.grammar_factory = default_grammar_factory if on else (lambda spec: None)


def run_items(engine: Any, build: Any, items: list[Any], *, grammar: bool, segmented: bool = True,
              concurrency: int = 8, max_tokens: int = MAX_TOKENS, timeout_s: float = 300.0,
              id_base: int = 0) -> list[Outcome]:
    """Plan every item (``concurrency`` at once); resume a suspended generation at once."""
    from llm_planner_node.core.engine_api import FailedEvent, GenerationSpec

    set_grammar(engine, grammar)
    outcomes = [Outcome(it) for it in items]

    def spec_for(i: int) -> GenerationSpec:
        it = items[i]
        outcomes[i].t_add = engine.clock.now()
        return GenerationSpec(id_base + i, build(it.instruction, it.robot_kind, it.skill_set), max_tokens,
                              it.robot_kind, it.skill_set, suspend_at_segments=segmented)

    def ended(o: Outcome, ev: Any) -> None:
        if isinstance(ev, FailedEvent):
            o.status, o.error = ("invalid" if ev.invalid_plan else "failed"), ev.error
        else:
            o.status = "finished"

    run_generations(engine, outcomes, spec_for, ended, concurrency=concurrency, deadline_s=timeout_s)
    for o in outcomes:
        o.plan = engine.tokenizer.decode([t for s in o.segments for t in s.token_ids],
                                         skip_special_tokens=True).strip()
    return outcomes


def adapter_rejections(outcomes: list[Outcome]) -> tuple[int, int, list[str]]:
    """(segments checked, segments refused, first refusals) by the robot adapter's validation."""
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.adapter_core import SegmentIn

    from timely_robot.skills import DEFAULT_SKILL_SETS

    cores: dict[str, Any] = {}
    checked = refused = 0
    why: list[str] = []
    for o in outcomes:
        ss = o.item.skill_set
        core = cores.get(ss)
        if core is None:  # never started: only its validation is used
            core = cores[ss] = AdapterCore(f"bench-{ss}", None, skill_set=DEFAULT_SKILL_SETS[ss])
        for k, seg in enumerate(o.segments):
            checked += 1
            try:
                core.validate(SegmentIn(goal_id="bench", sequence=k, text=seg.text,
                                         skills=[(c.name, [str(a) for a in c.args]) for c in seg.calls]))
            except Exception as e:  # SkillError, PlanError: the adapter would refuse the segment
                refused += 1
                if len(why) < 5:
                    why.append(f"{o.item.instruction!r}: {seg.text!r}: {e}")
    return checked, refused, why


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    with_plan = [o for o in outcomes if o.item.expected_plan]
    exact = sum(o.plan == o.item.expected_plan for o in with_plan)
    checked, refused, why = adapter_rejections(outcomes)
    by_cat: dict[str, dict[str, int]] = {}
    for o in outcomes:
        c = by_cat.setdefault(o.item.category, {"n": 0, "invalid": 0, "exact": 0})
        c["n"] += 1
        c["invalid"] += o.status == "invalid"
        c["exact"] += bool(o.item.expected_plan) and o.plan == o.item.expected_plan
    return {
        "invalid_plans": sum(o.status == "invalid" for o in outcomes),
        "invalid_rate": sum(o.status == "invalid" for o in outcomes) / max(1, len(outcomes)),
        "exact": exact,
        "exact_rate": exact / max(1, len(with_plan)),
        "with_expected_plan": len(with_plan),
        "other_failures": sum(o.status in ("failed", "timeout") for o in outcomes),
        "segments": checked,
        "adapter_rejected": refused,
        "adapter_rejections": why,
        "by_category": by_cat,
        "invalid_examples": [f"{o.item.instruction!r} -> {o.error}" for o in outcomes if o.status == "invalid"][:8],
    }


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def timing(engine: Any, build: Any, items: list[Any], repeats: int = 1) -> dict[str, Any]:
    """Each item alone, unsegmented, grammar and free interleaved: decode cost per token and
    time to first segment (medians, seconds) and grammar/free ratios."""
    per: dict[str, dict[str, list[float]]] = {m: {"decode": [], "first": []} for m in ("grammar", "free")}
    gid = 1_000_000
    for _ in range(repeats):
        for it in items:
            for mode in ("grammar", "free"):
                gid += 1
                (o,) = run_items(engine, build, [it], grammar=mode == "grammar", segmented=False, concurrency=1,
                                 id_base=gid)
                if o.t_first_segment is not None:
                    per[mode]["first"].append(o.t_first_segment - o.t_add)
                if o.t_end is not None and o.t_first_token is not None and o.tokens > 1:
                    per[mode]["decode"].append((o.t_end - o.t_first_token) / (o.tokens - 1))
    med = {m: {k: _median(v) for k, v in d.items()} for m, d in per.items()}

    def ratio(k: str) -> float | None:
        g, f = med["grammar"][k], med["free"][k]
        return g / f if g is not None and f else None

    return {"runs_per_mode": len(items) * repeats,
            "grammar": {"decode_per_token_s": med["grammar"]["decode"], "first_segment_s": med["grammar"]["first"]},
            "free": {"decode_per_token_s": med["free"]["decode"], "first_segment_s": med["free"]["first"]},
            "ratios": {"decode_per_token": ratio("decode"), "first_segment": ratio("first")}}


def measure(engine_params: Any, *, limit: int | None = None, timing_items: int = 12, concurrency: int = 8,
            engine: Any = None) -> dict[str, Any]:
    from llm_planner_node.engines.factory import prompt_builder_for
    from llm_planner_node.planner_model.heldout import load_heldout

    items = load_heldout()[:limit] if limit else load_heldout()
    build = prompt_builder_for(engine_params)
    own = engine is None
    t0 = time.monotonic()
    if own:
        _log(f"loading vLLM (model {engine_params.model}) ...")
        engine = make_engine(engine_params)
        _log(f"vLLM ready in {time.monotonic() - t0:.0f} s")
    try:
        # warm-up: compile each skill set's grammar, fill the prefix cache
        warm = list({it.skill_set: it for it in items}.values())
        run_items(engine, build, warm, grammar=True, id_base=2_000_000)
        run_items(engine, build, warm, grammar=False, id_base=2_100_000)
        t = time.monotonic()
        g = run_items(engine, build, items, grammar=True, concurrency=concurrency, id_base=0)
        tg = time.monotonic() - t
        t = time.monotonic()
        f = run_items(engine, build, items, grammar=False, concurrency=concurrency, id_base=10_000)
        tf = time.monotonic() - t
        with_plan = [it for it in items if it.expected_plan]
        step = max(1, len(with_plan) // max(1, timing_items))
        tm = timing(engine, build, with_plan[::step][:timing_items]) if timing_items else None
    finally:
        if own:
            engine.close()
    from timely_tools.bench.grammar_matcher import matcher_cost

    result = {"instructions": len(items), "model": engine_params.model, "matcher": matcher_cost(engine_params.model),
              "grammar": summarize(g) | {"wall_s": tg}, "free": summarize(f) | {"wall_s": tf},
              "timing": tm, "ratios": tm["ratios"] if tm else None,
              "differences": [{"instruction": a.item.instruction, "grammar": a.plan or a.error,
                               "free": b.plan or b.error} for a, b in zip(g, f) if a.plan != b.plan][:20]}
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None, digits: int) -> str:
    """Seconds as milliseconds, or "-" when there was nothing to time (no segment, no tokens)."""
    return "-" if x is None else f"{1e3 * x:.{digits}f} ms"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(r: dict[str, Any]) -> str:
    n = r["instructions"]
    lines = [f"bench grammar: {n} held-out instructions (planner_model/heldout.jsonl), model {r['model']}, "
             "segmented generation (suspend at every segment)", "",
             f"{'':<10}{'INVALID_PLAN':>16}{'exact plans':>16}{'adapter refused':>18}{'wall':>8}"]
    for mode in ("grammar", "free"):
        s = r[mode]
        lines.append(f"{mode:<10}{s['invalid_plans']:>6} ({_pct(s['invalid_rate']):>6}){'':>1}"
                     f"{s['exact']:>5}/{s['with_expected_plan']} ({_pct(s['exact_rate']):>6})"
                     f"{s['adapter_rejected']:>8}/{s['segments']:<6}{s['wall_s']:>7.1f}s")
    lines.append("")
    lines.append("by category (invalid / exact, grammar vs free):")
    for cat, c in r["grammar"]["by_category"].items():
        fc = r["free"]["by_category"][cat]
        lines.append(f"  {cat:<15} n={c['n']:<4} invalid {c['invalid']:>3} vs {fc['invalid']:>3}   "
                     f"exact {c['exact']:>3} vs {fc['exact']:>3}")
    tm = r.get("timing")
    if tm:
        g, f, ra = tm["grammar"], tm["free"], tm["ratios"]
        lines.append("")
        lines.append(f"timing ({tm['runs_per_mode']} runs per mode, alone, unsegmented, interleaved; medians):")
        lines.append(f"  decode per token: grammar {_ms(g['decode_per_token_s'], 2)}, free "
                     f"{_ms(f['decode_per_token_s'], 2)} -> ratio {_ratio(ra['decode_per_token'])}")
        lines.append(f"  time to first segment: grammar {_ms(g['first_segment_s'], 1)}, free "
                     f"{_ms(f['first_segment_s'], 1)} -> ratio {_ratio(ra['first_segment'])}")
    if r.get("matcher"):
        from timely_tools.bench.grammar_matcher import report_lines

        lines.append("")
        lines += report_lines(r["matcher"])
    if r["free"]["invalid_examples"]:
        lines.append("")
        lines.append("free decoding, INVALID_PLAN examples:")
        lines += [f"  {x}" for x in r["free"]["invalid_examples"][:5]]
    if r["grammar"]["invalid_examples"] or r["grammar"]["adapter_rejections"]:
        lines.append("")
        lines.append("grammar: NOT SAFE:")
        lines += [f"  {x}" for x in r["grammar"]["invalid_examples"] + r["grammar"]["adapter_rejections"]]
    ok = r["grammar"]["invalid_plans"] == 0 and r["grammar"]["adapter_rejected"] == 0
    lines.append("")
    lines.append(f"target (0 INVALID_PLAN and 0 adapter refusals with the grammar): {'met' if ok else 'NOT met'}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_planner_node.config.params import DEFAULT_PARAMS

    parser.add_argument("--params", default=str(DEFAULT_PARAMS),
                        help="parameter YAML whose planner.engine settings are used (default: %(default)s)")
    parser.add_argument("--model", default=None, metavar="M",
                        help="model to bench (a name or path as in planner.engine.model; overrides the YAML's)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N held-out instructions")
    parser.add_argument("--timing-items", type=int, default=12,
                        help="instructions timed alone per mode for the cost ratios (default %(default)s; 0: skip)")
    parser.add_argument("--matcher-only", action="store_true",
                        help="only the grammar matcher's cost per token (xgrammar, no vLLM; seconds)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from timely_robot.errors import CommandError
    from llm_planner_node.config.params import load_params

    from timely_robot.model_cache import ModelError
    from llm_planner_node.models import engine_for_model

    try:  # the model's own engine sizes where the YAML keeps the defaults, as `up --model` applies them
        engine_params = engine_for_model(replace(load_params(args.params, check=False).planner.engine, kind="vllm"),
                                         getattr(args, "model", None))
    except ModelError as e:
        from timely_robot.errors import CommandError

        raise CommandError(str(e)) from None
    if args.matcher_only:
        from timely_tools.bench.grammar_matcher import matcher_cost, report_lines

        result: dict[str, Any] = {"model": engine_params.model, "matcher": matcher_cost(engine_params.model)}
        print("\n".join(report_lines(result["matcher"])))
    else:
        if importlib.util.find_spec("vllm") is None:
            raise CommandError("vLLM is not installed in this environment (run `make setup`)")
        result = measure(engine_params, limit=args.limit, timing_items=max(0, args.timing_items))
        print(report(result))
    if args.json:
        outfiles.write_json(args.json, result, indent=2)
    return 0
