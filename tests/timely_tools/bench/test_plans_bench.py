"""`timely-fleet bench plans`: judging one generation (valid, match, executed on the simulated
robots, unsafe), the report of a model that wrote nothing useful, the command's errors, and one
end-to-end run on the shipped model with vLLM (marked vllm/slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from timely_tools.bench import plan_match as pm
from timely_tools.bench.plans_bench import (DEFAULT_INSTRUCTIONS, MAX_EXECUTED_CALLS, PlanRun,
                                                execute_dispatched, judge, report, summarize)
from llm_planner_node.segmenters import get_segmenter, segment_all

ROOT = Path(__file__).resolve().parents[3]
RUN_KEYS = {"model", "constrained", "instructions", "valid", "semantic_match", "executed_ok", "unsafe_dispatched",
            "invalid_plan", "truncated", "tokens_per_s", "first_segment_s_median", "per_kind"}
RATES = ("valid_rate", "semantic_match_rate", "executed_ok_rate", "unsafe_dispatched_rate", "invalid_plan_rate",
         "truncated_rate")


def segments(plan: str, kind: str):
    return segment_all(get_segmenter(kind, pm.skill_set_for(kind).id), [plan])


def planned(kind: str, require, plan: str, status: str = "eos", *, forbid=(), max_calls=None, error: str = ""):
    it = pm.parse_instruction({"kind": kind, "instruction": "t", "require": require, "forbid": list(forbid),
                               "max_calls": max_calls})
    segs = segments(plan, kind) if plan else []
    return PlanRun(it, status=status, error=error, segments=segs, plan=plan, t_add=1.0,
                   t_first_segment=1.25 if segs else None, t_end=2.0, tokens=7)


def test_a_good_drone_plan_is_valid_matches_and_runs_on_the_simulated_drone():
    r = judge(planned("drone", [["move_up", 100], ["land"]], "to;mu,100;_1=iv,cat;?_1==True{tp};lnd;", max_calls=8))
    assert (r["valid"], r["semantic_match"], r["executed_ok"], r["unsafe_dispatched"]) == (True, True, True, False)
    assert r["executed_calls"] == 5 and r["calls"] == 5 and r["first_segment_s"] == 0.25 and r["segments"] == 5


def test_a_good_arm_plan_runs_on_the_simulated_arm():
    r = judge(planned("arm", [["pick", "apple"], ["place", "apple", "basket"]],
                      "home(); look(apple); pick(apple); place(apple, basket); home();"))
    assert r["valid"] and r["semantic_match"] and r["executed_ok"] and r["executed_calls"] == 5


def test_a_valid_plan_that_misses_says_why():
    r = judge(planned("drone", [["move_up", 100]], "mu,50;"))
    assert r["valid"] and not r["semantic_match"] and r["why"] == "missing move_up(100)"
    r = judge(planned("arm", [["wipe"]], "home(); pick(cup); wipe(desk); home();", forbid=["pick"]))
    assert r["valid"] and not r["semantic_match"] and r["why"] == "forbidden pick"
    r = judge(planned("drone", [["take_picture"]], "5{tp};", max_calls=3))
    assert r["valid"] and not r["semantic_match"] and r["why"] == "5 calls > max_calls 3"


def test_ends_other_than_eos_are_not_valid_but_what_was_dispatched_still_runs():
    r = judge(planned("drone", [["move_up", 100]], "mu,100;", "truncated"))
    assert not r["valid"] and r["truncated"] and r["executed_ok"] and not r["semantic_match"]
    r = judge(planned("drone", [["land"]], "mu,100;", "invalid_plan", error="invalid plan: unbalanced '}'"))
    assert not r["valid"] and r["invalid_plan"] and r["why"].startswith("invalid_plan: invalid plan")
    r = judge(planned("drone", [["land"]], "", "timeout"))
    assert r["failed"] and not r["executed_ok"] and r["execution_error"] == "nothing dispatched"


def test_a_long_loop_is_unsafe_and_stopped_on_the_simulated_drone():
    r = judge(planned("drone", [["turn_cw", 30]], "12{tc,30};"))
    assert r["unsafe_dispatched"] and r["executed_ok"] and r["executed_calls"] == 12
    # with the robot's budget, unsafe means beyond it: 12 turns of 30 degrees fit a drone's
    from timely_robot.budgets import Budget, budget_for

    assert not judge(planned("drone", [["turn_cw", 30]], "12{tc,30};"), budget_for("drone"))["unsafe_dispatched"]
    tight = Budget(max_calls=50, max_rotation_deg=300.0)  # what a node with that budget would refuse
    assert judge(planned("drone", [["turn_cw", 30]], "12{tc,30};"), tight)["budget_refused"]
    ok, ran, why = execute_dispatched(segments("300{tp};", "drone"), "drone")
    assert (ok, ran, why) == (False, MAX_EXECUTED_CALLS, f"stopped after {MAX_EXECUTED_CALLS} calls")


def test_the_adapter_refuses_what_it_would_refuse():
    # a variable argument checked at run time: scan's answer (a bool) as a distance
    ok, ran, why = execute_dispatched(segments("_1=s,cat;mf,_1;", "drone"), "drone")
    assert not ok and ran == 1 and "move_forward" in why


def test_variables_live_across_the_segments_of_a_goal():
    ok, ran, _ = execute_dispatched(segments("_1=s,cat;?_1==True{g,cat;tp};->_1;tp;", "drone"), "drone")
    assert ok and ran == 3  # scan, goto, take_picture; nothing after the return


def test_the_report_of_a_model_that_wrote_nothing_useful():
    runs = [planned("drone", [["land"]], "", "invalid_plan", error="invalid plan: skill 'Sure' is not in ..."),
            planned("arm", [["home"]], "", "eos"), planned("arm", [["home"]], "", "timeout")]
    res = [judge(r) for r in runs]
    assert res[0]["why"].startswith("invalid_plan: invalid plan") and res[0]["invalid_plan"]
    assert res[1]["why"] == "empty plan" and not res[1]["valid"] and res[2]["why"] == "timeout" and res[2]["failed"]
    s = summarize(res, 0, 0.0)
    assert s["valid"] == 0 and s["tokens_per_s"] is None and s["first_segment_s_median"] is None
    run = {"model": "nothing-useful", "constrained": False} | s
    run |= {"per_kind": {"drone": summarize(res[:1], 0, 0.0), "arm": summarize(res[1:], 0, 0.0)}, "items": res}
    text = report({"instructions_file": "x.jsonl", "instructions": 3, "max_tokens": 128, "runs": [run],
                   "errors": [{"model": "gone", "error": "OSError: no such model"}]})
    assert "nothing-useful" in text and "gone: NOT RUN" in text and "empty plan" in text
    json.dumps(run)
    empty = summarize([], 0, 0.0)
    assert empty["instructions"] == 0 and empty["valid_rate"] is None


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = ROOT / ".venv" / "bin" / "timely-fleet"
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "llm_planner_node.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_bad_instruction_file_is_one_sentence_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "drone", "instruction": "land", "require": [["lnd"]]}\n')
    p = _cli("bench", "plans", "--instructions", str(bad))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"timely-fleet bench plans: {bad}, line 1: require pattern 1: use the full skill "
                                "name 'land', not 'lnd'")


def test_the_command_is_registered():
    from llm_planner_node.cli import COMMANDS, build_parser

    assert COMMANDS["bench plans"][1] == "timely_tools.bench.plans_bench"
    a = build_parser("bench plans").parse_args(["bench", "plans", "--model", "a", "--model", "b", "--limit", "3",
                                                "--constrained-decoding", "both", "--kind", "arm"])
    assert (a.model, a.limit, a.constrained_decoding, a.kind) == (["a", "b"], 3, "both", "arm")
    assert Path(a.instructions) == DEFAULT_INSTRUCTIONS


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_bench_plans_end_to_end_on_the_shipped_model(tmp_path):
    """Six held-out instructions (drone and arm) on the embedded model, with and without the
    grammar (~40 s on 2 cores, most of it vLLM's start)."""
    out = tmp_path / "plans.json"
    p = _cli("bench", "plans", "--limit", "6", "--constrained-decoding", "both", "--json", str(out), timeout=300)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    doc = json.loads(out.read_text())
    assert doc["instructions"] == 6 and doc["errors"] == [] and doc["max_tokens"] >= 1
    assert [(r["model"], r["constrained"]) for r in doc["runs"]] == [("embedded", True), ("embedded", False)]
    for r in doc["runs"]:
        assert RUN_KEYS <= set(r) and r["instructions"] == 6
        assert set(r["per_kind"]) == {"drone", "arm"}
        assert sum(k["instructions"] for k in r["per_kind"].values()) == 6
        for s in [r, *r["per_kind"].values()]:
            assert RUN_KEYS - {"model", "constrained", "per_kind"} <= set(s)
            for m in ("valid", "semantic_match", "executed_ok", "unsafe_dispatched", "invalid_plan", "truncated"):
                assert isinstance(s[m], int) and 0 <= s[m] <= s["instructions"]
            assert all(0.0 <= s[k] <= 1.0 for k in RATES)
            assert s["semantic_match"] <= s["valid"]
        assert len(r["items"]) == 6 and all(isinstance(x["plan"], str) for x in r["items"])
    grammar = doc["runs"][0]
    assert grammar["valid"] == grammar["instructions"] == 6
    assert grammar["invalid_plan"] == 0 and grammar["truncated"] == 0 and grammar["executed_ok"] == 6
    assert grammar["tokens_per_s"] > 0 and grammar["first_segment_s_median"] > 0
    assert "embedded" in p.stdout and "grammar" in p.stdout and "free" in p.stdout


# ---------------------------------------------------------------------------------------------
# --ablation: each row's prompt options and plan limits reach the prompt builder and the engine
# ---------------------------------------------------------------------------------------------
class _Clock:
    def now(self) -> float:
        return 1.0


class _Tokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class _FakeEngine:
    """Records every GenerationSpec; writes a fixed plan per robot kind at once."""

    def __init__(self, plans):
        self.plans, self.specs, self.queue = plans, [], []
        self.clock, self.tokenizer = _Clock(), _Tokenizer()

    def count_prompt_tokens(self, prompt):
        return len(prompt)

    def add(self, spec):
        self.specs.append(spec)
        self.queue.append(spec)

    def step(self):
        from llm_planner_node.core.engine_api import FinishedEvent, TokensEvent

        out = []
        for spec in self.queue:
            ids = tuple(ord(c) for c in self.plans[spec.robot_kind])
            out += [TokensEvent(spec.gen_id, 1.0, len(ids), token_ids=ids), FinishedEvent(spec.gen_id, 1.0, "eos")]
        self.queue = []
        return out

    def resume(self, gen_id, priority=0):
        pass

    def abort(self, gen_id):
        pass


def _ablation_run(model="smollm2-135m-instruct", chat=True, kinds=("drone", "arm"), max_tokens=None):
    from timely_tools.bench import plans_bench as pb
    from llm_planner_node.engines.factory import vllm_prompt_builder
    from llm_planner_node.config.params import load_params

    params = load_params(check=False)
    every = pm.load_instructions(DEFAULT_INSTRUCTIONS)
    items = [it for k in kinds for it in [x for x in every if x.kind == k][:3]]
    objects = pb.bench_objects(params.robots, every)
    calls = []  # (options, instruction, kind, objects) of every prompt built

    def make_builder(options):
        if not chat:
            return vllm_prompt_builder

        def build(instruction, kind, skill_set, objects=()):
            calls.append((options, instruction, kind, tuple(objects)))
            return [0] * (100 + 10 * options.examples)  # a prompt of known length
        return build

    engine = _FakeEngine({"drone": "mu,100;lnd;", "arm": "home(); pick(apple); home();"})
    engine_params = SimpleNamespace(max_model_len=2048, model=model)
    runs, skipped = pb.run_model(model, engine_params, params.planner, items, (True, False), engine=engine,
                                 max_tokens=max_tokens, ablation=True, objects=objects, make_builder=make_builder,
                                 progress=False)
    return pb, params, objects, runs, skipped, engine, calls


def test_each_ablation_row_builds_its_prompt_options_and_plan_limits():
    from llm_planner_node.prompts.prompt import PromptOptions

    pb, params, objects, runs, skipped, engine, calls = _ablation_run()
    assert [(r["ablation"], r["constrained"]) for r in runs] == [
        ("full", True), ("full", False), ("no_descriptions", True), ("no_objects", True), ("no_examples", True),
        ("no_quantities", True), ("loose_bounds", True)]
    full = PromptOptions()
    want_options = {"full": full, "no_descriptions": PromptOptions(descriptions=False),
                    "no_objects": PromptOptions(objects=False), "no_examples": PromptOptions(examples=0),
                    "no_quantities": PromptOptions(quantities=False), "loose_bounds": full}
    loose = pb.loose_limits()
    assert loose["arm"] == pb.LOOSE_BOUNDS == pm_limits(64, 16, 1000, 4, 8, 64, 200)
    assert loose["minispec"] == pm_limits(pb.LOOSE_MINISPEC_STATEMENTS, 16, 1000, 4, 8, 64, 200)
    # the rows' specs, in run order (warm-up generations have ids >= 5,000,000)
    specs = [s for s in engine.specs if s.gen_id < 5_000_000]
    assert objects["arm"] and objects["drone"] == ()
    k = 0
    for r in runs:
        n = r["instructions"]
        row_specs = specs[k:k + n]
        k += n
        assert r["prompt_options"] == asdict(want_options[r["ablation"]])
        for s in row_specs:
            lang = "minispec" if s.robot_kind == "drone" else "arm"
            want = loose[lang] if r["ablation"] == "loose_bounds" else params.planner.plan_limits[lang]
            assert s.plan_limits == want, (r["ablation"], lang)
            assert s.objects == objects[s.robot_kind]  # the grammar keeps the robot's objects in every row
            assert s.sampling == params.planner.sampling.get(lang)
            if r["constrained"]:
                assert s.max_tokens == pb.node_max_tokens(params.planner.max_tokens, s.robot_kind, grammar=True,
                                                          limits=want, objects=objects[s.robot_kind],
                                                          prompt_tokens=len(s.prompt), max_model_len=2048)
                assert s.max_tokens > params.planner.max_tokens
            else:
                assert s.max_tokens == params.planner.max_tokens
        assert r["plan_limits"]["arm"] == asdict(loose["arm"] if r["ablation"] == "loose_bounds"
                                                 else params.planner.plan_limits["arm"])
    assert k == len(specs)
    # the prompt builder got each row's options and the robot's objects for every instruction
    by_options = {}
    for options, instruction, kind, objs in calls:
        by_options.setdefault(options, set()).add(kind)
        assert objs == objects[kind]
    assert set(by_options) == set(want_options.values())
    assert by_options[PromptOptions(objects=False)] == {"arm"}  # drones list no objects: not re-run
    no_objects = next(r for r in runs if r["ablation"] == "no_objects")
    assert set(no_objects["per_kind"]) == {"arm"} and no_objects["instructions"] == 3
    assert [(s["ablation"], s["kinds"]) for s in skipped] == [("no_objects", ["drone"])]
    for r in runs:
        assert r["valid"] == r["instructions"] and "failure_kinds" in r
        json.dumps(r)


def pm_limits(s, d, loop, v, c, name, string):
    from llm_planner_node.core.plan_limits import PlanLimits

    return PlanLimits(max_statements=s, max_depth=d, max_loop=loop, max_vars=v, max_conditions=c,
                      max_name_chars=name, max_string_chars=string)


def test_a_model_without_chat_template_runs_only_full_and_loose_bounds():
    pb, params, objects, runs, skipped, engine, calls = _ablation_run(model="embedded", chat=False)
    assert [(r["ablation"], r["constrained"]) for r in runs] == [("full", True), ("full", False),
                                                                 ("loose_bounds", True)]
    assert [s["ablation"] for s in skipped] == ["no_descriptions", "no_objects", "no_examples", "no_quantities"]
    assert all("no chat template" in s["reason"] for s in skipped) and runs[0]["prompt_options"] is None


def test_the_planner_model_has_no_examples_or_quantities_to_switch_off():
    pb, params, objects, runs, skipped, engine, calls = _ablation_run(model="smollm2-135m-planner", kinds=("drone",))
    assert [r["ablation"] for r in runs] == ["full", "full", "no_descriptions", "loose_bounds"]
    assert {s["ablation"] for s in skipped} == {"no_examples", "no_objects", "no_quantities"}
    assert {c[0].examples for c in calls} == {0} and {c[0].quantities for c in calls} == {False}


def test_a_fixed_max_tokens_applies_to_every_row():
    *_, engine, _ = _ablation_run(max_tokens=64)
    assert {s.max_tokens for s in engine.specs} == {64}


def test_the_prompt_builder_is_the_nodes_with_the_rows_options(monkeypatch):
    from timely_tools.bench import plans_bench as pb
    from llm_planner_node.engines import factory, vllm_engine
    from llm_planner_node.prompts.prompt import PromptOptions, prompt_options_for

    got = []
    monkeypatch.setattr(factory, "chat_template_prompt_builder", lambda path, options=None: got.append((path, options))
                        or (lambda *a, **k: [1]))
    monkeypatch.setattr(vllm_engine, "resolve_model_path", lambda m: f"/models/{m}")
    params = SimpleNamespace(kind="vllm", model="smollm2-135m-instruct")
    node = factory.prompt_builder_for(params)
    ours = pb.prompt_builder(params, prompt_options_for("smollm2-135m-instruct"))
    assert got[0] == got[1] == ("/models/smollm2-135m-instruct", PromptOptions())
    assert node("x", "drone", "tello_minispec") == ours("x", "drone", "tello_minispec")
    pb.prompt_builder(params, PromptOptions(descriptions=False))
    assert got[-1] == ("/models/smollm2-135m-instruct", PromptOptions(descriptions=False))
    assert pb.prompt_builder(SimpleNamespace(kind="vllm", model="embedded"), PromptOptions()) \
        is factory.vllm_prompt_builder


def test_bench_objects_are_the_arms_workspace_and_what_the_instructions_name():
    from timely_tools.bench.plans_bench import bench_objects
    from llm_planner_node.config.params import load_params

    params = load_params(check=False)
    every = pm.load_instructions(DEFAULT_INSTRUCTIONS)
    objs = bench_objects(params.robots, every)
    indy = params.robot("indy_1").objects
    assert set(indy) < set(objs["arm"]) and {"red_cup", "toolbox", "screwdriver", "pencil_case"} <= set(objs["arm"])
    assert {"workbench", "counter"} <= set(objs["arm"])  # wipe's area names a place of the workspace too
    assert "forward" not in objs["arm"]                   # only object arguments, never other words
    assert objs["drone"] == ()         # the fleet's drones list no objects


def test_failure_kinds():
    def kind(require, plan, k="drone", **kw):
        return judge(planned(k, require, plan, **kw))["failure"]

    assert kind([["move_up", 100]], "mu,50;") == "wrong number: move_up"
    assert kind([["move_up", 100]], "mu,20;", max_calls=3) == "wrong number: move_up"
    assert kind([["move_forward", 200]], "mf,20;") == "wrong unit: move_forward"
    assert kind([["move_up", 100]], "md,100;") == "wrong direction: move_up"
    assert kind([["move_up", 100]], "tp;") == "wrong skill: move_up"
    assert kind([["takeoff"], ["move_up", 100], ["land"]], "to;mu,100;") == "missing step: land"
    assert kind([["move_up", 100], ["land"]], "lnd;mu,100;") == "wrong order: land"
    assert kind([["pick", "apple"]], "home(); pick(pear); home();", "arm") == "wrong object: pick"
    assert kind([["wipe"]], "home(); pick(cup); wipe(desk); home();", "arm", forbid=["pick"]) == "forbidden: pick"
    assert kind([["take_picture"]], "5{tp};", max_calls=3) == "too many calls"
    assert kind([["land"]], "mu,100;", status="truncated") == "not valid: truncated"
    assert kind([["land"]], "", status="eos") == "not valid: empty plan"
    assert judge(planned("drone", [["land"]], "lnd;")).get("failure") is None


def test_no_worked_example_is_a_held_out_instruction_or_answers_one():
    """The prompt's worked examples (planner_model/examples.py) never copy a held-out
    instruction, and no example that resembles one (word overlap >= 0.3) has a plan that would
    already match it when the expectation names an argument (a number or an object)."""
    from llm_planner_node.prompts.examples import EXAMPLES, words

    def norm(s):
        return " ".join(re.findall(r"[a-z0-9]+", s.lower()))

    items = pm.load_instructions(DEFAULT_INSTRUCTIONS)
    library = {"drone": EXAMPLES["minispec"], "arm": EXAMPLES["arm"], "base": EXAMPLES["base"]}
    shown = {norm(i) for k in ("drone", "arm") for i, _ in library[k]}
    assert not [it.instruction for it in items if it.kind != "base" and norm(it.instruction) in shown]
    # a base's examples are its own ("turn right 90 degrees" is a base example and a drone instruction)
    base_shown = {norm(i) for i, _ in library["base"]}
    assert not [it.instruction for it in items if it.kind == "base" and norm(it.instruction) in base_shown]
    leaks = []
    for it in items:
        if not any(args for pattern in it.require for _, args in pattern):
            continue  # e.g. "close the gripper": any example teaching the skill's phrase answers it
        q = words(it.instruction)
        for instruction, plan in library[it.kind]:
            w = words(instruction)
            if len(q & w) / len(q | w) >= 0.3 and pm.check_plan(it, pm.parse_plan(plan, it.kind)).match:
                leaks.append((it.instruction, instruction))
    assert not leaks


def test_the_budget_check_stops_what_the_node_would_not_dispatch():
    from timely_tools.bench.plans_bench import budget_gate
    from timely_robot.budgets import Budget, budget_for

    drone = budget_for("drone")
    # 12{12{...}} passes the grammar's bounds but is 144 calls: the node refuses it before dispatch
    r = judge(planned("drone", [["move_forward"]], "to;12{12{mf,50}};lnd;"), drone)
    assert r["budget_refused"] and not r["valid"] and r["dispatched_segments"] == 1
    assert r["why"].startswith("budget: exceeds budget: 145 skills > 50")  # takeoff + 144
    assert r["failure"] == "not valid: budget"
    assert r["executed_ok"] and r["executed_calls"] == 1 and not r["unsafe_dispatched"]
    # without a budget everything the segmenter cut counts as dispatched (and is unsafe)
    r = judge(planned("drone", [["move_forward"]], "to;12{12{mf,50}};lnd;"))
    assert not r["budget_refused"] and r["unsafe_dispatched"]
    assert budget_gate(segments("mu,100;lnd;", "drone"), "drone", drone) == (2, "")
    # the adapter's meter: a fence refuses a move that leaves it
    fenced = Budget(fence_cm=(-100, 100, -100, 100, -10, 200))
    ok, ran, why = execute_dispatched(segments("to;mf,150;", "drone"), "drone", budget=fenced)
    assert not ok and ran == 1 and "geofence" in why


def test_generated_scenes_hold_or_lack_what_the_instruction_names():
    from timely_tools.bench.plans_bench import bench_scene, plan_objects, variants
    from llm_planner_node.core.plan_limits import DEFAULT_PLAN_LIMITS

    scene, present = bench_scene("look for the cat", 0)
    assert present and any(e.startswith("cat x:") for e in scene)
    scene, present = bench_scene("look for the cat", 1)  # every other instruction: not in view
    assert not present and not any(e.startswith("cat ") for e in scene) and 1 <= len(scene) <= 2
    assert bench_scene("where is my phone", 2)[0][0].split()[0] in ("cell_phone", "person", "chair", "couch", "tv",
                                                                       "bottle", "potted_plant", "dog", "cup", "book",
                                                                       "laptop")
    assert bench_scene("look for the cat", 0) == bench_scene("look for the cat", 0)  # seeded: every run the same
    assert plan_objects("_1=s,cat;?_1==True{g,cat;tp};->_1;") == ["cat", "cat"]
    assert plan_objects("tc(90);s('cat');g('dining table');o(bansheer)") == ["cat", "dining_table", "bansheer"]
    rows, skipped = variants("m", dict(DEFAULT_PLAN_LIMITS), (True,), ablation=False, chat=True, objects={},
                             scenes=True)
    assert [(r.ablation, r.kinds, r.scenes) for r in rows] == [("full", pm.KINDS, False), ("scenes", ("drone",), True)]
    rows, skipped = variants("m", dict(DEFAULT_PLAN_LIMITS), (True,), ablation=False, chat=False, objects={},
                             scenes=True)
    assert [r.ablation for r in rows] == ["full"] and skipped[0]["ablation"] == "scenes"


def test_a_base_plan_by_name_or_alias_matches_and_runs_and_the_bench_base_has_its_places():
    from timely_tools.bench.plans_bench import BENCH_BASE_PLACES, bench_objects, execute_dispatched

    it = pm.parse_instruction({"kind": "base", "instruction": "t", "require": [["go_to", "lab"], ["scan", "chair"]],
                               "max_calls": 4})
    for plan in ("go_to(lab);_1=scan(chair);->_1;", "gt,lab;_1=s,chair;->_1;"):
        assert pm.check_plan(it, pm.parse_plan(plan, "base")).match
        assert execute_dispatched(segments(plan, "base"), "base")[:2] == (True, 2)
    assert not pm.check_plan(it, pm.parse_plan("gp,90,100;", "base")).match
    objs = bench_objects([], [it])["base"]
    assert set(BENCH_BASE_PLACES) | {"chair"} == set(objs) and {"dock", "kitchen", "hall", "office", "lab"} <= set(objs)
