"""`running_fleet` freezes the heap it starts with (up.freeze_startup_heap): a full garbage
collection then skips it (one took 0.3 s with vLLM loaded, holding the GIL), and it is released
to the collector again when the fleet stops."""

from __future__ import annotations

import gc
import weakref

import pytest

pytestmark = pytest.mark.ros


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # only the cyclic collector can free it


def test_the_startup_heap_is_frozen_while_the_fleet_runs_and_collectable_after(ros_context):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.config.params import parse_params
    from llm_planner_node.up import running_fleet

    gc.unfreeze()
    params = parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                           "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]})
    before = _Cycle()
    alive = weakref.ref(before)
    with running_fleet(params, time_scale=0.05, context=ros_context):
        assert gc.get_freeze_count() > 0
        del before
        gc.collect()
        assert alive() is not None, "an object alive at start was collected: the heap was not frozen"
        client = GoalClient(ros_context)  # the node still serves goals with its heap frozen
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            res = client.send("d1", "look for the cat", tuf=(1.0, -2.0, 1.0)).result(60)
        client.destroy()
        assert res.status == 0, res.message
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert alive() is None, "the frozen heap was not released when the fleet stopped"
