"""The collaborators several parts of the planner service share, passed to each as one object."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from llm_planner_node.core.clock import Clock
from llm_planner_node.core.planner import Planner
from llm_planner_node.service.delivery import SegmentDelivery
from llm_planner_node.service.ports import PlannerPorts
from llm_planner_node.service.registry import GoalRegistry


@dataclass(frozen=True, eq=False)  # live objects: compared and hashed by identity
class Shared:
    """What the parts of one :class:`~.planner_service.PlannerService` have in common: the
    scheduling core, the goals in flight and busy robots, the segment delivery protocol, the
    ports to the ROS side, the clock and the service's counters (built once by the service;
    each part reads the ones it needs)."""

    planner: Planner
    goals: GoalRegistry
    delivery: SegmentDelivery
    ports: PlannerPorts
    clock: Clock
    counters: Counter[str]


class ServicePart:
    """A part of the service (intake, scheduler loop, status path, ...): it reads the shared
    collaborators as ``self._planner``, ``self._goals``, ``self._delivery``, ``self._ports``,
    ``self._clock`` and ``self._counters``."""

    def __init__(self, shared: Shared) -> None:
        self._planner = shared.planner
        self._goals = shared.goals
        self._delivery = shared.delivery
        self._ports = shared.ports
        self._clock = shared.clock
        self._counters = shared.counters
