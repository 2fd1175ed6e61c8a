"""Tello drone adapter node: ``/robot_segments`` (its robot id) -> djitellopy -> ``/robot_status``.

Run (inside the project environment)::

    python -m robot_adapters.drone_adapter --robot-id tello_1 --host 192.168.10.1 [--scene scene.yaml]

``--host`` is the drone's address (a real Tello in AP mode is 192.168.10.1; for the simulator
use the namespace set-up of ``robot_adapters.netns``). MiniSpec segment text is interpreted
(variables, conditionals, loops); perception skills read the scene model (``--scene`` JSON/YAML).
"""

from __future__ import annotations

import argparse
import json

from .adapter_base import AdapterCore, AdapterNode, spin_node
from .drone_executor import TelloExecutor
from .scene import Scene


def load_scene(path: str | None) -> Scene:
    if not path:
        return Scene()
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith((".yaml", ".yml")):
        import yaml

        return Scene.from_dict(yaml.safe_load(text) or {})
    return Scene.from_dict(json.loads(text))


def build(robot_id: str, host: str, scene: Scene | None = None, context=None, **core_kw) -> AdapterNode:
    ex = TelloExecutor(host, scene)
    ex.connect()
    node = AdapterNode(f"drone_adapter_{robot_id}", context=context)
    node.add_robot(AdapterCore(robot_id, ex, **core_kw))
    return node


def main(argv: list[str] | None = None) -> int:
    import rclpy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robot-id", required=True)
    p.add_argument("--host", required=True, help="Tello address")
    p.add_argument("--scene", help="scene file for perception skills (JSON or YAML)")
    a, ros_args = p.parse_known_args(argv)
    rclpy.init(args=ros_args)
    spin_node(build(a.robot_id, a.host, load_scene(a.scene)))
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
