"""Which robots an adapter process hosts (robot_adapters.host.select_robots)."""

from __future__ import annotations

import pytest

from timely_robot.config import ParamError, parse_robots
from robot_adapters.host import select_robots

ROBOTS = parse_robots([{"id": f"drone_{i}", "kind": "drone"} for i in range(1, 6)] + [{"id": "arm_1", "kind": "arm"}])


def test_every_robot_by_default_ids_patterns_and_groups():
    assert select_robots(ROBOTS, None) == select_robots(ROBOTS, "") == {r.id for r in ROBOTS}
    assert select_robots(ROBOTS, "arm_1, drone_2") == {"arm_1", "drone_2"}
    assert select_robots(ROBOTS, "drone_[12]") == {"drone_1", "drone_2"}
    groups = [select_robots(ROBOTS, f"{k}/3") for k in (1, 2, 3)]
    assert groups == [{"drone_1", "drone_2"}, {"drone_3", "drone_4"}, {"drone_5", "arm_1"}]


@pytest.mark.parametrize("spec, message", [("tello_*", "--robots: no robot of the YAML matches 'tello_*'"),
                                           ("4/3", "--robots 4/3: the group k/n needs 1 <= k <= n")])
def test_a_selection_that_names_nothing_is_refused(spec, message):
    with pytest.raises(ParamError, match="^" + message.replace("[", r"\[").replace("*", r"\*") + "$"):
        select_robots(ROBOTS, spec)
