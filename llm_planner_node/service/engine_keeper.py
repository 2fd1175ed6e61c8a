"""The inference engine's life in the service: warm-up, failure, restart from the factory (or
down until it can be rebuilt), close, and the health diagnostics report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from llm_planner_node.config.params import FleetParams
from llm_planner_node.core.engine_api import Engine, GenerationSpec
from llm_planner_node.core.text import safe_text
from llm_planner_node.service.shared import ServicePart, Shared


@dataclass
class EngineHealth:
    """What diagnostics say about the engine."""

    state: str = "up"                 # up | restarting | down
    failures: int = 0
    last_error: str = ""              # repr of the last failure (diagnostics)
    reason: str = ""                  # its text, as goals that end ENGINE_FAILED are told
    failures_reported: int = 0        # failures already shown by diagnostics


class EngineKeeper(ServicePart):
    """Keeps the core's engine running (its failures and restarts happen on the scheduler thread)."""

    def __init__(self, shared: Shared, factory: Callable[[], Engine] | None, owns_engine: bool,
                 params: Callable[[], FleetParams], prompt_builder: Callable[..., object], retry_s: float) -> None:
        """``factory``: builds a new engine (None: a failed engine is not rebuilt); ``owns_engine``:
        the engine was built here (a lent one is not closed); ``retry_s``: seconds between
        attempts to rebuild an engine that failed and could not be restarted."""
        super().__init__(shared)
        self._factory = factory
        self._owns_engine = owns_engine
        self._params = params
        self._prompt_builder = prompt_builder
        self._retry_s = retry_s
        self.health = EngineHealth()
        self.retry_at = 0.0  # while the engine is down: next attempt of the factory
        self._failure = ""  # the text of the engine's last failure

    @property
    def rebuildable(self) -> bool:
        return self._factory is not None

    def warm_up(self, engine: Engine) -> None:
        """Warm a freshly started engine (the engine contract's optional ``warm_up``) with one spec
        per robot kind and skill set of the fleet, the prompt of the shipped planner's first
        canonical goal of that kind, and the canonical plans of that kind: the first goals then
        find their prompt in the prefix cache and the base and resume grammars compiled, and
        start as fast as later ones. A failure is logged; the first goals then start cold."""
        warm = getattr(engine, "warm_up", None)
        if warm is None:
            return
        from llm_planner_node.planner_model.corpus import canonical_chat_examples, canonical_examples
        from llm_planner_node.planner_model.known import PLAN_KIND

        examples = canonical_examples() + canonical_chat_examples()
        specs: list[GenerationSpec] = []
        plans: list[list[str]] = []
        for kind, skill_set in sorted({(r.kind, r.skill_set) for r in self._params().robots}):
            mine = [ex for ex in examples if ex.robot_kind == PLAN_KIND.get(kind, kind)]
            prompt = None
            # the scripted engine's instruction is the plan itself: its canonical plan warms it
            for text in ([mine[0].instruction, mine[0].plan] if mine else ["warm up"]):
                try:
                    prompt = self._prompt_builder(text, kind, skill_set)
                    break
                except ValueError:
                    continue
            if prompt is None:
                continue
            specs.append(GenerationSpec(-1 - len(specs), prompt, 1, kind, skill_set, False))
            plans.append([ex.plan for ex in mine])
        t0 = time.monotonic()
        try:
            warm(specs, plans)
        except Exception as e:  # noqa: BLE001 - a cold first goal is slower, not wrong
            self._ports.log("warning", f"engine warm-up failed ({safe_text(repr(e), 300)}); the first goals start cold")
            return
        self._ports.log("debug", f"engine warmed for {len(specs)} robot kind(s) in {time.monotonic() - t0:.2f} s")

    def failed(self, error: Exception) -> None:
        """The engine raised: close it and build another, or go down without a factory."""
        self.health.failures += 1
        self.health.last_error = safe_text(repr(error), 300)
        self.health.reason = self._failure = safe_text(str(error) or repr(error), 300)
        self._counters["engine_failures"] += 1
        self._ports.log("error", f"inference engine failed: {self.health.last_error}")
        if self._factory is None:
            self.go_down()
            return
        close = getattr(self._planner.engine, "close", None)
        if close and self._owns_engine:
            try:
                close()
            except Exception:  # noqa: BLE001 - the engine is dead already
                pass
        self.restart()

    def go_down(self, why: str = "") -> None:
        """No engine: end every goal it would still have to generate; new goals are refused (and
        the scheduler retries the engine factory every ``retry_s``, if it has one)."""
        self.health.state = "down"
        self.retry_at = self._clock.now() + self._retry_s
        if why:
            self._ports.log("error", why)
        self._planner.engine_lost(self.health.reason)

    def restart(self) -> None:
        """Build an engine from the factory, warm it and hand it to the core; down if that fails."""
        assert self._factory is not None
        self.health.state = "restarting"
        try:
            engine = self._factory()
        except Exception as e:  # noqa: BLE001
            self.health.reason = f"{self._failure}; rebuilding it failed: {safe_text(str(e) or repr(e), 300)}"
            self.go_down(f"inference engine could not be restarted (next try in {self._retry_s:g} s): "
                         f"{safe_text(repr(e), 300)}")
            return
        self.warm_up(engine)
        self._planner.restart_engine(engine, self.health.reason)
        self._owns_engine = True
        self.health.state = "up"
        self._ports.log("info", "inference engine restarted")

    def close(self) -> None:
        """Free the engine, unless it was lent."""
        close = getattr(self._planner.engine, "close", None)
        if close and self._owns_engine:
            close()
