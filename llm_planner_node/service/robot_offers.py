"""A fleet's robots as the allocator sees them (:class:`~llm_planner_node.service.allocation.RobotOffer`):
what each declares in the fleet YAML, read where the planner reads it for one robot's goals (its
skill set, :func:`~llm_planner_node.config.params.perceivable_objects`, an arm's workspace
objects, a base's places), and its state now, as the caller knows it."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from timely_robot.skills import skill_set_of
from llm_planner_node.config.params import RobotParams, perceivable_objects
from llm_planner_node.service.allocation import RobotOffer


def declared_offer(robot: RobotParams, *, busy_with: str = "", link_age_s: float | None = 0.0,
                   battery_pct: float | None = None, expected_s: float = 0.0,
                   position: tuple[float, float, float] | None = None) -> RobotOffer:
    """``robot``'s declarations with the state given: its skill set's skill names (with their
    MiniSpec aliases), what it can perceive (None: unknown, so no perception task), its declared
    objects (an arm's workspace), its places (a base's); ``position``: where it is in the fleet
    frame (None: not known)."""
    skills = skill_set_of(robot.skill_set, robot.kind)
    names: set[str] = set()
    if skills is not None:
        for spec in skills.skills:
            names.add(spec.name)
            if spec.alias:
                names.add(spec.alias)
    seen = perceivable_objects(robot)
    return RobotOffer(robot.id, robot.kind, frozenset(names), None if seen is None else frozenset(seen),
                      objects=frozenset(robot.objects), places=frozenset(robot.places or {}),
                      busy_with=busy_with, link_age_s=link_age_s, battery_pct=battery_pct, expected_s=expected_s,
                      position=position)


def fleet_offers(robots: Sequence[RobotParams], busy: Mapping[str, str],
                 link_age_s: Callable[[str], float | None], battery_pct: Callable[[str], float | None],
                 expected_s: Callable[[RobotParams], float],
                 position: Callable[[str], tuple[float, float, float] | None] = lambda _r: None) -> list[RobotOffer]:
    """Every robot of the fleet, in the YAML's order: ``busy`` maps a robot to the goal (or
    mission) it serves; the callables give its link's age, its battery, a task's predicted
    completion on it and where it is in the fleet frame (:meth:`.poses.RobotPoses.fleet_position`)."""
    return [declared_offer(r, busy_with=busy.get(r.id, ""), link_age_s=link_age_s(r.id),
                           battery_pct=battery_pct(r.id), expected_s=expected_s(r), position=position(r.id))
            for r in robots]
