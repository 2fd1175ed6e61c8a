"""The LoRA planner's synthetic training data (``planner_model/plan_data.py``) and its adapter."""

from __future__ import annotations

import json
import re
from functools import lru_cache

import pytest

from timely_robot.skills import DEFAULT_SKILL_SETS
from llm_planner_node.prompts.grammar import GrammarChecker, build_plan_grammar
from timely_tools.training import plan_data
from llm_planner_node.prompts.examples import EXAMPLES
from timely_tools.training.plan_data import (BENCH_HELDOUT_PATH, MODEL_HELDOUT_PATH, SUBSTITUTION_PATHS,
                                                      generate, normalise, _jsonl_instructions)
from timely_tools.training.train_lora import DEFAULT_OUT, TARGET_MODULES, BASE_MODEL
from llm_planner_node.segmenters import get_segmenter, segment_all

N = 3000


@lru_cache(maxsize=1)
def _samples() -> tuple:
    return tuple(generate(N, 0))


@lru_cache(maxsize=8)
def _checker(skill_set: str, objects: tuple[str, ...] = ()) -> GrammarChecker:
    return GrammarChecker(build_plan_grammar(DEFAULT_SKILL_SETS[skill_set], objects=objects))


def test_deterministic_for_a_seed():
    assert generate(300, 7) == generate(300, 7)
    assert generate(300, 7) != generate(300, 8)
    s = _samples()
    assert len(s) == N and len({normalise(x.instruction) for x in s}) == N


def test_every_plan_is_accepted_by_the_grammar_and_segments():
    for s in _samples():
        assert _checker(s.skill_set).accepts(s.plan), s
        segs = segment_all(get_segmenter(s.robot_kind, s.skill_set), [s.plan])
        assert segs, s


def test_plans_with_objects_are_accepted_by_the_objects_grammar():
    with_objs = [s for s in _samples() if s.objects][:150]
    assert with_objs
    for s in with_objs:
        assert _checker(s.skill_set, tuple(s.objects)).accepts(s.plan), s


def test_plan_form():
    for s in _samples():
        assert " " not in s.plan.replace(", ", ",").replace("'", "") or "scan_abstract" in s.plan, s
        assert s.plan.endswith(";")
        if s.robot_kind == "arm":
            assert not re.search(r",\S", re.sub(r"'[^']*'", "", s.plan)), s  # a space after each comma


def _excluded_raw() -> set[str]:
    out = {normalise(i) for lib in EXAMPLES.values() for i, _ in lib}
    for p in (BENCH_HELDOUT_PATH, MODEL_HELDOUT_PATH, *SUBSTITUTION_PATHS):
        if p.exists():
            out |= {normalise(json.loads(line)["instruction"]) for line in p.read_text().splitlines() if line.strip()}
    return out


def test_no_overlap_with_heldout_or_worked_examples():
    excl = _excluded_raw()
    assert len(excl) >= sum(len(v) for v in EXAMPLES.values()) - 5
    if BENCH_HELDOUT_PATH.exists():
        assert _jsonl_instructions(BENCH_HELDOUT_PATH)
    gen = {normalise(s.instruction) for s in generate(6000, 0)}
    assert not (gen & excl)


def test_things_asked_for_by_kind_or_purpose_are_planned_as_the_detector_class_meant():
    """"something to snip a ribbon with" -> scan(scissors): the plan names a COCO class the
    instruction does not say, and the class is one of its supercategory's or the use's."""
    from timely_robot.perceivable import COCO_LABELS
    from timely_tools.training.coco_uses import SUPERCATEGORIES, USES

    assert set(USES) == set(COCO_LABELS) and {c for cs in SUPERCATEGORIES.values() for c in cs} <= set(COCO_LABELS)
    rng = __import__("random").Random(5)
    for _ in range(300):
        text, plan, (cls,) = plan_data._by_use(rng)
        assert cls in COCO_LABELS and f"({cls})" in plan and cls.replace("_", " ") not in text, (text, plan)
        said = [p for p, _prep in USES[cls]] + [n for ns, cs in SUPERCATEGORIES.items() if cls in cs for n in ns]
        assert any(s in text for s in said), (text, cls)
    def by_use(samples: list) -> int:
        return sum(any(v in s.instruction for vs in USES.values() for v, _p in vs)
                   for s in samples if s.robot_kind == "drone")

    # opt-in: the shipped adapter's data asks by name (a use's words may still occur: "water")
    assert by_use(generate(600, 0, use_fraction=0.3)) >= by_use(generate(600, 0)) + 0.1 * 600 * 0.6


