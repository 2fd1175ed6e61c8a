"""`timely-fleet sros2`: SROS2 enclaves and access-control policies for a fleet.

    timely-fleet sros2 [--params FLEET.yaml] --out DIR [--namespace NS]

Writes, in the SROS2 policy format (version 0.2.0, ``sros2/policy/schemas/policy.xsd``):

The policies are for a fleet with ``security.per_robot_topics: true`` (segments and statuses on
per-robot topics, so that access control can tell robots apart; otherwise the planner publishes
every robot's segments on the shared ``robot_segments`` topic, which no policy here grants, and
the command says so).

- ``planner.policy.xml``: enclave ``/timely_fleet[/NS]/planner`` (node ``llm_planner``): publish
  every robot's ``robots/<id>/segments``, ``planner/goals|results|stats``,
  ``planner/missions|mission_results``, ``/diagnostics``;
  subscribe every robot's ``robots/<id>/status``; publish and subscribe ``planner/journal``,
  ``planner/journal_ack`` and ``planner/active`` (failover); execute the ``plan_task`` and
  ``plan_mission`` actions; its parameter and lifecycle
  services; ``planner_standby.policy.xml``: the same for a standby planner, enclave
  ``/timely_fleet[/NS]/planner_standby`` (node ``llm_planner_standby``);
- ``robot_<id>.policy.xml``: one enclave per robot adapter, ``/timely_fleet[/NS]/robots/<id>``
  (node ``adapter_<id>``): subscribe only its own ``robots/<id>/segments``, publish only its own
  ``robots/<id>/status``;
- ``operator.policy.xml``: enclave ``/timely_fleet[/NS]/operator`` for ``timely-fleet goal`` /
  ``record``: call ``plan_task`` and ``plan_mission``, read the planner's and the robots' topics, publish none of them;
- ``fleet.policy.xml``: all of the above in one file (what ``ros2 security create_permission``
  reads), and ``create_keystore.sh``: the ``ros2 security`` commands that build the keystore.

Every node also gets what any ROS 2 node needs (``/rosout``, ``/parameter_events``, ``/clock``,
its ``~/`` parameter services). Enforcement needs a system ROS 2 whose DDS was built with
DDS-Security; the Fast DDS of the pip wheels has none ("This Fast DDS version doesn't have the
security libraries"), so the policies are checked here against the SROS2 schema only.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable


class PolicyError(ValueError):
    """A fleet that cannot be written as SROS2 policies (a bad namespace or robot id); one sentence."""


ENCLAVE_ROOT = "/timely_fleet"
PLANNER_NODE = "llm_planner"
OPERATOR_NODE = "timely_fleet_operator"
ACTION_NAME = "plan_task"
MISSION_ACTION = "plan_mission"  # ros/mission_server.py
PLANNER_TOPICS = ("planner/goals", "planner/results", "planner/stats")
#: every mission as received and as it ended (ros/mission_server.py): the planner publishes, the operator reads
MISSION_TOPICS = ("planner/missions", "planner/mission_results")
#: The planners' journal, its acknowledgements and the role (failover): an active planner and its
#: standby each publish and read all three; clients read the role.
FAILOVER_TOPICS = ("planner/journal", "planner/journal_ack", "planner/active")
STANDBY_NODE = "llm_planner_standby"
#: The planner's services: cancel a goal by id, the operator's stop and approval, the fleet memory
#: (ros/node.py, ros/operator.py, ros/memory_server.py). The planner replies; the operator enclave may request them.
PLANNER_SERVICES = ("planner/cancel_goal", "planner/stop_robots", "planner/approve", "planner/memory")
DIAGNOSTICS_TOPIC = "/diagnostics"
POLICY_VERSION = "0.2.0"

#: Vendored schemas and templates (see the header of each file for source and license).
SROS2_DIR = Path(__file__).resolve().parents[2] / "config" / "sros2"
POLICY_XSD = SROS2_DIR / "policy.xsd"
XML_XSD = SROS2_DIR / "xml.xsd"
PERMISSIONS_XSL = SROS2_DIR / "permissions.xsl"
_XML_XSD_URL = "http://www.w3.org/2001/03/xml.xsd"

#: What every rclpy node uses (sros2's common/node.xml: logging, time, parameters) ...
COMMON_PUBLISH = ("/rosout",)
COMMON_SUBSCRIBE = ("/clock",)
COMMON_PUBSUB = ("/parameter_events",)
PARAMETER_SERVICES = tuple(f"~/{s}" for s in (
    "describe_parameters", "get_parameter_types", "get_parameters", "list_parameters", "set_parameters",
    "set_parameters_atomically", "get_type_description"))
#: ... and a lifecycle node (the planner) in addition.
LIFECYCLE_SERVICES = tuple(f"~/{s}" for s in (
    "change_state", "get_state", "get_available_states", "get_available_transitions", "get_transition_graph"))
LIFECYCLE_TOPICS = ("~/transition_event",)

_NS_TOKEN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ROBOT_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def segments_topic(robot_id: str) -> str:
    """A robot's segment topic, relative to the fleet's namespace (as ros_messages.segments_topic)."""
    return f"robots/{robot_id}/segments"


def status_topic(robot_id: str) -> str:
    """A robot's own status topic, relative to the fleet's namespace (per robot, so that access
    control can tell robots apart)."""
    return f"robots/{robot_id}/status"


def adapter_node_name(robot_id: str) -> str:
    """The node name of a robot's adapter when it runs in its own enclave (its own process)."""
    return f"adapter_{robot_id}"


