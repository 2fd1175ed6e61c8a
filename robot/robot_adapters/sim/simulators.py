"""The protocol simulators behind the ``tello-sim`` and ``indy-sim`` adapters, started for
:func:`robot_adapters.executors.make_executor`: the Tello SDK simulator in the process's network
namespaces (it streams H.264 video rendered from the robot's ``simulator.scene``), and the fake
IndyDCP3 servicer on loopback with the arm's simulated desk."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from timely_robot.config import ParamError, RobotParams


class TelloNetworks:
    """One test network for every ``tello-sim`` drone of this process: djitellopy keeps one
    control socket (and one state socket) per process, created in the network namespace of the
    first client, so every simulated Tello must be reachable from that one client namespace."""

    def __init__(self, n_sims: int, stack: contextlib.ExitStack) -> None:
        self.n_sims = max(1, n_sims)
        self.stack = stack
        self.net: Any = None
        self.used = 0

    def take(self) -> tuple[Any, str, int]:
        """(network, simulator address, index k) for the next simulated drone."""
        from robot_adapters.sim import netns

        if self.net is None:
            self.net = self.stack.enter_context(netns.TestNetwork(n_sims=self.n_sims))
        if self.used >= self.n_sims:
            raise ParamError(f"more tello-sim drones than the {self.n_sims} this process prepared addresses for")
        k, self.used = self.used, self.used + 1
        return self.net, self.net.sim_ips[k], k


def start_tello_sim(robot: RobotParams, time_scale: float, stack: contextlib.ExitStack,
                    networks: TelloNetworks | None = None) -> tuple[Any, str, int]:
    """Start the Tello SDK simulator of ``robot`` at the next address of ``networks`` (default: a
    network of its own), stopped when ``stack`` closes; (network, simulator address, index k)."""
    from timely_robot.logging_setup import quiet_djitellopy
    from robot_adapters.scene import Scene
    from robot_adapters.sim.tello_sim import TelloSim

    quiet_djitellopy()  # its import sets INFO: one log line per command sent
    net, ip, k = (networks or TelloNetworks(1, stack)).take()
    simulated = dict(robot.simulator or {})
    world = Scene.from_dict(simulated.get("scene") or {})
    battery = float(simulated.get("battery_pct", 87))
    drain = float(simulated.get("battery_drain_per_s", 0.12))  # in flight; higher: a drone that runs flat mid-task
    # drains in flight only: an `up` left running for hours does not find its drone flat
    sim = net.in_sim(lambda: TelloSim(ip, scene=world, time_scale=time_scale, battery=battery,
                                      battery_drain_per_s=drain, ground_drain_per_s=0.0).start())
    stack.callback(sim.stop)
    return net, ip, k


def start_fake_indy(robot: RobotParams, index: int, spec: dict[str, Any] | None, time_scale: float,
                    stack: contextlib.ExitStack, desk: Callable[[tuple[str, ...]], Any] | None = None
                    ) -> tuple[str, dict[str, Any], Any]:
    """Start the fake IndyDCP3 servicer of the ``index``-th robot, stopped when ``stack`` closes;
    (its host, the perception spec: the simulated desk unless the robot declares a source, the
    simulated world). The world is the robot's ``simulator.scene``, else what its map declares,
    else ``desk(robot.objects)``."""
    from timely_robot.errors import CommandError
    from robot_adapters.scene import Scene
    from robot_adapters.sim.indy_sim import FakeIndy

    host = robot.host or f"127.0.0.{10 + index}"
    spec = spec or {"source": "scene"}  # the simulated desk, unless the robot declares a source
    if (robot.simulator or {}).get("scene") is not None:  # the world as declared (a map may be wrong)
        scene = Scene.from_dict(robot.simulator["scene"])  # type: ignore[index]
    elif spec["source"] == "map":  # the simulated world holds what the map declares
        scene = Scene.from_dict({"objects": {n: {"pos": p} for n, p in spec["objects"].items()}})
    else:
        if desk is None:
            raise ValueError(f"robot {robot.id}: its simulated desk needs desk= "
                             "(`timely-fleet up` passes llm_planner_node.up.workspace_scene)")
        scene = desk(robot.objects)
    try:
        fake = FakeIndy(host, time_scale=time_scale, scene=scene).start()
    except OSError as e:  # most often: another `up` or `demo` of this fleet still runs here
        raise CommandError(f"robot {robot.id}: {e} (or stop the other `timely-fleet up` or `demo` "
                           "running on this machine)") from e
    stack.callback(fake.stop)
    return host, spec, scene
