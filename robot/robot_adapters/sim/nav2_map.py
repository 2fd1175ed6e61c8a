"""The Nav2 simulator's world (robot_adapters.sim.nav2_sim): a rectangular room with rectangular
obstacles, collision checks for a disc-shaped robot, and a grid planner (A* on an occupancy grid whose
obstacles are inflated by the robot's radius, shortened by line of sight). No ROS."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangular obstacle (map frame, metres)."""
    x0: float
    y0: float
    x1: float
    y1: float

    def distance(self, x: float, y: float) -> float:
        return math.hypot(max(self.x0 - x, 0.0, x - self.x1), max(self.y0 - y, 0.0, y - self.y1))


class PlanError(Exception):
    """A ComputePathToPose failure: ``code`` names the Result constant (e.g. "GOAL_OCCUPIED")."""

    def __init__(self, code: str, msg: str) -> None:
        super().__init__(msg)
        self.code, self.msg = code, msg


class GridMap:
    """The room: its size, its obstacles, and A* on a grid of the obstacles inflated by ``radius``."""

    def __init__(self, size: tuple[float, float], obstacles: Sequence[Rect], radius: float, resolution: float) -> None:
        self.w, self.h = size
        self.obstacles, self.radius, self.res = tuple(obstacles), radius, resolution
        self.nx, self.ny = int(round(self.w / resolution)), int(round(self.h / resolution))
        xs = (np.arange(self.nx) + 0.5) * resolution
        ys = (np.arange(self.ny) + 0.5) * resolution
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        m = radius + resolution / 2  # cell centres this far from everything: the segments between them are clear
        blocked = (gx < m) | (gy < m) | (gx > self.w - m) | (gy > self.h - m)
        for r in self.obstacles:
            blocked |= np.hypot(np.maximum.reduce([r.x0 - gx, np.zeros_like(gx), gx - r.x1]),
                                np.maximum.reduce([r.y0 - gy, np.zeros_like(gy), gy - r.y1])) < m
        self.blocked = blocked

    def inside(self, x: float, y: float) -> bool:
        return 0.0 <= x <= self.w and 0.0 <= y <= self.h

    def collides(self, x: float, y: float, margin: float | None = None) -> bool:
        """The robot's disc (``margin``: its radius) at (x, y) touches an obstacle or the walls."""
        m = self.radius if margin is None else margin
        if x < m or y < m or x > self.w - m or y > self.h - m:
            return True
        return any(r.distance(x, y) < m for r in self.obstacles)

    def _cell(self, x: float, y: float) -> tuple[int, int]:
        return min(self.nx - 1, max(0, int(x / self.res))), min(self.ny - 1, max(0, int(y / self.res)))

    def _clear(self, a: tuple[float, float], b: tuple[float, float]) -> bool:
        """The segment a-b keeps the clearance of the grid's free cells (radius + half a cell)
        from everything: a base that cuts a corner a little does not touch the obstacle."""
        n = max(1, int(math.dist(a, b) / (self.res / 2)))
        m = self.radius + self.res / 2
        return not any(self.collides(a[0] + (b[0] - a[0]) * i / n, a[1] + (b[1] - a[1]) * i / n, margin=m)
                       for i in range(n + 1))

    def plan(self, start: tuple[float, float], goal: tuple[float, float]) -> list[tuple[float, float]]:
        """Corner points from start to goal, each segment collision-free; raises PlanError."""
        for (x, y), what in ((start, "Start"), (goal, "Goal")):
            if not self.inside(x, y):
                raise PlanError(f"{what.upper()}_OUTSIDE_MAP", f"{what} Coordinates of({x:.2f}, {y:.2f}) was outside bounds")
        for (x, y), what in ((start, "Start"), (goal, "Goal")):
            if self.collides(x, y):  # the robot does not fit there (the grid's inflation is wider)
                raise PlanError(f"{what.upper()}_OCCUPIED", f"{what} Coordinates of({x:.2f}, {y:.2f}) was in lethal cost")
        s, g = self._cell(*start), self._cell(*goal)
        came: dict[tuple[int, int], tuple[int, int] | None] = {s: None}
        cost = {s: 0.0}
        heap = [(0.0, s)]
        while heap:
            _, c = heapq.heappop(heap)
            if c == g:
                break
            for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1)):
                n = (c[0] + dx, c[1] + dy)
                if not (0 <= n[0] < self.nx and 0 <= n[1] < self.ny) or (self.blocked[n] and n != g):
                    continue
                nc = cost[c] + (1.4142135 if dx and dy else 1.0)
                if nc < cost.get(n, math.inf):
                    cost[n], came[n] = nc, c
                    hx, hy = abs(n[0] - g[0]), abs(n[1] - g[1])
                    heapq.heappush(heap, (nc + max(hx, hy) + 0.4142135 * min(hx, hy), n))
        if g not in came:
            raise PlanError("NO_VALID_PATH", f"Failed to create plan with tolerance of: 0.00 from ({start[0]:.2f}, "
                            f"{start[1]:.2f}) to ({goal[0]:.2f}, {goal[1]:.2f}): no path")
        cells: list[tuple[int, int]] = []
        c: tuple[int, int] | None = g
        while c is not None:
            cells.append(c)
            c = came[c]
        pts = [start] + [((i + 0.5) * self.res, (j + 0.5) * self.res) for i, j in reversed(cells[1:-1])] + [goal]
        corners = [pts[0]]  # line-of-sight shortening: from each corner, the farthest point in clear view
        i = 0
        while i < len(pts) - 1:
            j = len(pts) - 1
            while j > i + 1 and not self._clear(pts[i], pts[j]):
                j -= 1
            corners.append(pts[j])
            i = j
        return corners


def densify(corners: Sequence[tuple[float, float]], step: float) -> list[tuple[float, float]]:
    """Points every ``step`` m along the corners' polyline (both ends included)."""
    out = [corners[0]]
    for a, b in zip(corners, corners[1:]):
        n = max(1, math.ceil(math.dist(a, b) / step))
        out += [(a[0] + (b[0] - a[0]) * k / n, a[1] + (b[1] - a[1]) * k / n) for k in range(1, n + 1)]
    return out
