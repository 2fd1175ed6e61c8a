"""`timely-fleet up`: the planner node and the fleet's adapters in one process, from the YAML.

This is manual composition of the same nodes that ``launch/planner.launch.py`` starts as
separate processes on a ROS 2 install (pip-only machines have no ``ros2 launch``).

Each robot in ``robots:`` names its adapter:

- ``sim`` (default): a simulated robot whose skill durations are drawn from the
  execution-time model (``time_scale`` compresses them);
- ``tello``: a real Tello at ``host`` through djitellopy;
- ``tello-sim``: djitellopy against the project's Tello SDK simulator, each in its own network
  namespace on this machine (needs root and iproute2; at most one per process, since djitellopy
  keeps one control socket per process);
- ``indy``: a real Indy arm at ``host`` through neuromeka's IndyDCP3 client;
- ``indy-sim``: the neuromeka client against the project's fake IndyDCP3 servicer on loopback;
- ``external``: the adapter runs elsewhere (e.g. on the robot); nothing is started here.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from .core.clock import WallClock
from .params import DEFAULT_PARAMS, FleetParams, ParamError, RobotParams, load_params


@dataclass
class Fleet:
    """A running composition: the planner node, the adapter node and the protocol simulators."""

    planner: Any
    adapters: Any
    executor: Any
    context: Any
    simulators: list[Any] = field(default_factory=list)


def workspace_scene() -> Any:
    """A desk scene for simulated arms: every object an arm plan of the planner corpus or of the
    LRTrace library names, on a grid inside the Indy7's reach, so generated plans find them."""
    from robot_adapters.scene import Scene, SceneObject

    from .core.skills import INDY7_ARM
    from .planner_model.corpus import generate_corpus
    from .segmenters.arm import parse_arm_plan
    from .sim.traces import TRACES

    plans = [e.plan for e in generate_corpus() if e.robot_kind == "arm"]
    plans += ["".join(seg.text for seg in t.prompt.segments) for t in TRACES.values() if t.robot_kind == "arm"]
    names: set[str] = set()
    for plan in plans:
        for call in parse_arm_plan(plan, INDY7_ARM):
            names.update(a for a in call.args if isinstance(a, str))
    objects = {}
    for i, name in enumerate(sorted(names)):
        row, col = divmod(i, 8)
        objects[name] = SceneObject(name, [250.0 + 50.0 * (row % 7), -280.0 + 80.0 * col, 60.0])
    return Scene(objects)


def _make_executor(robot: RobotParams, index: int, time_scale: float, stack: contextlib.ExitStack) -> Any:
    from llm_planner_node.core.execution_time import ExecutionTimeModel
    from llm_planner_node.core.skills import DEFAULT_SKILL_SETS
    from robot_adapters.sim_fleet import SampledExecutor

    skill_set = DEFAULT_SKILL_SETS[robot.skill_set]
    kind = "drone" if robot.kind == "sim" else robot.kind
    adapter = robot.adapter
    if adapter == "tello-sim":
        from robot_adapters import netns

        if not netns.available():
            print(f"note: robot {robot.id}: the Tello simulator needs network namespaces (root and iproute2); "
                  "using a simulated drone instead", flush=True)
            adapter = "sim"
    if adapter == "sim":
        return SampledExecutor(robot.id, kind, skill_set, ExecutionTimeModel(online=False), index,
                               time_scale=time_scale)
    if adapter in ("tello", "tello-sim"):
        from robot_adapters.drone_executor import TelloExecutor

        if adapter == "tello":
            ex = TelloExecutor(robot.host)
        else:
            import djitellopy
            from robot_adapters import netns
            from robot_adapters.tello_sim import TelloSim

            net = stack.enter_context(netns.TestNetwork())
            ip = net.sim_ips[0]
            sim = net.in_sim(lambda: TelloSim(ip, time_scale=time_scale).start())
            stack.callback(sim.stop)
            ex = TelloExecutor(ip, client_factory=lambda: net.in_client(
                lambda: djitellopy.Tello(host=ip, retry_count=1)), time_scale=time_scale)
        ex.connect()
        stack.callback(ex.close)
        return ex
    if robot.adapter in ("indy", "indy-sim"):
        from robot_adapters.arm_executor import IndyArmExecutor

        host = robot.host or "127.0.0.1"
        if robot.adapter == "indy-sim":
            from robot_adapters.indy_sim import FakeIndy

            host = robot.host or f"127.0.0.{10 + index}"
            scene = workspace_scene()
            fake = FakeIndy(host, time_scale=time_scale, scene=scene).start()
            stack.callback(fake.stop)
            ex = IndyArmExecutor(host, scene, time_scale=time_scale)
        else:
            ex = IndyArmExecutor(host, time_scale=time_scale)
        ex.connect()
        return ex
    raise ParamError(f"robot {robot.id}: unknown adapter {robot.adapter!r}")


