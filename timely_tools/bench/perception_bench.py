"""Perception benchmark: the Tello adapter looking for objects on real decoded video.

Run: ``timely-fleet bench perception [--present N] [--absent M] [--json PATH] [--seed S]``.

The real client stack against the Tello SDK simulator in a network namespace: djitellopy,
``streamon``, its H.264 decoder (PyAV) with every frame stamped by the adapter, the default
detector on CPU, the adapter's own MiniSpec interpreter. The simulator streams its scene rendered
with real photographs; for every goal it gets a new scene with objects at random bearings (all
around the drone) and distances, and the adapter runs the plan of "look for X",
``_1=s,X;?_1==True{o,X};->_1;`` (scan, then turn to face it), as a planner would send it:

* *present* goals: X is in the scene (with one or two other objects elsewhere); a goal counts
  as found when the plan returns True, and the drone then faces X within ``--facing-deg``
  (the simulator's true pose against the object's true bearing);
* *absent* goals: X is a COCO class that is not in the scene (one or two other objects are);
  a plan returning True is a false find.

At the end the video stream is switched off and a perception skill must fail as stale, never
answer from the last frame. Reported (``--json``): ``{"detector", "frames", "detect_ms_p50",
"detect_ms_p95", "decode_fps", "present": {"goals", "found", "facing"}, "absent": {"goals",
"false_found"}, "scan_s_median", "stale_frame_refusals", "recall_per_class"}`` and each goal.
Motions run at ``--time-scale`` of real time (the video and the detector in real time).
"""

from __future__ import annotations

import argparse
import math
import statistics
import threading
import time
from typing import Any

import numpy as np

from timely_tools import outfiles

#: labels the simulator has real photographs of, with sizes (cm: width, height) and centre heights
OBJECTS = {"cat": ((50.0, 40.0), 20.0), "person": ((60.0, 170.0), 85.0), "motorcycle": ((200.0, 110.0), 55.0),
           "cup": ((30.0, 25.0), 12.0)}
#: COCO classes the absent goals look for (none of them is ever in a scene)
ABSENT = ("umbrella", "dog", "bottle", "chair", "backpack", "teddy_bear", "laptop", "potted_plant")


def _place(rng: np.random.Generator, pose: tuple[float, float, float, float], bearing: float,
           dist: float, label: str) -> dict[str, Any]:
    x, y, _z, yaw = pose
    a = math.radians(yaw + bearing)
    (w, h), z = OBJECTS[label]
    return {"pos": [round(x + dist * math.cos(a), 1), round(y + dist * math.sin(a), 1), z], "size": [w, h]}


