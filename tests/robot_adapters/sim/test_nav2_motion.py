"""The Nav2 simulator's path follower and planner (robot_adapters/sim/nav2_sim.py, nav2_map.py),
without ROS: Nav2's progress checker, and routes that keep their clearance at corners."""

from __future__ import annotations

import math

from robot_adapters.sim.nav2_map import GridMap
from robot_adapters.sim.nav2_sim import DEFAULT_OBSTACLES, DEFAULT_SIZE, PLACES, PROGRESS_S, FollowPath


def test_a_base_that_cannot_move_fails_failed_to_make_progress_after_the_checkers_allowance():
    m = FollowPath([(2.0, 2.0), (5.0, 2.0)], 0.0, v=0.5, w=1.0, timeout_s=600.0)
    m.begin((2.0, 2.0, 0.0), 0.0)
    t = 0.0
    while t < PROGRESS_S + 1 and not m.finished.is_set():
        t += 0.02
        assert m.command((2.0, 2.0, 0.0), 0.02, t) is not None or m.finished.is_set()  # it never moves
    assert m.outcome == ("fail", "FAILED_TO_MAKE_PROGRESS", "Failed to make progress")
    assert PROGRESS_S < t <= PROGRESS_S + 0.05
    moving = FollowPath([(2.0, 2.0), (15.0, 2.0)], 0.0, v=0.5, w=1.0, timeout_s=600.0)
    moving.begin((2.0, 2.0, 0.0), 0.0)
    for k in range(1, 1000):  # 20 s at 0.5 m/s: it progresses, so the checker says nothing
        assert moving.command((2.0 + 0.01 * k, 2.0, 0.0), 0.02, 0.02 * k) is not None


def test_every_route_of_the_default_room_keeps_half_a_cell_of_clearance_beyond_the_radius():
    g = GridMap(DEFAULT_SIZE, DEFAULT_OBSTACLES, radius=0.25, resolution=0.2)
    for a in PLACES.values():
        for b in PLACES.values():
            if a == b:
                continue
            corners = g.plan(a[:2], b[:2])
            for p, q in zip(corners, corners[1:]):
                n = max(1, int(math.dist(p, q) / 0.05))
                for i in range(n + 1):
                    x, y = p[0] + (q[0] - p[0]) * i / n, p[1] + (q[1] - p[1]) * i / n
                    if math.dist((x, y), a[:2]) > 0.4 and math.dist((x, y), b[:2]) > 0.4:
                        assert not g.collides(x, y, margin=0.25 + 0.09), (a, b, (x, y))
