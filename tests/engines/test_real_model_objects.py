"""The shipped planner (``smollm2-135m-planner``) on the live vLLM engine, a goal set up as the
node sets it up for a simulated drone (it declares no objects: its prompt lists the instruction's
words, its grammar admits any name), greedy: the plan of each canonical drone task names only
things its instruction names, so the object check lets it through. Without the instruction's
words in the prompt, "check the book on the cabinet" was planned ``is_visible(boss)``."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

pytest.importorskip("vllm")

from timely_robot.skills import DEFAULT_SKILL_SETS  # noqa: E402
from llm_planner_node.config.params import EngineParams, parse_params, plan_objects  # noqa: E402
from llm_planner_node.core.clock import WallClock  # noqa: E402
from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent  # noqa: E402
from llm_planner_node.grounding.objects import grammar_objects, literally_named, plan_objects_of  # noqa: E402
from llm_planner_node.planner_model.corpus import TASKS  # noqa: E402

from engine_runs import next_gen_id  # noqa: E402

PLANNER = "smollm2-135m-planner"
DRONE_TASKS = [TASKS[i].instruction for i in sorted(TASKS) if TASKS[i].robot_kind == "drone"]


@pytest.fixture(scope="module")
def robot():
    return parse_params({"planner": {"engine": {"kind": "vllm"}},
                         "robots": [{"id": "r00", "kind": "drone", "adapter": "sim"}]}).robots[0]


@pytest.fixture(scope="module")
def engine():
    from llm_planner_node import models
    from llm_planner_node.engines.factory import prompt_builder_for
    from llm_planner_node.engines.vllm_engine import VllmEngine

    if not models.is_prepared(PLANNER):
        pytest.fail(f"{PLANNER} is not prepared: `make setup` prepares it (timely-fleet models prepare {PLANNER})")
    params = EngineParams(kind="vllm", model=PLANNER, max_model_len=2048, block_size=32, kv_cache_gib=0.5,
                          max_num_seqs=16)
    eng = VllmEngine(params, WallClock(), constrained_decoding="grammar")
    yield eng, prompt_builder_for(params)
    eng.close()


def _plan(eng, spec: GenerationSpec) -> tuple[str, list]:
    eng.add(spec)
    text, calls = "", []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for ev in eng.step():
            if ev.gen_id != spec.gen_id:
                continue
            if isinstance(ev, SegmentEvent):
                text, calls = text + ev.text, calls + list(ev.calls)
                if ev.suspended:
                    eng.resume(spec.gen_id)
            if isinstance(ev, FailedEvent):
                raise AssertionError(f"{spec.gen_id}: {ev.error}")
            if isinstance(ev, FinishedEvent):
                return text, calls
    raise AssertionError("the generation did not end within 180 s")


@pytest.mark.parametrize("instruction", DRONE_TASKS, ids=[t[:24] for t in DRONE_TASKS])
def test_the_plan_of_a_drone_task_names_what_its_instruction_names(engine, robot, instruction):
    eng, build = engine
    assert robot.objects == () and plan_objects(robot) == ()
    prompt = build(instruction, robot.kind, robot.skill_set, objects=robot.objects)  # as the intake builds it
    spec = GenerationSpec(next_gen_id(), prompt, 128, robot.kind, robot.skill_set, suspend_at_segments=True,
                          objects=grammar_objects(plan_objects(robot), instruction))
    plan, calls = _plan(eng, spec)
    named = plan_objects_of(calls, DEFAULT_SKILL_SETS[robot.skill_set])
    assert all(literally_named(o, instruction) for o in named), (instruction, plan)
    if instruction == "check the book on the cabinet":
        assert set(named) & {"book", "cabinet"}, plan
