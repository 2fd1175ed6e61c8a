"""The fleet memory over ROS: the ``planner/memory`` service (``timely_fleet/srv/QueryMemory``),
and sightings as ``timely_fleet/Sighting`` messages (its answers, the planner's journal).

The node stays thin: :func:`attach` converts the request, asks the service
(:meth:`~llm_planner_node.service.planner_service.PlannerService.query_memory`) and converts its
answer; what is remembered and how a label matches is :mod:`llm_planner_node.service.memory`'s.
"""

from __future__ import annotations

import math
from typing import Any

from builtin_interfaces.msg import Time
from timely_fleet.msg import Sighting as SightingMsg

from llm_planner_node.service.memory import MAX_TEXT, Sighting

MEMORY_SERVICE = "planner/memory"
#: Longest label a query may carry (characters).
MAX_QUERY_CHARS = 200


def sighting_msg(s: Sighting) -> Any:
    """A sighting as a ``timely_fleet/Sighting`` message."""
    sec = math.floor(s.wall_time)
    x, y, z = s.position if s.position is not None else (0.0, 0.0, 0.0)
    return SightingMsg(robot_id=s.robot_id, label=s.label, has_confidence=s.confidence is not None,
                       confidence=float(s.confidence or 0.0), has_position=s.position is not None,
                       x=float(x), y=float(y), z=float(z),
                       stamp=Time(sec=int(sec), nanosec=min(int((s.wall_time - sec) * 1e9), 999_999_999)),
                       goal_id=s.goal_id)


def sighting_of_msg(m: Any) -> Sighting:
    """A ``timely_fleet/Sighting`` message as a sighting (texts cut to the memory's bound)."""
    return Sighting(robot_id=str(m.robot_id)[:MAX_TEXT], label=str(m.label)[:MAX_TEXT],
                    confidence=float(m.confidence) if m.has_confidence else None,
                    position=(float(m.x), float(m.y), float(m.z)) if m.has_position else None,
                    wall_time=m.stamp.sec + m.stamp.nanosec * 1e-9, goal_id=str(m.goal_id)[:MAX_TEXT])


def attach(node: Any) -> Any:
    """Serve ``planner/memory`` on ``node`` (a :class:`~.node.PlannerNode`); returns the service."""
    from timely_fleet.srv import QueryMemory

    def on_query(request: Any, response: Any) -> Any:
        service = node.service
        if service is None:
            response.message = ("the planner is not configured (lifecycle state 'unconfigured'): "
                                "it remembers nothing yet")
            return response
        found, response.message = service.query_memory(str(request.label)[:MAX_QUERY_CHARS], int(request.max_results))
        response.sightings = [sighting_msg(s) for s in found]
        return response

    return node.create_service(QueryMemory, MEMORY_SERVICE, on_query, callback_group=node.goals_callback_group)