def test_exclusion_is_applied():
    s = generate(50, 3, exclude=set())
    banned = {normalise(s[0].instruction)}
    assert all(normalise(x.instruction) not in banned for x in generate(50, 3, exclude=banned))


def test_coverage():
    plans = [s.plan for s in _samples()]
    drone = DEFAULT_SKILL_SETS["tello_minispec"]
    movement = [n for n in drone.names() if n.startswith(("move_", "turn_"))] + ["takeoff", "land", "delay",
                                                                                 "take_picture", "goto", "scan"]
    for name in movement:
        assert any(f"{name}(" in p for p in plans), name
    for name in ("place(", "push(", "pick(", "wipe(", "move_to(", "open_gripper(", "close_gripper(", "home(",
                 "wait("):
        assert any(name in p for p in plans), name
    assert any(re.search(r"^\d+\{", p) for p in plans)  # loops
    assert any("?_1==True{" in p for p in plans)  # find pattern
    kinds = {s.robot_kind for s in _samples()}
    assert kinds == {"drone", "arm"}
    assert any(s.objects for s in _samples()) and any(not s.objects for s in _samples())


def test_units():
    by_instr = {s.instruction: s.plan for s in generate(3000, 1)}
    for instr, plan in by_instr.items():
        m = re.fullmatch(r"(?:climb|rise|ascend|go up|fly up|move up) (\d+) (?:m|meters)", instr)
        if m:
            assert plan == f"move_up({int(m.group(1)) * 100});", (instr, plan)
        m = re.fullmatch(r"push (?:the )?\w+ (\d+) cm", instr)
        if m:
            assert plan.endswith(f", {int(m.group(1)) * 10});"), (instr, plan)


def test_module_has_no_heldout_text():
    """The generator's templates never contain a held-out instruction verbatim."""
    src = normalise(open(plan_data.__file__).read())
    if BENCH_HELDOUT_PATH.exists():
        long_ones = [normalise(i) for i in _jsonl_instructions(BENCH_HELDOUT_PATH) if len(i.split()) >= 5]
        assert not [i for i in long_ones if i in src]
    uses = normalise(open(plan_data.__file__.replace("plan_data.py", "coco_uses.py")).read())
    subst = [normalise(i) for p in SUBSTITUTION_PATHS for i in _jsonl_instructions(p) if len(i.split()) >= 4]
    assert subst and not [i for i in subst if i in src or i in uses]


