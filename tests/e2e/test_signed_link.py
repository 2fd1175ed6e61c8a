"""The robot link as a safety boundary over real ROS: with `security.mode: sign`,
the planner applies only statuses signed with that robot's key and adapters execute only segments
their planner signed. A rogue node on the domain (an independent rclpy node here) publishes
unsigned, wrongly keyed and replayed messages; none changes a goal or moves a robot, and each is
counted."""

from __future__ import annotations

import time

import pytest
from testkit import wait_until

pytestmark = pytest.mark.ros

NORMAL = (1.0, -2.0, 1.0)


def fleet(tmp_path, **security):
    from llm_planner_node.config.params import parse_params

    return parse_params({"planner": {"engine": {"kind": "sim"}, "robot_timeout_s": 10.0},
                         "security": {"mode": "sign", "keystore": str(tmp_path / "keys"), **security},
                         "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"},
                                    {"id": "a1", "kind": "arm", "adapter": "sim"}]})


def forged_status(goal_id, robot_id, seq, state, error=""):
    from timely_fleet.msg import RobotStatus

    return RobotStatus(robot_id=robot_id, goal_id=goal_id, sequence=seq, state=state, error=error,
                       skill_names=["pick"], skill_durations_s=[0.5])


@pytest.mark.parametrize("per_robot_topics", [False, True])
def test_forged_statuses_change_nothing_and_are_counted(ros_context, tmp_path, per_robot_topics):
    from timely_fleet.msg import RobotStatus

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from timely_robot.link.ros import STATUS_QOS, STATUS_TOPIC, status_topic
    from timely_robot.link.signing import Keystore, sign_status_msg
    from llm_planner_node.up import running_fleet

    params = fleet(tmp_path, per_robot_topics=per_robot_topics)
    with running_fleet(params, time_scale=0.2, context=ros_context) as f:
        client = GoalClient(ros_context)
        topic = status_topic("a1") if per_robot_topics else STATUS_TOPIC
        rogue = client.node.create_publisher(RobotStatus, topic, STATUS_QOS)
        real: list = []
        client.node.create_subscription(RobotStatus, topic, real.append, STATUS_QOS)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            h = client.send("a1", "desk cleaning", tuf=NORMAL)  # ~11 arm segments: long at time scale 0.2
            assert wait_until(lambda: h.feedback, 10)
            verifier = f.planner.status_reader.verifier
            before = verifier.counts()
            # (1) unsigned: DONE for every segment and a FAILED with the rogue's text
            for k in range(12):
                rogue.publish(forged_status(h.goal_id, "a1", k, RobotStatus.STATE_DONE))
            rogue.publish(forged_status(h.goal_id, "a1", 0, RobotStatus.STATE_FAILED, "FORGED"))
            # (2) signed with a key that is not a1's (the rogue made its own keystore)
            wrong = Keystore(tmp_path / "rogue_keys")
            wrong.ensure(["a1"])
            rogue.publish(sign_status_msg(forged_status(h.goal_id, "a1", 0, RobotStatus.STATE_FAILED, "FORGED"),
                                          wrong.key("a1"), 10**15))
            # (3) a real, correctly signed status of a1, replayed as it was recorded
            assert wait_until(lambda: any(m.goal_id == h.goal_id and len(m.mac) == 32 for m in real), 10)
            recorded = next(m for m in real if m.goal_id == h.goal_id and len(m.mac) == 32)
            rogue.publish(recorded)
            assert wait_until(lambda: verifier.counts()["replayed"] > before["replayed"], 5)
            after = verifier.counts()
            assert after["unsigned"] - before["unsigned"] == 13
            assert after["unknown key id"] - before["unknown key id"] == 1
            assert after["replayed"] - before["replayed"] >= 1
            res = h.result(120)
            # the goal ran to its real end: every segment executed by the real arm, no FORGED text
            assert res.status == 0, res.message
            assert "FORGED" not in res.message and all(s.execution_end_s > 0 for s in res.segments)
            assert wait_until(lambda: f.planner.service.snapshot.counters.get("status_dropped: link: unsigned", 0)
                              >= 13, 3), f.planner.service.snapshot.counters  # counted in diagnostics
        client.destroy()