def normalize_namespace(namespace: str | None) -> str:
    """``fleet_a`` / ``/fleet_a/`` -> ``fleet_a``; ``""`` for the root namespace; else PolicyError."""
    ns = (namespace or "").strip().strip("/")
    if ns and not all(_NS_TOKEN.match(t) for t in ns.split("/")):
        raise PolicyError(f"--namespace {namespace!r} is not a ROS namespace (letters, digits, '_', '/'; "
                           "each part starts with a letter)")
    return ns


def enclave_path(role: str, namespace: str = "") -> str:
    """``/timely_fleet[/NS]/planner``, ``.../operator`` or ``.../robots/<id>`` (role ``robots/<id>``)."""
    ns = normalize_namespace(namespace)
    return "/".join(p for p in (ENCLAVE_ROOT, ns, role) if p)


def _profile(enclaves: ET.Element, path: str, node: str, namespace: str) -> ET.Element:
    enclave = ET.SubElement(enclaves, "enclave", path=path)
    profiles = ET.SubElement(enclave, "profiles")
    return ET.SubElement(profiles, "profile", ns="/" + normalize_namespace(namespace), node=node)


def _rules(profile: ET.Element, tag: str, item: str, names: Iterable[str], **qualifiers: str) -> None:
    names = list(names)
    if names:
        group = ET.SubElement(profile, tag, **qualifiers)
        for name in names:
            ET.SubElement(group, item).text = name


def _node_basics(profile: ET.Element, lifecycle: bool = False) -> None:
    _rules(profile, "topics", "topic", COMMON_PUBLISH + (LIFECYCLE_TOPICS if lifecycle else ()), publish="ALLOW")
    _rules(profile, "topics", "topic", COMMON_SUBSCRIBE, subscribe="ALLOW")
    _rules(profile, "topics", "topic", COMMON_PUBSUB, publish="ALLOW", subscribe="ALLOW")
    _rules(profile, "services", "service", PARAMETER_SERVICES + (LIFECYCLE_SERVICES if lifecycle else ()),
           reply="ALLOW", request="ALLOW")


def _check_ids(robot_ids: Iterable[str]) -> list[str]:
    ids = list(robot_ids)
    for rid in ids:
        if not _ROBOT_ID.match(rid):
            raise PolicyError(f"robot id {rid!r} cannot name an enclave: use 1-64 letters, digits and '_'")
    return ids


def add_planner_enclave(enclaves: ET.Element, robot_ids: Iterable[str], namespace: str = "", *,
                        node: str = PLANNER_NODE, name: str = "planner") -> None:
    """The planner's enclave (``name`` ``planner_standby``, node ``llm_planner_standby``: a
    standby planner's, the same rights: it becomes the active one)."""
    ids = _check_ids(robot_ids)
    p = _profile(enclaves, enclave_path(name, namespace), node, namespace)
    _node_basics(p, lifecycle=True)
    _rules(p, "topics", "topic", [segments_topic(r) for r in ids] + list(PLANNER_TOPICS) + list(MISSION_TOPICS)
           + [DIAGNOSTICS_TOPIC] + list(FAILOVER_TOPICS), publish="ALLOW")
    _rules(p, "topics", "topic", [status_topic(r) for r in ids] + list(FAILOVER_TOPICS), subscribe="ALLOW")
    _rules(p, "actions", "action", [ACTION_NAME, MISSION_ACTION], execute="ALLOW")
    _rules(p, "services", "service", PLANNER_SERVICES, reply="ALLOW")


def add_robot_enclave(enclaves: ET.Element, robot_id: str, namespace: str = "") -> None:
    (rid,) = _check_ids([robot_id])
    p = _profile(enclaves, enclave_path(f"robots/{rid}", namespace), adapter_node_name(rid), namespace)
    _node_basics(p)
    _rules(p, "topics", "topic", [segments_topic(rid)], subscribe="ALLOW")
    _rules(p, "topics", "topic", [status_topic(rid)], publish="ALLOW")


def add_operator_enclave(enclaves: ET.Element, robot_ids: Iterable[str], namespace: str = "") -> None:
    ids = _check_ids(robot_ids)
    p = _profile(enclaves, enclave_path("operator", namespace), OPERATOR_NODE, namespace)
    _node_basics(p)
    watched = list(PLANNER_TOPICS) + list(MISSION_TOPICS) + [DIAGNOSTICS_TOPIC, "planner/active"] + [
        t for r in ids for t in (segments_topic(r), status_topic(r))]
    _rules(p, "topics", "topic", watched, subscribe="ALLOW")
    _rules(p, "actions", "action", [ACTION_NAME, MISSION_ACTION], call="ALLOW")
    planner_services = [f"{PLANNER_NODE}/{s[2:]}" for s in PARAMETER_SERVICES + LIFECYCLE_SERVICES]
    # ros2 param / ros2 lifecycle, and `timely-fleet stop|approve|deny|memory` and goal cancels by id
    _rules(p, "services", "service", planner_services + list(PLANNER_SERVICES), request="ALLOW")


