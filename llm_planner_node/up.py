"""`timely-fleet up`: the planner node and the fleet's adapters in one process, from the YAML.

This is manual composition of the same nodes that ``launch/planner.launch.py`` starts as
separate processes on a ROS 2 install (pip-only machines have no ``ros2 launch``).

Each robot in ``robots:`` names its adapter (``robot_adapters.executors.make_executor`` builds its
executor, the simulators of ``robot_adapters.sim`` behind the simulated ones):

- ``sim`` (default): a simulated robot whose skill durations are drawn from the
  execution-time model (``time_scale`` compresses them, and the planner's predictions with them);
- ``tello``: a real Tello at ``host`` through djitellopy; it sees through its own camera (video
  stream, djitellopy's decoder, the default detector) unless ``perception`` says otherwise;
- ``tello-sim``: djitellopy against the project's Tello SDK simulator, which streams H.264 video
  rendered from the robot's ``simulator.scene``; every simulator of the process and the one
  client share a pair of network namespaces on this machine (needs root and iproute2);
- ``indy``: a real Indy arm at ``host`` through neuromeka's IndyDCP3 client;
- ``indy-sim``: the neuromeka client against the project's fake IndyDCP3 servicer on loopback;
- ``external``: the adapter runs elsewhere (e.g. on the robot); nothing is started here.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from llm_planner_node.core.clock import WallClock
from timely_robot.logging_setup import add_log_level_argument, configure_logging
from llm_planner_node.config.params import DEFAULT_PARAMS, ENGINE_KINDS, FleetParams, load_params
from timely_robot.config import ParamError

from robot_adapters.host import select_robots, start_adapters

log = logging.getLogger("timely_fleet.up")


@dataclass
class Fleet:
    """A running composition: the planner node, the adapter node and the protocol simulators."""

    planner: Any
    adapters: Any
    executors: Any  # one single-threaded executor per node
    context: Any
    simulators: list[Any] = field(default_factory=list)


def workspace_scene(extra: tuple[str, ...] = ()) -> Any:
    """A desk scene for simulated arms: every object an arm plan of the planner corpus or of the
    LRTrace library names, and the robot's own ``objects`` (``extra``), on a grid inside the
    Indy7's reach, so generated plans find them."""
    from robot_adapters.scene import Scene, SceneObject

    from timely_robot.skills import INDY7_ARM
    from llm_planner_node.planner_model.corpus import generate_corpus
    from llm_planner_node.segmenters.arm import parse_arm_plan
    from llm_planner_node.engines.sim_traces import TRACES

    plans = [e.plan for e in generate_corpus() if e.robot_kind == "arm"]
    plans += ["".join(seg.text for seg in t.prompt.segments) for t in TRACES.values() if t.robot_kind == "arm"]
    from llm_planner_node.prompts.grammar import object_names

    names: set[str] = set(object_names(extra))
    for plan in plans:
        for call in parse_arm_plan(plan, INDY7_ARM):
            names.update(a for a in call.args if isinstance(a, str))
    objects = {}
    for i, name in enumerate(sorted(names)):
        row, col = divmod(i, 8)
        objects[name] = SceneObject(name, [250.0 + 50.0 * (row % 7), -280.0 + 80.0 * col, 60.0])
    return Scene(objects)


def fleet_keystore(params: FleetParams) -> Any:
    """The keystore of ``security.keystore`` with a key for every robot of the fleet (created on
    first run: planner and adapters started here share it; remote adapters need a copy of their
    robot's key file: ``timely-robot key install``)."""
    from robot_adapters.host import adapter_keystore

    return adapter_keystore(params.security, [r.id for r in params.robots], create=True)


