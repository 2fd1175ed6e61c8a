"""The README's *Extend* examples, run as a user would paste them: a new policy is selectable
and schedules goals to the end; a new robot's adapter built as shown runs only segments the
planner signed with its key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _example(heading: str) -> str:
    """The first python block after ``heading`` in the README."""
    start = README.index(heading)
    m = re.compile(r"```python\n(.*?)```", re.S).search(README, start)
    assert m is not None, heading
    return m.group(1)


def test_the_new_policy_example_is_selectable_and_completes_every_goal():
    import numpy as np

    from timely_tools.decision_cost import make_queue
    from llm_planner_node.core.policies import get_policy
    from llm_planner_node.core.policies.base import REGISTRY
    from timely_tools.sim.simulation import simulate
    from llm_planner_node.core.task_model import EndKind
    from timely_tools.sim.workload import Arrival, goal_for

    code = _example("**A new policy.**").replace("from .base import", "from llm_planner_node.core.policies.base import")
    try:
        exec(compile(code, "README.md: a new policy", "exec"), {})
        pol = get_policy("my-policy")
        # its order: earliest ERT first, over a queue of urgent and normal goals
        q = make_queue(300, np.random.default_rng(0)).view()
        rows = pol.order(q, 0.0, 0.0)
        assert sorted(rows.tolist()) == list(range(300))
        assert np.all(np.diff((q.arrival + q.ert)[rows]) >= 0)
        # the node's scheduler runs it: goals of every kind arrive together and all succeed
        arrivals = [Arrival(0.0, goal_for(t, f"r{i}")) for i, t in enumerate((1, 2, 6, 6, 7))]
        res = simulate(arrivals, pol, seed=0)
        assert len(res.requests) == 5 and all(r.end is EndKind.SUCCEEDED for r in res.requests)
    finally:
        REGISTRY.pop("my-policy", None)


def test_the_new_robot_example_runs_only_segments_signed_with_its_key(tmp_path):
    rclpy = pytest.importorskip("rclpy")
    from rclpy.context import Context

    from timely_robot.skills import INDY7_ARM
    from timely_robot.link.signing import Keystore, LinkSigner
    from timely_fleet.msg import SkillSegment

    keys = Keystore(tmp_path / "keys")
    keys.ensure(["my_robot_1"])
    code = (_example("**A new robot.**").replace("/etc/timely_fleet/keys", str(tmp_path / "keys"))
            .replace('AdapterNode("my_adapter", ', 'AdapterNode("my_adapter", context=_ctx, '))
    ctx = Context()
    rclpy.init(context=ctx)
    ns = {"MY_SKILLS": INDY7_ARM, "_ctx": ctx}
    try:
        exec(compile(code, "README.md: a new robot", "exec"), ns)
        node = ns["node"]
        core = node.cores["my_robot_1"]
        submitted = []
        core.submit = submitted.append

        def segment(seq: int) -> SkillSegment:
            return SkillSegment(goal_id="a" * 32, robot_id="my_robot_1", sequence=seq, text="", final=True)

        node._deliver(segment(0), core)  # anyone on the domain, unsigned
        assert submitted == [] and node.link_drops == {"unsigned": 1}
        node._deliver(LinkSigner(keys).sign_segment(segment(0)), core)  # the planner, signed
        assert [s.sequence for s in submitted] == [0]
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