def _true_bearing(pose: tuple[float, float, float, float], pos: list[float]) -> float:
    x, y, _z, yaw = pose
    b = math.degrees(math.atan2(pos[1] - y, pos[0] - x)) - yaw
    return (b + 180.0) % 360.0 - 180.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--present", type=int, default=16, help="goals whose object is in the scene")
    parser.add_argument("--absent", type=int, default=8, help="goals whose object is not in the scene")
    parser.add_argument("--min-cm", type=float, default=150.0,
                        help="nearest object distance (cm; nearer, an object on the floor is below a hovering Tello's view)")
    parser.add_argument("--max-cm", type=float, default=250.0, help="farthest object distance (cm)")
    parser.add_argument("--facing-deg", type=float, default=10.0, help="facing tolerance after orienting")
    parser.add_argument("--time-scale", type=float, default=0.25, help="simulated motions at this factor of real time")
    parser.add_argument("--detector", default="default", help="detector: default or a .onnx file")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def run(args: argparse.Namespace) -> int:
    from timely_robot.errors import CommandError
    from robot_adapters.sim import netns

    if args.json:
        outfiles.ready(args.json)
    if not netns.available():
        raise CommandError("bench perception needs network namespaces for the Tello simulator (root and iproute2)")
    out = measure(args)
    p, a = out["present"], out["absent"]
    print(f"detector {out['detector']}: {out['frames']} frames decoded at {out['decode_fps']:.1f} fps, "
          f"detection p50 {out['detect_ms_p50']:.0f} ms, p95 {out['detect_ms_p95']:.0f} ms")
    print(f"present: {p['found']}/{p['goals']} found ({100 * p['found'] / max(p['goals'], 1):.0f}%), "
          f"{p['facing']} facing it within {args.facing_deg:g} degrees; scan median {out['scan_s_median']:.1f} s")
    print(f"absent:  {a['false_found']}/{a['goals']} false finds; stale-frame refusals after streamoff: "
          f"{out['stale_frame_refusals']}")
    print("recall per class: " + ", ".join(f"{k} {v['found']}/{v['goals']}" for k, v in out["recall_per_class"].items()))
    if args.json:
        outfiles.write_json(args.json, out, indent=2)
    return 0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import djitellopy

    from timely_robot.skills import TELLO_MINISPEC
    from timely_robot.logging_setup import quiet_djitellopy
    from robot_adapters.sim import netns
    from robot_adapters.adapter_core import STATE_DONE, STATE_FAILED, SegmentIn
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.drone_executor import TelloExecutor, camera_perception
    from robot_adapters.perception.detectors import load_detector
    from robot_adapters.perception.types import PerceptionError
    from robot_adapters.scene import Scene
    from robot_adapters.sim.tello_sim import TelloSim

    quiet_djitellopy()
    rng = np.random.default_rng(args.seed)
    detector = load_detector(args.detector)
    goals: list[dict[str, Any]] = []
    with netns.TestNetwork(n_sims=1) as net:
        ip = net.sim_ips[0]
        sim = net.in_sim(lambda: TelloSim(ip, scene=Scene(), time_scale=args.time_scale, battery=100,
                                          battery_drain_per_s=0.0).start())
        ex = TelloExecutor(ip, name="bench_drone", time_scale=args.time_scale,
                           client_factory=lambda: net.in_client(lambda: djitellopy.Tello(host=ip, retry_count=1)),
                           perception_factory=camera_perception("bench_drone", detector, in_client=net.in_client))
        ex.connect()
        camera = ex.perception.camera  # type: ignore[attr-defined]
        events: list[Any] = []
        core = AdapterCore("bench_drone", ex, events.append, skill_set=TELLO_MINISPEC,
                           time_scale=args.time_scale).start()
        t_video = time.monotonic()
        first = camera.frames()
        try:
            kinds = ["present"] * args.present + ["absent"] * args.absent
            rng.shuffle(kinds)
            labels = list(OBJECTS)
            for i, kind in enumerate(kinds):
                pose = sim.pose()
                target = labels[i % len(labels)] if kind == "present" else ABSENT[i % len(ABSENT)]
                others = [lb for lb in labels if lb != target]
                rng.shuffle(others)
                objects: dict[str, Any] = {}
                bearings = []
                for lb in ([target] if kind == "present" else []) + others[: int(rng.integers(1, 3))]:
                    for _ in range(50):  # objects at least 40 degrees apart, so boxes do not overlap
                        b = float(rng.uniform(-180.0, 180.0))
                        if all(abs((b - o + 180) % 360 - 180) > 40 for o in bearings):
                            break
                    bearings.append(b)
                    objects[lb] = _place(rng, pose, b, float(rng.uniform(args.min_cm, args.max_cm)), lb)
                world = Scene.from_dict({"objects": objects})
                sim.scene = sim.renderer.scene = world  # the simulator's camera shows the new scene
                gid = f"{i:032x}"
                events.clear()
                t0 = time.monotonic()
                core.submit(SegmentIn(gid, 0, text=f"_1=s,{target};?_1==True{{o,{target}}};->_1;",
                                      skills=[("s", [target]), ("o", [target])], final=True))
                while not any(e.goal_id == gid and e.state in (STATE_DONE, STATE_FAILED) for e in events):
                    if time.monotonic() - t0 > 120:
                        raise RuntimeError(f"goal {i} did not end in 120 s")
                    time.sleep(0.02)
                end = [e for e in events if e.goal_id == gid and e.state in (STATE_DONE, STATE_FAILED)][-1]
                found = end.return_value == "True"
                pose_after = sim.pose()
                facing = None
                if kind == "present" and found:
                    facing = abs(_true_bearing(pose_after, objects[target]["pos"])) <= args.facing_deg
                scan_s = end.skill_durations_s[end.skill_names.index("scan")] if "scan" in end.skill_names else None
                goals.append({"kind": kind, "target": target, "objects": objects, "found": found, "facing": facing,
                              "error": end.error, "answers": end.answers, "scan_s": scan_s,
                              "seconds": round(time.monotonic() - t0, 2)})
                print(f"  goal {i + 1}/{len(kinds)} {kind:7} look for the {target:10} -> "
                      f"{'found' if found else 'not found'}" + (f" ({end.error})" if end.error else "")
                      + ("" if facing is None else f", facing it: {facing}"), flush=True)
            frames_seq = camera.frames().seq - (first.seq if first is not None else 0)
            video_s = time.monotonic() - t_video
            # a dead stream: the next perception answer must be a refusal, not the last frame
            refusals_before = camera.stale_refusals
            ex.tello.streamoff()
            time.sleep(camera.max_age_s + 0.5)
            try:
                ex.perception.is_visible("cat", threading.Event())
            except PerceptionError:
                pass
            stale = camera.stale_refusals - refusals_before
        finally:
            core.shutdown()
            ex.close()
            sim.stop()
    present = [g for g in goals if g["kind"] == "present"]
    absent = [g for g in goals if g["kind"] == "absent"]
    per_class: dict[str, dict[str, int]] = {}
    for g in present:
        c = per_class.setdefault(g["target"], {"goals": 0, "found": 0})
        c["goals"] += 1
        c["found"] += int(g["found"])
    ms = sorted(camera.detect_ms)
    scans = [g["scan_s"] for g in present if g["scan_s"] is not None]
    return {
        "detector": detector.name, "frames": int(frames_seq), "decode_fps": round(frames_seq / max(video_s, 1e-9), 2),
        "detect_ms_p50": round(float(np.percentile(ms, 50)), 1) if ms else None,
        "detect_ms_p95": round(float(np.percentile(ms, 95)), 1) if ms else None,
        "detections_run": len(ms),
        "present": {"goals": len(present), "found": sum(g["found"] for g in present),
                    "facing": sum(1 for g in present if g["facing"])},
        "absent": {"goals": len(absent), "false_found": sum(g["found"] for g in absent)},
        "scan_s_median": round(statistics.median(scans), 2) if scans else None,
        "stale_frame_refusals": stale,
        "recall_per_class": {k: dict(v, recall=round(v["found"] / v["goals"], 3)) for k, v in sorted(per_class.items())},
        "settings": {"present": args.present, "absent": args.absent, "distance_cm": [args.min_cm, args.max_cm],
                     "time_scale": args.time_scale, "facing_deg": args.facing_deg, "seed": args.seed,
                     "max_age_s": camera.max_age_s, "settle_s": camera.settle_s},
        "goals": goals,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
