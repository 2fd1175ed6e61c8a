"""``timely-fleet eval``: run scheduling policies on one workload and report per-task-type metrics.

    timely-fleet eval --workload WID1 --policy vllm,vllm-stream,timelyllm --engine sim
    timely-fleet eval --workload my.yaml --policy timelyllm --json out.json --out results/
    timely-fleet eval --workload WID1 --policy timelyllm --engine vllm --bag runs/wid1   # live

``--engine sim``: the discrete-event simulator (the real Planner over the calibrated simulated
engine and simulated robots; fast, hundreds of robots). Every policy sees the same arrivals
(same seed) and the same robot execution-time draws.

``--engine vllm``: live, through the planner node on vLLM and simulated robots, started here for
each policy (or an already running node with ``--attach``); the workload's goals are sent as
``plan_task`` action goals with their original timing and metrics are computed from the
``/planner/results`` messages (see :mod:`.live`).

Output: a table (per policy and task type: mean utility, % of beta, mean/P90 response, mean
robot waiting, goals completed, tokens/s), ``--json PATH`` (one object per policy) and
``--out DIR`` (``results.json`` + ``utility.png`` / ``waiting.png`` bar charts).

``--admission literal|improved`` (default improved): the batch admission shared by every
segmented policy (``vllm-stream``, ``seg-fcfs``, ``seg-edf``, ``timelyllm`` and its
combinations): ``literal`` is TimelyLLM 4.4 as written, ``improved`` ours (what differs and
why: :mod:`llm_planner_node.core.batching`). ``vllm``, Trail, LTR, LAMPS and hybrid keep their
own rule (fixed batch up to KV memory); ``--max-batch`` overrides both with a fixed batch.

``--calibration NAME|PATH`` (sim; default ``paper-vllm``): the simulated engine's calibration,
a name from :data:`llm_planner_node.engines.calibration.CALIBRATIONS` (``paper-vllm``,
``hf-table1``, ``phi3-hf-table1``, ``npu-hybrid``) or a file written by ``timely-fleet
calibrate``; the report's header line and the JSON's ``"calibration"`` give its constants and
source. A simulated run applies one plan per robot with the workload's agent count
(:mod:`timely_tools.sim.agents`; the live node enforces the same rule).

``--bound`` (sim only): a real upper bound on the mean time utility of any schedule of these
arrivals on the simulated engine (:mod:`.bound_milp`: hindsight MILP over engine iterations,
sum(beta), per-goal served-alone); adds a "bound" row per task type and each policy's utility
as % of it (``%bound``) to the table, and ``"bound": {"all": {"mean_utility": ..}, ...}`` to
the JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from llm_planner_node.core.policies import policy_names
from timely_robot.logging_setup import add_log_level_argument, configure_logging
from timely_tools.evaluation.results import bar_chart, format_bound_rows, format_table, policy_result, write_json
from timely_tools.evaluation.workload_spec import EvalSpec, compose, load_spec


def agent_pool(spec: EvalSpec, arrivals: Sequence[Any]) -> Any:
    """The workload's fleet: ``spec.agents`` robots of each kind its goals use (one plan per
    robot, :mod:`timely_tools.sim.agents`)."""
    from timely_tools.sim.agents import AgentPool

    return AgentPool.for_goals([a.goal for a in arrivals], spec.agents)


def run_sim(spec: EvalSpec, policies: Sequence[str], seed: int | None = None, *,
            max_batch: int | None = None, chat_segmentation: str | None = None,
            progress: bool = False, arrivals: list | None = None,
            admission: str | None = None, one_plan_per_robot: bool = True,
            submitted: dict[str, list] | None = None) -> list[dict[str, Any]]:
    """Simulate each policy on the same arrivals; one :func:`policy_result` dict per policy.
    ``admission``: the shared admission of segmented policies (None: the default, improved).
    ``one_plan_per_robot`` (default): the workload's ``agents`` robots per kind, a task for a busy
    robot goes to a free one of its kind or waits (:mod:`timely_tools.sim.agents`); each
    result then has ``agents`` = {"reassigned", "waited", "mean_wait_s", "max_wait_s"}.
    ``submitted``: filled with each policy's goals as they reached the planner (``Arrival`` at
    the time they were submitted: later than their arrival when they waited for a robot)."""
    from timely_tools.sim.simulation import simulate

    seed = spec.seed if seed is None else seed
    arr = arrivals if arrivals is not None else compose(spec, seed, chat_segmentation=chat_segmentation)
    params: dict[str, Any] = {} if max_batch is None else {"max_batch": max_batch}
    if admission is not None:
        params["admission"] = admission
    it: Any = policies
    if progress:
        from tqdm import tqdm

        it = tqdm(policies, desc=f"{spec.name} (sim)", unit="policy", file=sys.stderr)
    out = []
    for name in it:
        t0 = time.perf_counter()
        pool = agent_pool(spec, arr) if one_plan_per_robot else None
        res = simulate(arr, name, seed=seed, engine_config=spec.engine_config(),
                       planner_config=spec.planner_config(), agents=pool, **params)
        extra: dict[str, Any] = {}
        if pool is not None:
            waits = [w for w in res.agent_wait_s.values() if w > 0]
            extra["agents"] = {"robots_per_kind": spec.agents, "reassigned": len(res.reassigned),
                               "waited": len(waits),
                               "mean_wait_s": float(sum(waits) / len(waits)) if waits else 0.0,
                               "max_wait_s": float(max(waits, default=0.0))}
        if submitted is not None:
            from timely_tools.sim.workload import Arrival

            submitted[name] = [Arrival(r.arrival, r.goal) for r in res.requests]
        started = [r.gen_start[0] - r.arrival for r in res.requests if r.gen_start]
        out.append(policy_result(name, res.summary, wall_s=time.perf_counter() - t0,
                                 sim_end_s=res.end_time, peak_batch=res.engine.peak_batch,
                                 # arrival at the planner -> first admission into the engine's batch
                                 mean_admission_delay_s=float(sum(started) / len(started)) if started else None,
                                 **extra))
    return out


def add_calibration_argument(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """``--calibration NAME|PATH`` (eval, paper, compare)."""
    from llm_planner_node.engines.calibration import CALIBRATIONS, DEFAULT_CALIBRATION

    parser.add_argument("--calibration", default=default or DEFAULT_CALIBRATION, metavar="NAME|PATH",
                        help=f"simulated engine calibration: {', '.join(CALIBRATIONS)} or a file "
                             f"written by `timely-fleet calibrate` (default {default or DEFAULT_CALIBRATION}: "
                             "TimelyLLM's Llama3-8B on vLLM; the chat workload keeps Phi-3's Table 1 "
                             "profile); every report prints its source")


def with_calibration(spec: EvalSpec, name_or_path: str | None) -> EvalSpec:
    """``spec`` on the calibration ``name_or_path`` (checked: SpecError names the choices)."""
    if name_or_path is None:
        return spec
    from llm_planner_node.engines.calibration import get_calibration
    from timely_tools.evaluation.workload_spec import SpecError

    try:
        get_calibration(name_or_path)
    except ValueError as e:
        raise SpecError(f"--calibration: {e}") from None
    return spec.with_(calibration=str(name_or_path))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", default="WID1",
                        help="preset (WID1, WID2, WID3, CHAT) or a YAML spec file")
    parser.add_argument("--policy", default="vllm,vllm-stream,seg-fcfs,seg-edf,timelyllm",
                        help=f"comma-separated policies ({', '.join(policy_names())})")
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--seed", type=int, default=None, help="override the spec's seed")
    parser.add_argument("--max-batch", type=int, default=None, help="fixed maximum batch size")
    parser.add_argument("--admission", choices=("literal", "improved"), default="improved",
                        help="batch admission of every segmented policy: literal = TimelyLLM 4.4 "
                             "as written, improved = ours (default)")
    parser.add_argument("--chat-segmentation", choices=("sentence", "paragraph"), default=None)
    add_calibration_argument(parser)
    parser.add_argument("--json", metavar="PATH", help="write results as JSON")
    parser.add_argument("--out", metavar="DIR", help="write results.json and bar charts here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--bound", action="store_true",
                        help="sim: add the hindsight MILP upper bound and each policy's %% of it")
    add_log_level_argument(parser)
    # live (--engine vllm) options
    parser.add_argument("--bag", metavar="DIR", help="live: record a rosbag2 of the run here")
    parser.add_argument("--attach", action="store_true",
                        help="live: send the goals to an already running node (one --policy) "
                             "instead of starting the planner and simulated robots here")
    parser.add_argument("--params", metavar="YAML",
                        help="live: planner parameters (engine, model, batching); robots come from the workload")
    parser.add_argument("--robots", default="",
                        help="live: comma-separated robot ids whose segment topics to record")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="live: multiply arrival times (e.g. 0.5 = twice as fast)")
    parser.add_argument("--limit", type=int, default=None, help="live: send only the first N goals")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="live: seconds to wait for results after the last goal")


def _check_arguments(args: argparse.Namespace, policies: list[str]) -> None:
    """Refuse what cannot run, before anything runs (CommandError: one sentence)."""
    import difflib

    from timely_robot.errors import CommandError

    if not policies:
        raise CommandError(f"--policy names no policy (known: {', '.join(policy_names())})")
    for p in policies:
        if p not in policy_names():
            close = difflib.get_close_matches(p, policy_names(), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(policy_names())}"
            raise CommandError(f"unknown policy {p} ({hint})")
    if len(set(policies)) != len(policies):
        raise CommandError(f"--policy names a policy twice ({args.policy})")
    if args.engine == "sim":
        live_only = [o for o, v in (("--bag", args.bag), ("--attach", getattr(args, "attach", False)),
                                    ("--params", getattr(args, "params", None)), ("--limit", args.limit)) if v]
        if live_only:
            raise CommandError(f"{', '.join(live_only)} {'is' if len(live_only) == 1 else 'are'} for live runs: "
                               "add --engine vllm")
    if getattr(args, "admission", "improved") != "improved" and args.engine != "sim":
        raise CommandError("--admission applies to simulated runs; a live planner takes its "
                           "admission from the planner.admission parameter (--params)")
    if getattr(args, "bound", False) and args.engine != "sim":
        raise CommandError("--bound bounds schedules on the simulated engine's iteration model: "
                           "use it with --engine sim")
    if not args.time_scale > 0:
        raise CommandError(f"--time-scale must be > 0, got {args.time_scale}")
    if args.limit is not None and args.limit < 1:
        raise CommandError(f"--limit must be >= 1, got {args.limit}")


def run(args: argparse.Namespace) -> int:
    """The command; a user mistake ends it with one sentence on stderr and status 2."""
    from llm_planner_node.errors import is_user_error

    configure_logging(getattr(args, "log_level", "info"), ros=getattr(args, "engine", "sim") != "sim")
    try:
        return _run(args)
    except Exception as e:  # noqa: BLE001 - only user mistakes are caught, the rest is re-raised
        if not is_user_error(e):
            raise
        print(f"timely-fleet eval: {e}", file=sys.stderr)
        return 2


def batch_rules(policies: Sequence[str], max_batch: int | None, admission: str | None) -> dict[str, str]:
    """What batch admission (and simulated engine rule) each policy runs with: the segmented
    policies share ``admission``; vllm, Trail, LTR, LAMPS and hybrid keep their papers' fixed
    batch; hybrid also assumes its paper's iteration rule; ``--max-batch`` fixes it for all."""
    from llm_planner_node.core.batching import FixedBatch
    from llm_planner_node.core.policies import get_policy

    out = {}
    for name in policies:
        pol = get_policy(name, **({} if max_batch is None else {"max_batch": max_batch}),
                         **({} if admission is None else {"admission": admission}))
        adm = pol.admission
        rule = (f"fixed batch {adm.max_batch}" if isinstance(adm, FixedBatch)
                else f"latency-guided ({getattr(adm, 'name', 'custom')})")
        if pol.engine_iteration is not None:
            rule += f", engine iteration rule {pol.engine_iteration}"
        out[name] = rule
    return out


