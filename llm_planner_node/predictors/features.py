"""Hidden states of the planner model through a forward hook (Trail: probe a middle layer)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from llm_planner_node.planner_model import DEFAULT_MODEL_PATH
from llm_planner_node.prompts.prompt import build_prompt, prompt_prefix

#: Trail probes layer 11 of 32 (layers 10-15 best); our model has 4 layers: the 3rd (index 2).
DEFAULT_LAYER = 2


@contextmanager
def layer_hook(model: Any, layer: int) -> Iterator[list[torch.Tensor]]:
    """Capture decoder layer ``layer``'s output hidden states ([1, T, d]) on every forward."""
    captured: list[torch.Tensor] = []

    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        captured.append((output[0] if isinstance(output, tuple) else output).detach())

    handle = model.model.layers[layer].register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


@dataclass
class PlannerModel:
    """The planner model + tokenizer, loaded once (CPU, eval mode)."""

    path: str = DEFAULT_MODEL_PATH

    def __post_init__(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModelForCausalLM.from_pretrained(self.path).eval()

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def task_span(self, instruction: str, robot_kind: str) -> tuple[list[int], int]:
        """Prompt ids and where the task part starts (after the shared skill-set prefix)."""
        ids = self.ids(build_prompt(instruction, robot_kind))
        return ids, min(len(self.ids(prompt_prefix(robot_kind))), len(ids) - 1)

    @torch.no_grad()
    def states(self, ids: list[int], layer: int) -> torch.Tensor:
        """Layer ``layer``'s hidden states for ``ids`` ([T, d])."""
        with layer_hook(self.model, layer) as cap:
            self.model(torch.tensor([ids]))
        return cap[-1][0]
