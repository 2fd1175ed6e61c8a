"""`timely-fleet bench fleet`: a fleet of N simulated drones over real ROS.

For each size N of ``--sizes`` (default 100, 300, 1000):

- a temporary fleet YAML of N simulated drones ``drone0`` .. ``drone<N-1>`` (``engine: {kind:
  sim}``, ``--policy``, ``security.mode`` ``--security``);
- ``timely-fleet up --only planner`` and ``--adapter-procs`` x ``timely-fleet up --only adapters
  --robots k/n`` as separate processes (started, stopped and sampled with the helpers of
  :mod:`.faults_bench`); robots execute at ``--time-scale`` (1 = real time);
- in this process, an independent goal generator: a :class:`~llm_planner_node.ros.goal_client.GoalClient`
  on its own node and executor thread sends the goals of a WID1 workload scaled to N agents
  (TimelyLLM Table 3: Poisson events at 0.25/s x N/25, each starting 1-8 tasks on distinct agents,
  drone traces 1-8: 0.045 goals/s per robot) at their arrival times for ``--duration-s`` seconds.
  A robot runs one plan at a time: a goal whose agent still runs an earlier plan (no result yet)
  goes to a free robot chosen at random instead (``redirected``); none free: not sent
  (``not_sent_all_busy``). Then at most ``--drain-s`` for the results.

What is measured:

- ``sent`` / ``succeeded`` / ``timeout`` (result status TIMEOUT) / ``lost`` (no result after the
  drain) / ``by_status``;
- ``inflation``: the same goals (same send times relative to the first, same robots, same
  traces) simulated by :func:`~timely_tools.sim.simulation.simulate` with the same policy
  (the simulator of ``timely-fleet eval``; default engine and planner configuration, 8 ms
  network). Per goal live ``response_time_s`` / simulated response; ``inflation_mean`` is
  mean(live) / mean(sim) over goals that succeeded live, ``inflation_p90`` the ratio of the P90s;
- ``not_succeeded_why``: result messages of goals that did not succeed, counted;
  ``response_parts_mean_s``: where a live response goes, from the first segment's timings
  (``queue``: arrival -> generation start; ``generation``; ``to_dispatch``; ``dispatch_to_execution``:
  the ROS link and the adapter); ``planner_counters``: the planner's segment re-sends, probes and
  status delay p99 from its last ``/diagnostics``;
- ``startup_s``: process launch -> the planner answers the client's handshake and every robot's
  segment topic has its adapter subscribed;
- per process (``planner``, ``adapters_<k>``): CPU (% of one core) while idle (``--idle-s``
  before any goal) and under load (sending phase), RSS and peak RSS (MiB), thread count;
- ``wakeup``: the per-wake-up CPU cost of an rclpy single-threaded executor that receives segments
  for N robots, per-robot topics (N subscriptions, what the planner publishes on with
  ``security.per_robot_topics``) vs the shared keyed topic (one subscription,
  :data:`~llm_planner_node.ros.messages.SEGMENTS_TOPIC`, the planner's default):
  ``--wakeup-msgs`` messages at 200/s from another process's publisher, CPU of the spin thread
  per message taken (``time.thread_time``).

With ``--standby`` a standby planner (``timely-fleet up --standby``, its own process) follows the
active one before the goals start (its diagnostics report a snapshot applied), and the run
reports what the journal costs (``journal``): journals and bytes per second on
``planner/journal`` (counted by this process's own subscriber, serialized sizes), the goal
entries per second they carry, snapshots and snapshot requests, and the active planner's CPU for
journaling (writer thread and scheduler-thread takes, from its diagnostics) as % of a core over
the sending phase. ``--standby both`` runs each size without a standby, then with one, and
reports the ratios (``standby_vs_none``: planner CPU under load, inflation mean and p90).
``--repeats K`` runs each size (and mode) K times, alternating the modes (A B A B), and reports
each figure's runs, median, min and max (``repeats``); the ratios are then of the medians.
``--kill-at S`` (with a standby) SIGKILLs the active planner S seconds into the sending phase and
reports the takeover (``takeover``): the goals in flight at the kill (accepted, no result), how
many the standby adopted (its ``planner/active`` message), how they ended, and the seconds from
the kill to the new term's announcement. The goal generator goes on meanwhile (its client
re-attaches to the new active planner).

Bounded: every size is at most startup (<= 120 s) + idle + duration + drain; defaults (60 s
sending, 60 s drain) run the three sizes in about 8 minutes here. Every child process is stopped
in ``finally``.

Run: ``timely-fleet bench fleet [--sizes 100,300,1000] [--duration-s 60] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from timely_tools import outfiles
from timely_tools.bench.faults_bench import CLI, STATUS_NAMES, TIMEOUT, in_workdir, pct, proc_sample
from timely_tools.bench.procs import start_process, stop_process

SUCCEEDED = 0
WID1_EPS_PER_AGENT = 0.25 / 25  # WID1: 0.25 events/s for 25 agents, 4.5 tasks per event on average
WID1_GOALS_PER_AGENT_S = WID1_EPS_PER_AGENT * 4.5  # 0.045
#: a kill's goals sent this shortly before it may not be in a journal yet (a delta follows a new goal
#: within 0.05 s, after the action server accepted it): reported apart
RECENT_S = 0.25
REQUIRED_KEYS = ("n", "sent", "succeeded", "timeout", "lost", "inflation_mean", "startup_s", "processes",
                 "idle_cpu_pct", "wakeup")


def log(text: str) -> None:
    print(f"[fleet] {text}", file=sys.stderr, flush=True)


@dataclass
class Config:
    sizes: tuple[int, ...] = (100, 300, 1000)
    duration_s: float = 60.0
    drain_s: float = 180.0  # a base's plan of three long drives runs ~150 s; drones end within ~35 s
    idle_s: float = 5.0
    time_scale: float = 1.0
    adapter_procs: int = 1
    policy: str = "timelyllm"
    security: str = "sign"
    seed: int = 0
    wakeup_msgs: int = 600
    wakeup: bool = True
    standby: str = "no"  # no | yes | both
    standby_nice: int = 10
    kill_at_s: float | None = None
    repeats: int = 1  # runs of each size and mode, one after the other (A B A B with --standby both)
    bases: float = 0.0  # the share of each size's robots that are mobile bases (base traces 12-14)
    goals_path: str | None = None  # per-goal live and simulated responses, one JSON line each


def threads_of(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def sample(pid: int) -> dict[str, float]:
    s = proc_sample(pid) or {}
    s["threads"] = threads_of(pid) or 0
    s["t"] = time.monotonic()
    return s


def cpu_pct(a: dict, b: dict) -> float | None:
    if not a or not b or "cpu_s" not in a or "cpu_s" not in b or b["t"] <= a["t"]:
        return None
    return round(100.0 * (b["cpu_s"] - a["cpu_s"]) / (b["t"] - a["t"]), 1)


def split(n: int, bases: float) -> tuple[int, int]:
    """(drones, bases) of a fleet of ``n`` robots of which a share ``bases`` are mobile bases."""
    b = int(round(n * bases))
    return n - b, b


def workload(n: int, duration_s: float, seed: int, bases: float = 0.0) -> list[Any]:
    """WID1 arrivals scaled to the drones (same per-agent rate), robot ids ``drone<i>``; with
    ``bases``, the bases' goals at the same per-agent rate, the base traces (12-14) on ``base<i>``."""
    from timely_tools.sim.workload import WorkloadSpec, generate

    drones, nb = split(n, bases)
    out = generate(WorkloadSpec(WID1_EPS_PER_AGENT * drones, 8, tuple(range(1, 9)), drones, duration_s), seed)
    if nb:
        base = generate(WorkloadSpec(WID1_EPS_PER_AGENT * nb, 8, (12, 13, 14), nb, duration_s), seed + 1)
        out = sorted(out + base, key=lambda a: a.t)
    return out