@contextlib.contextmanager
def running_fleet(params: FleetParams, *, time_scale: float = 1.0, context: Any = None,
                  engine: Any = None, planner: bool = True, adapters: bool = True,
                  namespace: str = "", ros_args: list[str] | None = None,
                  robots: str | None = None, on_fenced: Any = None) -> Iterator[Fleet]:
    """Start the planner and/or every configured adapter; stop everything on exit.

    ``namespace`` applies to both nodes (their topics are relative); ``ros_args`` (what follows
    ``--ros-args`` on the command line: ``-p``, ``--params-file``, ``-r __node:=...``) apply to
    the planner node only, so renaming it never renames the adapters. ``robots``: host only the
    adapters of these robots (``robot_adapters.host.select_robots``), to split a fleet over adapter processes.
    ``on_fenced(reason)``: the planner was replaced by one that took over from it (failover)."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from llm_planner_node.ros.node import PlannerNode

    # keys generated on first run, before the planner looks for them; the adapters share them
    keystore = fleet_keystore(params) if params.security.mode == "sign" else None
    own_context = context is None
    if own_context:
        context = Context()
        rclpy.init(context=context)
    clock = WallClock()
    with contextlib.ExitStack() as stack:
        if own_context:
            stack.callback(rclpy.try_shutdown, context=context)
        # One single-threaded executor per node, each on its own thread: every callback only hands
        # work to the planner service or an adapter core, so one thread per node is enough, and
        # rclpy's MultiThreadedExecutor costs several times more per wake-up (measured: the
        # planner drained 384 statuses/s with it, 786/s with its own single-threaded executor).
        executors: list[Any] = []
        # One node per role and nothing else in the process: `ros2 launch` renames every node of
        # a process with `-r __node:=...`, so `--only planner` must hold the planner alone.
        adapter_node = None
        if adapters:
            adapter_node = start_adapters(params.robots, params.security, context=context, stack=stack,
                                          keystore=keystore, time_scale=time_scale, namespace=namespace,
                                          hosted=select_robots(params.robots, robots), desk=workspace_scene)
            executors.append(SingleThreadedExecutor(context=context))
            executors[-1].add_node(adapter_node)
        planner_node = None
        if planner:
            # the planner predicts the simulated robots' compressed time (all of them run at
            # time_scale; real robots run at 1.0, the default)
            # a standby has its own name: two planners of one name would both answer its parameter services
            planner_node = PlannerNode(params, engine=engine, clock=clock, context=context,
                                       name="llm_planner_standby" if params.planner.standby else "llm_planner",
                                       robot_time_scale=time_scale, on_fenced=on_fenced,
                                       namespace=namespace or None,
                                       cli_args=["--ros-args", *ros_args] if ros_args else None)
            stack.callback(planner_node.destroy_node)
            stack.callback(planner_node.close)
            # the lifecycle, driven here as a lifecycle manager would: configure loads the engine
            from rclpy.lifecycle import TransitionCallbackReturn

            if planner_node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                from timely_robot.errors import CommandError

                raise CommandError("the planner could not be configured (the reason is logged above)")
            planner_node.trigger_activate()
            executors.insert(0, SingleThreadedExecutor(context=context))
            executors[0].add_node(planner_node)
            executors.insert(1, SingleThreadedExecutor(context=context))  # robot statuses: their own thread
            executors[1].add_node(planner_node.status_node)
        freeze_startup_heap(stack)
        spinners = [threading.Thread(target=ex.spin, name=f"ros-spin-{i}", daemon=True)
                    for i, ex in enumerate(executors)]
        for t in spinners:
            t.start()

        def stop_spinning() -> None:
            for ex in executors:
                ex.shutdown(timeout_sec=2.0)
            for t in spinners:
                t.join(timeout=5)

        stack.callback(stop_spinning)
        yield Fleet(planner_node, adapter_node, executors, context)


def freeze_startup_heap(stack: contextlib.ExitStack) -> None:
    """Move everything alive once the fleet is built (the engine, tokenizer, rclpy, the nodes:
    about 700,000 objects with vLLM loaded) into the collector's permanent generation, and make
    it collectable again when ``stack`` closes (as vLLM's engine core does in its own process).

    Python's full (generation-2) collection walks every tracked object and holds the GIL while
    it does: measured with vLLM loaded, one took 0.37 s, a pause in which no status, goal or
    engine output of this process moves. Frozen, a full collection walks only what was
    allocated since (``timely-fleet bench live`` reports both). Garbage is collected first, so
    only live objects are frozen."""
    gc.collect()
    gc.freeze()
    stack.callback(gc.unfreeze)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), help="parameter YAML (default: %(default)s)")
    parser.add_argument("--engine", choices=ENGINE_KINDS,
                        help="override planner.engine.kind (remote: `vllm serve` servers, see --server)")
    parser.add_argument("--server", action="append", default=None, metavar="URL",
                        help="engine remote: base URL of a `vllm serve` server (`timely-fleet serve-engine` prints "
                             "it); repeat for several servers; replaces planner.engine.servers (implies --engine "
                             "remote when --engine is not given)")
    add_model_argument(parser)
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="simulated robots' time runs at this factor of real time (0.02 = 50x faster); the "
                             "planner predicts their actions in the same compressed time")
    parser.add_argument("--seconds", type=float, help="exit after this long (default: until Ctrl-C)")
    parser.add_argument("--only", choices=("all", "planner", "adapters"), default="all",
                        help="start only the planner node or only the adapters (launch/planner.launch.py "
                             "runs them as separate processes)")
    parser.add_argument("--robots", default=None, metavar="IDS",
                        help="adapters: host only these robots of the YAML: comma-separated ids or shell "
                             "patterns (drone_1*), or k/n for the k-th of n equal groups (split a fleet over "
                             "adapter processes)")
    parser.add_argument("--standby", action="store_true",
                        help="start a standby planner (planner.standby): it loads its engine, follows the active "
                             "planner of the namespace and takes over its goals when it falls silent; implies "
                             "--only planner (docs/guides/failover.md)")
    parser.add_argument("--namespace", default="",
                        help="ROS namespace of the planner and the adapters (topics follow it; two fleets "
                             "can share a domain in different namespaces)")
    add_log_level_argument(parser)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="NAME|PATH", default=None,
                        help="override planner.engine.model: a name of `timely-fleet models` (prepared on first "
                             "use, with its engine defaults such as max_model_len where the YAML keeps the "
                             "default), a .gguf file or a Hugging Face model directory")


def load_with_overrides(args: argparse.Namespace) -> FleetParams:
    from dataclasses import replace

    from llm_planner_node.core.policies import policy_names
    from timely_robot.model_cache import ModelError
    from llm_planner_node.models import engine_for_model

    model = getattr(args, "model", None)
    params = load_params(args.params, tuple(policy_names()), check=False)
    try:  # --model, or a registry name / .gguf file in the YAML: its prepared directory and engine defaults
        params = replace(params, planner=replace(params.planner,
                                                 engine=engine_for_model(params.planner.engine, model)))
    except ModelError as e:
        raise ParamError(str(e)) from None
    try:
        params.check()
    except ParamError as e:
        raise ParamError(str(e) if model else f"{args.params}: {e}") from None
    kind, servers = getattr(args, "engine", None), getattr(args, "server", None)
    if servers:
        if kind not in (None, "remote"):
            raise ParamError(f"--server is for the remote engine, not --engine {kind}: drop one of them")
        kind = "remote"
    if kind or servers:
        engine = replace(params.planner.engine, kind=kind or params.planner.engine.kind)
        if servers:
            bad = [u for u in servers if not u.startswith(("http://", "https://"))]
            if bad:
                raise ParamError(f"--server {bad[0]!r} is not an http:// or https:// URL (e.g. http://10.0.0.5:8000)")
            engine = replace(engine, servers=tuple(u.rstrip("/") for u in servers))
        if engine.kind == "remote" and not engine.servers:
            raise ParamError("the remote engine needs at least one server: give --server URL (repeatable) or "
                             "planner.engine.servers in the parameter file (`timely-fleet serve-engine` starts "
                             "one and prints its URL)")
        params = replace(params, planner=replace(params.planner, engine=engine))
        params.check()  # the same checks as the file got, for the engine actually used
    return params


def check_servers(urls: tuple[str, ...], timeout_s: float = 5.0) -> None:
    """Raise :class:`ParamError` (one sentence) if one of the remote engine's servers does not answer
    ``GET /v1/models`` within ``timeout_s`` (a wrong URL, a server not started or still loading)."""
    import httpx

    for url in urls:
        try:
            r = httpx.get(f"{url}/v1/models", timeout=timeout_s)
            r.raise_for_status()
            r.json()["data"][0]["id"]
        except Exception as e:  # noqa: BLE001 - every way of not answering is the same sentence
            if isinstance(e, httpx.ConnectError):
                reason = "connection refused"
            elif isinstance(e, httpx.TimeoutException):
                reason = f"no answer in {timeout_s:g} s"
            elif isinstance(e, httpx.HTTPStatusError):
                reason = f"HTTP {e.response.status_code} on /v1/models"
            else:
                reason = "no model list on /v1/models: not a vLLM server"
            raise ParamError(f"the inference server {url} does not answer ({reason}): start it with "
                             "`timely-fleet serve-engine` and wait for its 'ready' line, or fix --server / "
                             "planner.engine.servers") from None


def describe(params: FleetParams, only: str = "all", *, loaded: bool = False, robots: str | None = None) -> str:
    """What `up` runs, e.g. "planner (vllm engine loaded, model embedded, policy timelyllm) and 4
    robot adapter(s)"."""
    eng = params.planner.engine
    planner = f"{'standby ' if params.planner.standby else ''}planner ({eng.kind} engine{' loaded' if loaded else ''}" + \
        (f", model {eng.model}" if eng.kind == "vllm" else "") + \
        (f", servers {', '.join(eng.servers)}" if eng.kind == "remote" else "") + f", policy {params.planner.policy})"
    hosted = select_robots(params.robots, robots)
    n = sum(1 for r in params.robots if r.adapter != "external" and r.id in hosted)
    adapters = f"{n} robot adapter(s)"
    return {"all": f"{planner} and {adapters}", "planner": planner, "adapters": adapters}[only]


def run(args: argparse.Namespace) -> int:
    configure_logging(getattr(args, "log_level", "info"))
    try:
        params = load_with_overrides(args)
    except ParamError as e:
        print(f"timely-fleet up: {e}", file=sys.stderr)
        return 2
    if getattr(args, "standby", False):
        if args.only == "adapters":
            print("timely-fleet up: --standby starts a planner: drop --only adapters", file=sys.stderr)
            return 2
        from dataclasses import replace

        args.only = "planner"  # the robots' adapters run beside the active planner, once
        params = replace(params, planner=replace(params.planner, standby=True))
    stop = threading.Event()
    fenced: list[str] = []

    def on_fenced(reason: str) -> None:
        fenced.append(reason)
        stop.set()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    robots = getattr(args, "robots", None)
    try:
        what = describe(params, args.only, robots=robots)
    except ParamError as e:
        print(f"timely-fleet up: {e}", file=sys.stderr)
        return 2
    if args.only != "adapters" and params.planner.engine.kind == "remote":
        try:
            check_servers(params.planner.engine.servers)
        except ParamError as e:
            print(f"timely-fleet up: {e}", file=sys.stderr)
            return 2
    kind = params.planner.engine.kind if args.only != "adapters" else None
    log.info(f"starting {what}" + {"vllm": "; loading the vLLM engine (about a minute on CPU)",
                                   "remote": "; connecting to the inference server(s)"}.get(kind, ""))
    t0 = time.monotonic()
    with running_fleet(params, time_scale=args.time_scale, planner=args.only != "adapters",
                       adapters=args.only != "planner", namespace=args.namespace,
                       ros_args=getattr(args, "ros_args", None), robots=robots, on_fenced=on_fenced):
        log.info(f"ready in {time.monotonic() - t0:.0f} s: {describe(params, args.only, loaded=True, robots=robots)}; "
                 + ("it takes the active planner's goals over if that one falls silent; " if params.planner.standby
                    else "send goals to the 'plan_task' action (e.g. timely-fleet goal ...); " if args.only != "adapters"
                    else "") + "Ctrl-C to stop")
        deadline = None if args.seconds is None else time.monotonic() + args.seconds
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(0.2)
        log.info("stopping")
    log.info("stopped")
    if fenced:
        print(f"timely-fleet up: {fenced[0]}; start this planner again with --standby to follow it", file=sys.stderr)
        return 3
    return 0
