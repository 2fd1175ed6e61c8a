"""Build the node's engine from its parameters: vLLM, or the simulated engine in real time.

The simulated engine (``engine.kind: sim``) lets the node run without a model: a goal's plan is
the LRTrace plan of the trace its instruction names (or the first trace of the robot's kind),
and iterations take the calibrated time of the simulated GPU, in wall-clock time.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..core.clock import Clock
from ..core.engine_api import Engine, EngineEvent
from ..params import EngineParams
from .sim_engine import SimEngine, SimEngineConfig


class RealtimeSimEngine(SimEngine):
    """The simulated engine driven by a wall clock: ``step`` runs one iteration in real time."""

    def __init__(self, clock: Clock, config: SimEngineConfig = SimEngineConfig(),
                 idle_wait_s: float = 0.005) -> None:
        super().__init__(clock, config)
        self.idle_wait_s = idle_wait_s

    def step(self) -> list[EngineEvent]:
        self.start_iteration()
        end = self.in_flight_end()
        if end is None:
            time.sleep(self.idle_wait_s)
            return []
        delay = end - self.clock.now()
        if delay > 0:
            time.sleep(min(delay, 0.05))
        return super().step()


def sim_prompt_builder(instruction: str, robot_kind: str, skill_set_id: str) -> object:
    """The simulated plan for a goal: the LRTrace task whose canonical instruction (planner
    corpus) or trace description matches the instruction, else the kind's first trace."""
    from ..planner_model.corpus import canonical_examples
    from ..sim.traces import TRACES

    text = instruction.lower().strip()
    for ex in canonical_examples():
        if ex.instruction == text and ex.task_id in TRACES:
            return TRACES[ex.task_id].prompt
    kind = "drone" if robot_kind == "sim" else robot_kind
    candidates = [t for t in TRACES.values() if t.robot_kind == kind]
    if not candidates:
        raise ValueError(f"the simulated engine has no plans for robot kind '{robot_kind}'")
    for t in candidates:
        if t.description.lower() in text or text in t.description.lower():
            return t.prompt
    return candidates[0].prompt


#: Live length predictors (on the planner model) for the length-aware policies.
LIVE_PREDICTORS = {"trail": "trail_probe", "hybrid": "trail_probe", "ltr": "ltr_ranker"}


def predictor_for(policy: Any, params: EngineParams) -> Any:
    """The length predictor a policy uses in the node: the simulator-fed default with the
    simulated engine; with vLLM the real one (Trail's hidden-state probe or the LTR ranker)."""
    if params.kind == "sim" or policy.make_predictor() is None:
        return None
    which = LIVE_PREDICTORS.get(policy.name)
    if which == "trail_probe":
        from ..predictors.trail_probe import TrailProbePredictor

        # per-token refinement reads the engine's token ids: only with the planner model's tokenizer
        return TrailProbePredictor(refine_with_tokens=params.model == "embedded")
    if which == "ltr_ranker":
        from ..predictors.ltr_ranker import LTRPredictor

        return LTRPredictor()
    raise ValueError(f"policy '{policy.name}' needs per-segment length predictions that only the "
                     "simulator provides: run it with engine.kind: sim or `timely-fleet eval --engine sim`")


def engine_factory(params: EngineParams, clock: Clock) -> Callable[[], Engine]:
    """A function that (re)creates the configured engine; the node calls it again after a crash."""
    if params.kind == "sim":
        return lambda: RealtimeSimEngine(clock)
    if params.kind == "vllm":
        def make() -> Engine:
            from .vllm_engine import VllmEngine

            return VllmEngine(params, clock)
        return make
    raise ValueError(f"unknown engine kind {params.kind!r} (vllm or sim)")


def vllm_prompt_builder(instruction: str, robot_kind: str, skill_set_id: str) -> object:
    """The planner model's prompt for a goal (skill set + guidance + examples + task)."""
    from ..core.skills import DEFAULT_SKILL_SETS
    from ..planner_model.prompt import build_prompt

    return build_prompt(instruction, robot_kind, DEFAULT_SKILL_SETS[skill_set_id])


def prompt_builder_for(params: EngineParams) -> Callable[[str, str, str], object]:
    """How the node turns a goal into the engine's prompt."""
    return sim_prompt_builder if params.kind == "sim" else vllm_prompt_builder
