"""Goals over ROS on the simulated engine with the default fleet's robots: the
README's canonical instructions succeed for every robot (a base: a base trace), chat robots tell the corpus story, and
an instruction the planner does not know is rejected with what it can plan."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)
URGENT = (0.2, -6.67, 2.0)


def default_fleet_on_sim():
    """config/fleet.yaml's robots (ids, kinds, skill sets) on the simulated engine, simulated adapters."""
    from pathlib import Path

    import yaml

    from llm_planner_node.config.params import parse_params

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "fleet.yaml").read_text())
    robots = [{**{k: v for k, v in r.items() if k not in ("perception", "simulator")}, "adapter": "sim"}
              for r in doc["robots"]]
    return parse_params({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}}, "robots": robots})


@pytest.fixture
def fleet(ros_context):
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    params = default_fleet_on_sim()
    with running_fleet(params, time_scale=0.05, context=ros_context) as f:
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(30), client.wait_problem
            f.client = client
            f.robots = params.robots
            yield f
        client.destroy()


def test_every_robot_runs_a_canonical_instruction_of_its_kind(fleet):
    from llm_planner_node.engines.sim_traces import BASE_TRACES
    from llm_planner_node.planner_model.known import PLAN_KIND, known_instructions

    handles = []
    for r in fleet.robots:
        # a base's tasks are the simulated engine's base traces (this one needs no perception,
        # which the fleet here leaves out)
        instr = (BASE_TRACES[12].description if r.kind == "base"
                 else known_instructions()[PLAN_KIND[r.kind]][0])
        handles.append((r.id, instr, fleet.client.send(r.id, instr, tuf=NORMAL)))
    for rid, instr, h in handles:
        res = h.result(60)
        assert res.status == 0, (rid, instr, res.message)
        assert len(res.segments) >= 3


def test_chat_robot_tells_the_corpus_story(fleet):
    from llm_planner_node.planner_model.corpus import chat_story

    chat = next(r.id for r in fleet.robots if r.kind == "chat")
    h = fleet.client.send(chat, "Tell a short story about a robot.", tuf=NORMAL, task_type="chat")
    res = h.result(60)
    assert res.status == 0, res.message
    assert [f.text.strip() for f in h.feedback] == [s for s in _sentences(chat_story("robot"))]


def _sentences(story: str) -> list[str]:
    import re

    return [s for s in re.split(r"(?<=\.) ", story) if s]


def test_unknown_instruction_is_rejected_with_what_the_engine_plans(fleet):
    from llm_planner_node.planner_model.known import known_instructions

    drone = next(r.id for r in fleet.robots if r.kind == "drone")
    res = fleet.client.send(drone, "fly up one meter and land", tuf=URGENT).result(20)
    assert res.status == 1, res.message  # STATUS_REJECTED
    assert 'no plan for "fly up one meter and land"' in res.message
    assert all(f'"{i}"' in res.message for i in known_instructions()["drone"])
    # the robot was not taken: a known instruction right after is accepted and completes
    ok = fleet.client.send(drone, "evade the dog chasing you", tuf=URGENT).result(60)
    assert ok.status == 0, ok.message