@pytest.mark.parametrize("per_robot_topics", [False, True])
def test_forged_segments_are_not_executed_and_a_rogue_cancel_is_ignored(ros_context, tmp_path, per_robot_topics):
    """On the shared segment topic (the default) and on per-robot topics alike."""
    from timely_fleet.msg import RobotStatus, Skill, SkillSegment

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from timely_robot.link.ros import SHARED_SEGMENT_QOS, STATUS_QOS, STATUS_TOPIC, segment_topic_of, status_topic
    from timely_robot.link.signing import Keystore, now_us, sign_segment_msg
    from llm_planner_node.up import running_fleet

    with running_fleet(fleet(tmp_path, per_robot_topics=per_robot_topics), time_scale=0.2, context=ros_context) as f:
        assert f.adapters.segment_topics == ("per_robot" if per_robot_topics else "shared")
        client = GoalClient(ros_context)
        rogue = client.node.create_publisher(SkillSegment, segment_topic_of("d1", per_robot_topics), SHARED_SEGMENT_QOS)
        statuses: list = []
        for topic in ((status_topic("d1"), status_topic("a1")) if per_robot_topics else (STATUS_TOPIC,)):
            client.node.create_subscription(RobotStatus, topic, statuses.append, STATUS_QOS)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            time.sleep(0.5)
            move = SkillSegment(goal_id="f" * 32, robot_id="d1", sequence=0, text="tc(90);",
                                skills=[Skill(name="turn_cw", arg_names=["degrees"], arg_values=["90"])],
                                final=True)
            rogue.publish(move)                                          # unsigned
            wrong = Keystore(tmp_path / "rogue_keys")
            wrong.ensure(["d1"])
            rogue.publish(sign_segment_msg(move, wrong.key("d1"), 10**15))  # signed with another key
            time.sleep(1.0)
            assert not [m for m in statuses if m.goal_id == "f" * 32], "the adapter acted on a forged segment"
            drops = f.adapters.link_drops
            assert drops.get("unsigned") == 1 and drops.get("unknown key id") == 1
            # a segment signed with a1's real key, addressed to d1: d1 never runs what was signed for a1
            for_a1 = SkillSegment(goal_id="e" * 32, robot_id="a1", sequence=0, text="tc(90);",
                                  skills=list(move.skills), final=True)
            relabelled = sign_segment_msg(for_a1, Keystore(tmp_path / "keys").key("a1"), now_us())
            relabelled.robot_id = "d1"
            rogue.publish(relabelled)
            assert wait_until(lambda: f.adapters.link_drops.get("unknown key id") == 2, 3), f.adapters.link_drops
            assert not [m for m in statuses if m.goal_id == "e" * 32], "d1 acted on a segment signed for a1"
            # a real goal; a forged cancel segment for it is dropped, the goal completes
            h = client.send("d1", "look for the cat", tuf=NORMAL)
            assert wait_until(lambda: h.feedback, 10)
            rogue.publish(SkillSegment(goal_id=h.goal_id, robot_id="d1", sequence=99, cancel=True))
            res = h.result(60)
            assert res.status == 0, res.message
            assert f.adapters.link_drops.get("unsigned") == 2
        client.destroy()


def test_a_fleet_without_keys_for_its_robots_gets_them_on_first_run(ros_context, tmp_path):
    """`security.mode: sign` with an empty keystore: `up` creates one key per robot (0600) and the
    signed fleet serves a goal; the keys are reused on the next start."""
    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.up import running_fleet

    keys = tmp_path / "keys"
    with running_fleet(fleet(tmp_path), time_scale=0.05, context=ros_context):
        client = GoalClient(ros_context)
        with spinning(client.node, ros_context):
            assert client.wait_for_server(20), client.wait_problem
            assert client.send("d1", "look for the cat", tuf=NORMAL).result(60).status == 0
        client.destroy()
    files = sorted(p.name for p in keys.iterdir())
    assert files == ["a1.key", "d1.key"]
    assert all((keys / n).stat().st_mode & 0o777 == 0o600 for n in files)