def new_policy() -> tuple[ET.Element, ET.Element]:
    policy = ET.Element("policy", version=POLICY_VERSION)
    return policy, ET.SubElement(policy, "enclaves")


def to_xml(policy: ET.Element) -> str:
    ET.indent(policy)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(policy, encoding="unicode") + "\n"


def fleet_policies(robot_ids: Iterable[str], namespace: str = "") -> dict[str, str]:
    """File name -> policy XML text: one file per enclave plus ``fleet.policy.xml`` with all."""
    ids = _check_ids(robot_ids)
    builders = [("planner.policy.xml", lambda e: add_planner_enclave(e, ids, namespace)),
                ("planner_standby.policy.xml",
                 lambda e: add_planner_enclave(e, ids, namespace, node=STANDBY_NODE, name="planner_standby"))]
    builders += [(f"robot_{r}.policy.xml", lambda e, r=r: add_robot_enclave(e, r, namespace)) for r in ids]
    builders += [("operator.policy.xml", lambda e: add_operator_enclave(e, ids, namespace))]
    files: dict[str, str] = {}
    fleet, fleet_enclaves = new_policy()
    for name, build in builders:
        policy, enclaves = new_policy()
        build(enclaves)
        build(fleet_enclaves)
        files[name] = to_xml(policy)
    files["fleet.policy.xml"] = to_xml(fleet)
    return files


def enclave_paths(robot_ids: Iterable[str], namespace: str = "") -> list[str]:
    return ([enclave_path("planner", namespace), enclave_path("planner_standby", namespace)]
            + [enclave_path(f"robots/{r}", namespace) for r in robot_ids]
            + [enclave_path("operator", namespace)])


def keystore_script(robot_ids: Iterable[str], namespace: str = "") -> str:
    """A POSIX shell script running the sros2 CLI for every enclave of the fleet."""
    ids = list(robot_ids)
    lines = [
        "#!/bin/sh",
        "# Generated by `timely-fleet sros2`: builds an SROS2 keystore for this fleet.",
        "# Usage: sh create_keystore.sh [KEYSTORE_DIR]   (on a system ROS 2 with the sros2 package sourced)",
        "# Permissions are bound to ROS_DOMAIN_ID: run this with the domain id the fleet uses.",
        "set -e",
        'HERE="$(cd "$(dirname "$0")" && pwd)"',
        'KEYSTORE="${1:-$HOME/.ros/timely_fleet_keystore}"',
        '[ -d "$KEYSTORE/enclaves" ] || ros2 security create_keystore "$KEYSTORE"',
    ]
    for path in enclave_paths(ids, namespace):
        q = shlex.quote(path)
        lines.append(f'ros2 security create_enclave "$KEYSTORE" {q}')
        lines.append(f'ros2 security create_permission "$KEYSTORE" {q} "$HERE/fleet.policy.xml"')
    lines.append('echo "keystore ready: export ROS_SECURITY_KEYSTORE=$KEYSTORE ROS_SECURITY_ENABLE=true '
                 'ROS_SECURITY_STRATEGY=Enforce"')
    return "\n".join(lines) + "\n"


# -- validation against the vendored SROS2 schema (lxml) ------------------------------------------

def _schema():  # noqa: ANN202 - lxml types
    from lxml import etree

    class _Local(etree.Resolver):
        """The schema imports the W3C xml.xsd by URL; answer with the vendored copy (no network)."""

        def resolve(self, url, pubid, context):  # noqa: ANN001, ANN201
            if url == _XML_XSD_URL or url.endswith("/xml.xsd"):
                return self.resolve_filename(str(XML_XSD), context)
            return None

    parser = etree.XMLParser(no_network=True)
    parser.resolvers.add(_Local())
    return etree.XMLSchema(etree.parse(str(POLICY_XSD), parser))


def validation_errors(xml_text: str) -> list[str]:
    """Errors of a policy document against the SROS2 policy schema ([] when valid)."""
    from lxml import etree

    schema = _schema()
    doc = etree.fromstring(xml_text.encode())
    if schema.validate(doc):
        return []
    return [f"line {e.line}: {e.message}" for e in schema.error_log]


def dds_permissions(xml_text: str) -> str:
    """The DDS permissions document that sros2's ``create_permission`` derives from a policy
    (vendored ``permissions.xsl``), for inspecting which DDS topics a grant allows."""
    from lxml import etree

    transform = etree.XSLT(etree.parse(str(PERMISSIONS_XSL)))
    return str(transform(etree.fromstring(xml_text.encode())))