#: a bench base's places: the Nav2 simulator's room, where the base traces go
BASE_PLACES = {"dock": [2, 2], "kitchen": [16, 3], "hall": [10, 8], "office": [3, 17], "lab": [17, 17]}


def sim_base_robot(robot_id: str) -> dict[str, Any]:
    """A simulated mobile base's entry of a bench's fleet YAML: the room's places, and a
    detections topic reporting the classes the bench plans look for."""
    return {"id": robot_id, "kind": "base", "adapter": "sim", "places": BASE_PLACES,
            "perception": {"source": "topic", "topic": f"{robot_id}/detections", "classes": ["person", "box"]}}


def fleet_yaml(cfg: Config, n: int, tmp: Path) -> Path:
    drones, nb = split(n, cfg.bases)
    robots = [{"id": f"drone{i}", "kind": "drone", "adapter": "sim"} for i in range(drones)]
    robots += [sim_base_robot(f"base{i}") for i in range(nb)]
    p = tmp / f"fleet_{n}.yaml"
    p.write_text(yaml.safe_dump({"planner": {"engine": {"kind": "sim"}, "policy": cfg.policy},
                                 "robots": robots,
                                 "security": {"mode": cfg.security, "keystore": str(tmp / "keys")}}))
    return p


def simulated_responses(sent: list[tuple[float, Any]], policy: str) -> tuple[list[float | None], dict[str, str]]:
    """The simulator's response time for each sent goal (same relative times, robots, traces), and
    its engine's work in the planner's diagnostics keys (``SimEngine.diagnostics``)."""
    from llm_planner_node.core.metrics import measured_times
    from llm_planner_node.core.clock import VirtualClock
    from llm_planner_node.engines.sim_engine import SimEngine
    from timely_tools.sim.simulation import simulate
    from timely_tools.sim.workload import Arrival

    arrivals = [Arrival(t, g) for t, g in sent]
    res = simulate(arrivals, policy)
    by_id = {r.id: r for r in res.requests}
    out: list[float | None] = []
    for i in range(len(arrivals)):
        req = by_id.get(res.request_of_arrival.get(i, -1))
        out.append(None if req is None else float(measured_times(req)[0]))
    stats = SimEngine(VirtualClock())
    stats.stats = res.engine
    return out, stats.diagnostics()


