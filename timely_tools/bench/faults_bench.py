"""`timely-fleet bench faults`: a repeatable fault campaign against a planner and its adapters.

What runs (all bounded in count and time; every child process is killed in ``finally``):

- a temporary fleet YAML of ``--robots`` simulated robots (80% drones, 20% arms,
  ``engine: {kind: sim}``, ``robot_timeout_s: --robot-timeout-s``);
- ``timely-fleet up --only planner`` and two ``timely-fleet up --only adapters`` processes
  (``--time-scale``): adapters **A** host most robots, adapters **B** a subset (20%, at least
  one; the other YAML marks them ``adapter: external``). B is SIGKILLed at 25% of the campaign
  and restarted 2 s later: that is the adapter kill/restart;
- in this process, three rclpy nodes on their own executors: an independent **client**
  (``GoalClient``: ``plan_task`` action), an independent **recorder** (segments, results, goal
  records) and a **rogue**; statuses are recorded by a **status recorder** subprocess
  (``status_recorder_main``: serialized, drained in bulk, so it keeps up with the flood and the
  flood never reaches this process) and loaded by the recorder at the end;
- a **flood** subprocess (a fourth node) publishing garbage ``RobotStatus`` on ``robot_status``
  at ``--flood-rate`` per second for ``--flood-s`` seconds, starting at 30% of the campaign:
  random goal ids (some huge, some with control characters), real and random robot ids,
  random sequences and states, NaN / inf / -1e308 / 1,000-element durations, 64 KiB error texts.

The client sends ``--bursts`` bursts of ``--burst-size`` goals (spread evenly over
``--duration-s``, the first at t=0) plus a steady ``--rate`` goals/s. Each goal: one in ten is
malformed, cycling through: unknown robot, ert 0, ert NaN, alpha > 0, empty instruction,
5,000-char instruction, 100,000-char robot id, ANSI-escape robot id (sent by the probe client,
see ``reject_*`` below); the others go to a robot
this client believes free (no result yet for its last goal), with an instruction the simulated
engine plans (drones: "look for the cat", "check the book on the cabinet"; arms: "clean the
desk", "desk cleaning", "object stacking"); when no robot is free, to a busy one (refused by
design: counted as ``busy_rejections``, not as malformed). 10% of the valid goals are cancelled
by the client 0.2-1.5 s after sending. Robots of adapters B are not chosen while B is down.

The rogue node forges, against real goals in flight (never client-cancelled ones, never on B's
robots), ``--forgeries`` times each, spread over the first 70% of the campaign:

- ``forged_done``: once the planner dispatched segment 0 of an **arm** goal, DONE for
  sequences 0..19 (durations 0.01 s);
- ``forged_failed``: FAILED with error "FORGED failure" for the goal's current segment;
- ``rogue_cancel``: a ``cancel`` ``SkillSegment`` for the goal's robot on the shared segment
  topic ``robot_segments`` (where the planner publishes; the fleet has no per-robot topics);
- ``cancel_all``: once, at 90% of the campaign, a ``CancelGoal`` with the all-zero goal id and
  zero stamp ("cancel every goal") on the action's cancel service.

The recorder subscribes ``robot_status``, ``robot_segments``, ``planner/results``
and any ``robots/<id>/status`` topic that appears (it lists topics every 0.5 s), with message
info: every sample's **publisher GID** (the rogue's own publishers are known, so forged samples
are never taken for the real adapter's) and its **DDS source timestamp** (the publisher's system
clock at publish time; one machine, one clock), so a recorder that lags under the flood does not
skew the times. It keeps, per (goal id, sequence, state), the first real sample.

What is measured, exactly:

- ``goals_sent``: every goal request the client sent; ``terminal``: those with a result by the
  end (after a drain of at most ``max(20 s, 3 x robot_timeout_s)`` once sending stopped);
  ``lost`` = ``goals_sent - terminal``; ``by_status``: result statuses.
- ``status_delay_*``: for every DONE of every SUCCEEDED goal, the time from the real adapter
  publishing it (DDS source timestamp) to the planner applying it: the planner records the
  apply time as the segment's ``execution_end_s`` (relative to the goal's arrival, whose wall
  time is the goal's ``planner/goals`` stamp). DDS transport, verification, the status queue and
  the scheduler loop. p50 / p99 over those statuses. ``last_done_to_result_*``: from the last
  segment's DONE to the goal's result, which also waits for the engine to end the plan (with
  segmented generation the end of the plan may be generated after its last segment ran).
- ``reject_*``: for malformed goals, monotonic time from ``send`` to the result, measured by a
  **probe client** in a process of its own (``probe_client_main``: the bench process tells it
  which malformed kind to send at each tenth goal), so it is what an outside user sending a bad
  goal to the loaded planner sees, not the load client's own backlog. (Busy rejections go
  through the load client and are timed separately: ``busy_reject_*``.) ``reject_slowest``: the
  ten slowest, with their kind and when they were sent (seconds into the campaign).
- ``false_timeouts``: goals ending TIMEOUT (6) although the real adapter was never silent for
  ``robot_timeout_s`` while it owed a report. From the recorder's timeline of the goal: the
  silence clock starts when a segment is dispatched (planner's sample on the segments topic)
  while nothing else is outstanding and restarts at every real status of the goal (any state
  but IDLE); a segment stops being owed at its real DONE/FAILED/CANCELLED; the last silence runs
  to the planner's decision (its first stop segment for the goal, else the result's source
  timestamp). A TIMEOUT whose longest silence is < ``robot_timeout_s`` is false (the planner
  timed out a robot that was talking); the others are ``timeouts_robot_silent``. Goals in
  flight on adapters B when they were killed and forgery targets are not judged
  (``timeouts_excluded``): their robot really stopped. Each false timeout's recorded timeline
  is in the JSON (``false_timeout_goals``).
- ``forged_accepted`` (total and ``forged_accepted_by_kind``): targets of ``forged_done`` that
  ended SUCCEEDED before the real adapter's DONE of their last segment (or without one) or
  ended ROBOT_FAILED/ENGINE_FAILED/INVALID_PLAN/CANCELLED; targets of ``forged_failed`` whose
  result message contains "FORGED" or that ended ROBOT_FAILED without a real FAILED; targets of
  ``rogue_cancel`` that did not end SUCCEEDED (they were never cancelled by the client);
  ``cancel_all``: goals ending CANCELLED after the zero-id cancel that the client did not cancel
  (a target ending that way counts here, not under its own kind, unless the real adapter had
  already reported CANCELLED for it before the zero-id cancel). ``forgery_outcomes`` lists
  every target with its status and message.
- ``killed_adapter_goals``: result statuses of the valid goals in flight on adapters B when
  they were killed (TIMEOUT is the honest answer: their robot went silent).
- ``flood_ended_healthy_goals``: healthy goals (valid, not cancelled by the client, not forgery
  targets, not on B's robots) that did not end SUCCEEDED and ended while the flood ran or within
  ``robot_timeout_s`` after it; ``healthy_not_succeeded`` over the whole campaign.
- planner and adapter processes: CPU seconds and % over the campaign, RSS and peak RSS
  (``/proc``).

Targets (on the 2-core machine with the full load: ``--robots 50 --bursts 4
--burst-size 200 --rate 5``): 0 lost, 0 false timeouts, status delay p99 < 1 s, rejection p99
< 1 s, a 10 s flood of 6,000 statuses/s ends no healthy goal. The bench measures; it asserts
nothing. ``--short`` is the CI form (10 robots, 2 bursts of 20, 12 s, 3 s flood at 1,000/s,
2 forgeries of each kind, one adapter kill/restart), well under a minute.

Run: ``timely-fleet bench faults [--short] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from timely_robot.outcomes import STATUS_NAMES, ActionStatus, RobotState  # noqa: F401
from timely_tools.bench.procs import start_process, stop_process

CLI = [sys.executable, "-m", "llm_planner_node.cli"]
DRONE_TASKS = ("look for the cat", "check the book on the cabinet")
ARM_TASKS = ("clean the desk", "desk cleaning", "object stacking")
MALFORMED = ("unknown_robot", "ert_zero", "ert_nan", "alpha_positive", "empty_instruction",
             "oversize_instruction", "huge_robot_id", "ansi_robot_id")
KINDS = ("forged_done", "forged_failed", "rogue_cancel", "cancel_all")
SUCCEEDED, REJECTED, CANCELLED, INVALID_PLAN, ROBOT_FAILED, ENGINE_FAILED, TIMEOUT = list(ActionStatus)[:7]
S_IDLE, S_RECEIVED, S_EXECUTING, S_DONE, S_FAILED, S_CANCELLED = RobotState
ROGUE_NODE = "faults_rogue"
FLOOD_NODE = "faults_rogue_flood"
#: Keys the JSON always holds (the test checks them).
REQUIRED_KEYS = ("goals_sent", "terminal", "lost", "false_timeouts", "status_delay_p99_s", "reject_p99_s",
                 "forged_accepted")


def log(text: str) -> None:
    print(f"[faults] {text}", file=sys.stderr, flush=True)


def pct(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no samples)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))]


# -- processes -------------------------------------------------------------------------------------
def _bench_main(fn: str, *args: Any) -> list[str]:
    """Command line running ``faults_bench.<fn>(*args)`` in a new Python (arguments by repr)."""
    call = f"{fn}({', '.join(repr(a) for a in args)})"
    return [sys.executable, "-c", f"from timely_tools.bench.faults_bench import {fn}; {call}"]


def in_workdir(prefix: str, body: Callable[[Path], Any]) -> Any:
    """``body(workdir)`` in a temporary directory; if it raises RuntimeError (a process did not
    come up, ...), the tail of every process log there is printed first. A SIGTERM to the bench
    (``kill``, a CI runner's timeout) raises SystemExit in it, so the bench's ``finally`` stops the
    planners and adapters it started in their own sessions rather than leave them running."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            try:
                return body(Path(tmp))
            except RuntimeError:
                for p in sorted(Path(tmp).glob("*.log")):
                    log(f"--- {p.name} (tail) ---\n" + p.read_text(errors="replace")[-2000:])
                raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def proc_sample(pid: int) -> dict[str, float] | None:
    """CPU seconds (user+system) and RSS / peak RSS in MiB of a live process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    mem = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in status.splitlines()
           if line.startswith(("VmRSS", "VmHWM"))}
    return {"cpu_s": cpu, "rss_mib": mem.get("VmRSS", 0.0), "peak_rss_mib": mem.get("VmHWM", 0.0)}


# -- the flood subprocess --------------------------------------------------------------------------
def flood_main(rate: float, seconds: float, robot_ids: list[str], seed: int = 1) -> None:
    """Publish garbage RobotStatus on robot_status at ``rate``/s for ``seconds`` (own process)."""
    import rclpy
    from rclpy.context import Context
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import STATUS_QOS, STATUS_TOPIC

    rng = random.Random(seed)
    ctx = Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node(FLOOD_NODE, context=ctx)
    pub = node.create_publisher(RobotStatus, STATUS_TOPIC, STATUS_QOS)
    bad_floats = [math.nan, math.inf, -math.inf, -1e308, 1e308, -1.0, 0.0]
    pool = []
    for i in range(400):
        gid = rng.choice([uuid.uuid4().hex, uuid.uuid4().hex, "x" * rng.randint(1, 5000), "\x1b[2J\x00evil",
                          ""])
        rid = rng.choice(robot_ids + ["ghost", "\x1b[31mred\x1b[0m", "r" * 2000, ""])
        durs = ([rng.choice(bad_floats) for _ in range(rng.choice([1, 3, 1000]))] if i % 3 else [])
        err = "E" * 65536 if i % 100 == 0 else rng.choice(["", "garbage", "\x1b[31mFAIL\x1b[0m", "z" * 3000])
        pool.append(RobotStatus(robot_id=rid, goal_id=gid, sequence=rng.choice([0, 1, 2, 7, 2**32 - 1]),
                                state=rng.randrange(0, 6), current_skill=rng.choice(["", "s" * 500]),
                                progress=rng.choice([math.nan, 2.0, -1.0, 0.5]),
                                elapsed_s=rng.choice(bad_floats), predicted_remaining_s=rng.choice(bad_floats),
                                skill_names=["n"] * len(durs), skill_durations_s=durs, error=err))
    time.sleep(1.0)  # discovery
    sent = 0
    t0 = time.monotonic()
    try:
        while (now := time.monotonic()) - t0 < seconds:
            due = int((now - t0) * rate)
            while sent < due:
                pub.publish(pool[sent % len(pool)])
                sent += 1
            time.sleep(0.002)
    finally:
        print(json.dumps({"flood_sent": sent, "flood_s": time.monotonic() - t0}), flush=True)
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


# -- the status recorder subprocess ----------------------------------------------------------------
#: Largest status the recorder keeps (real adapters' statuses are a few hundred bytes).
RECORDED_STATUS_MAX_BYTES = 8192


def status_recorder_main(out_path: str) -> None:
    """Record every status on ``robot_status`` and on any ``robots/<id>/status`` (own process)
    until stdin closes, then write them to ``out_path`` (pickle).

    Statuses are taken serialized (no deserialization), drained in bulk, and only those whose
    goal id looks like a real one (32 hex digits) are kept, with their publisher GID and DDS
    source timestamp: so this process keeps up with a 6,000/s flood, and the bench process, where
    the client runs, does not see the flood at all."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from timely_fleet.msg import RobotStatus

    from timely_robot.link.ros import STATUS_TOPIC, draining_subscription, status_goal_id

    ctx = Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("faults_status_recorder", context=ctx)
    deep = QoSProfile(depth=50000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
    samples: list[tuple[bytes, bytes, int]] = []
    received = [0]
    topics: set[str] = set()
    hexdigits = set("0123456789abcdef")

    def keep(raw: bytes, info: Any) -> None:
        received[0] += 1
        if len(raw) > RECORDED_STATUS_MAX_BYTES:
            return
        gid = status_goal_id(raw)
        if gid is None or len(gid) != 32 or not set(gid) <= hexdigits:
            return
        g = info.get("publisher_gid")
        samples.append((raw, bytes(g["data"]) if g else b"", int(info["source_timestamp"])))

    def subscribe(topic: str) -> None:
        draining_subscription(node, RobotStatus, topic, keep, deep, 1000, raw=True, with_info=True)
        topics.add(topic)

    subscribe("/" + STATUS_TOPIC)

    def discover() -> None:
        for name, types in node.get_topic_names_and_types():
            parts = name.strip("/").split("/")
            if (len(parts) >= 3 and parts[-3] == "robots" and parts[-1] == "status"
                    and "timely_fleet/msg/RobotStatus" in types and name not in topics):
                subscribe(name)

    node.create_timer(0.5, discover)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("ready", flush=True)
    try:
        while not stop.is_set():
            ex.spin_once(timeout_sec=0.05)
    finally:
        Path(out_path).write_bytes(pickle.dumps({"samples": samples, "received": received[0],
                                                 "topics": sorted(topics)}))
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


# -- the recorder ----------------------------------------------------------------------------------
def probe_client_main(out_path: str, drain_s: float) -> None:
    """Send the campaign's malformed goals from their own client process: one malformed kind
    (:data:`MALFORMED`) per stdin line, sent at once; at stdin's end wait at most ``drain_s`` for
    the outstanding results and write them to ``out_path`` (pickle).

    Rejection latency is what a user sending a bad goal to a loaded planner sees: measured here,
    in a process of its own, it is not the load client's backlog (the bench process sends about
    a thousand goals and tracks their results, feedback and cancels under one GIL)."""
    import rclpy
    from rclpy.context import Context

    from llm_planner_node.ros.goal_client import GoalClient, spinning

    ctx = Context()
    rclpy.init(context=ctx)
    client = GoalClient(ctx, name="faults_probe")
    sent: list[tuple[str, Any, GoalTrack]] = []
    try:
        with spinning(client.node, ctx):
            if not client.wait_for_server(90.0):
                print(f"error: {client.wait_problem}", flush=True)
                return
            print("ready", flush=True)
            for line in sys.stdin:
                kind = line.strip()
                if kind not in MALFORMED:
                    continue
                robot, text, tuf = malformed_goal(kind)
                h = client.send(robot, text, tuf=tuf)
                sent.append((kind, h, timed_track(h, robot, "malformed", kind, text)))
            deadline = time.monotonic() + drain_s
            while time.monotonic() < deadline and not all(h.done for _, h, _ in sent):
                time.sleep(0.05)
    finally:
        records = [{"goal_id": h.goal_id, "robot_id": tr.robot_id, "kind": kind, "instruction": tr.instruction,
                    "sent_mono": tr.sent_mono, "sent_wall_ns": tr.sent_wall_ns, "result_mono": tr.result_mono,
                    "result_wall_ns": tr.result_wall_ns,
                    "result": (h.last_result.status, h.last_result.message) if h.last_result is not None else None}
                   for kind, h, tr in sent]
        Path(out_path).write_bytes(pickle.dumps(records))
        client.destroy()
        rclpy.try_shutdown(context=ctx)


@dataclass
class GoalTrack:
    goal_id: str
    robot_id: str
    kind: str                           # "valid" | "malformed" | "busy" (sent to a robot believed busy)
    malformed: str = ""
    instruction: str = ""
    sent_mono: float = 0.0
    sent_wall_ns: int = 0
    handle: Any = None
    result_mono: float | None = None
    result_wall_ns: int | None = None
    client_cancel_at: float | None = None   # planned client cancel (monotonic)
    client_cancelled: bool = False
    target: str = ""                        # forgery kind aimed at this goal
    on_b: bool = False
    unknown_answers: int = 0                # GetResult answers with status UNKNOWN taken as the result
    requery: Any = None                     # our own GetResult future for such a goal
    requery_at: float = 0.0
    real_result: Any = None

    @property
    def result(self) -> Any:
        """The goal's result, or None. ``GoalClient`` falls back to asking for a goal's result by
        id when its goal request goes unanswered for 1 s; if the server answers that with status
        UNKNOWN (it has not seen the goal yet) after the client stopped waiting, the handle ends
        with an empty default Result (status 0 = SUCCEEDED). Such an answer is not a result: it
        is re-asked here until the real one comes (or the drain ends: then the goal is lost)."""
        if self.real_result is not None:
            return self.real_result
        if self.handle is None or not self.handle.done:
            return None
        r = self.handle.last_result
        if r is not None and r.status == 0 and not r.message and not r.segments and not r.plan_text:
            return None
        return r

    @property
    def done(self) -> bool:
        return self.result is not None


class Recorder:
    """First real (non-rogue) sample per (goal id, sequence, state), with source timestamps."""

    def __init__(self, node: Any, robot_ids: list[str]) -> None:
        from timely_fleet.msg import GoalRecord, GoalResult, RobotStatus, SkillSegment

        from llm_planner_node.ros.messages import GOALS_TOPIC, RESULTS_TOPIC
        from timely_robot.link.ros import SEGMENTS_TOPIC, SHARED_SEGMENT_QOS, STATUS_TOPIC

        self.node = node
        self.lock = threading.Lock()
        self.rogue_gids: set[bytes] = set()
        self.known: set[str] = set()        # goal ids the client sent
        self.first: dict[str, dict[tuple[int, int], int]] = {}     # goal -> (seq, state) -> ts ns
        self.timeline: dict[str, list[tuple[int, str, int, int]]] = {}  # goal -> (ts, "s"/"d", seq, state)
        self.results_ts: dict[str, int] = {}
        self.arrival_ns: dict[str, int] = {}  # goal -> planner's GoalRecord stamp (its arrival)
        self.applied_ns: dict[str, list[int]] = {}  # goal -> when the planner applied each DONE
        self.stops: dict[str, int] = {}     # goal -> the planner's first stop (cancel segment)
        self.status_msgs = 0
        self.rogue_msgs = 0
        self.unknown_goal_msgs = 0
        self.status_topics: set[str] = set()
        self._RobotStatus = RobotStatus
        # deep queues: a recorder that lags under the flood must not drop real samples
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        deep = QoSProfile(depth=50000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
        self._qos = deep
        # statuses are recorded by their own process (status_recorder_main), loaded afterwards
        # with load_statuses: the flood would otherwise starve this process (and the client in it)
        # every robot's segments on the one shared topic (the fleet YAML has no per_robot_topics)
        node.create_subscription(SkillSegment, SEGMENTS_TOPIC, self._on_segment, SHARED_SEGMENT_QOS)
        node.create_subscription(GoalResult, RESULTS_TOPIC, self._on_result, deep)
        node.create_subscription(GoalRecord, GOALS_TOPIC, self._on_record, deep)

    def load_statuses(self, path: Path) -> None:
        """Take in the statuses the status recorder process wrote (``status_recorder_main``)."""
        from rclpy.serialization import deserialize_message

        data = pickle.loads(path.read_bytes())
        self.status_topics = set(data["topics"])
        self.status_msgs = data["received"]
        self.unknown_goal_msgs = data["received"] - len(data["samples"])  # kept: plausible goal ids only
        for raw, gid, ts in data["samples"]:
            self._on_status(deserialize_message(raw, self._RobotStatus),
                            {"publisher_gid": {"data": gid}, "source_timestamp": ts})

    def dispatched(self, goal_id: str) -> list[int]:
        """Sequences of the planner's segments seen for the goal (not its stops)."""
        with self.lock:
            return sorted({seq for _ts, what, seq, _st in self.timeline.get(goal_id, []) if what == "d"})

    @staticmethod
    def _gid(info: Any) -> bytes:
        g = info.get("publisher_gid") if isinstance(info, dict) else None
        return bytes(g["data"]) if g else b""

    def _on_status(self, msg: Any, info: Any) -> None:
        self.status_msgs += 1
        gid = msg.goal_id
        if gid not in self.known:
            self.unknown_goal_msgs += 1
            return
        if self._gid(info) in self.rogue_gids:
            self.rogue_msgs += 1
            return
        ts = int(info["source_timestamp"])
        with self.lock:
            self.first.setdefault(gid, {}).setdefault((int(msg.sequence), int(msg.state)), ts)
            self.timeline.setdefault(gid, []).append((ts, "s", int(msg.sequence), int(msg.state)))

    def _on_segment(self, msg: Any, info: Any) -> None:
        if msg.goal_id not in self.known or self._gid(info) in self.rogue_gids:
            return
        ts = int(info["source_timestamp"])
        with self.lock:
            if msg.cancel:  # the planner's stop: when it decided the goal's end
                self.stops.setdefault(msg.goal_id, ts)
            self.timeline.setdefault(msg.goal_id, []).append((ts, "c" if msg.cancel else "d", int(msg.sequence), -1))

    def _on_record(self, msg: Any) -> None:
        with self.lock:
            self.arrival_ns.setdefault(msg.goal_id, msg.stamp.sec * 1_000_000_000 + msg.stamp.nanosec)

    def _on_result(self, msg: Any, info: Any) -> None:
        with self.lock:
            self.results_ts.setdefault(msg.goal_id, int(info["source_timestamp"]))
            self.applied_ns.setdefault(msg.goal_id, [int(s.execution_end_s * 1e9) for s in msg.segments])

    def real(self, goal_id: str, seq: int, state: int) -> int | None:
        with self.lock:
            return self.first.get(goal_id, {}).get((seq, state))

    def seen_states(self, goal_id: str) -> dict[tuple[int, int], int]:
        with self.lock:
            return dict(self.first.get(goal_id, {}))

    def describe(self, goal_id: str, origin_ns: int, end_ns: int) -> list[str]:
        """The goal's recorded timeline, seconds after ``origin_ns`` (for the JSON of a false timeout)."""
        names = {0: "IDLE", 1: "RECEIVED", 2: "EXECUTING", 3: "DONE", 4: "FAILED", 5: "CANCELLED"}
        with self.lock:
            events = sorted(self.timeline.get(goal_id, []))
        label = {"d": "dispatch", "c": "planner stop"}
        out = [f"{(ts - origin_ns) / 1e9:+.3f} " + (f"{label[what]} {seq}" if what in label else f"{names.get(st, st)} {seq}")
               for ts, what, seq, st in events[:60]]
        return out + [f"{(end_ns - origin_ns) / 1e9:+.3f} result"]

    def longest_silence_s(self, goal_id: str, end_ns: int) -> float:
        """The longest time the real adapter owed a report for the goal and said nothing
        (see the module docstring), up to ``end_ns``."""
        with self.lock:
            events = sorted(self.timeline.get(goal_id, []))
        outstanding: set[int] = set()
        terminal: set[int] = set()
        dispatched: set[int] = set()
        last = None
        longest = 0
        end_ns = min(end_ns, self.stops.get(goal_id, end_ns))  # statuses after the stop answer it
        for ts, what, seq, state in events:
            if ts > end_ns:
                break
            if what == "c":
                continue
            if what == "d":
                if seq in dispatched:
                    continue  # a re-send
                dispatched.add(seq)
                if seq in terminal:
                    continue
                if not outstanding:
                    last = ts
                outstanding.add(seq)
            elif state != S_IDLE:
                if outstanding and last is not None:
                    longest = max(longest, ts - last)
                last = ts
                if state in (S_DONE, S_FAILED, S_CANCELLED):
                    terminal.add(seq)
                    outstanding.discard(seq)
        if outstanding and last is not None:
            longest = max(longest, end_ns - last)
        return longest / 1e9


# -- the campaign ----------------------------------------------------------------------------------
@dataclass
class Config:
    robots: int = 50
    bursts: int = 4
    burst_size: int = 200
    rate: float = 5.0
    duration_s: float = 60.0
    flood_s: float = 10.0
    flood_rate: float = 6000.0
    forgeries: int = 5
    robot_timeout_s: float = 5.0
    time_scale: float = 0.05
    seed: int = 0
    short: bool = False
    security: str = "sign"  # the product default (config/fleet.yaml); "off" shows what signing prevents


@dataclass
class Campaign:
    cfg: Config
    tracks: dict[str, GoalTrack] = field(default_factory=dict)
    events: dict[str, float] = field(default_factory=dict)   # name -> monotonic time
    events_wall: dict[str, int] = field(default_factory=dict)
    targets: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    flood: dict[str, float] = field(default_factory=dict)


def fleet_yamls(cfg: Config, tmp: Path) -> tuple[Path, Path, Path, list[str], list[str]]:
    n_arms = max(1, round(cfg.robots * 0.2))
    robots = [{"id": f"drone_{i + 1}", "kind": "drone", "adapter": "sim"} for i in range(cfg.robots - n_arms)]
    robots += [{"id": f"arm_{i + 1}", "kind": "arm", "adapter": "sim"} for i in range(n_arms)]
    # adapters B: every fifth robot (drones and arms), at least one
    b_ids = [r["id"] for i, r in enumerate(robots) if i % 5 == 4] or [robots[-1]["id"]]
    planner = {"engine": {"kind": "sim"}, "robot_timeout_s": cfg.robot_timeout_s}
    paths = []
    for name, external in (("planner", set()), ("adapters_a", set(b_ids)),
                           ("adapters_b", {r["id"] for r in robots} - set(b_ids))):
        rs = [dict(r, adapter="external") if r["id"] in external else r for r in robots]
        p = tmp / f"{name}.yaml"
        p.write_text(yaml.safe_dump({"planner": planner, "robots": rs,
                                     "security": {"mode": cfg.security, "keystore": str(tmp / "keys")}}))
        paths.append(p)
    return paths[0], paths[1], paths[2], [r["id"] for r in robots], b_ids


def malformed_goal(kind: str) -> tuple[str, str, tuple[float, float, float]]:
    """(robot id, instruction, tuf) of a malformed goal."""
    ok = (1.0, -2.0, 1.0)
    return {
        "unknown_robot": ("ghost_robot", "look for the cat", ok),
        "ert_zero": ("drone_1", "look for the cat", (0.0, -2.0, 1.0)),
        "ert_nan": ("drone_1", "look for the cat", (math.nan, -2.0, 1.0)),
        "alpha_positive": ("drone_1", "look for the cat", (1.0, 1.0, 1.0)),
        "empty_instruction": ("drone_1", "", ok),
        "oversize_instruction": ("drone_1", "look for the cat " * 300, ok),
        "huge_robot_id": ("r" * 100_000, "look for the cat", ok),
        "ansi_robot_id": ("\x1b[31mdrone_1\x1b[0m\x1b[2J", "look for the cat", ok),
    }[kind]


def _stamp_result(track: GoalTrack) -> None:
    """The goal's result arrived now (its receive time, monotonic and wall clock)."""
    if track.result_mono is None:
        track.result_mono = time.monotonic()
        track.result_wall_ns = time.time_ns()


def timed_track(h: Any, robot: str, kind: str, malformed: str, instruction: str, **kw: Any) -> GoalTrack:
    """The GoalTrack of a goal just sent (``h``: GoalClient handle), stamped when its result arrives."""
    tr = GoalTrack(h.goal_id, robot, kind, malformed, instruction, h.sent_at, time.time_ns(), h, **kw)
    h.when_done(lambda: _stamp_result(tr))
    return tr


def load_probe(probe: subprocess.Popen, out: Path, camp: Campaign, rec: Any, workdir: Path) -> None:
    """End the probe client (stdin closed: it drains and writes) and add its malformed goals."""
    from types import SimpleNamespace

    try:
        probe.stdin.close()
        probe.wait(timeout=40)
        records = pickle.loads(out.read_bytes())
    except (OSError, subprocess.TimeoutExpired, ValueError, pickle.UnpicklingError) as e:
        raise RuntimeError(f"the probe client failed ({e}); see {workdir / 'probe.log'}") from e
    for r in records:
        tr = GoalTrack(r["goal_id"], r["robot_id"], "malformed", r["kind"], r["instruction"], r["sent_mono"],
                       r["sent_wall_ns"], result_mono=r["result_mono"], result_wall_ns=r["result_wall_ns"])
        if r["result"] is not None:
            status, message = r["result"]
            tr.real_result = SimpleNamespace(status=status, message=message, segments=[], plan_text="")
        camp.tracks[tr.goal_id] = tr
        rec.known.add(tr.goal_id)


def run_campaign(cfg: Config, workdir: Path) -> dict:
    import rclpy
    from rclpy.action import ActionClient
    from rclpy.action.client import ClientGoalHandle
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from timely_fleet.action import PlanTask
    from timely_fleet.msg import RobotStatus, SkillSegment
    from unique_identifier_msgs.msg import UUID

    from llm_planner_node.ros.goal_client import GoalClient
    from llm_planner_node.ros.messages import action_qos_kwargs
    from timely_robot.link.ros import SEGMENTS_TOPIC, SHARED_SEGMENT_QOS, STATUS_QOS, STATUS_TOPIC

    rng = random.Random(cfg.seed)
    planner_yaml, a_yaml, b_yaml, robot_ids, b_ids = fleet_yamls(cfg, workdir)
    arms = [r for r in robot_ids if r.startswith("arm_")]
    camp = Campaign(cfg)
    procs: dict[str, subprocess.Popen | None] = {"planner": None, "adapters_a": None, "adapters_b": None,
                                                 "flood": None}
    ctx = Context()
    rclpy.init(context=ctx)
    executors: list[tuple[Any, threading.Thread]] = []
    stop_spin = threading.Event()
    samples: dict[str, dict] = {}

    def spin_in_thread(*nodes: Any) -> None:
        ex = SingleThreadedExecutor(context=ctx)
        for n in nodes:
            ex.add_node(n)

        def loop() -> None:
            while not stop_spin.is_set():
                try:
                    ex.spin_once(timeout_sec=0.05)
                except Exception as e:  # noqa: BLE001 - keep recording; say what happened
                    log(f"executor error: {e!r}")
        t = threading.Thread(target=loop, daemon=True)
        t.start()
        executors.append((ex, t))

    up = [*CLI, "up", "--log-level", "warning"]
    client = rogue = rec_node = None
    try:
        t_start = time.monotonic()
        procs["planner"] = start_process([*up, "--only", "planner", "--params", str(planner_yaml)],
                                         workdir / "planner.log")
        ad = ["--only", "adapters", "--time-scale", str(cfg.time_scale)]
        procs["adapters_a"] = start_process([*up, *ad, "--params", str(a_yaml)], workdir / "adapters_a.log")
        procs["adapters_b"] = start_process([*up, *ad, "--params", str(b_yaml)], workdir / "adapters_b.log")
        status_rec_out = workdir / "statuses.pickle"
        procs["status_recorder"] = start_process(_bench_main("status_recorder_main", str(status_rec_out)),
                                                 workdir / "status_recorder.log", pipe_stdin=True)
        probe_out = workdir / "probe.pickle"
        procs["probe"] = start_process(_bench_main("probe_client_main", str(probe_out), 20.0), workdir / "probe.log",
                                       pipe_stdin=True, pipe_stdout=True)

        client = GoalClient(ctx, name="faults_client")
        rogue = rclpy.create_node(ROGUE_NODE, context=ctx)
        rogue_status = rogue.create_publisher(RobotStatus, STATUS_TOPIC, STATUS_QOS)
        rogue_segs = rogue.create_publisher(SkillSegment, SEGMENTS_TOPIC, SHARED_SEGMENT_QOS)
        rogue_action = ActionClient(rogue, PlanTask, "plan_task", **action_qos_kwargs())
        rec_node = rclpy.create_node("faults_recorder", context=ctx)
        rec = Recorder(rec_node, robot_ids)
        for topic in (STATUS_TOPIC, SEGMENTS_TOPIC):
            for info in rogue.get_publishers_info_by_topic(topic):
                if info.node_name == ROGUE_NODE:
                    rec.rogue_gids.add(bytes(info.endpoint_gid))
        spin_in_thread(client.node, rogue)
        spin_in_thread(rec_node)

        log(f"starting planner + adapters ({cfg.robots} robots, {len(b_ids)} on adapters B); waiting for them")
        if not client.wait_for_server(90.0):
            raise RuntimeError(f"the planner did not come up; see {workdir / 'planner.log'}")

        def segment_readers() -> set[bytes]:
            return {bytes(i.endpoint_gid) for i in rec_node.get_subscriptions_info_by_topic(SEGMENTS_TOPIC)}

        def adapters_ready() -> bool:
            return (rec_node.count_subscribers(SEGMENTS_TOPIC) >= 3  # recorder + adapters A + adapters B
                    and rec_node.count_subscribers(STATUS_TOPIC) >= 2)  # planner + status recorder

        readers_before_restart: set[bytes] = set()

        def adapters_b_back() -> bool:
            # B's new process: a segment reader not there before (the killed one's may linger
            # in the graph until its DDS lease expires)
            return bool(segment_readers() - readers_before_restart)

        line = procs["probe"].stdout.readline().decode(errors="replace").strip()  # "ready" once it sees the server
        if line != "ready":
            raise RuntimeError(f"the probe client did not come up: {line or 'it exited'}; see {workdir / 'probe.log'}")
        deadline = time.monotonic() + 90
        while not adapters_ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the adapters did not come up; see {workdir}/adapters_*.log")
            time.sleep(0.1)
        time.sleep(0.5)
        log(f"ready in {time.monotonic() - t_start:.1f} s; campaign of {cfg.duration_s:g} s")
        for name in ("planner", "adapters_a", "adapters_b"):
            samples[name + "_start"] = proc_sample(procs[name].pid) or {}

        # -- the campaign loop --------------------------------------------------------------
        t0 = time.monotonic()
        D = cfg.duration_s
        camp.events["t0"] = t0
        burst_times = [t0 + i * D / max(1, cfg.bursts) for i in range(cfg.bursts)]
        flood_at = t0 + 0.3 * D
        kill_at, restart_at = t0 + 0.25 * D, t0 + 0.25 * D + 2.0
        cancel_all_at = t0 + 0.9 * D
        forge_times = {k: [t0 + (0.1 + 0.6 * (i + 0.5) / cfg.forgeries) * D for i in range(cfg.forgeries)]
                       for k in KINDS[:3]}
        busy: dict[str, str] = {}            # robot -> goal id (client view)
        open_tracks: dict[str, GoalTrack] = {}  # sent, no result yet (what reap looks at)
        b_down = [False]
        malformed_i = [0]
        goal_no = [0]
        lock = threading.Lock()

        def send(robot: str, instruction: str, tuf: tuple[float, float, float], kind: str) -> None:
            h = client.send(robot, instruction, tuf=tuf)
            tr = timed_track(h, robot, kind, "", instruction, on_b=robot in b_ids)
            rec.known.add(h.goal_id)
            if kind == "valid" and rng.random() < 0.10:
                tr.client_cancel_at = time.monotonic() + rng.uniform(0.2, 1.5)
            with lock:
                camp.tracks[h.goal_id] = open_tracks[h.goal_id] = tr
                if kind == "valid":
                    busy[robot] = h.goal_id

        def send_one() -> None:
            goal_no[0] += 1
            if goal_no[0] % 10 == 0:
                kind = MALFORMED[malformed_i[0] % len(MALFORMED)]
                malformed_i[0] += 1
                procs["probe"].stdin.write(f"{kind}\n".encode())  # the probe process sends it
                procs["probe"].stdin.flush()
                return
            usable = [r for r in robot_ids if not (b_down[0] and r in b_ids)]
            free = [r for r in usable if r not in busy]
            robot = rng.choice(free) if free else rng.choice(usable)
            text = rng.choice(ARM_TASKS if robot in arms else DRONE_TASKS)
            send(robot, text, (1.0, -2.0, 1.0), "valid" if free else "busy")

        def reap() -> None:
            """Free robots whose goal ended; send due client cancels; re-ask UNKNOWN answers."""
            now = time.monotonic()
            with lock:
                for gid in [g for g, tr in open_tracks.items() if tr.done]:
                    del open_tracks[gid]  # its client cancel (if any) is moot now
                for tr in open_tracks.values():
                    if tr.handle.done and tr.result is None and now >= tr.requery_at:
                        fut = tr.requery
                        if fut is not None and fut.done():
                            resp = fut.result()
                            if resp.status != 0:      # action GoalStatus: known at last
                                tr.real_result = resp.result
                                tr.result_mono, tr.result_wall_ns = now, time.time_ns()
                                continue
                        if fut is None or fut.done():
                            if fut is None:
                                tr.unknown_answers += 1
                            tr.requery = client.result_of(bytes.fromhex(tr.goal_id))[1]
                        tr.requery_at = now + 0.5
                for robot, gid in list(busy.items()):
                    if camp.tracks[gid].done:
                        del busy[robot]
                for tr in open_tracks.values():
                    if tr.client_cancel_at is not None and not tr.client_cancelled and now >= tr.client_cancel_at:
                        tr.client_cancelled = True
                        if not tr.done and tr.handle.accepted.is_set():
                            client.cancel(tr.handle, timeout_s=0.01)
                            camp.events_wall.setdefault("first_client_cancel", time.time_ns())
                        elif not tr.done:
                            tr.client_cancel_at = now + 0.1  # not accepted yet: try again soon
                            tr.client_cancelled = False

        def forge(kind: str) -> bool:
            """Forge against one suitable goal in flight; False if none yet."""
            with lock:
                cands = [tr for tr in camp.tracks.values()
                         if tr.kind == "valid" and not tr.done and tr.client_cancel_at is None
                         and not tr.target and not tr.on_b and (kind != "forged_done" or tr.robot_id in arms)]
            rng.shuffle(cands)
            for tr in cands:
                started = rec.dispatched(tr.goal_id)  # the planner sent it segments: the robot works on it
                if not started:
                    continue
                cur = max(started)
                tr.target = kind
                camp.targets[kind].append(tr.goal_id)
                if kind == "forged_done":
                    for seq in range(20):
                        rogue_status.publish(RobotStatus(robot_id=tr.robot_id, goal_id=tr.goal_id, sequence=seq,
                                                         state=S_DONE, skill_names=["forged"],
                                                         skill_durations_s=[0.01]))
                elif kind == "forged_failed":
                    rogue_status.publish(RobotStatus(robot_id=tr.robot_id, goal_id=tr.goal_id, sequence=cur,
                                                     state=S_FAILED, error="FORGED failure"))
                else:
                    rogue_segs.publish(SkillSegment(goal_id=tr.goal_id, robot_id=tr.robot_id, sequence=cur,
                                                    cancel=True))
                return True
            return False

        steady_next = t0
        steady_end = t0 + D
        bursts_done = 0
        while True:
            now = time.monotonic()
            if now >= steady_end:
                break
            if bursts_done < len(burst_times) and now >= burst_times[bursts_done]:
                log(f"burst {bursts_done + 1}/{cfg.bursts}: {cfg.burst_size} goals")
                for _ in range(cfg.burst_size):
                    reap()
                    send_one()
                bursts_done += 1
            while steady_next <= now and cfg.rate > 0:
                send_one()
                steady_next += 1.0 / cfg.rate
            if procs["flood"] is None and now >= flood_at and cfg.flood_s > 0:
                log(f"flood: {cfg.flood_rate:g} garbage statuses/s for {cfg.flood_s:g} s")
                camp.events["flood_start"] = now + 1.0   # the subprocess waits ~1 s for discovery
                procs["flood"] = start_process(_bench_main("flood_main", cfg.flood_rate, cfg.flood_s, robot_ids,
                                                           cfg.seed + 1), workdir / "flood.out")
            if "kill" not in camp.events and now >= kill_at:
                log(f"killing adapters B ({len(b_ids)} robots)")
                samples["adapters_b_end"] = proc_sample(procs["adapters_b"].pid) or {}
                b_down[0] = True
                stop_process(procs["adapters_b"], signal.SIGKILL, 2.0)
                camp.events["kill"] = now
            if "restart" not in camp.events and now >= restart_at:
                log("restarting adapters B")
                readers_before_restart.update(segment_readers())
                procs["adapters_b2"] = start_process([*up, *ad, "--params", str(b_yaml)], workdir / "adapters_b2.log")
                camp.events["restart"] = now
            if "restart" in camp.events and b_down[0] and adapters_b_back():
                b_down[0] = False
                camp.events["restart_ready"] = now
                log(f"adapters B back after {now - camp.events['kill']:.1f} s")
                samples["adapters_b2_start"] = proc_sample(procs["adapters_b2"].pid) or {}
            for kind, times in forge_times.items():
                if times and now >= times[0] and forge(kind):
                    times.pop(0)
            if "cancel_all" not in camp.events and now >= cancel_all_at:
                log("rogue: cancel-all (zero goal id, zero stamp)")
                resp = PlanTask.Impl.SendGoalService.Response(accepted=True)
                ClientGoalHandle(rogue_action, UUID(uuid=[0] * 16), resp).cancel_goal_async()
                camp.events["cancel_all"] = now
                camp.events_wall["cancel_all"] = time.time_ns()
            reap()
            time.sleep(0.01)
        camp.events["sending_stopped"] = time.monotonic()
        drain = max(20.0, 3 * cfg.robot_timeout_s)
        log(f"sent {len(camp.tracks)} goals; draining (at most {drain:g} s)")
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            reap()
            if not open_tracks:
                break
            time.sleep(0.05)
        camp.events["end"] = time.monotonic()
        time.sleep(0.3)  # the last results' samples reach the recorder
        load_probe(procs["probe"], probe_out, camp, rec, workdir)
        sr = procs["status_recorder"]
        try:
            sr.stdin.close()  # the status recorder writes what it recorded and exits
            sr.wait(timeout=60)
            rec.load_statuses(status_rec_out)
        except (OSError, subprocess.TimeoutExpired, ValueError, pickle.UnpicklingError) as e:
            raise RuntimeError(f"the status recorder failed ({e}); see {workdir / 'status_recorder.log'}") from e
        for name in ("planner", "adapters_a", "adapters_b2"):
            if procs.get(name) is not None:
                samples[name + "_end"] = proc_sample(procs[name].pid) or {}
        if procs["flood"] is not None:
            try:
                procs["flood"].wait(timeout=max(5.0, cfg.flood_s + 5))
            except subprocess.TimeoutExpired:
                pass
            camp.flood = {}
            try:  # its JSON line (rclpy may log after it at shutdown)
                for line in reversed((workdir / "flood.out").read_text(errors="replace").splitlines()):
                    if line.startswith('{"flood_sent"'):
                        camp.flood = json.loads(line)
                        break
                else:
                    log(f"the flood process printed no count: {(workdir / 'flood.out').read_text()[-300:]!r}")
            except (OSError, ValueError):
                pass
        return analyse(camp, rec, samples, b_ids)
    finally:
        for name, p in procs.items():
            stop_process(p, signal.SIGINT, 10.0)
        stop_spin.set()
        for ex, t in executors:
            t.join(timeout=2)
            ex.shutdown(timeout_sec=1)
        if client is not None:
            client.destroy()
        for n in (rogue, rec_node):
            if n is not None:
                n.destroy_node()
        rclpy.try_shutdown(context=ctx)


def analyse(camp: Campaign, rec: Recorder, samples: dict[str, dict], b_ids: list[str]) -> dict:
    cfg = camp.cfg
    tracks = list(camp.tracks.values())
    by_status: dict[str, int] = {}
    busy_lat, delays, plan_end = [], [], []
    rejects: list[tuple[float, str, float]] = []  # malformed goals: (latency, kind, sent at s)
    worst: list[tuple[float, str, int]] = []
    false_to, silent_to, delay_unmeasured = [], 0, 0
    busy_rejections = unexpected_busy = malformed_not_rejected = valid_rejected = 0
    forged = {k: 0 for k in KINDS}
    target_outcomes = []
    healthy_not_ok = 0
    excluded_to = 0
    killed: dict[str, int] = {}   # goals in flight on adapters B when they were killed
    flood_ended = 0
    t0 = camp.events["t0"]
    flood_start = camp.events.get("flood_start", math.inf)
    flood_end = flood_start + cfg.flood_s + cfg.robot_timeout_s
    cancel_all_ns = camp.events_wall.get("cancel_all")
    for tr in tracks:
        res = tr.result
        if res is None:
            continue
        name = STATUS_NAMES.get(res.status, str(res.status))
        by_status[name] = by_status.get(name, 0) + 1
        latency = tr.result_mono - tr.sent_mono if tr.result_mono is not None else None
        is_busy_msg = res.status == REJECTED and "still executing goal" in res.message
        if tr.kind == "malformed":
            if res.status == REJECTED and latency is not None:
                rejects.append((latency, tr.malformed, tr.sent_mono - t0))
            else:
                malformed_not_rejected += 1
            continue
        if is_busy_msg:
            busy_rejections += 1
            if latency is not None:
                busy_lat.append(latency)
            if tr.kind == "valid":
                unexpected_busy += 1
            continue
        if res.status == REJECTED:
            valid_rejected += 1
        result_ns = rec.results_ts.get(tr.goal_id) or tr.result_wall_ns or 0
        if res.status == SUCCEEDED and res.segments:
            # status delay: adapter publishes DONE -> the planner applies it (the planner records
            # the apply time as the segment's execution end, relative to the goal's arrival,
            # whose wall time is the GoalRecord stamp). Every segment's DONE of the goal counts.
            arrival = rec.arrival_ns.get(tr.goal_id)
            applied = rec.applied_ns.get(tr.goal_id) or []
            measured = False
            for k, rel_ns in enumerate(applied):
                done_ns = rec.real(tr.goal_id, k, S_DONE)
                if arrival is not None and done_ns is not None and rel_ns > 0:
                    delays.append((arrival + rel_ns - done_ns) / 1e9)
                    worst.append((delays[-1], tr.goal_id, k))
                    measured = True
            last_done = rec.real(tr.goal_id, len(res.segments) - 1, S_DONE)
            if last_done is not None and tr.goal_id in rec.results_ts:
                plan_end.append((rec.results_ts[tr.goal_id] - last_done) / 1e9)
            if not measured:
                delay_unmeasured += 1
        in_flight_at_kill = tr.on_b and tr.sent_mono < camp.events.get("kill", math.inf) and (
            tr.result_mono is None or tr.result_mono > camp.events.get("kill", math.inf))
        if res.status == TIMEOUT and (tr.target or in_flight_at_kill):
            excluded_to += 1   # their robot was killed or a forgery stopped it: not the planner's doing
        elif res.status == TIMEOUT:
            silence = rec.longest_silence_s(tr.goal_id, result_ns)
            if silence < cfg.robot_timeout_s:
                false_to.append({"goal_id": tr.goal_id, "robot_id": tr.robot_id, "longest_silence_s": round(silence, 3),
                                 "message": res.message[:200], "on_killed_adapter": tr.on_b,
                                 "timeline": rec.describe(tr.goal_id, tr.sent_wall_ns, result_ns)})
            else:
                silent_to += 1
        # forgeries
        last_done = rec.real(tr.goal_id, len(res.segments) - 1, S_DONE) if res.segments else None
        if tr.target == "forged_done":
            early = res.status == SUCCEEDED and (last_done is None or result_ns < last_done)
            acc = early or res.status in (ROBOT_FAILED, ENGINE_FAILED, INVALID_PLAN, CANCELLED)
        elif tr.target == "forged_failed":
            real_failed = any(st == S_FAILED for (_s, st) in rec.seen_states(tr.goal_id))
            acc = "FORGED" in res.message or (res.status == ROBOT_FAILED and not real_failed)
        elif tr.target == "rogue_cancel":
            acc = res.status != SUCCEEDED
        else:
            acc = False
        adapter_cancel = min((ts for (_s, st), ts in rec.seen_states(tr.goal_id).items() if st == S_CANCELLED),
                             default=None)
        if (res.status == CANCELLED and not tr.client_cancelled and cancel_all_ns is not None
                and result_ns >= cancel_all_ns
                and not (tr.target == "rogue_cancel" and adapter_cancel is not None and adapter_cancel < cancel_all_ns)):
            forged["cancel_all"] += 1   # ended by the zero-id cancel, not by its own forgery
            acc = False
        if tr.kind == "valid" and in_flight_at_kill:
            killed[name] = killed.get(name, 0) + 1
        if tr.target:
            forged[tr.target] += int(acc)
            target_outcomes.append({"kind": tr.target, "goal_id": tr.goal_id, "robot_id": tr.robot_id,
                                    "status": name, "message": res.message[:200], "forged_accepted": acc})
        healthy = tr.kind == "valid" and tr.client_cancel_at is None and not tr.target and not tr.on_b
        if healthy and res.status != SUCCEEDED and not (res.status == CANCELLED and cancel_all_ns is not None
                                                         and result_ns >= cancel_all_ns):
            healthy_not_ok += 1
            if tr.result_mono is not None and flood_start <= tr.result_mono <= flood_end:
                flood_ended += 1
    sent = len(tracks)
    terminal = sum(1 for tr in tracks if tr.done)

    def proc(name: str, start: str, end: str) -> dict:
        a, b = samples.get(start) or {}, samples.get(end) or {}
        if not a or not b:
            return {}
        span = camp.events.get("end", t0) - t0
        return {"cpu_s": round(b["cpu_s"] - a["cpu_s"], 2),
                "cpu_pct": round(100 * (b["cpu_s"] - a["cpu_s"]) / max(span, 1e-6), 1),
                "rss_mib": round(b["rss_mib"], 1), "peak_rss_mib": round(b["peak_rss_mib"], 1)}

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 4)

    out = {
        "config": cfg.__dict__,
        "goals_sent": sent, "terminal": terminal, "lost": sent - terminal,
        # lost by the client although the planner published the goal's end on planner/results:
        # the bench's own client lagged (client, recorder and rogue share this process)
        "lost_but_ended_by_planner": sum(1 for tr in tracks if not tr.done and tr.goal_id in rec.results_ts),
        "valid_sent": sum(1 for t in tracks if t.kind == "valid"),
        "malformed_sent": sum(1 for t in tracks if t.kind == "malformed"),
        "by_status": by_status,
        "false_timeouts": len(false_to), "false_timeout_goals": false_to[:50],
        "timeouts_robot_silent": silent_to, "timeouts_excluded": excluded_to,
        "status_delay_p50_s": r(pct(delays, 50)), "status_delay_p99_s": r(pct(delays, 99)),
        "status_delay_max_s": r(max(delays) if delays else None), "status_delay_samples": len(delays),
        "status_delay_worst": [{"delay_s": r(d), "goal_id": g, "sequence": k,
                                "robot_id": next((t.robot_id for t in tracks if t.goal_id == g), ""),
                                "timeline": rec.describe(g, rec.arrival_ns.get(g, 0), rec.results_ts.get(g, 0)),
                                "applied_rel_s": [x / 1e9 for x in rec.applied_ns.get(g, [])]}
                               for d, g, k in sorted(worst, reverse=True)[:5]],
        "last_done_to_result_p50_s": r(pct(plan_end, 50)), "last_done_to_result_p99_s": r(pct(plan_end, 99)),
        "status_delay_unmeasured": delay_unmeasured,
        "reject_p50_s": r(pct([x[0] for x in rejects], 50)), "reject_p99_s": r(pct([x[0] for x in rejects], 99)),
        "reject_samples": len(rejects), "malformed_not_rejected": malformed_not_rejected,
        "reject_slowest": [{"latency_s": round(a, 3), "kind": k, "sent_at_s": round(t, 2)}
                           for a, k, t in sorted(rejects)[-10:][::-1]],
        "busy_rejections": busy_rejections, "busy_reject_p50_s": r(pct(busy_lat, 50)),
        "busy_reject_p99_s": r(pct(busy_lat, 99)), "unexpected_busy_rejections": unexpected_busy,
        "valid_rejected_other": valid_rejected,
        "client_unknown_answers": sum(1 for t in tracks if t.unknown_answers),
        "client_cancels": sum(1 for t in tracks if t.client_cancelled),
        "forged_accepted": sum(forged.values()), "forged_accepted_by_kind": forged,
        "forgery_targets": {k: len(v) for k, v in camp.targets.items()} | {"cancel_all": int("cancel_all" in camp.events)},
        "forgery_outcomes": target_outcomes,
        "flood_ended_healthy_goals": flood_ended, "healthy_not_succeeded": healthy_not_ok,
        "flood": camp.flood, "recorder": {"status_msgs": rec.status_msgs, "rogue_msgs_ignored": rec.rogue_msgs,
                                          "unknown_goal_msgs": rec.unknown_goal_msgs,
                                          "per_robot_status_topics": len(rec.status_topics),
                                          # share of the flood the recorder received: well below 1, it
                                          # could not keep up and may have missed real statuses too
                                          "flood_seen_fraction": round(rec.unknown_goal_msgs / camp.flood["flood_sent"], 3)
                                          if camp.flood.get("flood_sent") else None},
        "adapter_restart_s": r(camp.events["restart_ready"] - camp.events["kill"]) if "restart_ready" in camp.events else None,
        "killed_adapter_robots": len(b_ids), "killed_adapter_goals": killed,
        "campaign_s": round(camp.events.get("end", t0) - t0, 2),
        "processes": {"planner": proc("planner", "planner_start", "planner_end"),
                      "adapters_a": proc("adapters_a", "adapters_a_start", "adapters_a_end"),
                      "adapters_b": proc("adapters_b", "adapters_b_start", "adapters_b_end"),
                      "adapters_b_restarted": proc("adapters_b2", "adapters_b2_start", "adapters_b2_end")},
    }
    return out


def print_table(r: dict) -> None:
    def f(x: Any, unit: str = " s") -> str:
        return "n/a" if x is None else f"{x:.3f}{unit}"

    c = r["config"]
    print(f"fault campaign: {c['robots']} robots, {c['bursts']} bursts of {c['burst_size']} + {c['rate']:g}/s for "
          f"{c['duration_s']:g} s, flood {c['flood_rate']:g}/s for {c['flood_s']:g} s "
          f"(sent {r['flood'].get('flood_sent', 'n/a')}), adapter kill/restart, robot_timeout_s {c['robot_timeout_s']:g}")
    rows = [
        ("goals sent / terminal / lost", f"{r['goals_sent']} / {r['terminal']} / {r['lost']}", "0 lost"),
        ("  valid / malformed / client cancels", f"{r['valid_sent']} / {r['malformed_sent']} / {r['client_cancels']}", ""),
        ("  GetResult answered UNKNOWN (re-asked)", str(r["client_unknown_answers"]), ""),
        ("  by status", ", ".join(f"{k} {v}" for k, v in sorted(r["by_status"].items())), ""),
        ("  lost, but ended by the planner (client lag)", str(r["lost_but_ended_by_planner"]), ""),
        ("false timeouts (robot was talking)", str(r["false_timeouts"]), "0"),
        ("timeouts: robot silent / killed or forged", f"{r['timeouts_robot_silent']} / {r['timeouts_excluded']}", ""),
        ("status delay p50 / p99", f"{f(r['status_delay_p50_s'])} / {f(r['status_delay_p99_s'])} "
                                   f"(n={r['status_delay_samples']})", "p99 < 1 s"),
        ("last DONE -> result p50 / p99", f"{f(r['last_done_to_result_p50_s'])} / "
                                          f"{f(r['last_done_to_result_p99_s'])}", "(includes the plan's end)"),
        ("rejection p50 / p99 (malformed)", f"{f(r['reject_p50_s'])} / {f(r['reject_p99_s'])} "
                                            f"(n={r['reject_samples']}, not rejected {r['malformed_not_rejected']})",
         "p99 < 1 s"),
        ("busy rejections (by design), p50 / p99", f"{r['busy_rejections']}, {f(r['busy_reject_p50_s'])} / "
                                                   f"{f(r['busy_reject_p99_s'])}", ""),
        ("forged accepted", f"{r['forged_accepted']} (" + ", ".join(
            f"{k} {v}/{r['forgery_targets'].get(k, 0)}" for k, v in r["forged_accepted_by_kind"].items()) + ")", "0"),
        ("healthy goals ended by the flood", str(r["flood_ended_healthy_goals"]), "0"),
        ("healthy goals not succeeded (whole run)", str(r["healthy_not_succeeded"]), ""),
        ("recorder: share of the flood it received", f(r["recorder"]["flood_seen_fraction"], ""), "~1 (else it lagged)"),
        ("adapter B back after kill; its goals then", f"{f(r['adapter_restart_s'])}; " + (", ".join(
            f"{k} {v}" for k, v in sorted(r["killed_adapter_goals"].items())) or "none in flight"), ""),
    ]
    for name, p in r["processes"].items():
        if p:
            rows.append((f"{name} CPU / RSS (peak)", f"{p['cpu_s']:.1f} s ({p['cpu_pct']:.0f}%) / "
                                                     f"{p['rss_mib']:.0f} MiB ({p['peak_rss_mib']:.0f})", ""))
    w = max(len(a) for a, _, _ in rows)
    print(f"{'':<{w}}  {'measured':<44} target")
    for a, b, t in rows:
        print(f"{a:<{w}}  {b:<44} {t}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Config()
    parser.add_argument("--robots", type=int, default=d.robots, help="simulated robots, 80%% drones (default: %(default)s)")
    parser.add_argument("--bursts", type=int, default=d.bursts, help="goal bursts (default: %(default)s)")
    parser.add_argument("--burst-size", type=int, default=d.burst_size, help="goals per burst (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=d.rate, help="steady goals per second (default: %(default)s)")
    parser.add_argument("--duration-s", type=float, default=d.duration_s, help="sending phase (default: %(default)s)")
    parser.add_argument("--flood-s", type=float, default=d.flood_s, help="garbage flood length (default: %(default)s)")
    parser.add_argument("--flood-rate", type=float, default=d.flood_rate, help="garbage statuses/s (default: %(default)s)")
    parser.add_argument("--forgeries", type=int, default=d.forgeries, help="targets per forgery kind (default: %(default)s)")
    parser.add_argument("--robot-timeout-s", type=float, default=d.robot_timeout_s,
                        help="the planner's robot_timeout_s (default: %(default)s)")
    parser.add_argument("--time-scale", type=float, default=d.time_scale,
                        help="simulated robots' time scale (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--security", choices=("sign", "off"), default=d.security,
                        help="security.mode of the fleet (default: %(default)s, as config/fleet.yaml)")
    parser.add_argument("--short", action="store_true",
                        help="the CI form: 10 robots, 2 bursts of 20, 12 s, 3 s flood at 1000/s, 2 forgeries per kind")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")


def config_of(args: argparse.Namespace) -> Config:
    cfg = Config(robots=args.robots, bursts=args.bursts, burst_size=args.burst_size, rate=args.rate,
                 duration_s=args.duration_s, flood_s=args.flood_s, flood_rate=args.flood_rate,
                 forgeries=args.forgeries, robot_timeout_s=args.robot_timeout_s, time_scale=args.time_scale,
                 seed=args.seed, short=args.short, security=args.security)
    if args.short:
        cfg.robots, cfg.bursts, cfg.burst_size, cfg.rate = 10, 2, 20, 5.0
        cfg.duration_s, cfg.flood_s, cfg.flood_rate, cfg.forgeries = 12.0, 3.0, 1000.0, 2
    return cfg


def run(args: argparse.Namespace) -> int:
    cfg = config_of(args)
    if cfg.robots < 2:
        from timely_robot.errors import CommandError

        raise CommandError("--robots must be at least 2 (one adapter process is killed and restarted)")
    r = in_workdir("faults_bench_", lambda workdir: run_campaign(cfg, workdir))
    print_table(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2, default=str))
    return 0
