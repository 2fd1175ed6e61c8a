"""`timely-fleet keys` and `timely-fleet sros2` as a user runs them, the generated SROS2 policies
against the vendored SROS2 schema, and signed ROS messages through a real serialization round
trip. DDS-Security enforcement itself is not tested: the Fast DDS of the pip wheels has no
security libraries."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from llm_planner_node.security import sros2_policy as sp

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / ".venv" / "bin" / "timely-fleet"
ROBOTS = ["alpha_1", "beta_2", "gamma_3"]


def fleet_yaml(tmp_path: Path, robots=ROBOTS) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                                    "robots": [{"id": r, "kind": "chat", "adapter": "sim"} for r in robots]}))
    return path


def tf(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *argv], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def secrets_in(keydir: Path) -> list[str]:
    return [json.loads(p.read_text())["key"] for p in keydir.glob("*.key")]


# -- timely-fleet keys ------------------------------------------------------------------------------

def test_keys_creates_then_keeps_and_never_prints_a_secret(tmp_path):
    params, keydir = fleet_yaml(tmp_path), tmp_path / "ks"
    first = tf("keys", "--params", str(params), "--dir", str(keydir), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in keydir.iterdir()) == sorted(f"{r}.key" for r in ROBOTS)
    assert stat.S_IMODE(keydir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in keydir.iterdir())
    for r in ROBOTS:
        assert re.search(rf"^created {r}: key id [0-9a-f]{{8}} ", first.stdout, re.M), first.stdout
    second = tf("keys", "--params", str(params), "--dir", str(keydir), cwd=tmp_path)
    assert second.returncode == 0 and "created" not in second.stdout
    assert all(f"kept {r}: key id" in second.stdout for r in ROBOTS)
    before = secrets_in(keydir)
    assert before == secrets_in(keydir) and len(set(before)) == 3
    for out in (first.stdout + first.stderr, second.stdout + second.stderr):
        assert not any(s in out or s.upper() in out for s in before)
        assert not re.search(r"[0-9a-f]{32}", out)  # nothing that looks like key material


def test_keys_rotate_replaces_one_key(tmp_path):
    params, keydir = fleet_yaml(tmp_path), tmp_path / "ks"
    assert tf("keys", "--params", str(params), "--dir", str(keydir), cwd=tmp_path).returncode == 0
    old = {p.name: p.read_text() for p in keydir.iterdir()}
    proc = tf("keys", "--params", str(params), "--dir", str(keydir), "--rotate", "beta_2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^rotated beta_2: key id [0-9a-f]{8} -> [0-9a-f]{8} ", proc.stdout, re.M)
    new = {p.name: p.read_text() for p in keydir.iterdir()}
    assert new["beta_2.key"] != old["beta_2.key"]
    assert new["alpha_1.key"] == old["alpha_1.key"] and new["gamma_3.key"] == old["gamma_3.key"]
    assert not any(s in proc.stdout for s in secrets_in(keydir))


def test_keys_mistakes_are_one_sentence(tmp_path):
    params = fleet_yaml(tmp_path)
    proc = tf("keys", "--params", str(params), "--dir", str(tmp_path / "ks"), "--rotate", "beta2", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == "timely-fleet keys: --rotate 'beta2' is not a robot of the fleet (did you mean 'beta_2'?)\n"
    (tmp_path / "file").write_text("")
    proc = tf("keys", "--params", str(params), "--dir", str(tmp_path / "file"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("timely-fleet keys: keystore ") and "Traceback" not in proc.stderr


def test_keys_default_directory_is_per_user_config(tmp_path):
    params = fleet_yaml(tmp_path, ["alpha_1"])
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "TIMELY_FLEET_KEYS": ""}
    proc = tf("keys", "--params", str(params), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cfg" / "timely_fleet" / "keys" / "alpha_1.key").is_file()
    assert f"keystore: {tmp_path / 'cfg' / 'timely_fleet' / 'keys'}" in proc.stdout


# -- timely-fleet sros2 ------------------------------------------------------------------------------

def topics_of(policy_xml: str, enclave: str) -> dict[str, set[str]]:
    """qualifier ('publish', 'subscribe', ...) -> names, for one enclave of a policy document."""
    from lxml import etree

    root = etree.fromstring(policy_xml.encode())
    out: dict[str, set[str]] = {}
    for group in root.xpath(f"//enclave[@path='{enclave}']/profiles/profile/*"):
        for qualifier, value in group.attrib.items():
            assert value == "ALLOW"  # only ALLOW rules; everything else is DENY by default
            out.setdefault(qualifier, set()).update(e.text for e in group)
    return out


def dds_grant_topics(policy_xml: str) -> str:
    return sp.dds_permissions(policy_xml)


@pytest.mark.parametrize("namespace", ["", "fleet_a"])
def test_sros2_writes_valid_policies_with_one_enclave_per_robot(tmp_path, namespace):
    params, out = fleet_yaml(tmp_path), tmp_path / "policies"
    argv = ["sros2", "--params", str(params), "--out", str(out)] + (["--namespace", namespace] if namespace else [])
    proc = tf(*argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # this YAML leaves security.per_robot_topics off: the command says the policies need it on
    assert "security.per_robot_topics: true" in proc.stdout
    expected = {"planner.policy.xml", "planner_standby.policy.xml", "operator.policy.xml", "fleet.policy.xml",
                "create_keystore.sh"}
    expected |= {f"robot_{r}.policy.xml" for r in ROBOTS}
    assert {p.name for p in out.iterdir()} == expected
    for p in out.glob("*.xml"):
        assert sp.validation_errors(p.read_text()) == [], p.name
    prefix = "/timely_fleet" + (f"/{namespace}" if namespace else "")
    fleet = (out / "fleet.policy.xml").read_text()
    planner = topics_of(fleet, f"{prefix}/planner")
    assert {f"robots/{r}/segments" for r in ROBOTS} <= planner["publish"]
    assert {f"robots/{r}/status" for r in ROBOTS} <= planner["subscribe"]
    assert {"planner/goals", "planner/results", "planner/stats", "/diagnostics"} <= planner["publish"]
    assert {"planner/missions", "planner/mission_results"} <= planner["publish"]
    # failover: a planner writes and reads the journal and the role; its standby has the same rights
    assert {"planner/journal", "planner/journal_ack", "planner/active"} <= planner["publish"] & planner["subscribe"]
    assert topics_of(fleet, f"{prefix}/planner_standby") == planner
    assert planner["execute"] == {"plan_task", "plan_mission"}
    # the planner answers cancels, stops and approvals; only the operator may ask
    assert planner["reply"] >= {"planner/cancel_goal", "planner/stop_robots", "planner/approve"}
    operator = topics_of(fleet, f"{prefix}/operator")
    assert {"planner/cancel_goal", "planner/stop_robots", "planner/approve"} <= operator["request"]
    for r in ROBOTS:
        robot = topics_of(fleet, f"{prefix}/robots/{r}")
        assert f"robots/{r}/segments" in robot["subscribe"] and f"robots/{r}/status" in robot["publish"]
        fleet_names = {n for q in robot.values() for n in q if n.startswith("robots/")}
        assert fleet_names == {f"robots/{r}/segments", f"robots/{r}/status"}
        assert "execute" not in robot and "call" not in robot
    script = (out / "create_keystore.sh").read_text()
    for r in ROBOTS:
        assert f"ros2 security create_enclave \"$KEYSTORE\" {prefix}/robots/{r}\n" in script
        assert f"ros2 security create_permission \"$KEYSTORE\" {prefix}/robots/{r} \"$HERE/fleet.policy.xml\"" in script
    assert "ros2 security create_keystore" in script
    assert os.access(out / "create_keystore.sh", os.X_OK)


def test_robot_a_enclave_has_no_permission_on_robot_b_topics_in_dds_terms(tmp_path):
    """Translated like sros2's create_permission does (vendored permissions.xsl): robot A's DDS
    grant names none of robot B's topics, default DENY; the planner's names all of them."""
    files = sp.fleet_policies(ROBOTS, "fleet_a")
    grant_a = dds_grant_topics(files["robot_alpha_1.policy.xml"])
    assert "rt/fleet_a/robots/alpha_1/segments" in grant_a and "rt/fleet_a/robots/alpha_1/status" in grant_a
    assert "beta_2" not in grant_a and "gamma_3" not in grant_a
    assert "plan_task" not in grant_a and "rt/fleet_a/planner" not in grant_a
    assert "<default>DENY</default>" in grant_a
    # robot A publishes only its own status, subscribes only its own segments
    from lxml import etree

    dds = etree.fromstring(grant_a.encode())
    pub = {t.text for t in dds.xpath("//allow_rule/publish/topics/topic")}
    sub = {t.text for t in dds.xpath("//allow_rule/subscribe/topics/topic")}
    assert {t for t in pub if t.startswith("rt/")} == {"rt/fleet_a/robots/alpha_1/status", "rt/parameter_events",
                                                       "rt/rosout"}
    assert {t for t in sub if t.startswith("rt/")} == {"rt/fleet_a/robots/alpha_1/segments", "rt/parameter_events",
                                                       "rt/clock"}
    grant_p = dds_grant_topics(files["planner.policy.xml"])
    for r in ROBOTS:
        assert f"rt/fleet_a/robots/{r}/segments" in grant_p and f"rt/fleet_a/robots/{r}/status" in grant_p
    assert "rq/fleet_a/plan_task/_action/send_goalRequest" in grant_p


def test_the_vendored_schema_rejects_what_sros2_rejects():
    good = sp.fleet_policies(["alpha_1"])["robot_alpha_1.policy.xml"]
    assert sp.validation_errors(good) == []
    assert sp.validation_errors(good.replace('version="0.2.0"', 'version="0.1.0"'))
    assert sp.validation_errors(good.replace('publish="ALLOW"', 'publish="MAYBE"', 1))
    assert sp.validation_errors(good.replace('node="adapter_alpha_1"', ""))
    assert sp.validation_errors(good.replace("<topic>", "<topc>", 1).replace("</topic>", "</topc>", 1))


def test_vendored_files_name_their_source_and_license():
    for name in ("policy.xsd", "permissions.xsl"):
        head = (ROOT / "config" / "sros2" / name).read_text()[:600]
        assert "github.com/ros2/sros2" in head and "Apache License, Version 2.0" in head
    assert "w3.org/2001/03/xml.xsd" in (ROOT / "config" / "sros2" / "xml.xsd").read_text()[:600]


def test_sros2_mistakes_are_one_sentence(tmp_path):
    params = fleet_yaml(tmp_path)
    proc = tf("sros2", "--params", str(params), "--out", str(tmp_path / "o"), "--namespace", "9bad", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("timely-fleet sros2: --namespace '9bad' is not a ROS namespace")
    assert "Traceback" not in proc.stderr


def test_policy_topic_names_are_the_nodes_topic_names():
    """The policy must name the topics the nodes use (per-robot status topics: the lead's wiring)."""
    pytest.importorskip("rclpy")
    from llm_planner_node.ros import messages as ros_messages
    from timely_robot.link import ros as robot_link

    assert robot_link.segments_topic("alpha_1") == sp.segments_topic("alpha_1")
    assert ros_messages.ACTION_NAME == sp.ACTION_NAME
    assert (ros_messages.GOALS_TOPIC, ros_messages.RESULTS_TOPIC, ros_messages.STATS_TOPIC) == sp.PLANNER_TOPICS
    from llm_planner_node.ros.mission_server import MISSION_RESULTS_TOPIC, MISSIONS_TOPIC

    assert (MISSIONS_TOPIC, MISSION_RESULTS_TOPIC) == sp.MISSION_TOPICS
    from llm_planner_node.ros.memory_server import MEMORY_SERVICE
    from llm_planner_node.ros.operator import APPROVE_SERVICE, STOP_SERVICE

    assert ("planner/cancel_goal", STOP_SERVICE, APPROVE_SERVICE, MEMORY_SERVICE) == sp.PLANNER_SERVICES
    assert '"planner/cancel_goal"' in (ROOT / "llm_planner_node" / "ros" / "node.py").read_text()
    assert robot_link.status_topic("alpha_1") == sp.status_topic("alpha_1")


# -- signed ROS messages through serialization ------------------------------------------------------

def test_signed_messages_survive_ros_serialization(tmp_path):
    """What a receiver verifies is the deserialized message: float32 progress, uint8[] mac, the
    uint64 counter and the stamp must all come through unchanged."""
    pytest.importorskip("rclpy")
    from rclpy.serialization import deserialize_message, serialize_message
    from timely_fleet.msg import RobotStatus, Skill, SkillSegment

    from timely_robot.link.signing import BAD_MAC, Keystore, LinkSigner, LinkVerifier

    ks = Keystore(tmp_path / "ks")
    ks.ensure(["alpha_1"])
    signer, verifier = LinkSigner(ks), LinkVerifier(ks)
    seg = SkillSegment(goal_id="g", robot_id="alpha_1", sequence=2, text="say('hi')", final=True,
                       skills=[Skill(name="say", arg_names=["text"], arg_values=["hi"])])
    seg.stamp.sec, seg.stamp.nanosec = 5, 6
    signer.sign_segment(seg)
    got = deserialize_message(serialize_message(seg), SkillSegment)
    assert verifier.check_segment(got, "alpha_1") is None
    status = RobotStatus(robot_id="alpha_1", goal_id="g", sequence=2, state=RobotStatus.STATE_EXECUTING,
                         current_skill="say", progress=0.1, elapsed_s=float("nan"), predicted_remaining_s=-1e308,
                         skill_names=["say"], skill_durations_s=[0.3])
    signer.sign_status(status)
    got = deserialize_message(serialize_message(status), RobotStatus)
    assert verifier.check_status(got) is None
    got.skill_durations_s = [0.4]
    got.counter += 1
    assert verifier.check_status(got) == BAD_MAC
