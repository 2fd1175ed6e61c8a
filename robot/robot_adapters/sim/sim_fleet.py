"""Simulated robot fleet: hundreds of adapters in one process (demos and evaluation).

Each robot is an :class:`AdapterCore` with a :class:`SimulatedExecutor` whose skill durations
are drawn from the execution-time model (``ExecutionTimeModel.sample_calls``, i.e. profiled
means with noise; scene-dependent skills from their profiled tables), optionally compressed by
``time_scale``. All robots share one rclpy node, one ``/robot_status`` publisher and one event
loop thread (:mod:`.event_loop`): skills are timers, no robot has a thread of its own. Robots can be made slower at run time (``set_speed``) to show
the planner's online execution-time update.

Run::

    python -m robot_adapters.sim.sim_fleet --drones 200 --arms 50 --chat 10 [--time-scale 0.1]

Robot ids: ``sim_drone_<i>``, ``sim_arm_<i>``, ``sim_chat_<i>`` (segments on the shared
``/robot_segments`` topic, one subscription for the whole fleet). ``--fail-prob`` makes skills fail at random (error text "simulated
failure").
"""

from __future__ import annotations

import argparse
import threading
from typing import Callable

import numpy as np

from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.skills import CHAT, INDY7_ARM, TELLO_MINISPEC, SkillCall, SkillSet

from robot_adapters.adapter_core import AdapterCore, StatusEvent
from robot_adapters.adapter_node import AdapterNode, spin_node
from robot_adapters.executor import SimulatedExecutor, SkillExecutionError


class SampledExecutor(SimulatedExecutor):
    """Simulated robot: each skill takes a duration sampled from the execution-time model (a
    timer on the adapter's event loop, see :class:`SimulatedExecutor`)."""

    def __init__(self, robot_id: str, robot_kind: str, skill_set: SkillSet, truth: ExecutionTimeModel,
                 seed: int, *, time_scale: float = 1.0, fail_prob: float = 0.0, scene=None,
                 places=None) -> None:
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self.truth = truth
        self.fail_prob = fail_prob

        def sampler(call: SkillCall) -> float:
            with self._lock:
                return self.truth.sample(robot_id, robot_kind, [call], self._rng)

        super().__init__(robot_id, robot_kind, skill_set, sampler, time_scale=time_scale, scene=scene, places=places)

    def prepare(self, call: SkillCall) -> float:
        if self.fail_prob > 0:
            with self._lock:
                failed = self._rng.random() < self.fail_prob
            if failed:
                raise SkillExecutionError(f"simulated failure of {call.name}")
        return super().prepare(call)


class SimFleet:
    """Builds the simulated robots: ``attach(node)`` puts them on ROS, ``build(publish_for)``
    gives their cores publishing where ``publish_for(robot_id)`` says (tests without ROS)."""

    def __init__(self, drones: int = 0, arms: int = 0, chat: int = 0, *, time_scale: float = 1.0,
                 seed: int = 0, fail_prob: float = 0.0, model: ExecutionTimeModel | None = None) -> None:
        self.truth = ExecutionTimeModel(online=False)  # the "real" robots' behaviour
        self.model = model  # adapter-side predictor (progress/remaining); shared, optional
        self.cores: list[AdapterCore] = []
        self._robots: list[tuple[str, SampledExecutor, SkillSet]] = []
        spec = [("drone", "sim_drone", TELLO_MINISPEC, drones), ("arm", "sim_arm", INDY7_ARM, arms),
                ("chat", "sim_chat", CHAT, chat)]
        k = 0
        for kind, prefix, ss, n in spec:
            for i in range(n):
                rid = f"{prefix}_{i}"
                ex = SampledExecutor(rid, kind, ss, self.truth, seed + k, time_scale=time_scale, fail_prob=fail_prob)
                self._robots.append((rid, ex, ss))
                k += 1
        self.time_scale = time_scale

    def set_speed(self, robot_id: str, factor: float | None) -> None:
        """Make a simulated robot move ``factor`` x as fast from now on (None = nominal)."""
        self.truth.set_speed_factor(robot_id, factor)

    def build(self, publish_for: Callable[[str], Callable[[StatusEvent], None]]) -> list[AdapterCore]:
        """The robots' adapter cores (built once), each publishing with ``publish_for(robot_id)``."""
        if not self.cores:
            self.cores = [AdapterCore(rid, ex, publish_for(rid), skill_set=ss,
                                      model=self.model or ExecutionTimeModel(), time_scale=self.time_scale)
                          for rid, ex, ss in self._robots]
        return self.cores

    def attach(self, node: AdapterNode) -> AdapterNode:
        for c in self.build(node.status_publisher):
            node.add_robot(c)
        return node


def main(argv: list[str] | None = None) -> int:
    import rclpy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drones", type=int, default=20)
    p.add_argument("--arms", type=int, default=5)
    p.add_argument("--chat", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--fail-prob", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seconds", type=float, default=None, help="exit after this long")
    a, ros_args = p.parse_known_args(argv)
    rclpy.init(args=ros_args)
    fleet = SimFleet(a.drones, a.arms, a.chat, time_scale=a.time_scale, seed=a.seed, fail_prob=a.fail_prob)
    node = fleet.attach(AdapterNode("sim_fleet"))
    node.get_logger().info(f"simulating {len(fleet.cores)} robots")
    spin_node(node, seconds=a.seconds)
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
