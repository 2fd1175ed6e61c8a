"""Workload specs (YAML) and the composer that turns one into timed goal arrivals.

A spec file (presets WID1-3 = TimelyLLM Table 3 in ``config/workloads/``)::

    name: WID1
    duration_s: 260          # arrivals in [0, duration_s)
    eps: 0.25                # Poisson event rate (events per second)
    max_tpe: 8               # each event starts 1..max_tpe tasks (uniform) on distinct agents
    traces: [1, 2, 3, 4, 5, 6, 7, 8]   # LRTrace ids 1-11 and/or "chat"
    agents: 25               # robots (agent indices 0..agents-1)
    seed: 0
    # optional
    tuf:                     # per-class overrides of the paper's TUFs
      urgent: {ert: 0.2, alpha: -6.67, beta: 2.0}
    network_latency_ms: 8
    chat_segmentation: sentence   # sentence | paragraph (chat traces)
    engine_model: llama3-8b       # the workload's model: llama3-8b | phi3 (chat)
    calibration: paper-vllm       # engine calibration: a name (engines/calibration.py) or a
                                  # `timely-fleet calibrate` file; default: the model's Table 1
                                  # profile (hf-table1 / phi3-hf-table1); --calibration overrides

The arrival process is :func:`timely_tools.sim.workload.generate` (same RNG stream), so
a spec and the equivalent ``WorkloadSpec`` give identical arrivals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from llm_planner_node.core.planner import PlannerConfig
from llm_planner_node.core.task_model import Goal
from llm_planner_node.core.tuf import PRESETS, TUFParams
from llm_planner_node.engines.sim_engine import SimEngineConfig
from llm_planner_node.engines.sim_traces import TRACES
from timely_tools.sim.workload import Arrival, WorkloadSpec, generate, goal_for
from timely_tools.evaluation.traces import CHAT_ID, PHI3_ENGINE, chat_goal, tuf_class

WORKLOAD_DIR = Path(__file__).resolve().parents[2] / "config" / "workloads"
CHAT_TRACE = 0  # internal trace id of the chat workload
ENGINE_MODELS = {"llama3-8b": SimEngineConfig(), "phi3": PHI3_ENGINE}
_REQUIRED = ("name", "duration_s", "eps", "max_tpe", "traces", "agents")
_OPTIONAL = ("seed", "tuf", "network_latency_ms", "chat_segmentation", "engine_model", "description",
             "calibration")


class SpecError(ValueError):
    """An invalid workload spec; the message names the file and field."""


@dataclass(frozen=True)
class EvalSpec:
    name: str
    duration_s: float
    eps: float
    max_tpe: int
    traces: tuple[int | str, ...]
    agents: int
    seed: int = 0
    tuf: Mapping[str, TUFParams] = field(default_factory=dict)
    network_latency_ms: float = 8.0
    chat_segmentation: str = "sentence"
    engine_model: str = "llama3-8b"
    calibration: str | None = None  # None: the model's Table 1 profile (ENGINE_MODELS)

    def workload_spec(self) -> WorkloadSpec:
        ids = tuple(CHAT_TRACE if t == CHAT_ID else int(t) for t in self.traces)
        return WorkloadSpec(self.eps, self.max_tpe, ids, self.agents, self.duration_s)

    def planner_config(self) -> PlannerConfig:
        return PlannerConfig(network_latency_s=self.network_latency_ms / 1000.0)

    def engine_config(self) -> SimEngineConfig:
        """The simulated engine: the spec's calibration for its model, else the model's Table 1
        profile."""
        if self.calibration is None:
            return ENGINE_MODELS[self.engine_model]
        from llm_planner_node.engines.calibration import get_calibration

        return get_calibration(self.calibration).engine_for(self.engine_model)

    def calibration_info(self) -> dict[str, Any]:
        """Name, constants and source line of the calibration this spec's engine uses."""
        from llm_planner_node.engines.calibration import get_calibration

        name = self.calibration or {"phi3": "phi3-hf-table1"}.get(self.engine_model, "hf-table1")
        return get_calibration(name).for_model(self.engine_model).as_dict()

    def with_(self, **changes: Any) -> "EvalSpec":
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "duration_s": self.duration_s, "eps": self.eps,
                "max_tpe": self.max_tpe, "traces": list(self.traces), "agents": self.agents,
                "seed": self.seed, "network_latency_ms": self.network_latency_ms,
                "tuf": {k: vars(v) for k, v in self.tuf.items()},
                "chat_segmentation": self.chat_segmentation, "engine_model": self.engine_model,
                "calibration": self.calibration}


def _num(where: str, key: str, v: Any, *, integer: bool = False, positive: bool = True) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise SpecError(f"{where}: '{key}' must be {'an integer' if integer else 'a number'}, got {v!r}")
    if not math.isfinite(v) or (positive and v <= 0) or (not positive and v < 0):
        raise SpecError(f"{where}: '{key}' must be {'> 0' if positive else '>= 0'}, got {v!r}")
    return v