@contextlib.contextmanager
def running_fleet(params: FleetParams, *, time_scale: float = 1.0, context: Any = None,
                  engine: Any = None, planner: bool = True, adapters: bool = True) -> Iterator[Fleet]:
    """Start the planner and/or every configured adapter; stop everything on exit."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import MultiThreadedExecutor
    from robot_adapters.adapter_base import AdapterCore, AdapterNode

    from .engines.factory import engine_factory
    from .node import PlannerNode

    own_context = context is None
    if own_context:
        context = Context()
        rclpy.init(context=context)
    clock = WallClock()
    with contextlib.ExitStack() as stack:
        if own_context:
            stack.callback(rclpy.try_shutdown, context=context)
        adapter_node = AdapterNode("fleet_adapters", context=context)
        stack.callback(adapter_node.destroy_node)
        stack.callback(adapter_node.shutdown_robots)
        for i, robot in enumerate(params.robots):
            if robot.adapter == "external" or not adapters:
                continue
            ex = _make_executor(robot, i, time_scale, stack)
            from llm_planner_node.core.skills import DEFAULT_SKILL_SETS

            adapter_node.add_robot(AdapterCore(robot.id, ex, skill_set=DEFAULT_SKILL_SETS[robot.skill_set],
                                               time_scale=time_scale))
        executor = MultiThreadedExecutor(num_threads=6, context=context)
        executor.add_node(adapter_node)
        planner_node = None
        if planner:
            factory = engine_factory(params.planner.engine, clock)
            planner_node = PlannerNode(params, engine=engine, engine_factory=factory, clock=clock, context=context)
            stack.callback(planner_node.destroy_node)
            stack.callback(planner_node.close)
            executor.add_node(planner_node)
        spinner = threading.Thread(target=executor.spin, name="ros-spin", daemon=True)
        spinner.start()

        def stop_spinning() -> None:
            executor.shutdown(timeout_sec=2.0)
            spinner.join(timeout=5)

        stack.callback(stop_spinning)
        yield Fleet(planner_node, adapter_node, executor, context)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), help="parameter YAML (default: %(default)s)")
    parser.add_argument("--engine", choices=("vllm", "sim"), help="override planner.engine.kind")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="simulated robots execute this many times faster than real ones (<1 = faster)")
    parser.add_argument("--seconds", type=float, help="exit after this long (default: until Ctrl-C)")
    parser.add_argument("--only", choices=("all", "planner", "adapters"), default="all",
                        help="start only the planner node or only the adapters (launch/planner.launch.py "
                             "runs them as separate processes)")


def load_with_overrides(args: argparse.Namespace) -> FleetParams:
    from dataclasses import replace

    from .core.policies import policy_names

    params = load_params(args.params, tuple(policy_names()))
    if getattr(args, "engine", None):
        engine = replace(params.planner.engine, kind=args.engine)
        params = replace(params, planner=replace(params.planner, engine=engine))
    return params


def run(args: argparse.Namespace) -> int:
    try:
        params = load_with_overrides(args)
    except ParamError as e:
        print(f"timely-fleet up: {e}")
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    what = {"all": f"planner ({params.planner.engine.kind} engine, policy {params.planner.policy}) and "
                   f"{len(params.robots)} robot adapter(s)",
            "planner": f"planner ({params.planner.engine.kind} engine, policy {params.planner.policy})",
            "adapters": f"{len(params.robots)} robot adapter(s)"}[args.only]
    print(f"starting {what}; Ctrl-C to stop", flush=True)
    with running_fleet(params, time_scale=args.time_scale, planner=args.only != "adapters",
                       adapters=args.only != "planner"):
        print("ready: send goals to the 'plan_task' action (e.g. timely-fleet goal ...)", flush=True)
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.2)
    print("stopped")
    return 0
