"""`timely-fleet goal`: send one planning goal from a terminal and watch its segments (over
:class:`~llm_planner_node.ros.goal_client.GoalClient`)."""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from timely_robot.outcomes import STATUS_NAMES
from llm_planner_node.ros.goal_client import TUF_CLASSES, GoalClient, spinning

PLANNER_GONE_S = 1.0     # the planner's action server unseen this long = the planner is gone


def preset_help() -> str:
    """The default parameter file's presets for --help (the built-in ones if it does not load)."""
    from llm_planner_node.config.params import DEFAULT_PARAMS, load_params
    from timely_robot.config import ParamError

    try:
        presets = {n: t.as_tuple() for n, t in load_params(DEFAULT_PARAMS, check=False).planner.tuf_presets.items()}
    except ParamError:
        presets = TUF_CLASSES
    return ", ".join(f"{n}: ERT {ert:g} s" for n, (ert, _a, _b) in presets.items())


def tuf_for(args: argparse.Namespace) -> tuple[float, float, float]:
    """(ert_s, alpha, beta) of ``--urgency`` in ``--params``' planner.tuf_presets, with --ert/--alpha/--beta
    applied; a ParamError (one sentence) for an unknown preset or an invalid TUF."""
    import difflib

    from timely_robot.config import ParamError
    from llm_planner_node.config.params import TufParams, load_params

    presets = load_params(args.params, check=False).planner.tuf_presets
    if args.urgency not in presets:
        close = difflib.get_close_matches(args.urgency, list(presets), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"presets: {', '.join(presets)}"
        raise ParamError(f"--urgency {args.urgency!r} is not in planner.tuf_presets of {args.params} ({hint})")
    p = presets[args.urgency]
    tuf = TufParams(p.ert_s if args.ert is None else args.ert, p.alpha if args.alpha is None else args.alpha,
                    p.beta if args.beta is None else args.beta)
    return tuf.check(f"the TUF of --urgency {args.urgency}").as_tuple()


def add_tuf_arguments(parser: argparse.ArgumentParser) -> None:
    """``--urgency``, ``--params``, ``--ert``, ``--alpha``, ``--beta``: what :func:`tuf_for` reads."""
    from llm_planner_node.config.params import DEFAULT_PARAMS

    parser.add_argument("--urgency", default="normal",
                        help=f"TUF preset from the parameter file's planner.tuf_presets ({preset_help()})")
    parser.add_argument("--params", default=str(DEFAULT_PARAMS),
                        help="parameter YAML whose planner.tuf_presets --urgency names (default: %(default)s)")
    parser.add_argument("--ert", type=float, help="override the TUF's ERT (s)")
    parser.add_argument("--alpha", type=float, help="override the TUF slope (<= 0)")
    parser.add_argument("--beta", type=float, help="override the TUF's maximum utility")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("robot_id", help="robot that executes the plan (as in the parameter YAML)")
    parser.add_argument("instruction", help='the task, e.g. "look for the cat"')
    add_tuf_arguments(parser)
    parser.add_argument("--task-type", default="", help="label for reports")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    parser.add_argument("--wait", type=float, default=10.0,
                        help="how long to wait for a planner to answer before giving up (s; longer on a loaded host)")


def run(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.context import Context

    tuf = tuf_for(args)
    ctx = Context()
    rclpy.init(context=ctx)
    client = GoalClient(ctx)
    try:
        with spinning(client.node, ctx):
            return _send_and_watch(client, args, tuf)
    finally:
        client.destroy()
        rclpy.try_shutdown(context=ctx)


def _send_and_watch(client: GoalClient, args: argparse.Namespace, tuf: tuple[float, float, float]) -> int:
    import sys

    if not client.wait_for_server(min(args.wait, args.timeout)):
        print(f"timely-fleet goal: no planner answers on the 'plan_task' action ({client.wait_problem}); start "
              "one with `timely-fleet up`", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    lock = threading.Lock()

    def say(text: str) -> None:
        """One whole line: the robot's status and the goal's feedback arrive on other threads."""
        with lock:
            print(text, flush=True)

    mine: dict[str, Any] = {}
    shown: set[str] = set()

    def progress(st: Any) -> None:
        """The robot's progress on this goal, from /robot_status: one line per change (a robot
        answers the planner's probes during a long skill by repeating its latest status)."""
        if st.goal_id != mine.get("id"):
            return
        if st.state == 2 and st.current_skill:
            line = f"segment {st.sequence} executing {st.current_skill} (skill {len(st.skill_names) + 1})"
        elif st.state == 3:
            done = ", ".join(f"{n} {d:.1f} s" for n, d in zip(st.skill_names, st.skill_durations_s))
            line = f"segment {st.sequence} finished ({done})"
        elif st.state == 4:
            line = f"segment {st.sequence} failed: {st.error}"
        elif st.state == 5:
            line = f"segment {st.sequence} cancelled"
        elif st.state == 0 and st.error:
            line = st.error
        else:
            return
        if line in shown:
            return
        shown.add(line)
        say(f"[{time.monotonic() - t0:7.3f} s] robot {st.robot_id}: {line}")

    client.watch_status(progress)

    def show(fb: Any) -> None:
        if not fb.skills and fb.text.startswith("waiting for approval of segment"):  # held for an operator
            say(f"[{time.monotonic() - t0:7.3f} s] {fb.text}")
            return
        skills = ", ".join(f"{s.name}({', '.join(s.arg_values)})" for s in fb.skills)
        if fb.plan > mine.get("plan", 0):
            mine["plan"] = fb.plan
            say(f"[{time.monotonic() - t0:7.3f} s] the plan asked to re-plan: plan {fb.plan + 1}")
        say(f"[{time.monotonic() - t0:7.3f} s] segment {fb.index}: {fb.text!r} -> {skills}"
            f" (queued {fb.queue_s * 1000:.0f} ms, generated in {fb.generation_s * 1000:.0f} ms)"
            f"{' [final]' if fb.final else ''}")

    h = client.send(args.robot_id, args.instruction, task_type=args.task_type, tuf=tuf, on_feedback=show)
    mine["id"] = h.goal_id
    deadline = t0 + args.timeout
    gone_since: float | None = None
    while not h.done:
        now = time.monotonic()
        if now >= deadline:
            client.cancel(h)
            say(f"no result after {args.timeout} s: goal cancelled")
            return 1
        # a planner killed without a goodbye leaves discovery within its DDS lease (4 s,
        # config/fastdds.xml); its robots' adapters stop them when its own lease runs out. With a
        # standby planner known, wait for its takeover: GoalClient then asks it for the result
        # (or ends the goal as lost if it did not take the goal over).
        if client.client.server_is_ready():
            gone_since = None
        elif gone_since is None:
            gone_since = now
        elif now - gone_since >= (gone_after := client.planner_gone_after_s(PLANNER_GONE_S)):
            no_takeover = (f" and no standby planner took over within {gone_after:g} s"
                           if gone_after > PLANNER_GONE_S else "")
            say(f"the planner is gone: its action server disappeared {gone_since - t0:.1f} s after the goal was "
                f"sent{no_takeover}; robot {args.robot_id}'s adapter stops the robot when the planner's lease runs out")
            return 1
        h.result_wait(0.25)
    res = h.result(0)
    say(f"{STATUS_NAMES.get(res.status, res.status)}: {res.message}")
    if len(res.plans) > 1:  # the goal re-planned: each plan it ran
        for i, p in enumerate(res.plans):
            say(f"  plan {i + 1}: {p}")
    for a in res.answers:  # what the robot found, skill by skill
        say(f"  segment {a.segment}: {a.skill} -> {a.value}")
    for a in res.unachieved:  # NOT_ACHIEVED: the calls that did not do their action
        say(f"  not achieved: segment {a.segment}: {a.skill} -> {a.value}")
    if res.has_return_value:
        say(f"the plan returned {res.return_value}")
    if res.status == 0:
        say(f"response {res.response_time_s:.3f} s, robot waiting {res.robot_waiting_s:.3f} s, "
            f"utility {res.time_utility:.2f} of {tuf[2]:g}")
    return 0 if res.status == 0 else 1