def parse_spec(data: Any, where: str = "spec") -> EvalSpec:
    """Validate a mapping (parsed YAML) into an :class:`EvalSpec`; raise :class:`SpecError`."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: a workload spec must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)} "
                        f"(known: {', '.join(_REQUIRED + _OPTIONAL)})")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise SpecError(f"{where}: missing required field(s) {', '.join(missing)}")
    name = str(data["name"])
    duration = float(_num(where, "duration_s", data["duration_s"]))
    eps = float(_num(where, "eps", data["eps"]))
    max_tpe = _num(where, "max_tpe", data["max_tpe"], integer=True)
    agents = _num(where, "agents", data["agents"], integer=True)
    traces = data["traces"]
    if not isinstance(traces, list) or not traces:
        raise SpecError(f"{where}: 'traces' must be a non-empty list of trace ids 1-11 or 'chat'")
    tr: list[int | str] = []
    for t in traces:
        if t == CHAT_ID:
            tr.append(CHAT_ID)
        elif isinstance(t, int) and not isinstance(t, bool) and t in TRACES:
            tr.append(t)
        else:
            raise SpecError(f"{where}: unknown trace {t!r} in 'traces' (ids {min(TRACES)}-{max(TRACES)} or 'chat')")
    seed = _num(where, "seed", data.get("seed", 0), integer=True, positive=False)
    net = float(_num(where, "network_latency_ms", data.get("network_latency_ms", 8.0), positive=False))
    tufs: dict[str, TUFParams] = {}
    raw_tuf = data.get("tuf") or {}
    if not isinstance(raw_tuf, Mapping):
        raise SpecError(f"{where}: 'tuf' must map a class (normal/urgent) to {{ert, alpha, beta}}")
    for cls, p in raw_tuf.items():
        if cls not in PRESETS:
            raise SpecError(f"{where}: tuf class {cls!r} unknown (known: {', '.join(PRESETS)})")
        if not isinstance(p, Mapping) or set(p) != {"ert", "alpha", "beta"}:
            raise SpecError(f"{where}: tuf.{cls} must have exactly ert, alpha, beta")
        try:
            tufs[cls] = TUFParams(float(p["ert"]), float(p["alpha"]), float(p["beta"]))
        except (TypeError, ValueError) as e:
            raise SpecError(f"{where}: tuf.{cls}: {e}") from None
    seg = str(data.get("chat_segmentation", "sentence"))
    if seg not in ("sentence", "paragraph"):
        raise SpecError(f"{where}: 'chat_segmentation' must be sentence or paragraph, got {seg!r}")
    model = str(data.get("engine_model", "llama3-8b"))
    if model not in ENGINE_MODELS:
        raise SpecError(f"{where}: 'engine_model' must be one of {', '.join(ENGINE_MODELS)}, got {model!r}")
    cal = data.get("calibration")
    if cal is not None:
        from llm_planner_node.engines.calibration import get_calibration

        try:
            get_calibration(str(cal))
        except ValueError as e:
            raise SpecError(f"{where}: 'calibration': {e}") from None
    return EvalSpec(name, duration, eps, int(max_tpe), tuple(tr), int(agents), int(seed), tufs, net,
                    seg, model, None if cal is None else str(cal))


def preset_names() -> list[str]:
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.yaml"))


def load_spec(name_or_path: str | Path) -> EvalSpec:
    """A preset name (WID1, WID2, WID3, CHAT) or a YAML file path."""
    import yaml

    p = Path(name_or_path)
    if not p.is_file():
        cand = WORKLOAD_DIR / f"{str(name_or_path).upper()}.yaml"
        if not cand.is_file():
            raise SpecError(f"workload {name_or_path!r}: not a file and not a preset "
                            f"({', '.join(preset_names())})")
        p = cand
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"{p}: invalid YAML: {e}") from None
    return parse_spec(data, str(p))


def compose(spec: EvalSpec, seed: int | None = None, *,
            chat_segmentation: str | None = None) -> list[Arrival]:
    """Timed goal arrivals of ``spec`` (seed defaults to the spec's).

    Arrival times, agents and trace choices are :func:`sim.workload.generate`'s; chat stories
    come from a separate RNG stream so the arrival process does not depend on them, and a given
    (seed, arrival index) always gets the same story whatever the segmentation mode.
    """
    seed = spec.seed if seed is None else seed
    mode = chat_segmentation or spec.chat_segmentation
    story_rng = np.random.default_rng([seed, 7])

    def make_goal(tid: int, agent: int) -> Goal:
        if tid == CHAT_TRACE:
            g = chat_goal(f"chat{agent}", np.random.default_rng(story_rng.integers(2**63)), mode)
        else:
            g = goal_for(tid, f"{TRACES[tid].robot_kind}{agent}")
        cls = tuf_class(g.tuf)
        if cls in spec.tuf:
            g = replace(g, tuf=spec.tuf[cls])
        return g

    return generate(spec.workload_spec(), seed, make_goal)


@dataclass(frozen=True)
class WorkloadStats:
    """Table 3 statistics of a composed workload."""

    events: int
    tasks: int
    tasks_per_event: float
    max_tasks_per_event: int
    agents: int
    first_s: float
    last_s: float


def stats(arrivals: list[Arrival]) -> WorkloadStats:
    times: dict[float, int] = {}
    for a in arrivals:
        times[a.t] = times.get(a.t, 0) + 1
    n_ev = len(times)
    return WorkloadStats(n_ev, len(arrivals), len(arrivals) / n_ev if n_ev else 0.0,
                         max(times.values(), default=0), len({a.goal.robot_id for a in arrivals}),
                         min(times, default=0.0), max(times, default=0.0))
