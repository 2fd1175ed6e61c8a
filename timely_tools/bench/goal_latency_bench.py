"""`timely-fleet bench goal-latency`: how long `timely-fleet goal` takes to answer a rejected goal.

Starts `timely-fleet up --engine sim` (one simulated drone) as its own process, then, ``--tries``
times, runs `timely-fleet goal ghost "look for the cat"` (an unknown robot: rejected at once) as
a separate process and times it. Alongside, in this process, a fresh ROS context per try splits
the same path into its parts: discovery of the action server, the readiness handshake
(``GoalClient.wait_for_server``) and goal sent -> result. Target: the answer to a
rejected goal within 0.5 s at the median once the client sees the server; the whole process also
pays Python start-up and rclpy import (~0.4 s here). A goal process that sees no planner within
its 10 s (seen once in a full CI run) is run once more, and its sentence is reported under
``unanswered``.

Run: ``timely-fleet bench goal-latency [--tries 10] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

CLI = [sys.executable, "-m", "llm_planner_node.cli"]


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs)}


def _in_process_try() -> dict[str, float]:
    import rclpy
    from rclpy.context import Context

    from llm_planner_node.ros.goal_client import GoalClient, spinning

    ctx = Context()
    rclpy.init(context=ctx)
    client = GoalClient(ctx)
    try:
        with spinning(client.node, ctx):
            t0 = time.monotonic()
            while not client.client.server_is_ready():
                if time.monotonic() - t0 > 30:
                    raise TimeoutError("no planner")
                time.sleep(0.005)
            t1 = time.monotonic()
            if not client.wait_for_server(30):
                raise TimeoutError("the planner does not answer")
            t2 = time.monotonic()
            res = client.send("ghost", "look for the cat").result(30)
            t3 = time.monotonic()
        if res.status != 1:
            raise RuntimeError(f"expected a rejection, got status {res.status}: {res.message}")
        return {"discovery_s": t1 - t0, "handshake_s": t2 - t1, "goal_to_result_s": t3 - t2}
    finally:
        client.destroy()
        rclpy.try_shutdown(context=ctx)


def measure(tries: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "fleet.yaml"
        params.write_text(yaml.safe_dump({"planner": {"engine": {"kind": "sim"}},
                                          "robots": [{"id": "d1", "kind": "drone", "adapter": "sim"}]}))
        up = subprocess.Popen([*CLI, "up", "--params", str(params)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            _in_process_try()  # waits for the planner to come up; not counted
            whole: list[float] = []
            parts: list[dict[str, float]] = []
            unanswered: list[str] = []
            for i in range(tries):
                for attempt in range(2):  # a goal process that saw no planner is run once more, as a user would
                    t0 = time.monotonic()
                    p = subprocess.run([*CLI, "goal", "ghost", "look for the cat"], capture_output=True, text=True,
                                       timeout=60)
                    if "REJECTED: unknown robot 'ghost'" in p.stdout:
                        whole.append(time.monotonic() - t0)
                        break
                    if attempt == 1 or "no planner answers" not in p.stderr:
                        raise RuntimeError(f"try {i}: unexpected output {p.stdout!r} {p.stderr[-300:]!r}")
                    unanswered.append(p.stderr.strip()[-300:])
                    print(f"try {i + 1}/{tries}: the goal process got no answer ({unanswered[-1]}); running it again",
                          file=sys.stderr, flush=True)
                parts.append(_in_process_try())
                print(f"try {i + 1}/{tries}: goal process {whole[-1]:.2f} s, in process: discovery "
                      f"{parts[-1]['discovery_s']:.3f} s, handshake {parts[-1]['handshake_s']:.3f} s, "
                      f"goal->result {parts[-1]['goal_to_result_s']:.3f} s", file=sys.stderr, flush=True)
        finally:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
    out = {"tries": tries, "unanswered": unanswered, "goal_process": _stats(whole)}
    for key in ("discovery_s", "handshake_s", "goal_to_result_s"):
        out[key[:-2]] = _stats([p[key] for p in parts])
    answer = [p["handshake_s"] + p["goal_to_result_s"] for p in parts]
    out["answer_after_discovery"] = _stats(answer)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tries", type=int, default=10, help="rejected goals to time (default: %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")


def run(args: argparse.Namespace) -> int:
    r = measure(args.tries)
    print(f"rejected goal, {r['tries']} tries (median / min / max, seconds)")
    for label, key in (("`timely-fleet goal` process, start to exit", "goal_process"),
                       ("  discovery of the action server", "discovery"),
                       ("  readiness handshake", "handshake"),
                       ("  goal sent -> result", "goal_to_result"),
                       ("answer once the server is seen (target < 0.5)", "answer_after_discovery")):
        s = r[key]
        print(f"{label:<48} {s['median_s']:6.3f} {s['min_s']:6.3f} {s['max_s']:6.3f}")
    if r["unanswered"]:
        print(f"{len(r['unanswered'])} goal process(es) saw no planner and were run again (not in the times above):")
        for why in r["unanswered"]:
            print(f"  {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))
    return 0
