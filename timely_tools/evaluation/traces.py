"""Trace library for the evaluation: the 11 LRTrace tasks (TimelyLLM Table 2) and a chat workload.

Robot traces live in :mod:`llm_planner_node.engines.sim_traces` (plans as :class:`SimPrompt`); this module
adds what an evaluation report needs around them: the natural-language instruction, the TUF
class, and execution-time draws from the profiled :class:`ExecutionTimeModel`.

Chat workload (TimelyLLM 7.4.2, WritingPrompts): a person asks for a short story; the "plan" is
the story text, segmented into sentences (TimelyLLM-Sen) or paragraphs (TimelyLLM-Para) by the
project's chat segmenters; a segment's token count is ~1.3 tokens per word; "execution" is
reading at 300 words per minute (the ``say`` skill of the chat skill set); TUF = normal. The
WritingPrompts data set is not downloaded: stories are composed deterministically (per seed)
from a small bank of WritingPrompts-style prompts and sentences, with lengths in the range of
the data set's short stories (4-7 paragraphs of 3-6 sentences, ~250-500 words).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.skills import CHAT
from llm_planner_node.core.task_model import Goal
from llm_planner_node.core.tuf import NORMAL, URGENT, TUFParams
from llm_planner_node.engines.calibration import CALIBRATIONS, PHI3_MINI_RTX4090  # noqa: F401 (re-exported)
from llm_planner_node.engines.sim_engine import SimPrompt, SimSegment
from llm_planner_node.engines.sim_stories import (CHAT_PREFIX_TOKENS, CHAT_PROMPTS, TOKENS_PER_WORD, chat_segments,  # noqa: F401
                           compose_story)
from llm_planner_node.engines.sim_traces import TRACES, Trace

READING_WORDS_PER_MIN = 300.0
CHAT_ID = "chat"

# Phi-3-mini-128k fp16 on an RTX 4090 (TimelyLLM Table 1): the named calibration
# ``phi3-hf-table1`` (constants and derivation in engines/calibration.py).
PHI3_ENGINE = CALIBRATIONS["phi3-hf-table1"].engine


def tuf_class(tuf: TUFParams) -> str:
    """``urgent`` / ``normal`` for the paper's presets, else ``custom``."""
    return "urgent" if tuf == URGENT else "normal" if tuf == NORMAL else "custom"


@dataclass(frozen=True)
class TraceInfo:
    """One row of the trace library (TimelyLLM Table 2)."""

    id: int | str
    instruction: str
    robot_kind: str
    task_type: str
    tuf_class: str
    plan: tuple[str, ...]  # segment texts
    segment_tokens: tuple[int, ...]

    @property
    def plan_tokens(self) -> int:
        return sum(self.segment_tokens)


def _instruction(tr: Trace) -> str:
    return {
        "drone": f"Drone, {tr.description}.",
        "arm": f"Robot arm, do the {tr.description} on the desk.",
    }.get(tr.robot_kind, tr.description)


def library() -> list[TraceInfo]:
    """The 11 LRTrace tasks, in id order."""
    return [TraceInfo(t.id, _instruction(t), t.robot_kind, t.task_type, tuf_class(t.tuf),
                      tuple(s.text for s in t.prompt.segments),
                      tuple(s.n_tokens for s in t.prompt.segments)) for t in TRACES.values()]


def execution_draws(trace_id: int, n: int, seed: int = 0,
                    model: ExecutionTimeModel | None = None) -> np.ndarray:
    """``n`` sampled execution times (s) of the whole plan of ``trace_id``, shape (n, segments)."""
    tr = TRACES[trace_id]
    m = model or ExecutionTimeModel(online=False)
    rng = np.random.default_rng(seed)
    return np.array([[m.sample(f"{tr.robot_kind}0", tr.robot_kind, s.calls, rng)
                      for s in tr.prompt.segments] for _ in range(n)])


# ----------------------------------------------------------------------------- chat workload

def chat_goal(robot_id: str, rng: np.random.Generator, mode: str = "sentence",
              tuf: TUFParams = NORMAL) -> Goal:
    """One chat request (story generation) for the simulator."""
    prompt, story = compose_story(rng)
    segs = chat_segments(story, mode)
    task_tokens = max(1, math.ceil(TOKENS_PER_WORD * len(prompt.split()))) + 16
    sp = SimPrompt(CHAT_PREFIX_TOKENS, task_tokens, segs, CHAT.id)
    n = sum(s.n_tokens for s in segs)
    return Goal(robot_id, "chat", "chat", sp, tuf, max(n + 8, 64), CHAT.id,
                f"Write a short story: {prompt}")


def reading_time_s(text: str) -> float:
    """Nominal reading time of ``text`` at 300 words per minute."""
    return len(text.split()) * 60.0 / READING_WORDS_PER_MIN