def _add_bounds(results: list[dict[str, Any]], arr: list, submitted: dict[str, list],
                spec: EvalSpec) -> dict[str, Any] | None:
    """``eval --bound``: each policy's ``utility_pct_of_bound``. The bound assumes every goal
    reaches the planner at its arrival; a goal that waited for its robot (one plan per robot)
    reached it later, at a time the policy's own schedule decided, so no bound over the arrivals
    bounds that policy (a policy scored 102.5% of it). Then each policy gets its own bound, over
    its goals as they reached the planner (``bound`` in its result), and None is returned;
    else the one bound of the arrivals, shared by every policy."""
    from timely_tools.evaluation.bound_milp import add_pct_of_bound, bound_by_type

    if all(r.get("agents", {}).get("waited", 0) == 0 for r in results):
        bound = bound_by_type(arr, spec.engine_config(), spec.planner_config())
        add_pct_of_bound(results, bound)
        return bound
    for r in results:
        r["bound"] = bound_by_type(submitted[r["policy"]], spec.engine_config(), spec.planner_config())
        add_pct_of_bound([r], r["bound"])
    return None


def _run(args: argparse.Namespace) -> int:
    spec = load_spec(args.workload)
    if args.engine == "sim":
        spec = with_calibration(spec, getattr(args, "calibration", None))
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    _check_arguments(args, policies)
    seed = spec.seed if args.seed is None else args.seed
    bound = None
    if args.engine == "sim":
        arr = compose(spec, seed, chat_segmentation=args.chat_segmentation)
        submitted: dict[str, list] = {}
        results = run_sim(spec, policies, seed, max_batch=args.max_batch, arrivals=arr,
                          chat_segmentation=args.chat_segmentation, progress=not args.no_progress,
                          admission=getattr(args, "admission", None), submitted=submitted)
        if getattr(args, "bound", False):
            bound = _add_bounds(results, arr, submitted, spec)
    else:
        from timely_tools.evaluation.live import run_live

        results = run_live(spec, policies, seed, args)
        if results is None:
            return 1
    n_goals = results[0]["task_types"].get("all", {}).get("goals", 0) if results else 0
    admission = getattr(args, "admission", "improved")
    rules = batch_rules(policies, args.max_batch, admission)
    print(f"workload {spec.name}: {n_goals} goals, seed {seed}, engine {args.engine}")
    print("batch admission: " + "; ".join(f"{p} {r}" for p, r in rules.items()))
    if args.engine == "sim":
        print(f"calibration {spec.calibration_info()['description']}")
        moved = [(r["policy"], r["agents"]) for r in results if "agents" in r]
        if moved:
            print(f"one plan per robot ({spec.agents} robots per kind): " + "; ".join(
                f"{p} {a['reassigned']} moved to a free robot, {a['waited']} waited "
                f"(mean {a['mean_wait_s']:.2f} s)" for p, a in moved))
    own_bounds = any("bound" in r for r in results)  # per policy (_add_bounds)
    print(format_table(results, bound, pct_of_bound=own_bounds))
    if own_bounds:
        print("goals waited for their robot, so each policy's %bound is against its own bound: its goals "
              "as they reached the planner")
        for r in results:
            print(format_bound_rows(r["bound"], label=f"bound {r['policy']}"))
    for r in results:
        if r.get("bag"):
            print(f"recorded {r['policy']} to {r['bag']} (timely-fleet report {r['bag']})")
    doc = {"workload": spec.as_dict(), "engine": args.engine, "seed": seed,
           "calibration": spec.calibration_info() if args.engine == "sim" else None,
           "max_batch": args.max_batch, "admission": admission, "batch_rules": rules, "policies": results}
    if bound is not None:
        doc["bound"] = bound
    if args.json:
        write_json(args.json, doc)
    if args.out:
        out = Path(args.out)
        write_json(out / "results.json", doc)
        bar_chart(results, out / "utility.png", f"{spec.name}: time utility")
        bar_chart(results, out / "waiting.png", f"{spec.name}: robot waiting",
                  metric="mean_waiting_s", ylabel="mean robot waiting (s)")
        print(f"wrote {out / 'results.json'}, {out / 'utility.png'}, {out / 'waiting.png'}")
    return 0
