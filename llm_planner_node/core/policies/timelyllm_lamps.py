"""``timelyllm-lamps``: TimelyLLM scheduling with LAMPS's KV handling during robot actions.

Priorities and admission are TimelyLLM's (the suspended generation is resumed ahead of the end
of its robot's action, not after it), and each suspension picks preserve / discard / swap by
LAMPS's waste formulas with the time the context would sit unused: the predicted end of the
action minus the next segment's generation time G.
"""

from __future__ import annotations

from llm_planner_node.core.policies.base import Pause, register
from llm_planner_node.core.policies.lamps import WasteModel
from llm_planner_node.core.policies.timelyllm import TimelyLLM


@register
class TimelyLLMLamps(TimelyLLM):
    name = "timelyllm-lamps"

    def __init__(self, max_batch: int | None = None, waste: WasteModel = WasteModel(),
                 **params: float) -> None:
        self.waste = waste
        super().__init__(max_batch, **params)

    def retention(self, pause: Pause) -> str | None:
        idle = max(0.0, pause.until_needed_s - pause.g_s)
        return self.waste.best(idle, pause.ctx, pause.other_ctx)[0]
