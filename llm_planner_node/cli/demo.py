"""`timely-fleet demo` (`make demo`): the embedded default, end to end.

Starts the planner on vLLM (CPU) with the shipped planner model and the fleet of
``config/fleet.yaml`` (simulated drones, an arm behind the real neuromeka client and the fake
IndyDCP3 servicer, a chat robot, a mobile base on the Nav2 simulator), sends a short mixed
workload (normal and urgent drone goals that overlap, an arm goal, a chat goal, and with the
planner model a base goal), prints every segment as it is dispatched, and ends with a
per-task-type report and a timeline plot.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_planner_node.ros.goal_client import STATUS_NAMES, TUF_CLASSES, GoalClient, GoalHandle, spinning
from timely_robot.logging_setup import add_log_level_argument, configure_logging
from llm_planner_node.config.params import DEFAULT_PARAMS
from timely_robot.config import ParamError


@dataclass(frozen=True)
class DemoGoal:
    at_s: float           # send time after the start of the workload
    robot_id: str
    instruction: str
    urgency: str          # normal | urgent
    task_type: str


#: One round per tuple: each robot gets one goal per round (a robot runs one plan at a time), and
#: the rounds differ because the arm's world changes (round 1 stacks the boxes).
WORKLOAD: tuple[tuple[DemoGoal, ...], ...] = (
    (DemoGoal(0.0, "tello_1", "look for the cat", "normal", "drone-normal"),
     DemoGoal(0.1, "tello_2", "avoid injuring the person in front of you", "urgent", "drone-urgent"),
     DemoGoal(0.3, "indy_1", "stack the red, blue and green boxes", "normal", "arm"),
     DemoGoal(0.4, "chat_1", "tell a short story about a robot", "normal", "chat"),
     DemoGoal(0.5, "base_1", "go to the kitchen and look for a person", "normal", "base")),
    (DemoGoal(0.0, "indy_1", "clean the desk", "normal", "arm"),
     DemoGoal(0.2, "tello_1", "find the dog", "normal", "drone-normal"),  # its camera sees none
     DemoGoal(0.3, "tello_2", "evade the dog chasing you", "urgent", "drone-urgent"),
     DemoGoal(0.4, "chat_1", "tell a short story about a dragon", "normal", "chat")),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default=str(DEFAULT_PARAMS), help="parameter YAML (default: %(default)s)")
    parser.add_argument("--engine", choices=("vllm", "sim"), help="override planner.engine.kind")
    from llm_planner_node.up import add_model_argument

    add_model_argument(parser)
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="simulated robots run this many times as long as real ones (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=len(WORKLOAD), choices=range(1, len(WORKLOAD) + 1),
                        help="how many rounds of goals to send (default: all %(default)s)")
    parser.add_argument("--out", default="out/demo", help="directory for the report and plot")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-goal time limit (s)")
    add_log_level_argument(parser)


def run(args: argparse.Namespace) -> int:
    configure_logging(getattr(args, "log_level", "info"))
    from llm_planner_node.up import load_with_overrides, running_fleet

    if getattr(args, "model", None) is None:
        # the demo's story is the papers' 11 tasks and their timing: the 1M-parameter model that
        # knows them, unless --model says otherwise
        args.model = "embedded"
    try:
        params = load_with_overrides(args)
    except ParamError as e:
        print(f"timely-fleet demo: {e}")
        return 2
    known = {r.id for r in params.robots}
    presets = {k: v.as_tuple() for k, v in params.planner.tuf_presets.items()}
    # the 1M-parameter model knows the papers' drone, arm and chat tasks, not a mobile base's
    skip = {"base"} if params.planner.engine.model == "embedded" else set()
    workload = [[g for g in rnd if g.robot_id in known and g.task_type not in skip] for rnd in WORKLOAD[: args.rounds]]
    if skip & {g.task_type for rnd in WORKLOAD[: args.rounds] for g in rnd if g.robot_id in known}:
        print("[demo] base_1 runs but gets no goal: the embedded model knows no mobile-base task "
              "(make demo DEMO_ARGS='--model smollm2-135m-planner' sends it one)", flush=True)
    if not any(workload):
        print("timely-fleet demo: the parameter file has none of the demo robots "
              f"({', '.join(sorted({g.robot_id for rnd in WORKLOAD for g in rnd}))})")
        return 2
    print(f"[demo] starting the planner ({params.planner.engine.kind} engine, model "
          f"{params.planner.engine.model}, policy {params.planner.policy}) and {len(params.robots)} robots;"
          " vLLM start-up takes about a minute on CPU", flush=True)
    t_start = time.monotonic()
    with running_fleet(params, time_scale=args.time_scale) as fleet:
        print(f"[demo] ready after {time.monotonic() - t_start:.0f} s", flush=True)
        client = GoalClient(fleet.context, "demo_client")
        try:
            with spinning(client.node, fleet.context):
                sent = _send_workload(client, workload, args, presets)
        finally:
            client.destroy()
    if sent is None:
        return 1
    rows = report_rows(sent, presets)
    print()
    print(format_report(rows))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_timeline(sent, out / "demo_timeline.png")
    print(f"\n[demo] timeline plot: {plot}")
    ok = sum(r["completed"] for r in rows) == len(sent)
    print(f"[demo] {'all goals completed' if ok else 'some goals did not complete'}; total "
          f"{time.monotonic() - t_start:.0f} s")
    return 0 if ok else 1


def _send_workload(client: GoalClient, workload: list[list[DemoGoal]], args: argparse.Namespace,
                   presets: dict[str, tuple[float, float, float]]) -> list[tuple[DemoGoal, GoalHandle]] | None:
    """Send each round's goals with their timing; wait for every result before the next round."""
    if not client.wait_for_server(30):
        print("[demo] the planner's action server did not come up")
        return None
    sent: list[tuple[DemoGoal, GoalHandle]] = []
    t0 = time.monotonic()
    for rnd, goals in enumerate(workload):
        base = time.monotonic()
        handles = []
        for g in goals:
            delay = base + g.at_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            h = client.send(g.robot_id, g.instruction, task_type=g.task_type, tuf=presets[g.urgency],
                            on_feedback=_printer(g, t0))
            print(f"[{time.monotonic() - t0:7.2f} s] round {rnd + 1}: {g.urgency} goal to {g.robot_id}: "
                  f"{g.instruction!r}", flush=True)
            handles.append((g, h))
        for g, h in handles:
            try:
                res = h.result(args.timeout)
            except TimeoutError:
                client.cancel(h)
                res = h.result(30)
            print(f"[{time.monotonic() - t0:7.2f} s] {g.robot_id}: {STATUS_NAMES.get(res.status)} "
                  f"({res.message}); response {res.response_time_s:.3f} s, utility {res.time_utility:.2f}",
                  flush=True)
        sent += handles
    return sent


