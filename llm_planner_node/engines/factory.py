"""Build the node's engine from its parameters (vLLM in process, remote vLLM servers, or the
simulated engine in real time, :class:`~.sim_engine.RealtimeSimEngine`), the prompt builder that
goes with it, and the live length predictor of a policy.

The simulated engine (``engine.kind: sim``) lets the node run without a model: a goal's plan is
the plan of the instruction the shipped planner knows (:func:`~.sim_prompts.sim_prompt_builder`;
an unknown instruction is rejected with the list of what it can plan), and iterations take the
calibrated time of the simulated GPU, in wall-clock time.
"""

from __future__ import annotations

from typing import Any, Callable

from llm_planner_node.core.clock import Clock
from llm_planner_node.core.engine_api import Engine
from llm_planner_node.core.policies import LIVE_PREDICTORS
from llm_planner_node.config.params import CONSTRAINED_DECODING, SIM_ENGINES, EngineParams, PlannerParams
from llm_planner_node.engines.sim_engine import RealtimeSimEngine
from llm_planner_node.engines.sim_prompts import scripted_prompt_builder, sim_prompt_builder
from llm_planner_node.prompts.builders import chat_template_prompt_builder, vllm_prompt_builder


def predictor_for(policy: Any, params: EngineParams) -> Any:
    """The length predictor a policy uses in the node: the simulator-fed default with the
    simulated engine; with vLLM the real one (Trail's hidden-state probe or the LTR ranker)."""
    if params.kind in SIM_ENGINES or policy.make_predictor() is None:
        return None
    which = LIVE_PREDICTORS.get(policy.name)
    if which == "trail_probe":
        from llm_planner_node.predictors.trail_probe import TrailProbePredictor

        # per-token refinement reads the engine's token ids: only with the planner model's tokenizer
        return TrailProbePredictor(refine_with_tokens=params.model == "embedded")
    if which == "ltr_ranker":
        from llm_planner_node.predictors.ltr_ranker import LTRPredictor

        return LTRPredictor()
    raise ValueError(f"policy '{policy.name}' needs per-segment length predictions that only the "
                     "simulator provides: run it with engine.kind: sim or `timely-fleet eval --engine sim`")


def engine_factory(params: EngineParams | PlannerParams, clock: Clock, *,
                   constrained_decoding: str | None = None) -> Callable[[], Engine]:
    """A function that (re)creates the configured engine; the node calls it again after a crash.

    ``params``: the engine section, or the whole planner section (then its
    ``constrained_decoding`` applies). ``constrained_decoding`` (``planner.constrained_decoding``:
    ``grammar``, the default, or ``off``) decides whether vLLM decodes under the skill set's plan
    grammar; the simulated engine has no decoding to constrain."""
    if isinstance(params, PlannerParams):
        constrained_decoding = constrained_decoding or params.constrained_decoding
        params = params.engine
    mode = constrained_decoding or PlannerParams.constrained_decoding
    if mode not in CONSTRAINED_DECODING:
        raise ValueError(f"constrained_decoding must be one of {', '.join(CONSTRAINED_DECODING)}, got {mode!r}")
    if params.kind in SIM_ENGINES:
        return lambda: RealtimeSimEngine(clock)
    if params.kind == "vllm":
        def make() -> Engine:
            from llm_planner_node.engines.vllm_engine import VllmEngine

            return VllmEngine(params, clock, constrained_decoding=mode)
        return make
    if params.kind == "remote":  # `vllm serve` servers (planner.engine.servers)
        from llm_planner_node.engines.remote_engine import build_remote_engine

        return lambda: build_remote_engine(params, clock, constrained_decoding=mode)
    raise ValueError(f"unknown engine kind {params.kind!r} (vllm, remote or sim)")


def prompt_builder_for(params: EngineParams) -> Callable[..., object]:
    """How the node turns a goal into the engine's prompt: the simulated plan (sim), the shipped
    planner's own format (embedded model, or a model without a chat template), or the model's
    chat template (instruct models)."""
    if params.kind == "sim":
        return sim_prompt_builder
    if params.kind == "scripted":
        return scripted_prompt_builder
    if params.model != "embedded":
        from llm_planner_node.engines.vllm_engine import resolve_model_path

        from llm_planner_node.prompts.prompt import prompt_options_for

        chat = chat_template_prompt_builder(resolve_model_path(params.model), prompt_options_for(params.model))
        if chat is not None:
            return chat
    return vllm_prompt_builder