# -- per-wake-up cost of the executor: per-robot topics vs one shared topic ------------------------
def wakeup_publisher_main(mode: str, n: int, count: int, rate: float, domain_ready: str) -> None:
    """Own process: publish ``count`` segments for random robots of ``n`` at ``rate``/s."""
    import rclpy
    from timely_fleet.msg import SkillSegment

    from timely_robot.link.ros import SEGMENT_QOS, SEGMENTS_TOPIC, SHARED_SEGMENT_QOS, segments_topic

    rclpy.init()
    node = rclpy.create_node("wakeup_pub")
    if mode == "shared":
        pub = node.create_publisher(SkillSegment, SEGMENTS_TOPIC, SHARED_SEGMENT_QOS)
        pubs = None
    else:
        pubs = [node.create_publisher(SkillSegment, segments_topic(f"drone{i}"), SEGMENT_QOS) for i in range(n)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every reader matched
        targets = [pub] if pubs is None else pubs
        if all(p.get_subscription_count() > 0 for p in targets):
            break
        time.sleep(0.05)
    Path(domain_ready).write_text("ready")
    time.sleep(1.0)
    rng = random.Random(0)
    t0 = time.monotonic()
    for k in range(count):
        i = rng.randrange(n)
        msg = SkillSegment(goal_id="g", robot_id=f"drone{i}", sequence=k, text="tc,90;")
        (pub if pubs is None else pubs[i]).publish(msg)
        delay = t0 + (k + 1) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    time.sleep(1.0)
    node.destroy_node()
    rclpy.try_shutdown()


def measure_wakeup(n: int, mode: str, count: int, tmp: Path, rate: float = 200.0) -> dict[str, float]:
    """CPU seconds of the receiving executor thread per message (and idle), ``mode`` per_robot|shared."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.msg import SkillSegment

    from timely_robot.link.ros import SEGMENTS_TOPIC, segment_qos, segments_topic

    ctx = Context()
    rclpy.init(context=ctx)
    node = Node("wakeup_sub", context=ctx)
    got = [0]

    def on_msg(_m: Any) -> None:
        got[0] += 1

    t_create = time.monotonic()
    if mode == "shared":
        node.create_subscription(SkillSegment, SEGMENTS_TOPIC, on_msg, segment_qos())
    else:
        for i in range(n):
            node.create_subscription(SkillSegment, segments_topic(f"drone{i}"), on_msg, segment_qos())
    create_s = time.monotonic() - t_create
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    stop = threading.Event()
    cpu: dict[str, float] = {}

    def spin() -> None:
        while not stop.is_set():
            ex.spin_once(timeout_sec=0.2)
            if got[0] == 1 and "first" not in cpu:
                cpu["first"] = time.thread_time()
        cpu["end"] = time.thread_time()

    ready = tmp / f"wakeup_{mode}_{n}.ready"
    pub = subprocess.Popen([sys.executable, "-c", "from timely_tools.bench.fleet_bench import "
                            f"wakeup_publisher_main as m; m({mode!r}, {n}, {count}, {rate}, {str(ready)!r})"],
                           stdout=subprocess.DEVNULL, stderr=open(tmp / f"wakeup_{mode}_{n}.log", "wb"),
                           start_new_session=True)
    th = threading.Thread(target=spin, name="wakeup-spin", daemon=True)
    try:
        th.start()
        deadline = time.monotonic() + 90
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        # idle: matched, nothing published yet (the publisher waits 1 s)
        deadline = time.monotonic() + count / rate + 30
        while got[0] < count and time.monotonic() < deadline and pub.poll() is None:
            time.sleep(0.1)
        time.sleep(0.3)
    finally:
        stop.set()
        th.join(5)
        stop_process(pub, wait_s=5)
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
    per_msg = None
    if got[0] == 0:
        err = (tmp / f"wakeup_{mode}_{n}.log").read_text(errors="replace")[-500:]
        log(f"wake-up {mode} N={n}: nothing received (publisher exit {pub.returncode}): {err}")
    if got[0] > 1 and "first" in cpu:
        per_msg = (cpu["end"] - cpu["first"]) / (got[0] - 1)
    return {"received": got[0], "cpu_per_msg_us": None if per_msg is None else round(per_msg * 1e6, 1),
            "subscriptions": 1 if mode == "shared" else n, "create_s": round(create_s, 2)}


# -- one fleet size --------------------------------------------------------------------------------
class JournalMeter:
    """``planner/journal`` as a standby sees it, counted in this process: journals and their
    serialized bytes, and (from ``planner/active``) the goals a planner adopted at a new term."""

    def __init__(self, node: Any) -> None:
        from timely_fleet.msg import PlannerJournal, PlannerRole

        from llm_planner_node.ros.failover import journal_qos
        from llm_planner_node.ros.messages import JOURNAL_TOPIC, LATCHED_QOS, ROLE_TOPIC

        self.lock = threading.Lock()
        self.sizes: list[tuple[float, int]] = []
        self.roles: list[tuple[float, str, int, list[str]]] = []  # (t, role, term, adopted goal ids)
        node.create_subscription(PlannerJournal, JOURNAL_TOPIC, self._on_journal, journal_qos(3.0), raw=True)
        node.create_subscription(PlannerRole, ROLE_TOPIC, self._on_role, LATCHED_QOS)

    def _on_journal(self, raw: bytes) -> None:
        self.sizes.append((time.monotonic(), len(raw)))  # list.append is atomic

    def _on_role(self, m: Any) -> None:
        with self.lock:
            self.roles.append((time.monotonic(), m.role, int(m.term), list(m.adopted_goal_ids)))

    def window(self, t0: float, t1: float) -> dict[str, float]:
        got = [b for t, b in self.sizes if t0 <= t < t1]
        dt = max(t1 - t0, 1e-9)
        return {"journals_per_s": round(len(got) / dt, 1), "bytes_per_s": round(sum(got) / dt),
                "bytes_max": max(got, default=0)}

    def takeover_after(self, t: float) -> tuple[float, int, list[str]] | None:
        """The first active role of a term above 1 announced after ``t``: (time, term, adopted)."""
        with self.lock:
            for at, role, term, adopted in self.roles:
                if at >= t and role == "active" and term > 1:
                    return at, term, adopted
        return None


def _num(values: dict[str, str], key: str) -> float:
    try:
        return float(values.get(key, "nan"))
    except ValueError:
        return float("nan")


def run_size(cfg: Config, n: int, tmp: Path, standby: bool = False) -> dict[str, Any]:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from llm_planner_node.ros.goal_client import GoalClient
    from timely_tools.evaluation.live import live_instruction
    from timely_robot.link.ros import SEGMENTS_TOPIC, planner_segment_topics, segments_topic

    params = fleet_yaml(cfg, n, tmp)
    arrivals = workload(n, cfg.duration_s, cfg.seed, cfg.bases)
    procs: dict[str, subprocess.Popen | None] = {}
    ctx = Context()
    rclpy.init(context=ctx)
    client = None
    ex = None
    stop_spin = threading.Event()
    spinner = None
    r: dict[str, Any] = {"n": n, "arrivals": len(arrivals), "adapter_procs": cfg.adapter_procs,
                         "segment_topics": planner_segment_topics(False), "time_scale": cfg.time_scale,
                         "standby": standby, "bases": split(n, cfg.bases)[1]}
    tag = f"{n}{'_standby' if standby else ''}"
    try:
        up = [*CLI, "up", "--log-level", "warning", "--params", str(params)]
        t_launch = time.monotonic()
        procs["planner"] = start_process([*up, "--only", "planner"], tmp / f"planner_{tag}.log")
        if standby:
            # at a lower CPU priority (nice): on one shared host, a standby's following must not
            # take CPU from the active planner's goals (on its own host it need not be niced)
            nice = ["nice", "-n", str(cfg.standby_nice)] if cfg.standby_nice else []
            procs["standby"] = start_process([*nice, *up, "--standby"], tmp / f"standby_{tag}.log")
        k_procs = max(1, min(cfg.adapter_procs, n))
        for k in range(k_procs):
            procs[f"adapters_{k + 1}"] = start_process([*up, "--only", "adapters", "--time-scale", str(cfg.time_scale),
                                                        "--robots", f"{k + 1}/{k_procs}"], tmp / f"adapters_{tag}_{k + 1}.log")
        client = GoalClient(ctx, name="fleet_bench_client")
        from diagnostic_msgs.msg import DiagnosticArray

        diag: dict[str, str] = {}  # the active planner's last diagnostics values (resends, probes, status delay)
        standby_diag: dict[str, str] = {}  # the standby's

        def on_diag(m: Any) -> None:
            for st in m.status:  # "<node name>: <part>": the active planner is llm_planner until a takeover
                node = st.name.split(":", 1)[0]
                (standby_diag if node == "llm_planner_standby" else diag).update({kv.key: kv.value for kv in st.values})

        client.node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
        meter = JournalMeter(client.node)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(client.node)

        def spin() -> None:
            while not stop_spin.is_set():
                try:
                    ex.spin_once(timeout_sec=0.05)
                except Exception as e:  # noqa: BLE001
                    log(f"executor error: {e!r}")

        spinner = threading.Thread(target=spin, name="fleet-client-spin", daemon=True)
        spinner.start()
        if not client.wait_for_server(120.0):
            raise RuntimeError(f"the planner did not come up: {client.wait_problem}; see {tmp}/planner_{n}.log")
        t_planner = time.monotonic() - t_launch
        drones, nb = split(n, cfg.bases)
        ids = [f"drone{i}" for i in range(drones)] + [f"base{i}" for i in range(nb)]
        deadline = time.monotonic() + 120
        while True:
            shared_ok = client.node.count_subscribers(SEGMENTS_TOPIC) >= k_procs
            per_robot = r["segment_topics"] != "shared"
            if shared_ok and (not per_robot or all(client.node.count_subscribers(segments_topic(i)) >= 1 for i in ids)):
                break
            for name, p in procs.items():
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}); see {tmp}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the adapters did not come up in 120 s; see {tmp}")
            time.sleep(0.2)
        if standby:  # the standby follows: it has applied the active planner's snapshot
            deadline = time.monotonic() + 120
            while not _num(standby_diag, "replica snapshots applied") >= 1:  # NaN: not reported yet
                if time.monotonic() > deadline or procs["standby"].poll() is not None:
                    raise RuntimeError(f"the standby did not follow the active planner; see {tmp}/standby_{tag}.log")
                time.sleep(0.2)
        r["startup_s"] = round(time.monotonic() - t_launch, 2)
        r["startup_planner_s"] = round(t_planner, 2)
        log(f"N={n}: ready in {r['startup_s']:.1f} s (planner {t_planner:.1f} s); idle {cfg.idle_s:g} s")
        s0 = {name: sample(p.pid) for name, p in procs.items()}
        time.sleep(cfg.idle_s)
        s1 = {name: sample(p.pid) for name, p in procs.items()}
        me1 = (time.process_time(), time.monotonic())  # this process: the goal client and the meters
        j1 = dict(diag)

        # -- sending phase ------------------------------------------------------------------------
        rng = random.Random(cfg.seed)
        busy: dict[str, Any] = {}  # robot -> handle of its last goal
        sent: list[tuple[float, Any, Any]] = []  # (t relative, goal as sent, handle)
        redirected = not_sent = 0
        log(f"N={n}: sending {len(arrivals)} goals over {cfg.duration_s:g} s "
            f"({len(arrivals) / cfg.duration_s:.1f} goals/s)")
        t0 = time.monotonic()
        kill: dict[str, Any] = {}
        kill_at = t0 + cfg.kill_at_s if standby and cfg.kill_at_s is not None else None

        def kill_active() -> None:
            """SIGKILL the active planner's process group; note the goals in flight (accepted, no result)."""
            kill.update(t=time.monotonic(), in_flight={h.goal_id: h for _, _, h in sent if h.accepted.is_set() and not h.done},
                        planner_cpu_pct=cpu_pct(s1["planner"], sample(procs["planner"].pid)))
            os.killpg(procs["planner"].pid, signal.SIGKILL)
            log(f"N={n}: killed the active planner with {len(kill['in_flight'])} goals in flight")

        for a in arrivals:
            if kill_at is not None and not kill and t0 + a.t >= kill_at:
                time.sleep(max(0.0, kill_at - time.monotonic()))
                kill_active()
            delay = t0 + a.t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            goal = a.goal
            h = busy.get(goal.robot_id)
            if h is not None and not h.done:
                kind = goal.robot_id.rstrip("0123456789")  # a robot of the goal's own kind
                free = [rid for rid in ids if rid.startswith(kind) and (rid not in busy or busy[rid].done)]
                if not free:
                    not_sent += 1
                    continue
                goal = replace(goal, robot_id=rng.choice(free))
                redirected += 1
            tuf = (float(goal.tuf.ert), float(goal.tuf.alpha), float(goal.tuf.beta))
            h = client.send(goal.robot_id, live_instruction(goal), robot_kind=goal.robot_kind,
                            task_type=goal.task_type, tuf=tuf, skill_set=goal.skill_set_id or "",
                            max_tokens=int(goal.max_tokens))
            busy[goal.robot_id] = h
            sent.append((time.monotonic() - t0, goal, h))
        if kill_at is not None and not kill and kill_at <= t0 + cfg.duration_s:  # after the last goal was sent
            time.sleep(max(0.0, kill_at - time.monotonic()))
            kill_active()
        t_send_end = time.monotonic()
        s2 = {name: sample(p.pid) for name, p in procs.items()}
        me2 = (time.process_time(), time.monotonic())
        j2 = dict(diag)
        drain_end = time.monotonic() + cfg.drain_s
        while time.monotonic() < drain_end and not all(h.done for _, _, h in sent):
            time.sleep(0.2)
        s3 = {name: sample(p.pid) for name, p in procs.items()}
        r["drain_s"] = round(time.monotonic() - t_send_end, 1)

        # -- results ------------------------------------------------------------------------------
        by_status: dict[str, int] = {}
        reasons: dict[str, int] = {}  # why goals did not succeed (message up to its first digit)
        live: list[float | None] = []
        parts: list[tuple[float, float, float, float]] = []  # first segment: queue, generation, dispatch, link
        for _, _, h in sent:
            if not h.done:
                live.append(None)
                continue
            res = h.result(0)
            name = STATUS_NAMES.get(res.status, str(res.status))
            by_status[name] = by_status.get(name, 0) + 1
            if res.status != SUCCEEDED:
                why = f"{name}: " + re.sub(r"\d+(\.\d+)?", "N", str(res.message))[:120]  # numbers said once
                reasons[why] = reasons.get(why, 0) + 1
            live.append(float(res.response_time_s) if res.status == SUCCEEDED else None)
            if res.status == SUCCEEDED and len(res.segments):
                seg0 = min(res.segments, key=lambda x: x.index)
                parts.append((seg0.generation_start_s, seg0.generation_end_s - seg0.generation_start_s,
                              seg0.dispatch_s - seg0.generation_end_s, seg0.execution_start_s - seg0.dispatch_s))
        r.update(sent=len(sent), redirected=redirected, not_sent_all_busy=not_sent,
                 succeeded=by_status.get("SUCCEEDED", 0), timeout=by_status.get(STATUS_NAMES[TIMEOUT], 0),
                 lost=sum(1 for _, _, h in sent if not h.done), by_status=by_status, not_succeeded_why=reasons,
                 goals_per_s=round(len(sent) / cfg.duration_s, 2))
        if parts:  # where a live response goes (means over succeeded goals, seconds)
            r["response_parts_mean_s"] = {
                k: round(sum(p[i] for p in parts) / len(parts), 3)
                for i, k in enumerate(("queue", "generation", "to_dispatch", "dispatch_to_execution"))}
        time.sleep(1.2)  # the planner's diagnostics after the last result (refreshed once a second)
        sim, sim_engine = simulated_responses([(t, g) for t, g, _ in sent], cfg.policy)
        r["engine_live_vs_sim"] = {  # the live engine's work over the run against the simulation's
            k: {"live": diag.get(k), "sim": v} for k, v in sim_engine.items()}
        pairs = [(lv, sv) for lv, sv in zip(live, sim) if lv is not None and sv is not None and sv > 0]
        if pairs:
            lv = [p[0] for p in pairs]
            sv = [p[1] for p in pairs]
            r["response_live_mean_s"] = round(sum(lv) / len(lv), 3)
            r["response_sim_mean_s"] = round(sum(sv) / len(sv), 3)
            r["response_live_p90_s"] = round(pct(lv, 90), 3)
            r["response_sim_p90_s"] = round(pct(sv, 90), 3)
            r["inflation_mean"] = round(r["response_live_mean_s"] / max(r["response_sim_mean_s"], 1e-9), 2)
            r["inflation_p90"] = round(r["response_live_p90_s"] / max(r["response_sim_p90_s"], 1e-9), 2)
            r["response_percentiles_s"] = {  # the two distributions' shapes, same goals
                f"p{q}": {"live": round(pct(lv, q), 3), "sim": round(pct(sv, q), 3)} for q in (25, 50, 75, 90, 99)}
        else:
            r["inflation_mean"] = r["inflation_p90"] = None
        if cfg.goals_path:  # one line a goal: where the two distributions differ, goal by goal
            with open(cfg.goals_path, "a", encoding="utf-8") as f:
                for (t, g, _h), a, b in zip(sent, live, sim):
                    f.write(json.dumps({"n": n, "standby": standby, "t": round(t, 3),
                                        "robot": g.robot_id, "task_type": g.task_type, "ert_s": float(g.tuf.ert),
                                        "live_s": a, "sim_s": b}) + "\n")
        if cfg.bases:  # each kind's own inflation (the same goals, live / simulated)
            r["inflation_by_kind"] = {}
            for kind in ("drone", "base"):
                kp = [(a, b) for a, b, (_t, g, _h) in zip(live, sim, sent)
                      if g.robot_kind == kind and a is not None and b is not None and b > 0]
                if kp:
                    r["inflation_by_kind"][kind] = {
                        "goals": len(kp),
                        "mean": round(sum(a for a, _ in kp) / max(sum(b for _, b in kp), 1e-9), 2),
                        "p90": round(pct([a for a, _ in kp], 90) / max(pct([b for _, b in kp], 90), 1e-9), 2)}
        r["planner_counters"] = {k: diag[k] for k in ("resends", "probes", "status_delay_p99_s", "rejected")
                                 if k in diag}
        load_s = max(t_send_end - t0, 1e-9)
        journal = meter.window(t0, t_send_end)
        for key in ("journals", "entries", "snapshots", "snapshot requests"):
            journal[f"planner_{key.replace(' ', '_')}"] = _num(j2, f"journal {key}") - _num(j1, f"journal {key}")
        journal["entries_per_s"] = round(journal["planner_entries"] / load_s, 1)
        journal["cpu_pct_of_core"] = round(100.0 * (_num(j2, "journal cpu s") - _num(j1, "journal cpu s")) / load_s, 2)
        journal["standbys_following"] = j2.get("journal standbys following")
        if standby:  # a standby that took over with no kill judged a living planner silent
            with meter.lock:
                journal["unprovoked_takeovers"] = sum(1 for at, role, term, _ in meter.roles if role == "active"
                                                      and term > 1 and (not kill or at < kill["t"]))
            journal["replica_gaps"] = _num(standby_diag, "replica sequence gaps")
            journal["replica_snapshots_applied"] = _num(standby_diag, "replica snapshots applied")
        r["journal"] = journal
        if kill:
            took = meter.takeover_after(kill["t"])
            in_flight = kill["in_flight"]
            adopted = set(took[2]) if took else set()
            ends: dict[str, int] = {}
            for gid, h in in_flight.items():
                name = STATUS_NAMES.get(h.result(0).status, "?") if h.done else "no result"
                ends[name] = ends.get(name, 0) + 1
            recent = {gid for gid, h in in_flight.items() if kill["t"] - h.sent_at <= RECENT_S}
            r["takeover"] = {"in_flight_at_kill": len(in_flight), "adopted": len(adopted & set(in_flight)),
                             "in_flight_sent_last_s": {"s": RECENT_S, "goals": len(recent),
                                                       "adopted": len(adopted & recent)},
                             "not_adopted": sorted(g[:8] for g in set(in_flight) - adopted),
                             "adopted_total": len(adopted), "ended": ends,
                             "takeover_s": None if took is None else round(took[0] - kill["t"], 2),
                             "term": None if took is None else took[1],
                             "planner_cpu_pct_before_kill": kill["planner_cpu_pct"]}
        r["processes"] = {}
        for name in procs:
            r["processes"][name] = {
                "idle_cpu_pct": cpu_pct(s0[name], s1[name]), "load_cpu_pct": cpu_pct(s1[name], s2[name]),
                "drain_cpu_pct": cpu_pct(s2[name], s3[name]),
                "rss_mib": round(s3[name].get("rss_mib", 0.0), 1),
                "peak_rss_mib": round(s3[name].get("peak_rss_mib", 0.0), 1),
                "threads_idle": s1[name].get("threads"), "threads_load": s2[name].get("threads")}
        r["idle_cpu_pct"] = round(sum(p["idle_cpu_pct"] or 0.0 for p in r["processes"].values()), 1)
        r["bench_client_load_cpu_pct"] = round(100.0 * (me2[0] - me1[0]) / max(me2[1] - me1[1], 1e-9), 1)
        r["machine_load_cpu_pct"] = round(r["bench_client_load_cpu_pct"] + sum(
            p["load_cpu_pct"] or 0.0 for p in r["processes"].values()), 1)
    finally:
        stop_spin.set()
        if spinner is not None:
            spinner.join(5)
        for name, p in procs.items():
            stop_process(p)
        if client is not None:
            client.destroy()
        if ex is not None:
            ex.shutdown()
        rclpy.try_shutdown(context=ctx)
    return r


def run_bench(cfg: Config, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
                           "wid1_goals_per_robot_s": WID1_GOALS_PER_AGENT_S, "cpus": os.cpu_count(), "sizes": []}
    modes = {"no": (False,), "yes": (True,), "both": (False, True)}[cfg.standby]
    for n in cfg.sizes:
        runs: dict[bool, list[dict[str, Any]]] = {m: [] for m in modes}
        for rep in range(cfg.repeats):
            for standby in modes:
                r = run_size(cfg, n, tmp, standby)
                r["repeat"] = rep
                r["wakeup"] = {}
                if cfg.wakeup and standby == modes[0] and rep == 0:
                    for mode in ("per_robot", "shared"):
                        r["wakeup"][mode] = measure_wakeup(n, mode, cfg.wakeup_msgs, tmp)
                out["sizes"].append(r)
                runs[standby].append(r)
                print_row(r)
        if cfg.repeats > 1:
            out.setdefault("repeats", []).append(repeat_summary(n, runs))
            print(f"N={n:>5}  over {cfg.repeats} repeats: {out['repeats'][-1]}", flush=True)
        if len(modes) == 2:
            out.setdefault("standby_vs_none", []).append(standby_ratios(median_row(runs[False]),
                                                                        median_row(runs[True])))
            print(f"N={n:>5}  with a standby / without: {out['standby_vs_none'][-1]}", flush=True)
    return out


#: the figures of a run that :func:`repeat_summary` gives the spread of, and :func:`median_row` the median of
REPEATED = ("inflation_mean", "inflation_p90", "planner_load_cpu_pct", "journal_cpu_pct_of_core")


def _holder(r: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    """The dict of a run's row that holds figure ``key``, and its name there."""
    if key == "planner_load_cpu_pct":
        return r["processes"]["planner"], "load_cpu_pct"
    if key == "journal_cpu_pct_of_core":
        return r["journal"], "cpu_pct_of_core"
    return r, key


def _figure(r: dict[str, Any], key: str) -> float | None:
    holder, name = _holder(r, key)
    return holder.get(name)


def _median(xs: list[float | None]) -> float | None:
    got = [x for x in xs if x is not None]
    return round(statistics.median(got), 4) if got else None


def repeat_summary(n: int, runs: dict[bool, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each figure of :data:`REPEATED` over the repeats of one size, per mode ("none",
    "standby"): every run's value in order, their median, min and max (the spread between
    repeats of the same code, against which a target or a change is judged)."""
    out: dict[str, Any] = {"n": n}
    for standby, rows in runs.items():
        mode = "standby" if standby else "none"
        for key in REPEATED:
            vals = [_figure(r, key) for r in rows]
            got = [v for v in vals if v is not None]
            out.setdefault(key, {})[mode] = {"runs": vals, "median": _median(vals),
                                             "min": min(got) if got else None, "max": max(got) if got else None}
    return out


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's row with :data:`REPEATED` replaced by their medians over ``rows`` (the row
    itself when there is one)."""
    if len(rows) == 1:
        return rows[0]
    r = {**rows[0], "processes": {**rows[0]["processes"], "planner": {**rows[0]["processes"]["planner"]}},
         "journal": {**rows[0]["journal"]}}
    for key in REPEATED:
        holder, name = _holder(r, key)
        holder[name] = _median([_figure(x, key) for x in rows])
    return r


def standby_ratios(none: dict[str, Any], with_standby: dict[str, Any]) -> dict[str, Any]:
    """The run with a standby against the one without, side by side: planner CPU under load and
    response inflation (mean, p90), each as with / without."""
    def ratio(a: Any, b: Any) -> float | None:
        return None if a is None or b is None or not b else round(a / b, 3)

    cpu = (with_standby["processes"]["planner"]["load_cpu_pct"], none["processes"]["planner"]["load_cpu_pct"])
    return {"n": none["n"], "planner_load_cpu_pct": {"none": cpu[1], "standby": cpu[0]},
            "planner_cpu_ratio": ratio(*cpu),
            "inflation_mean": {"none": none.get("inflation_mean"), "standby": with_standby.get("inflation_mean")},
            "inflation_p90": {"none": none.get("inflation_p90"), "standby": with_standby.get("inflation_p90")},
            "journal_cpu_pct_of_core": {"none": none["journal"]["cpu_pct_of_core"],
                                        "standby": with_standby["journal"]["cpu_pct_of_core"]}}


def _f(x: Any, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def print_row(r: dict[str, Any]) -> None:
    procs = " | ".join(f"{k}: idle {_f(p['idle_cpu_pct'], '{:.1f}')}% load {_f(p['load_cpu_pct'], '{:.0f}')}% "
                       f"{_f(p['rss_mib'], '{:.0f}')} MiB {p['threads_load']} thr" for k, p in r["processes"].items())
    w = r.get("wakeup", {})
    wk = " ".join(f"{m} {_f(v.get('cpu_per_msg_us'), '{:.0f}')} us/msg" for m, v in w.items())
    print(f"N={r['n']:>5}  sent {r['sent']:>5}  succeeded {r['succeeded']:>5}  TIMEOUT {r['timeout']:>3}  "
          f"lost {r['lost']:>3}  inflation x{_f(r.get('inflation_mean'))} (p90 x{_f(r.get('inflation_p90'))}, "
          f"live {_f(r.get('response_live_mean_s'), '{:.3f}')} s vs sim {_f(r.get('response_sim_mean_s'), '{:.3f}')} s)  "
          f"start-up {_f(r.get('startup_s'), '{:.1f}')} s  idle CPU {_f(r.get('idle_cpu_pct'), '{:.1f}')}%"
          f"{'  (standby following)' if r.get('standby') else ''}; under load, all processes and this one: "
          f"{_f(r.get('machine_load_cpu_pct'), '{:.0f}')}% of {os.cpu_count()} cores\n"
          f"         {procs}\n         wake-up: {wk}", flush=True)
    j = r.get("journal")
    if j:
        print(f"         journal: {j['journals_per_s']:.1f}/s, {j['bytes_per_s'] / 1024:.1f} KiB/s, "
              f"{j['entries_per_s']:.1f} entries/s, {j['planner_snapshots']:.0f} snapshot(s), "
              f"{j['cpu_pct_of_core']:.2f}% of a core"
              + (f"; {j['unprovoked_takeovers']} unprovoked takeover(s)" if j.get("unprovoked_takeovers") else ""),
              flush=True)
    t = r.get("takeover")
    if t:
        print(f"         takeover: {t['adopted']} of {t['in_flight_at_kill']} goals in flight adopted in "
              f"{_f(t['takeover_s'])} s; they ended {t['ended']}", flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Config()
    parser.add_argument("--sizes", default=",".join(map(str, d.sizes)), help="fleet sizes (default: %(default)s)")
    parser.add_argument("--duration-s", type=float, default=d.duration_s, help="sending phase per size (default: %(default)s)")
    parser.add_argument("--drain-s", type=float, default=d.drain_s, help="max wait for results after sending; it ends as soon as every goal has its result "
                        "(default: %(default)s: a simulated base's plan of long drives runs up to ~150 s)")
    parser.add_argument("--idle-s", type=float, default=d.idle_s, help="idle window before the goals (default: %(default)s)")
    parser.add_argument("--time-scale", type=float, default=d.time_scale, help="robots' time scale (default: %(default)s: real time)")
    parser.add_argument("--adapter-procs", type=int, default=d.adapter_procs,
                        help="adapter processes, each hosting 1/n of the robots (default: %(default)s)")
    parser.add_argument("--policy", default=d.policy, help="planner policy (default: %(default)s)")
    parser.add_argument("--security", choices=("sign", "off"), default=d.security, help="security.mode (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--wakeup-msgs", type=int, default=d.wakeup_msgs,
                        help="messages per wake-up measurement (default: %(default)s)")
    parser.add_argument("--no-wakeup", action="store_true", help="skip the per-wake-up cost measurement")
    parser.add_argument("--standby", nargs="?", const="yes", default=d.standby, choices=("no", "yes", "both"),
                        help="a standby planner follows the active one (both: each size without, then with one)")
    parser.add_argument("--standby-nice", type=int, default=d.standby_nice,
                        help="the standby's niceness on this shared host (default: %(default)s; 0: as the active planner)")
    parser.add_argument("--kill-at", dest="kill_at_s", type=float, default=None, metavar="S",
                        help="with --standby: SIGKILL the active planner S s into the sending phase")
    parser.add_argument("--repeats", type=int, default=d.repeats,
                        help="runs of each size (and mode: A B A B with --standby both), their spread and "
                             "medians reported (default: %(default)s)")
    parser.add_argument("--bases", type=float, default=d.bases, metavar="SHARE",
                        help="the share of each size's robots that are mobile bases (simulated, base traces "
                             "12-14; default: %(default)s)")
    parser.add_argument("--goals-json", dest="goals_path", metavar="PATH",
                        help="append each goal's live and simulated response as a JSON line (for a closer look)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")


def run(args: argparse.Namespace) -> int:
    cfg = Config(sizes=tuple(int(x) for x in str(args.sizes).split(",") if x.strip()), duration_s=args.duration_s,
                 drain_s=args.drain_s, idle_s=args.idle_s, time_scale=args.time_scale,
                 adapter_procs=args.adapter_procs, policy=args.policy, security=args.security, seed=args.seed,
                 wakeup_msgs=args.wakeup_msgs, wakeup=not args.no_wakeup, standby=args.standby,
                 standby_nice=args.standby_nice, kill_at_s=args.kill_at_s, repeats=args.repeats, bases=args.bases,
                 goals_path=args.goals_path)
    if not 0.0 <= cfg.bases <= 1.0:
        print("timely-fleet bench fleet: --bases is a share of the robots, from 0 to 1", file=sys.stderr)
        return 2
    if cfg.repeats < 1:
        print("timely-fleet bench fleet: --repeats must be at least 1", file=sys.stderr)
        return 2
    if cfg.kill_at_s is not None and cfg.standby == "no":
        print("timely-fleet bench fleet: --kill-at needs --standby (a standby to take over)", file=sys.stderr)
        return 2
    r = in_workdir("fleet_bench_", lambda workdir: run_bench(cfg, workdir))
    if args.json:
        outfiles.write_json(args.json, r, indent=2)
    return 0