def _printer(g: DemoGoal, t0: float):
    def show(fb: Any) -> None:
        print(f"[{time.monotonic() - t0:7.2f} s]   {g.robot_id} segment {fb.index}: {fb.text.strip()!r}"
              f"{' (final)' if fb.final else ''}", flush=True)
    return show


def report_rows(sent: list[tuple[DemoGoal, GoalHandle]],
                presets: dict[str, tuple[float, float, float]] = TUF_CLASSES) -> list[dict[str, Any]]:
    """Per task type: mean utility (and % of beta), mean response, mean waiting, completed."""
    by_type: dict[str, list[tuple[DemoGoal, Any]]] = {}
    for g, h in sent:
        by_type.setdefault(g.task_type, []).append((g, h.result(0)))
    rows = []
    for task_type, items in by_type.items():
        ok = [(g, r) for g, r in items if r.status == 0]
        beta = presets[items[0][0].urgency][2]
        util = [r.time_utility for _, r in ok]
        rows.append({
            "task_type": task_type, "goals": len(items), "completed": len(ok),
            "mean_utility": statistics.fmean(util) if util else float("nan"),
            "utility_pct_beta": 100 * statistics.fmean(util) / beta if util else float("nan"),
            "mean_response_s": statistics.fmean(r.response_time_s for _, r in ok) if ok else float("nan"),
            "mean_waiting_s": statistics.fmean(r.robot_waiting_s for _, r in ok) if ok else float("nan"),
        })
    return rows


def format_report(rows: list[dict[str, Any]]) -> str:
    head = f"{'task type':<14}{'goals':>6}{'done':>6}{'utility':>9}{'% beta':>8}{'response s':>12}{'waiting s':>11}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['task_type']:<14}{r['goals']:>6}{r['completed']:>6}{r['mean_utility']:>9.2f}"
                     f"{r['utility_pct_beta']:>7.0f}%{r['mean_response_s']:>12.3f}{r['mean_waiting_s']:>11.3f}")
    return "\n".join(lines)


def plot_timeline(sent: list[tuple[DemoGoal, GoalHandle]], path: Path) -> Path:
    """Gantt chart per goal: generation (blue) and execution (green) of every segment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_first = min(h.sent_at for _, h in sent)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(sent) + 1.5))
    labels = []
    for row, (g, h) in enumerate(sent):
        res = h.result(0)
        off = h.sent_at - t_first
        labels.append(f"{g.robot_id} ({g.urgency})")
        for s in res.segments:
            if s.generation_start_s >= 0 and s.generation_end_s >= 0:
                ax.barh(row, s.generation_end_s - s.generation_start_s, left=off + s.generation_start_s,
                        color="tab:blue", height=0.35)
            if s.execution_start_s >= 0 and s.execution_end_s >= 0:
                ax.barh(row + 0.38, s.execution_end_s - s.execution_start_s, left=off + s.execution_start_s,
                        color="tab:green", height=0.35, edgecolor="white")
    ax.set_yticks(range(len(sent)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first goal")
    ax.set_title("Segmented generation (blue) and robot execution (green) per goal")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    from llm_planner_node.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