@pytest.mark.skipif(not (DEFAULT_OUT / "adapter_config.json").exists(), reason="adapter not trained yet")
def test_adapter_files():
    cfg = json.loads((DEFAULT_OUT / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == BASE_MODEL
    assert cfg.get("peft_type") == "LORA"
    assert set(cfg["target_modules"]) == set(TARGET_MODULES)
    weights = DEFAULT_OUT / "adapter_model.safetensors"
    assert weights.is_file() and weights.stat().st_size < 20 * 2**20
    total = sum(p.stat().st_size for p in DEFAULT_OUT.iterdir() if p.is_file())
    assert total < 20 * 2**20
    info = json.loads((DEFAULT_OUT / "training.json").read_text())
    for key in ("seed", "steps", "data_size", "wall_time_s", "final_loss", "versions"):
        assert key in info
    assert set(info["versions"]) == {"torch", "transformers", "peft"}


# ------------------------------------------------------------------------------------------
# the mobile base (nav2_base)
# ------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _base_samples() -> tuple:
    return tuple(s for s in generate(2000, 0, base_fraction=0.5) if s.robot_kind == "base")


def test_base_share_is_opt_in_and_leaves_the_drone_and_arm_data_alone():
    assert generate(300, 4) == generate(300, 4, base_fraction=0.0)
    assert {s.robot_kind for s in generate(300, 4)} == {"drone", "arm"}
    mixed = generate(1000, 4, base_fraction=0.3)
    share = sum(s.robot_kind == "base" for s in mixed) / len(mixed)
    assert 0.22 < share < 0.38 and {s.robot_kind for s in mixed} == {"drone", "arm", "base"}


def test_every_base_plan_is_valid_under_nav2_base_and_segments():
    from timely_robot.minispec import parse_program

    base = _base_samples()
    assert len(base) > 800 and all(s.skill_set == "nav2_base" for s in base)
    ss = DEFAULT_SKILL_SETS["nav2_base"]
    for s in base:
        assert _checker("nav2_base").accepts(s.plan), s
        assert parse_program(s.plan, ss), s
        assert segment_all(get_segmenter("base", "nav2_base"), [s.plan]), s
        assert s.plan.endswith(";") and " " not in re.sub(r"'[^']*'", "", s.plan).replace(", ", ","), s
    for s in [s for s in base if s.objects][:150]:  # a base's known objects: its places (and things)
        assert _checker("nav2_base", tuple(s.objects)).accepts(s.plan), s


def test_base_coverage():
    plans = [s.plan for s in _base_samples()]
    for name in ("go_to", "go_to_pose", "move_forward", "move_backward", "turn_cw", "turn_ccw", "stop", "scan",
                 "is_visible", "delay", "log", "re_plan"):
        assert any(f"{name}(" in p for p in plans), name
    assert any(re.search(r"^\d+\{go_to", p) for p in plans)  # patrols
    assert any("?_1==True{" in p for p in plans) and any("?_1==False{" in p for p in plans)
    assert any(re.fullmatch(r"go_to_pose\(-?[\d.]+, -?[\d.]+, -?\d+\);", p) for p in plans)  # with a yaw
    assert len({m for p in plans for m in re.findall(r"go_to\(([a-z0-9_]+)\)", p)}) > 80  # a large pool of places


def test_base_plans_copy_the_place_and_keep_the_units():
    from timely_robot.minispec import parse_program

    ss = DEFAULT_SKILL_SETS["nav2_base"]
    for s in _base_samples():
        for place in re.findall(r"go_to\(([a-z0-9_]+)\)", s.plan):
            assert place.replace("_", " ") in s.instruction.lower(), s  # the instruction's own words
        m = re.fullmatch(r"(?:go|drive|navigate|move|head) to x (-?[\d.]+) y (-?[\d.]+)", s.instruction)
        if m:
            assert s.plan == f"go_to_pose({m.group(1)}, {m.group(2)});", s
        m = re.fullmatch(r"(?:drive|move|go) forward (\d+) ?cm", s.instruction)
        if m:
            assert s.plan == f"move_forward({m.group(1)});", s
        m = re.fullmatch(r"(?:back up|reverse) (\d) (?:m|meters?|metres?)", s.instruction)
        if m:
            assert s.plan == f"move_backward({int(m.group(1)) * 100});", s
        for stmt in parse_program(s.plan, ss):  # the safe ranges (1 m = 100 cm)
            call = getattr(stmt, "call", None)
            if call is not None and call.name in ("move_forward", "move_backward"):
                assert 10 <= call.args[0] <= (300 if call.name == "move_forward" else 100), s


def test_base_data_never_holds_a_heldout_instruction():
    excl = _excluded_raw()
    base_heldout = [json.loads(line)["instruction"] for line in BENCH_HELDOUT_PATH.read_text().splitlines()
                    if line.strip() and json.loads(line)["kind"] == "base"]
    assert len(base_heldout) >= 40 and {normalise(i) for i in base_heldout} <= excl
    gen = {normalise(s.instruction) for s in generate(6000, 1, base_fraction=0.35, scene_fraction=0.4,
                                                      replan_fraction=0.08)}
    assert not (gen & excl)
