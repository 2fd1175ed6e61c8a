"""The executor of each robot of the fleet YAML, by its adapter (``robots[].adapter``), as
`timely-fleet up` builds them (``llm_planner_node/up.py`` hosts them in its adapter node):

- ``sim`` (default): a simulated robot whose skill durations are drawn from the execution-time
  model (``robot_adapters.sim.sim_fleet.SampledExecutor``);
- ``tello``: a real Tello at ``host`` through djitellopy (:class:`~robot_adapters.drone_executor.TelloExecutor`),
  seeing through its own camera unless ``perception`` says otherwise;
- ``tello-sim``: the same client against the Tello SDK simulator in the process's network
  namespaces (``robot_adapters.sim.simulators``), or a ``sim`` drone where namespaces are missing;
- ``indy``: a real Indy arm at ``host`` through neuromeka's IndyDCP3 client
  (:class:`~robot_adapters.arm_executor.IndyArmExecutor`), with its declared perception source;
- ``indy-sim``: the same client against the fake IndyDCP3 servicer on loopback;
- ``nav2``: a mobile base through its Nav2 stack's own interfaces (NavigateToPose,
  ComputePathToPose, Spin, DriveOnHeading, BackUp; :class:`~robot_adapters.base_executor.Nav2Executor`),
  in the namespace ``robots[].nav2.namespace``;
- ``ros``: the robot's own ROS actions and services, declared as skills in ``robots[].skills``
  (:class:`~robot_adapters.ros_executor.RosActionExecutor`, :mod:`timely_robot.declared`);
- ``nav2-sim``: the same client against the Nav2 protocol simulator
  (:class:`~robot_adapters.sim.nav2_sim.Nav2Sim`) started in this process, in the namespace
  ``robots[].nav2.namespace`` (default: the robot's id).

Mistakes in the YAML are :class:`~timely_robot.config.ParamError`, a robot that does
not answer a :class:`~timely_robot.errors.CommandError`: one sentence naming the robot.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

from timely_robot.config import ParamError, RobotParams

# the lines of `timely-fleet up`, which builds the executors: under its logger, as they always were
log = logging.getLogger("timely_fleet.up")

_DETECTORS: dict[str, Any] = {}  # one detector per spec, shared by the drones of this process


def tello_camera(robot: RobotParams, spec: dict[str, Any], in_client: Any = None) -> Any:
    """The perception factory of a Tello that sees through its camera (``perception.source:
    camera``): the declared detector (``topic``: the team's detector node, this drone's own), the
    frame age limits, the optional vision-language endpoint."""
    from robot_adapters.drone_executor import camera_perception

    name = str(spec.get("detector", "default"))
    if name == "topic":
        from robot_adapters.perception.topic_detector import DEFAULT_TIMEOUT_S, TopicDetector

        try:
            detector: Any = TopicDetector(robot.id, str(spec.get("topic", "")).strip(), spec.get("classes") or (),
                                          timeout_s=float(spec.get("timeout_s", DEFAULT_TIMEOUT_S)))
        except ValueError as e:
            raise ParamError(f"robot {robot.id}: {e}") from None
    else:
        if name not in _DETECTORS:
            from robot_adapters.perception.detectors import load_detector

            try:
                _DETECTORS[name] = load_detector(name)
            except (ValueError, OSError) as e:
                raise ParamError(f"robot {robot.id}: its detector cannot be loaded: {e}") from None
        detector = _DETECTORS[name]
    vlm = None
    if spec.get("vlm"):
        from robot_adapters.perception.vlm import VisionLanguageEndpoint

        v = spec["vlm"]
        vlm = VisionLanguageEndpoint(v["url"], v["model"], timeout_s=float(v.get("timeout_s", 20.0)))
    return camera_perception(robot.id, detector, max_age_s=float(spec.get("max_age_s", 1.0)),
                             settle_s=float(spec.get("settle_s", 0.3)), min_score=float(spec.get("min_score", 0.0)),
                             vlm=vlm, in_client=in_client)


def make_executor(robot: RobotParams, index: int, time_scale: float, stack: contextlib.ExitStack,
                  networks: Any = None, *, desk: Callable[[tuple[str, ...]], Any] | None = None,
                  context: Any = None) -> Any:
    """The connected executor of ``robot`` (the ``index``-th robot of the YAML), its simulator
    started and everything stopped or closed when ``stack`` closes.

    ``networks``: the process's :class:`~robot_adapters.sim.simulators.TelloNetworks` every
    ``tello-sim`` drone takes its address from (default: one of its own). ``desk(objects)``: the
    simulated desk (a :class:`~robot_adapters.scene.Scene`) of an ``indy-sim`` arm that declares
    neither a scene nor a map (`timely-fleet up` passes ``llm_planner_node.up.workspace_scene``).
    ``context``: the rclpy context of the adapter node (a base's Nav2 client and simulator use it)."""
    from timely_robot.execution_time import ExecutionTimeModel
    from timely_robot.skills import DEFAULT_SKILL_SETS
    from robot_adapters.sim.sim_fleet import SampledExecutor

    skill_set = DEFAULT_SKILL_SETS[robot.skill_set]
    kind = "drone" if robot.kind == "sim" else robot.kind
    adapter = robot.adapter
    if adapter == "tello-sim":
        from robot_adapters.sim import netns

        if not netns.available():
            log.warning(f"robot {robot.id}: the Tello simulator needs network namespaces (root and iproute2); "
                        "using a simulated drone instead")
            adapter = "sim"
    if adapter == "sim":
        return SampledExecutor(robot.id, kind, skill_set, ExecutionTimeModel(online=False), index,
                               time_scale=time_scale, places=robot.places)
    if adapter in ("tello", "tello-sim"):
        from timely_robot.errors import CommandError
        from robot_adapters.drone_executor import TelloExecutor
        from robot_adapters.executor import SkillExecutionError

        spec = dict(robot.perception) if robot.perception is not None else {"source": "camera"}
        camera = spec["source"] == "camera"  # a Tello sees through its own camera unless told otherwise
        if adapter == "tello":
            factory = tello_camera(robot, spec) if camera else None
            ex = TelloExecutor(robot.host, name=robot.id, perception_factory=factory)
        else:
            import djitellopy
            from robot_adapters.sim.simulators import start_tello_sim

            net, ip, k = start_tello_sim(robot, time_scale, stack, networks)
            factory = tello_camera(robot, spec, in_client=net.in_client) if camera else None
            video_port = 11111 + k  # one video port per drone of this process (djitellopy's `port`)
            ex = TelloExecutor(ip, name=robot.id, perception_factory=factory, time_scale=time_scale,
                               client_factory=lambda: net.in_client(
                                   lambda: djitellopy.Tello(host=ip, retry_count=1, vs_udp=video_port)))
        try:
            ex.connect()
        except SkillExecutionError as e:
            raise CommandError(f"robot {robot.id}: {e}") from None
        stack.callback(ex.close)
        return ex
    if robot.adapter in ("indy", "indy-sim"):
        from timely_robot.errors import CommandError
        from robot_adapters.arm_executor import IndyArmExecutor
        from robot_adapters.executor import SkillExecutionError
        from robot_adapters.perception.arm_sources import object_source

        spec = dict(robot.perception) if robot.perception is not None else None
        if robot.adapter == "indy" and spec is None:
            raise ParamError(f"robot {robot.id}: a real arm needs a perception source: set "
                             f"robots[{robot.id}].perception to {{source: map, objects: {{...}}}} or "
                             "{source: topic, topic: ...} (docs/guides/perception.md)")
        host = robot.host or "127.0.0.1"
        scene = None
        if robot.adapter == "indy-sim":
            from robot_adapters.sim.simulators import start_fake_indy

            host, spec, scene = start_fake_indy(robot, index, spec, time_scale, stack, desk)
        try:
            source = None if spec["source"] == "none" else object_source(spec, scene=scene)
        except ValueError as e:
            raise ParamError(f"robot {robot.id}: {e}") from None
        # every pose derived from a perceived object is checked against the arm's workspace box,
        # on the simulated desk too; a `source: topic` arm exposes ex.detections_source (its
        # .topic) for the adapter's ROS node to feed
        ex = IndyArmExecutor(host, source, scene=scene, check_workspace=True, time_scale=time_scale)
        try:
            ex.connect()
        except SkillExecutionError as e:
            raise CommandError(f"robot {robot.id}: {e}") from None
        return ex
    if robot.adapter in ("nav2", "nav2-sim"):
        return _nav2_executor(robot, time_scale, stack, context)
    if robot.adapter == "ros":
        return _ros_executor(robot, stack, context)
    raise ParamError(f"robot {robot.id}: unknown adapter {robot.adapter!r}")


def _nav2_executor(robot: RobotParams, time_scale: float, stack: contextlib.ExitStack, context: Any) -> Any:
    """A base's Nav2 client, connected (Nav2 active, a pose known), against the simulator for ``nav2-sim``."""
    from timely_robot.config import NAV2_KEYS
    from timely_robot.errors import CommandError
    from robot_adapters.base_executor import Nav2Executor
    from robot_adapters.executor import SkillExecutionError

    nav2 = dict(robot.nav2 or NAV2_KEYS)
    places = dict(robot.places or {})
    if robot.adapter == "nav2-sim":
        from robot_adapters.sim.nav2_sim import PLACES, Nav2Sim

        nav2["namespace"] = nav2["namespace"] or robot.id
        places = places or {k: list(v) for k, v in PLACES.items()}
        scene = ((robot.simulator or {}).get("scene") or {}).get("objects")
        sim = Nav2Sim(context, nav2["namespace"], time_scale=time_scale, stamped=bool(nav2["cmd_vel_stamped"]),
                      node_name=f"{robot.id}_nav2_sim",
                      objects=None if scene is None else {k: v["pos"][:2] for k, v in scene.items()}).start()
        stack.callback(sim.stop)
    elif not places:
        log.warning(f"robot {robot.id}: no places declared (robots[{robot.id}].places): it goes to poses only")
    spec = dict(robot.perception or {})
    detections = None
    if spec.get("source") == "topic":
        from robot_adapters.perception.arm_sources import DetectionsSource

        detections = DetectionsSource(spec["topic"], max_age_s=spec["max_age_s"])  # checked, with its default
    ex = Nav2Executor(robot.id, context=context, places=places, nav2=nav2, time_scale=time_scale,
                      detections=detections)
    stack.callback(ex.close)
    try:
        ex.connect()
    except SkillExecutionError as e:
        raise CommandError(str(e) if robot.id in str(e) else f"robot {robot.id}: {e}") from None
    return ex


def _ros_executor(robot: RobotParams, stack: contextlib.ExitStack, context: Any) -> Any:
    """The client of a robot's declared ROS actions and services, every declared server checked."""
    from timely_robot.declared import declared_skills
    from timely_robot.errors import CommandError
    from robot_adapters.executor import SkillExecutionError
    from robot_adapters.ros_executor import RosActionExecutor

    declared = declared_skills(robot.id, robot.kind, robot.skills, f"robots[{robot.id}].skills")
    ex = RosActionExecutor(robot.id, declared, context=context, places=robot.places)
    stack.callback(ex.close)
    try:
        ex.connect()
    except SkillExecutionError as e:
        raise CommandError(str(e)) from None
    return ex
