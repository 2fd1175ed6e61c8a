"""Workloads: timed goal arrivals for the simulator (TimelyLLM Table 3 generator and presets).

A workload is a list of :class:`Arrival` (time, :class:`~llm_planner_node.core.task_model.Goal`
whose prompt is a :class:`~llm_planner_node.engines.sim_engine.SimPrompt`). Build one by hand for
a custom scenario, load one from JSON with :func:`load_workload`, or use :func:`generate`:
events arrive Poisson with rate ``eps``; each event triggers 1..``max_tpe`` tasks (uniform) on
distinct agents, each running a trace drawn uniformly from ``trace_ids``.

JSON workload format (times in seconds; ``tuf`` is a preset name or ``{ert, alpha, beta}``;
skill calls are validated against the robot kind's skill set, MiniSpec aliases allowed)::

    {"arrivals": [
      {"t": 0.0, "trace": 1, "robot_id": "drone0"},
      {"t": 0.1, "robot_id": "drone1", "robot_kind": "drone", "task_type": "drone-urgent",
       "tuf": "urgent", "max_tokens": 64,
       "prompt": {"shared_prefix_tokens": 1250, "task_tokens": 50,
                  "segments": [{"text": "mb(100);", "n_tokens": 5, "calls": [["mb", [100]]]}]}}
    ]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS
from llm_planner_node.core.task_model import Goal
from llm_planner_node.core.tuf import PRESETS, TUFParams
from llm_planner_node.engines.sim_engine import SimPrompt, SimSegment
from llm_planner_node.engines.sim_traces import trace


@dataclass(frozen=True)
class Arrival:
    t: float
    goal: Goal


@dataclass(frozen=True)
class WorkloadSpec:
    """TimelyLLM Table 3 parameters."""

    eps: float
    max_tpe: int
    trace_ids: tuple[int, ...]
    agents: int
    duration_s: float


WORKLOADS: dict[str, WorkloadSpec] = {
    "WID1": WorkloadSpec(0.25, 8, tuple(range(1, 9)), 25, 260.0),
    "WID2": WorkloadSpec(0.25, 16, tuple(range(1, 9)), 42, 300.0),
    "WID3": WorkloadSpec(0.1, 8, (9, 10, 11), 40, 900.0),
}


def goal_for(trace_id: int, robot_id: str) -> Goal:
    """The goal a robot sends for an LRTrace-like trace (or a mobile base's, ``sim_traces.BASE_TRACES``)."""
    tr = trace(trace_id)
    return Goal(robot_id, tr.robot_kind, tr.task_type, tr.prompt, tr.tuf, tr.max_tokens,
                tr.prompt.prefix_key, tr.description)


def generate(spec: WorkloadSpec, seed: int = 0,
             make_goal: Callable[[int, int], Goal] | None = None) -> list[Arrival]:
    """Poisson events x up to ``max_tpe`` parallel tasks, deterministic under ``seed``.

    ``make_goal(trace_id, agent_index)`` builds each goal (default: :func:`goal_for` with robot
    id ``<kind><agent>``); it lets callers add trace ids of their own (e.g. a chat workload)
    or override TUFs without changing the arrival process.
    """
    rng = np.random.default_rng(seed)
    out: list[Arrival] = []
    t = float(rng.exponential(1 / spec.eps))
    while t < spec.duration_s:
        n = int(rng.integers(1, spec.max_tpe + 1))
        agents = rng.choice(spec.agents, size=min(n, spec.agents), replace=False)
        for a in agents.tolist():
            tid = int(rng.choice(spec.trace_ids))
            goal = (make_goal(tid, a) if make_goal is not None
                    else goal_for(tid, f"{trace(tid).robot_kind}{a}"))
            out.append(Arrival(t, goal))
        t += float(rng.exponential(1 / spec.eps))
    return out


def _goal_from_json(a: dict[str, Any]) -> Goal:
    if "trace" in a:
        return goal_for(int(a["trace"]), str(a["robot_id"]))
    kind = str(a["robot_kind"])
    p = a["prompt"]
    skill_set_id = str(p.get("prefix_key", DEFAULT_SKILL_SET_FOR_KIND[kind]))
    skills = DEFAULT_SKILL_SETS[skill_set_id]
    segments = tuple(
        SimSegment(str(s["text"]), int(s["n_tokens"]),
                   tuple(skills.validate(name, args) for name, args in s["calls"]))
        for s in p["segments"])
    prompt = SimPrompt(int(p["shared_prefix_tokens"]), int(p["task_tokens"]), segments, skill_set_id)
    tuf = a.get("tuf", "normal")
    tuf_params = PRESETS[tuf] if isinstance(tuf, str) else TUFParams(**tuf)
    return Goal(str(a["robot_id"]), kind, str(a.get("task_type", kind)), prompt, tuf_params,
                int(a.get("max_tokens", 256)), skill_set_id, str(a.get("instruction", "")))


def load_workload(path: str | Path) -> list[Arrival]:
    """Arrivals from a JSON workload file (format in the module docstring)."""
    data = json.loads(Path(path).read_text())
    return [Arrival(float(a["t"]), _goal_from_json(a)) for a in data["arrivals"]]
