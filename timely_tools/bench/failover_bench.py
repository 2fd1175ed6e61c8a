"""`timely-fleet bench failover`: the active planner killed again and again under load, a standby
taking over each time, against planner and adapters as separate processes.

What runs (every loop bounded in count and time; every child process is stopped in ``finally``,
SIGINT then SIGKILL, the standby first so that it does not take over at the very end):

- one generated parameter YAML (:func:`fleet_yaml`): ``--drones`` simulated drones, ``--arms``
  simulated arms and ``--chats`` chat robots (default 30 + 15 + 5), the ``scripted`` engine (the
  instruction is the plan, :func:`instruction`: drone plans of 6-8 one-call segments that end
  where they started, arm plans of 7, stories of 5 sentences; ``--engine sim`` or ``--model``:
  the instructions the shipped planner knows), ``security.lease_s`` ``--lease-s``,
  ``security.mode`` ``--security`` (default ``off`` as the project's; ``sign``: keys made by this
  process in the run's folder before any child starts, so the processes cannot race to make them);
- ``timely-fleet up --only adapters`` (through :func:`adapters_process`, below), ``timely-fleet up
  --only planner`` (the active) and ``timely-fleet up --standby``, each in its own session, its
  output in a log file of the run's folder (``--out-dir``, else a temporary one), all at
  ``--time-scale`` (``up`` gives it to the simulated robots, which run each skill ``time_scale`` x
  its modelled duration, and to the planner as ``robot_time_scale``, which predicts the same
  compressed time), all on one ROS domain (``--domain-id``, else ``ROS_DOMAIN_ID`` if set, else a
  random one in 150-199), this process included;
- in this process: a :class:`~llm_planner_node.ros.goal_client.GoalClient` that keeps one goal in
  flight per robot (the next one as soon as the last ended; after a goal that did not succeed,
  ``retry_s`` = 0.5 s later, as a client would), and a recorder of ``robot_status`` and
  ``robot_segments`` (kept serialized during the run: this process shares the CPU with the ones it
  measures), ``planner/results``, ``planner/active``, ``planner/journal`` and ``/diagnostics``.

Events: ``--kills`` SIGKILLs of the active planner's process group and, with ``--stop-once`` (the
default), one SIGSTOP besides, at a random place among them (seeded by ``--seed``), each ``--gap-s``
(random in the range) after the standby behind the active follows it, and once at least half the
robots have a goal in flight. After each event the bench waits for the standby's takeover (its
``planner/active`` message of a higher term), then starts a fresh standby and waits until it
follows (its ready line, its ``standby`` role seen, its diagnostics naming the planner it follows;
one that does not within ``--follow-s`` is replaced and counted: ``standbys_replaced``; with
``--quiet-loading``, the default with ``--model``, no new goal is sent meanwhile: on a small
machine a vLLM planner serving goals leaves a loading one no CPU). A
SIGSTOPped planner is SIGCONTed once the standby took over: it must read the new term's journal
and stop serving (``fenced``: ``up`` exits with status 3, ``fenced_exit_status``). A takeover that
no event caused (a standby that judged a living active silent) is recorded
(``unprovoked_takeovers``) and the roles follow it. After the last event goals go on for
``--settle-s``, then the drain (at most ``--drain-s``): no new goals, the last ones end.

The adapters' process is ``up --only adapters`` run by :func:`adapters_process`, which only adds
observation: it counts every segment execution the adapters start (the adapters' public
``HOOKS.segment_started``, told once per segment that starts executing) and writes, every second and
at exit, each robot's own counters (``stale_term_drops``, ``duplicates`` (re-sent segments
ignored), ``lease_stops``, ``lease_holds``, ``term``) and the (robot, goal, sequence) started more
than once to ``adapters_counters.json``. The robots' behaviour is unchanged.

Metrics (JSON keys):

- ``goals``: goals the planner accepted; ``succeeded``; ``statuses``: result status name -> count
  over the accepted goals that got a result; ``lost``: accepted goals still without a result after
  the drain (``lost_goals``: which, and the robot's last report of them); ``not_accepted``: goals
  never accepted; ``lost_in_takeover``: goals the client ended REJECTED "lost in a planner
  takeover" (accepted by a planner, not in the journal the standby adopted);
- ``in_flight_at_kill``: distinct goals accepted and without a result at a kill or stop;
  ``succeeded_of_in_flight`` (``_pct``): how many of them ended SUCCEEDED (target >= 95 %);
  ``in_flight_not_succeeded``: the others, with how long before the event the planner accepted
  them (the action server's stamp) and their result;
- ``duplicate_segments``: (robot, goal, sequence) the adapters started executing more than once,
  from the adapters' own count (above); ``duplicate_segments_status``: the same from outside, from
  ``robot_status``: an execution start is an EXECUTING report with no skill finished yet
  (``skill_names`` empty); a segment re-sent to a robot that has it is answered with a copy of its
  latest report (``AdapterCore._repeat_status``: same fields, new stamp), so starts are told apart
  by ``elapsed_s`` (a copy carries the original's exact value, a second execution its own)
  (:func:`execution_starts`);
- ``stale_commands_obeyed``: execution starts of a segment none of whose sends was current when
  sent: each had a term below the highest term already sent to that robot, which had been fenced
  from it (:func:`stale_commands`, from ``robot_segments``: every segment, stop and heartbeat with
  its ``term``, and the execution starts above). The bench receives two topics and cannot trust
  their relative order below :data:`ORDER_S`; two planners' messages to one robot are never that
  close here (a takeover comes >= takeover_s after the old planner's last message; a SIGCONTed
  planner speaks long after the takeover). ``stale_sends_seen``: such stale messages the bench
  saw; ``stale_term_drops``: the adapters' own count of messages they dropped for a stale term;
  ``stale_starts``: details of any stale start;
- ``takeovers``; ``takeover_s``: from the kill (or stop) to the new active planner's
  ``planner/active`` stamp (the end of ``FailoverRole.take_over``, same host clock);
  ``takeover_s_p50``, ``takeover_s_max``, against ``lease_s`` and ``takeover_s_target`` (the
  planner's ``takeover_s``: ``lease_s / 2`` by default, counted from the last journal heard, not
  from the kill); per event (``events``): ``first_new_term_message_s`` (the new term's first
  message to a robot, as received here) and ``robots_on_new_term_s_p50``/``_max`` (from the kill
  to each robot's adapter logging that it obeys the new term, :func:`term_switches`);
- ``robots_stopped_by_lease``: distinct robots that reported a status whose error says ``planner
  lost`` (target 0); ``adapter_lease_stops`` / ``adapter_lease_holds``: the adapters' counters;
- ``journal_gap_max_s``: the longest silence between two journals of one planner as received here
  that spans no event (:func:`journal_gaps`); ``cpu_pct_of_one_core`` per process over the goal
  phase and ``cores``: the bench shares the machine with what it measures;
  ``robot_busy_refusals_blocked_by``: goals refused because the planner holds another goal for the
  robot, by what this client knows of that other goal.

The process exits 0 when every target holds (no lost goal, no duplicate, no stale command obeyed,
no lease stop, every event taken over, >= 95 % of the goals in flight succeeded, the stopped
planner fenced, no unprovoked takeover), else 1.

Run: ``timely-fleet bench failover [--kills 5] [--seconds 180] [--json PATH]``; with a real model:
``--model smollm2-135m-planner`` (vLLM on CPU: every planner process loads the model, a minute or
more, before the next event; use fewer robots, e.g. ``--drones 10 --arms 4 --chats 2``, and a
larger ``--seconds``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from timely_tools.bench.fleet_bench import sim_base_robot
from timely_tools.bench.procs import signal_group, start_process, stop_process

TF = [sys.executable, "-m", "llm_planner_node.cli"]
SUCCEEDED = 0
EXECUTING = 2
ADAPTER_STATS_ENV = "TIMELY_FLEET_FAILOVER_BENCH_STATS"
READY_RE = re.compile(r"ready in \d+ s")
TOOK_OVER_RE = re.compile(r"\[(\d+\.\d+)\] .*took over from planner")


def log(msg: str) -> None:
    print(f"bench failover: {msg}", file=sys.stderr, flush=True)


# -- pure parts (tests/timely_tools/bench/test_failover_bench.py) -------------------------------------------
def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's
    default); None for no values."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass(frozen=True)
class StatusRec:
    """One ``robot_status`` report as the bench recorded it (``t``: arrival, monotonic s)."""

    t: float
    robot: str
    goal: str
    seq: int
    state: int
    elapsed_s: float = 0.0
    n_done: int = 0          # len(skill_names): skills finished so far in the segment
    error: str = ""


@dataclass(frozen=True)
class SendRec:
    """One ``robot_segments`` message (segment, stop or heartbeat) as the bench saw it."""

    t: float
    robot: str
    goal: str
    seq: int
    term: int
    kind: str = "segment"    # segment | stop | heartbeat


def execution_starts(statuses: Iterable[StatusRec]) -> dict[tuple[str, str, int], list[float]]:
    """(robot, goal, sequence) -> arrival times of its distinct execution starts: EXECUTING reports
    with no skill finished yet, one per distinct ``elapsed_s`` (a repeated report, the adapter's
    answer to a re-sent segment, copies the original's ``elapsed_s``)."""
    seen: dict[tuple[str, str, int], dict[float, float]] = {}
    for s in statuses:
        if s.state != EXECUTING or s.n_done != 0:
            continue
        starts = seen.setdefault((s.robot, s.goal, s.seq), {})
        if s.elapsed_s not in starts:
            starts[s.elapsed_s] = s.t
    return {k: sorted(v.values()) for k, v in seen.items()}


def duplicate_count(starts: dict[Any, list[float]] | dict[Any, int]) -> int:
    """Keys started more than once (values: start times or counts)."""
    return sum(1 for v in starts.values() if (len(v) if isinstance(v, list) else int(v)) > 1)


def stale_commands(sends: Iterable[SendRec], starts: dict[tuple[str, str, int], list[float]],
                   details: list[dict[str, Any]] | None = None, order_s: float = 0.0) -> dict[str, int]:
    """From the planners' messages and the execution starts:

    - ``stale_sends``: messages whose term is below the highest term already sent to that robot;
    - ``stale_obeyed``: execution starts of a (robot, goal, sequence) none of whose segment sends
      before the start was current when sent (each had a stale term);
    - ``unexplained``: execution starts with no segment send seen before them (the bench missed it).

    ``order_s``: the bench receives segments and statuses on two topics, whose arrival order it
    cannot trust below this (a start recorded a moment before the send that caused it): a send
    up to ``order_s`` after a start counts as before it. ``details``: gets one entry per stale
    start (its sends' times).
    """
    highest: dict[str, int] = {}
    current_send: dict[tuple[str, str, int], list[float]] = {}  # segment sends not stale when sent
    stale_send: dict[tuple[str, str, int], list[float]] = {}
    stale_sends = 0
    for m in sorted(sends, key=lambda m: m.t):
        top = highest.get(m.robot, 0)
        stale = m.term < top
        if stale:
            stale_sends += 1
        else:
            highest[m.robot] = m.term
        if m.kind == "segment":
            (stale_send if stale else current_send).setdefault((m.robot, m.goal, m.seq), []).append(m.t)
    obeyed = unexplained = 0
    for key, times in starts.items():
        ok = current_send.get(key, [])
        bad = stale_send.get(key, [])
        for t in times:
            if any(s <= t + order_s for s in ok):
                continue
            if any(s <= t + order_s for s in bad):
                obeyed += 1
                if details is not None:
                    details.append({"robot": key[0], "goal": key[1], "sequence": key[2], "started": t,
                                    "stale_sends": bad, "current_sends": ok})
            else:
                unexplained += 1
    return {"stale_sends": stale_sends, "stale_obeyed": obeyed, "unexplained": unexplained}


#: See :func:`stale_commands`: how far the bench's arrival order of a segment and the status of
#: its execution may be off (both topics' messages wait in this process's queues).
ORDER_S = 0.5


_TERM_SWITCH = re.compile(r"\[(\d+\.\d+)\] \[[^\]]*adapter\]: (\S+): planner term (\d+) -> (\d+)")


def term_switches(log_text: str) -> dict[int, dict[str, float]]:
    """From the adapters' log: new term -> robot -> when (wall clock s) its adapter first obeyed it
    (``<robot>: planner term A -> B``, logged by ``AdapterCore.admit_term``)."""
    out: dict[int, dict[str, float]] = {}
    for m in _TERM_SWITCH.finditer(log_text):
        out.setdefault(int(m.group(4)), {}).setdefault(m.group(2), float(m.group(1)))
    return out


def lease_stopped_robots(statuses: Iterable[StatusRec]) -> set[str]:
    """Robots that reported a stop by their lease (error text ``planner lost``)."""
    return {s.robot for s in statuses if "planner lost" in s.error}


# -- the fleet -------------------------------------------------------------------------------------
DRONE_PLANS = (
    "mf,{d};tc,90;mf,{d};tc,90;mf,{d};tc,90;mf,{d};tc,90;",   # a square: back where it started
    "mu,{h};tp;tc,180;tp;tc,180;md,{h};",
    "ml,{d};tp;mr,{d};tp;mb,{d};mf,{d};",
)
#: a base's plans: from the dock and back, through the Nav2 simulator's room (its places)
BASE_PLANS = ("gt,kitchen;d,500;gt,dock;", "gt,hall;tc,90;tc,270;gt,dock;", "gt,lab;s,box;gt,dock;")
BASE_INSTRUCTIONS = ("go to the kitchen and come back to the dock", "drive to the hall, look for a person, then "
                     "return to the dock", "go to the lab and back to the dock")
ARM_OBJECTS = ("apple", "cup", "pen", "book", "banana", "box")
ARM_PLACES = ("tray", "basket", "drawer")
CHAT_SENTENCES = ("The robot woke up early.", "It rolled to the window.", "A small cat sat outside.",
                  "The cat blinked at the robot.", "The robot blinked its lights back.",
                  "They watched the rain together.", "Then the sun came out.")


def instruction(kind: str, rng: random.Random, engine: str, known: dict[str, list[str]] | None = None) -> str:
    """A goal's instruction: with the scripted engine the plan itself (several segments: a drone
    plan of 6-8 one-call segments that ends where it started, an arm plan of 7, a story of 5
    sentences); with the simulated engine or a model one of the instructions the shipped planner
    knows for that kind (``planner_model.known``)."""
    if kind == "base":
        if engine == "scripted":
            return rng.choice(BASE_PLANS)
        from llm_planner_node.engines.sim_traces import BASE_TRACES

        return rng.choice([t.description for t in BASE_TRACES.values()] if engine == "sim" else BASE_INSTRUCTIONS)
    if engine != "scripted":
        return rng.choice((known or {})[kind])
    if kind == "drone":
        return rng.choice(DRONE_PLANS).format(d=rng.choice((30, 50, 80)), h=rng.choice((30, 50)))
    if kind == "arm":
        a, b = rng.sample(ARM_OBJECTS, 2)
        return (f"look({a});pick({a});place({a}, {rng.choice(ARM_PLACES)});"
                f"look({b});pick({b});place({b}, {rng.choice(ARM_PLACES)});home();")
    k = rng.randrange(0, len(CHAT_SENTENCES) - 4)
    return " ".join(CHAT_SENTENCES[k:k + 5])


def fleet_yaml(drones: int, arms: int, chats: int, *, lease_s: float, security: str, keystore: str,
               engine: str, model: str | None, robot_timeout_s: float, bases: int = 0) -> dict[str, Any]:
    robots = ([{"id": f"drone_{i}", "kind": "drone", "adapter": "sim"} for i in range(drones)]
              + [{"id": f"arm_{i}", "kind": "arm", "adapter": "sim"} for i in range(arms)]
              + [{"id": f"chat_{i}", "kind": "chat", "adapter": "sim"} for i in range(chats)]
              + [sim_base_robot(f"base_{i}") for i in range(bases)])
    eng: dict[str, Any] = {"kind": "vllm", "model": model} if model else {"kind": engine}
    sec: dict[str, Any] = {"mode": security, "lease_s": lease_s}
    if security == "sign":
        sec["keystore"] = keystore
    return {"planner": {"policy": "timelyllm", "engine": eng, "robot_timeout_s": robot_timeout_s},
            "security": sec, "robots": robots}


# -- the adapters' process ---------------------------------------------------------------------------
def adapters_process() -> None:
    """``up`` (arguments from ``sys.argv[1:]``) with the adapters' execution count and counters
    written to the file named by :data:`ADAPTER_STATS_ENV` (module docstring)."""
    from robot_adapters.adapter_core import HOOKS

    path = Path(os.environ[ADAPTER_STATS_ENV])
    lock = threading.Lock()
    starts: dict[tuple[str, str, int], int] = {}
    cores: dict[str, Any] = {}
    nodes: list[Any] = []

    def segment_started(core: Any, seg: Any) -> None:
        with lock:
            key = (core.robot_id, seg.goal_id, int(seg.sequence))
            starts[key] = starts.get(key, 0) + 1

    def robot_added(node: Any, core: Any) -> None:
        with lock:
            cores[core.robot_id] = core
            if node not in nodes:
                nodes.append(node)

    def dump() -> None:
        with lock:
            dups = [[r, g, s, n] for (r, g, s), n in starts.items() if n > 1]
            out = {"executions": sum(starts.values()), "segments_executed": len(starts), "duplicate_executions": dups,
                   "robots": {rid: {"term": c.term, "stale_term_drops": c.stale_term_drops, "duplicates": c.duplicates,
                                    "lease_stops": c.lease_stops, "lease_holds": c.lease_holds,
                                    "lease_resumes": c.lease_resumes} for rid, c in cores.items()},
                   "link_drops": [dict(n.link_drops) for n in nodes]}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out))
        os.replace(tmp, path)

    def every_second() -> None:
        while True:
            time.sleep(1.0)
            try:
                dump()
            except Exception:  # noqa: BLE001 - observation must never disturb the adapters
                pass

    HOOKS.segment_started.append(segment_started)
    HOOKS.robot_added.append(robot_added)
    threading.Thread(target=every_second, name="bench-stats", daemon=True).start()
    from llm_planner_node import up

    parser = argparse.ArgumentParser(prog="timely-fleet up")
    up.add_arguments(parser)
    args = parser.parse_args(sys.argv[1:])
    try:
        status = up.run(args)
    finally:
        dump()
    sys.exit(status)


# -- processes ---------------------------------------------------------------------------------------
def cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a live process has used (Linux /proc), None if unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _wait_ready(procs: list[subprocess.Popen], timeout_s: float) -> None:
    """Wait for the ``ready in`` line of every process; RuntimeError (with the log's tail) if one
    exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    waiting = list(procs)
    while waiting:
        for p in list(waiting):
            if READY_RE.search(p.log_text()):
                waiting.remove(p)
            elif p.poll() is not None:
                name = p.log_path.name
                raise RuntimeError(f"{name} exited with status {p.returncode} before it was ready:\n"
                                   + p.log_text()[-2500:])
        if waiting and time.monotonic() > deadline:
            p = waiting[0]
            name = p.log_path.name
            raise RuntimeError(f"{name} not ready within {timeout_s:g} s:\n" + p.log_text()[-2500:])
        time.sleep(0.1)


# -- the bench process's ROS side ------------------------------------------------------------------
class Recorder:
    """``robot_status``, ``robot_segments``, ``planner/results``, ``planner/active``, with arrival times."""

    def __init__(self, ctx: Any, lease_s: float) -> None:
        import rclpy
        from timely_fleet.msg import GoalResult, PlannerJournal, PlannerRole, RobotStatus, SkillSegment

        from llm_planner_node.ros.failover import journal_qos

        from timely_robot.link.rules import HEARTBEAT_SEQUENCE
        from llm_planner_node.ros.messages import (DIAGNOSTICS_TOPIC, JOURNAL_TOPIC, LATCHED_QOS, RESULTS_TOPIC,
                                                   ROLE_TOPIC)
        from timely_robot.link.ros import (
            SEGMENTS_TOPIC, SHARED_SEGMENT_QOS, STATUS_QOS, STATUS_READER_QOS, STATUS_TOPIC, draining_subscription)

        self._hb = HEARTBEAT_SEQUENCE
        self.lock = threading.Lock()
        self.statuses: list[StatusRec] = []
        self.sends: list[SendRec] = []
        self.results: dict[str, tuple[int, str]] = {}
        self.roles: list[tuple[float, float, str, str, int, int]] = []  # (t, stamp, node, role, term, adopted)
        self.journals: list[tuple[float, str, int, int]] = []  # (t, node, term, goals)
        self.journal_bytes: list[int] = []
        self.node = rclpy.create_node(f"bench_failover_recorder_{os.getpid()}", context=ctx)
        self._status_type, self._segment_type = RobotStatus, SkillSegment
        self._raw_statuses: list[tuple[float, bytes]] = []  # list.append is atomic: no lock on the hot path
        self._raw_sends: list[tuple[float, bytes]] = []
        # draining: one executor turn takes every message waiting, not one per wait-set round
        draining_subscription(self.node, RobotStatus, STATUS_TOPIC, self._on_status, STATUS_READER_QOS, raw=True)
        draining_subscription(self.node, SkillSegment, SEGMENTS_TOPIC, self._on_segment, SHARED_SEGMENT_QOS, raw=True)
        self.node.create_subscription(GoalResult, RESULTS_TOPIC, self._on_result, STATUS_QOS)
        self.node.create_subscription(PlannerRole, ROLE_TOPIC, self._on_role, LATCHED_QOS)
        self.node.create_subscription(PlannerJournal, JOURNAL_TOPIC, self._on_journal, journal_qos(lease_s))
        from diagnostic_msgs.msg import DiagnosticArray

        self.following: list[float] = []  # when a standby's diagnostics said it follows an active planner
        self.node.create_subscription(DiagnosticArray, DIAGNOSTICS_TOPIC, self._on_diagnostics, 10)

    # statuses and segments are kept serialized while the run lasts (the bench shares the CPU with
    # the processes it measures) and read afterwards (:meth:`decode`)
    def _on_status(self, raw: bytes) -> None:
        self._raw_statuses.append((time.monotonic(), raw))

    def _on_segment(self, raw: bytes) -> None:
        self._raw_sends.append((time.monotonic(), raw))

    def decode(self) -> None:
        """Turn the recorded statuses and segments into :class:`StatusRec` and :class:`SendRec`."""
        from rclpy.serialization import deserialize_message

        with self.lock:
            statuses, self._raw_statuses = self._raw_statuses, []
            sends, self._raw_sends = self._raw_sends, []
        for t, raw in statuses:
            m = deserialize_message(raw, self._status_type)
            self.statuses.append(StatusRec(t, m.robot_id, m.goal_id, int(m.sequence), int(m.state),
                                           float(m.elapsed_s), len(m.skill_names), m.error))
        for t, raw in sends:
            m = deserialize_message(raw, self._segment_type)
            kind = "stop" if m.cancel else "heartbeat" if int(m.sequence) == self._hb else "segment"
            self.sends.append(SendRec(t, m.robot_id, m.goal_id, int(m.sequence), int(m.term), kind))

    def _on_result(self, m: Any) -> None:
        with self.lock:
            self.results.setdefault(m.goal_id, (int(m.status), m.message))

    def _on_journal(self, m: Any) -> None:
        from rclpy.serialization import serialize_message

        t = time.monotonic()
        size = len(serialize_message(m))
        with self.lock:
            self.journals.append((t, m.node, int(m.term), len(m.goals)))
            self.journal_bytes.append(size)

    def _on_role(self, m: Any) -> None:
        stamp = m.stamp.sec + m.stamp.nanosec * 1e-9
        with self.lock:
            self.roles.append((time.monotonic(), stamp, m.node, m.role, int(m.term), len(m.adopted_goal_ids)))

    def _on_diagnostics(self, m: Any) -> None:
        for st in m.status:
            if st.name.endswith(": role"):
                values = {kv.key: kv.value for kv in st.values}
                if values.get("role") == "standby" and values.get("following"):
                    with self.lock:
                        self.following.append(time.monotonic())

    def role_seen(self, pid: int) -> bool:
        """Has the planner of process ``pid`` announced its role on planner/active?"""
        with self.lock:
            return any(_pid_of(r[2]) == pid for r in self.roles)

    def follows(self, pid: int, since: float) -> bool:
        """The standby of process ``pid`` is seen (its role) and a standby's diagnostics said it
        follows an active planner since ``since`` (one standby runs at a time here)."""
        with self.lock:
            following = any(t >= since for t in self.following)
        return following and self.role_seen(pid)

    def active_above(self, term: int) -> tuple[float, float, str, str, int, int] | None:
        """The first ``active`` role message of a term above ``term``."""
        with self.lock:
            return next((r for r in self.roles if r[3] == "active" and r[4] > term), None)


@dataclass
class Goal:
    robot: str
    kind: str
    instruction: str
    sent: float
    handle: Any
    accepted_at: float | None = None
    ended_at: float | None = None
    status: int | None = None
    message: str = ""
    abandoned: bool = False  # never accepted within the bench's wait: the robot got a new goal


@dataclass
class Sender:
    """Keeps one goal in flight per robot: a new goal as soon as its last one ended (a thread)."""

    client: Any
    kinds: dict[str, str]
    rng: random.Random
    engine: str
    known: dict[str, list[str]] | None
    accept_wait_s: float
    retry_s: float = 0.5
    goals: list[Goal] = field(default_factory=list)
    current: dict[str, Goal] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sending: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def run(self, deadline: float) -> None:
        tuf = (5.0, -0.1, 1.0)  # lenient: a goal delayed by a takeover keeps most of its utility
        while not self.stop.is_set() and time.monotonic() < deadline:
            now = time.monotonic()
            for robot, kind in self.kinds.items():
                with self.lock:
                    g = self.current.get(robot)
                if g is not None:
                    self._update(g, now)
                    if g.ended_at is None and not (g.accepted_at is None and now - g.sent > self.accept_wait_s):
                        continue
                    if g.ended_at is None:
                        g.abandoned = True
                    # after a refusal or failure, as a client would: a moment before the next goal
                    elif g.status != SUCCEEDED and now - g.ended_at < self.retry_s:
                        continue
                if not self.sending.is_set():
                    continue
                text = instruction(kind, self.rng, self.engine, self.known)
                try:
                    h = self.client.send(robot, text, tuf=tuf)
                except Exception as e:  # noqa: BLE001 - reported, never fatal to the bench
                    self.errors.append(f"{robot}: {e!r}")
                    continue
                g = Goal(robot, kind, text, time.monotonic(), h)
                with self.lock:
                    self.goals.append(g)
                    self.current[robot] = g
            time.sleep(0.02)

    @staticmethod
    def _update(g: Goal, now: float) -> None:
        h = g.handle
        if g.accepted_at is None and h.accepted.is_set():
            g.accepted_at = now
        if g.ended_at is None and h.done:
            r = h.result(0)
            g.ended_at, g.status, g.message = now, int(r.status), str(r.message)
            if g.accepted_at is None and h.accepted.is_set():
                g.accepted_at = now

    def refresh(self) -> None:
        now = time.monotonic()
        with self.lock:
            goals = list(self.goals)
        for g in goals:
            self._update(g, now)

    def in_flight(self) -> list[Goal]:
        """Goals accepted and without a result now."""
        self.refresh()
        with self.lock:
            return [g for g in self.goals if g.handle.accepted.is_set() and not g.handle.done]


# -- the run -----------------------------------------------------------------------------------------
@dataclass
class Procs:
    active: subprocess.Popen | None = None
    standby: subprocess.Popen | None = None
    adapters: subprocess.Popen | None = None
    others: list[subprocess.Popen] = field(default_factory=list)  # killed, fenced or spare

    def all(self) -> list[subprocess.Popen]:
        return [p for p in (self.active, self.standby, *self.others) if p is not None]


def _pid_of(node: str) -> int | None:
    """The process id in a planner's journal and role name (``<node>@<host>:<pid>``)."""
    m = re.search(r":(\d+)$", node)
    return int(m.group(1)) if m else None


def _event_plan(args: argparse.Namespace, rng: random.Random) -> list[str]:
    events = ["kill"] * args.kills
    if args.stop_once:
        events.insert(rng.randrange(0, len(events) + 1), "stop")
    return events


def run_bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import rclpy
    from rclpy.context import Context

    from timely_robot.outcomes import STATUS_NAMES
    from llm_planner_node.ros.goal_client import GoalClient, spinning

    rng = random.Random(args.seed)
    engine = "vllm" if args.model else args.engine
    keystore = workdir / "keys"
    fleet = fleet_yaml(args.drones, args.arms, args.chats, bases=args.bases, lease_s=args.lease_s, security=args.security,
                       keystore=str(keystore), engine=args.engine, model=args.model,
                       robot_timeout_s=args.robot_timeout_s)
    kinds = {r["id"]: r["kind"] for r in fleet["robots"]}
    if args.security == "sign":  # made once here: three processes creating them at once would race
        from timely_robot.link.signing import Keystore

        Keystore(str(keystore)).ensure(list(kinds))
    params = workdir / "fleet.yaml"
    params.write_text(yaml.safe_dump(fleet))
    known = None
    if engine != "scripted":
        from llm_planner_node.planner_model.known import known_instructions

        known = {k: list(v) for k, v in known_instructions().items()}
    takeover_target = args.lease_s / 2 if args.lease_s > 0 else 0.5
    up = [*TF, "up", "--params", str(params), "--time-scale", str(args.time_scale)]
    env = dict(os.environ)
    env[ADAPTER_STATS_ENV] = str(workdir / "adapters_counters.json")
    adapters_cmd = [sys.executable, "-c",
                    "from timely_tools.bench.failover_bench import adapters_process; adapters_process()",
                    "--params", str(params), "--time-scale", str(args.time_scale), "--only", "adapters"]
    procs = Procs()
    events_done: list[dict[str, Any]] = []
    unprovoked_events: list[dict[str, Any]] = []
    deaf: list[dict[str, Any]] = []  # standbys that never followed the active planner (replaced)
    no_standby: list[float] = []  # when three standbys in a row did not follow (no more events)
    in_flight_ids: dict[str, tuple[str, float]] = {}  # goal id -> (event, wall time) of its first event
    fenced_status: int | None = None
    n_standby = 0
    cpu: dict[str, Any] = {}  # % of one core over the goal phase (the last active and standby: since their start)
    ctx = Context()
    rclpy.init(context=ctx)
    sender: Sender | None = None
    thread: threading.Thread | None = None
    rec: Recorder | None = None
    t_phase = time.monotonic()
    try:
        rec = Recorder(ctx, args.lease_s)
        client = GoalClient(ctx)
        with spinning(client.node, ctx), spinning(rec.node, ctx):
            log(f"starting adapters ({len(kinds)} robots), the active planner and a standby in {workdir} "
                f"(ROS_DOMAIN_ID {os.environ.get('ROS_DOMAIN_ID')})")
            procs.adapters = start_process(adapters_cmd, workdir / "adapters.log", env=env)
            procs.active = start_process([*up, "--only", "planner"], workdir / "planner_0.log")
            _wait_ready([procs.active, procs.adapters], args.startup_s)  # the standby starts behind a running active
            term = 1

            def ready_standby() -> bool:
                """A new standby, once it follows the active planner: its ready line, its
                ``standby`` role on planner/active and its diagnostics naming the planner it
                follows. One that does not within --follow-s is stopped, counted and replaced
                (at most three tries; False when none followed: no more events then)."""
                quiet = args.quiet_loading and sender is not None and sender.sending.is_set()
                if quiet:  # no new goals while the standby loads its model (the goals in flight go on)
                    sender.sending.clear()
                try:
                    if follow_standby():
                        return True
                finally:
                    if quiet:
                        sender.sending.set()
                no_standby.append(round(time.monotonic() - t_phase, 3))
                log("three standbys in a row did not follow the active planner: no more events")
                return False

            def follow_standby() -> bool:
                nonlocal n_standby
                for _ in range(3):
                    n_standby += 1
                    t0 = time.monotonic()
                    p = procs.standby = start_process([*up, "--standby"], workdir / f"standby_{n_standby}.log")
                    _wait_ready([p], args.startup_s)
                    until = time.monotonic() + args.follow_s
                    while time.monotonic() < until and not rec.follows(p.pid, t0):
                        time.sleep(0.05)
                    if rec.follows(p.pid, t0):
                        return True
                    deaf.append({"standby": n_standby, "pid": p.pid, "at_s": round(time.monotonic() - t_phase, 3),
                                 "role_seen": rec.role_seen(p.pid), "term": term})
                    log(f"standby {n_standby} (pid {p.pid}) does not follow the active planner "
                        f"{args.follow_s:g} s after its start (its role "
                        f"{'seen' if rec.role_seen(p.pid) else 'never seen'} "
                        "on planner/active): replaced")
                    procs.standby = None
                    stop_process(p)
                    procs.others.append(p)
                return False

            ready_standby()
            if not client.wait_for_server(60.0):
                raise RuntimeError(f"the planner does not answer: {client.wait_problem}")
            time.sleep(1.0)  # the adapters' subscriptions
            t_phase = time.monotonic()
            phase_end = t_phase + args.seconds
            drain_at = phase_end - args.drain_s  # no new goal after this
            sender = Sender(client, kinds, random.Random(args.seed + 1), engine, known, args.accept_wait_s)
            sender.sending.set()
            thread = threading.Thread(target=sender.run, args=(phase_end,), name="bench-sender", daemon=True)
            thread.start()
            events = _event_plan(args, rng)
            log(f"goals flowing to {len(kinds)} robots; events: {', '.join(events)}")

            def unprovoked(until: float) -> None:
                """Wait until ``until``; a takeover meanwhile (no kill, no stop: the standby judged
                a living active planner silent) is recorded and the roles follow it."""
                nonlocal term
                while time.monotonic() < until:
                    took = rec.active_above(term)
                    if took is None:
                        time.sleep(0.02)
                        continue
                    term = took[4]
                    old, pid = procs.active, _pid_of(took[2])
                    ev: dict[str, Any] = {"event": "unprovoked takeover", "at_s": round(took[0] - t_phase, 3),
                                          "term": term, "adopted": took[5], "by_pid": pid}
                    if procs.standby is not None and procs.standby.pid == pid:
                        procs.active, procs.standby = procs.standby, None
                        if old is not None:
                            procs.others.append(old)
                            try:
                                ev["old_exit_status"] = old.wait(timeout=max(10.0, 3 * args.lease_s))
                            except subprocess.TimeoutExpired:
                                ev["old_exit_status"] = None
                        unprovoked_events.append(ev)
                        log(f"UNPROVOKED takeover at term {term} by pid {pid} ({took[5]} goal(s) adopted); "
                            f"the old active exited with {ev.get('old_exit_status')}")
                        if not ready_standby():
                            return
                        continue
                    unprovoked_events.append(ev)
                    log(f"UNPROVOKED takeover at term {term} by pid {pid} ({took[5]} goal(s) adopted); "
                        f"the old active exited with {ev.get('old_exit_status')}")

            for i, what in enumerate(events):
                if no_standby:
                    break
                gap = rng.uniform(*args.gap_s)
                # the event and its takeover must fit before the drain
                if time.monotonic() + gap + args.lease_s * 3 > drain_at:
                    log(f"no time left for event {i + 1} ({what}): stopped after {len(events_done)} events")
                    break
                unprovoked(time.monotonic() + gap)
                if no_standby:
                    break
                # while goals are in flight: at least half the robots have one (bounded wait)
                until = time.monotonic() + 5.0
                while len(sender.in_flight()) < len(kinds) // 2 and time.monotonic() < until:
                    time.sleep(0.05)
                unprovoked(time.monotonic())
                if no_standby:
                    break
                flying = sender.in_flight()
                old = procs.active
                assert old is not None
                t_kill, wall_kill = time.monotonic(), time.time()
                signal_group(old, signal.SIGKILL if what == "kill" else signal.SIGSTOP)
                for g in flying:
                    in_flight_ids.setdefault(g.handle.goal_id, (what, wall_kill))
                ev = {"event": what, "at_s": round(t_kill - t_phase, 3), "in_flight": len(flying), "wall": wall_kill}
                deadline = t_kill + max(10.0, 4 * args.lease_s)
                took = None
                while took is None and time.monotonic() < deadline:
                    took = rec.active_above(term)
                    time.sleep(0.01)
                if took is None:
                    ev["takeover_s"] = None
                    events_done.append(ev)
                    log(f"event {i + 1} ({what}): no takeover within {deadline - t_kill:.0f} s")
                    break
                term = took[4]
                ev.update(takeover_s=round(took[1] - wall_kill, 3), seen_after_s=round(took[0] - t_kill, 3),
                          term=term, adopted=took[5])
                log(f"event {i + 1} ({what}): takeover after {ev['takeover_s']:.2f} s at term {term}, "
                    f"{took[5]} goal(s) adopted, {len(flying)} in flight at the {what}")
                procs.active, procs.standby = procs.standby, None
                procs.others.append(old)
                if what == "stop":
                    signal_group(old, signal.SIGCONT)
                if what == "stop":
                    try:
                        # a vLLM planner's shutdown may take 20 s and more (its engine waits for its worker)
                        fenced_status = old.wait(timeout=max(60.0 if args.model else 20.0, 5 * args.lease_s))
                    except subprocess.TimeoutExpired:
                        fenced_status = None
                    ev["fenced_exit_status"] = fenced_status
                    log(f"the SIGCONTed planner exited with status {fenced_status} (3: fenced)")
                    if fenced_status is None:
                        stop_process(old)
                else:
                    old.wait(timeout=10)
                events_done.append(ev)
                if not ready_standby():
                    break
            # goals go on a little after the last takeover, then the drain: no new goals, the last ones end
            unprovoked(min(drain_at, time.monotonic() + args.settle_s))
            sender.sending.clear()
            log("draining")
            drain_end = min(phase_end, time.monotonic() + args.drain_s)
            while time.monotonic() < drain_end and sender.in_flight():
                time.sleep(0.2)
            took = rec.active_above(term)  # a takeover during the drain
            if took is not None:
                unprovoked_events.append({"event": "unprovoked takeover", "at_s": round(took[0] - t_phase, 3),
                                          "term": took[4], "adopted": took[5], "by_pid": _pid_of(took[2])})
            sender.stop.set()
            thread.join(timeout=5)
            sender.refresh()
            time.sleep(1.0)  # the last statuses and results
            phase_s = time.monotonic() - t_phase
            t = os.times()
            cpu["bench"] = t.user + t.system
            for name, p in (("adapters", procs.adapters), ("active", procs.active), ("standby", procs.standby)):
                if p is not None:
                    cpu[name] = cpu_s(p.pid)
            cpu = {k: None if v is None else round(100.0 * v / max(phase_s, 1e-9), 1) for k, v in cpu.items()}
        client.destroy()
        rec.node.destroy_node()
    finally:
        if sender is not None:
            sender.stop.set()
        if thread is not None:
            thread.join(timeout=5)
        statuses = {}
        # the standby first: stopping the active first would let it take over at the very end
        for name, p in (("standby", procs.standby), ("active", procs.active)):
            statuses[name] = stop_process(p)
        for p in procs.others:
            stop_process(p)
        statuses["adapters"] = stop_process(procs.adapters, wait_s=15.0)
        rclpy.try_shutdown(context=ctx)
    assert sender is not None and rec is not None
    rec.decode()
    if args.out_dir:  # what the bench saw, for a closer look (times: s since the goal phase began)
        with rec.lock:
            raw = {"journals": [(round(t - t_phase, 3), n, term, k, b) for (t, n, term, k), b
                                in zip(rec.journals, rec.journal_bytes)],
                   "roles": [(round(t - t_phase, 3), stamp, n, role, term, k)
                             for t, stamp, n, role, term, k in rec.roles],
                   "events": events_done + unprovoked_events}
        (workdir / "records.json").write_text(json.dumps(raw))
    counters_path = workdir / "adapters_counters.json"
    counters = json.loads(counters_path.read_text()) if counters_path.is_file() else None
    log_path = workdir / "adapters.log"
    adapters_log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    r = summarize(sender, rec, events_done, unprovoked_events, in_flight_ids, counters, args, engine,
                  takeover_target, fenced_status, STATUS_NAMES, t_phase, adapters_log)
    r["standbys_replaced"] = len(deaf)
    r["no_standby_followed_at_s"] = no_standby[0] if no_standby else None
    r["standbys_not_following"] = deaf
    r["cpu_pct_of_one_core"] = cpu
    r["cores"] = os.cpu_count()
    return r


def journal_gaps(journals: Iterable[tuple[float, str, int, int]], event_times: Iterable[float],
                 over_s: float) -> tuple[float, list[tuple[float, float, str]]]:
    """Silences in one planner's journal as the bench received it: (the longest gap between two
    consecutive journals of one planner that spans no kill or stop (a journal arriving up to
    :data:`ORDER_S` after one was in transit), every such gap longer than ``over_s`` as (start,
    seconds, planner))."""
    last: dict[str, float] = {}
    events = sorted(event_times)
    longest, over = 0.0, []
    for t, node, _term, _n in sorted(journals):
        t0 = last.get(node)
        last[node] = t
        if t0 is None or any(t0 - ORDER_S <= e <= t for e in events):  # a journal in transit at the event
            continue
        longest = max(longest, t - t0)
        if t - t0 > over_s:
            over.append((t0, t - t0, node))
    return longest, over


def summarize(sender: Sender, rec: Recorder, events: list[dict[str, Any]], unprovoked: list[dict[str, Any]],
              in_flight_ids: dict[str, tuple[str, float]], counters: dict[str, Any] | None,
              args: argparse.Namespace, engine: str, takeover_target: float, fenced_status: int | None,
              names: dict[int, str], t_phase: float, adapters_log: str = "") -> dict[str, Any]:
    goals = sender.goals
    accepted = [g for g in goals if g.handle.accepted.is_set()]
    ended = [g for g in accepted if g.status is not None]
    by_id = {g.handle.goal_id: g for g in goals}
    statuses: dict[str, int] = {}
    for g in ended:
        n = names.get(g.status, str(g.status))
        statuses[n] = statuses.get(n, 0) + 1
    ok_in_flight = sum(1 for gid in in_flight_ids if by_id[gid].status == SUCCEEDED)
    missed = []  # goals in flight at an event that did not succeed: why, and how long before the event accepted
    for gid, (what, wall) in in_flight_ids.items():
        g = by_id[gid]
        if g.status == SUCCEEDED:
            continue
        t_acc = g.handle.accepted_stamp
        missed.append({"robot": g.robot, "goal_id": gid, "event": what,
                       "accepted_before_event_s": None if not t_acc else round(wall - t_acc, 3),
                       "status": None if g.status is None else names.get(g.status, str(g.status)),
                       "message": re.sub(r"[0-9a-f]{32}", "<id>", g.message)[:160]})
    with rec.lock:
        status_recs, sends, journals = list(rec.statuses), list(rec.sends), list(rec.journals)
    gap_max, gaps = journal_gaps(journals, [t_phase + e["at_s"] for e in events], takeover_target / 2)
    starts = execution_starts(status_recs)
    stale_details: list[dict[str, Any]] = []
    stale = stale_commands(sends, starts, stale_details, ORDER_S)
    for d in stale_details:  # times since the goal phase began, and the robot's messages around the start
        t = d["started"]
        d["around"] = [(round(m.t - t_phase, 3), m.kind, m.goal[:8], m.seq, m.term) for m in sends
                       if m.robot == d["robot"] and abs(m.t - t) < 3.0][:40]
        d["started"] = round(t - t_phase, 3)
        d["stale_sends"] = [round(x - t_phase, 3) for x in d["stale_sends"]]
        d["current_sends"] = [round(x - t_phase, 3) for x in d["current_sends"]]
    took = [e["takeover_s"] for e in events if e.get("takeover_s") is not None]
    switched = term_switches(adapters_log) if adapters_log else {}
    for e in events:
        wall = e.pop("wall", None)
        if e.get("term") is None or wall is None:
            continue
        first = [m.t for m in sends if m.term == e["term"]]
        if first:  # the new term's first message as this process received it, after the kill
            e["first_new_term_message_s"] = round(min(first) - (t_phase + e["at_s"]), 3)
        ts = sorted(switched.get(e["term"], {}).values())
        if ts:  # every robot's adapter logs the moment it obeys a higher term
            e["robots_on_new_term"] = len(ts)
            e["robots_on_new_term_s_p50"] = round(percentile(ts, 50) - wall, 3)  # type: ignore[operator]
            e["robots_on_new_term_s_max"] = round(ts[-1] - wall, 3)
    last_status: dict[str, StatusRec] = {}
    for st in status_recs:
        last_status[st.goal] = st
    lost_goals = []
    for g in accepted:
        if g.status is None:
            st = last_status.get(g.handle.goal_id)
            lost_goals.append({"robot": g.robot, "goal_id": g.handle.goal_id, "sent_at_s": round(g.sent - t_phase, 3),
                               "instruction": g.instruction[:80],
                               "last_status": None if st is None else {
                                   "at_s": round(st.t - t_phase, 3), "sequence": st.seq, "state": st.state,
                                   "error": st.error[:120]}})
    # refusals "robot X is still executing goal G": what this client knows of G (the planner
    # holds a goal for the robot that the client may consider ended)
    busy_because: dict[str, int] = {}
    blocking: dict[str, dict[str, Any]] = {}
    for g in ended:
        m = re.search(r"still executing goal ([0-9a-f]{32})", g.message)
        if m:
            b = by_id.get(m.group(1))
            why = ("not this client's goal" if b is None else "no result yet" if b.status is None
                   else f"{names.get(b.status, b.status)}: " + re.sub(r"[0-9a-f]{32}", "<id>", b.message)[:60])
            busy_because[why] = busy_because.get(why, 0) + 1
            if b is not None and b.handle.goal_id not in blocking:
                stamp = b.handle.accepted_stamp
                blocking[b.handle.goal_id] = {
                    "robot": b.robot, "sent_at_s": round(b.sent - t_phase, 3),
                    "accepted_at_s": None if stamp is None else round(
                        stamp - (time.time() - (time.monotonic() - t_phase)), 3),
                    "ended_at_s": None if b.ended_at is None else round(b.ended_at - t_phase, 3),
                    "status": why, "refusals": 0}
            if b is not None:
                blocking[b.handle.goal_id]["refusals"] += 1
    lost_in_takeover = sum(1 for g in ended if "lost in a planner takeover" in g.message)
    not_ok: dict[str, int] = {}
    for g in ended:
        if g.status != SUCCEEDED:
            key = re.sub(r"[0-9a-f]{32}", "<id>", g.message)[:140]
            not_ok[key] = not_ok.get(key, 0) + 1
    robots_c = (counters or {}).get("robots", {})
    r: dict[str, Any] = {
        "goals": len(accepted), "succeeded": sum(1 for g in ended if g.status == SUCCEEDED),
        "lost": len(accepted) - len(ended),
        "not_accepted": sum(1 for g in goals if not g.handle.accepted.is_set()),
        "lost_in_takeover": lost_in_takeover,
        "lost_goals": lost_goals[:20],
        "robot_busy_refusals_blocked_by": dict(sorted(busy_because.items(), key=lambda kv: -kv[1])),
        "robot_busy_blocking_goals": list(blocking.values())[:20],
        "duplicate_segments": duplicate_count({tuple(d[:3]): d[3] for d in counters["duplicate_executions"]})
        if counters else None,
        "duplicate_segments_status": duplicate_count(starts),
        "stale_commands_obeyed": stale["stale_obeyed"],
        "stale_sends_seen": stale["stale_sends"],
        "executions_without_send_seen": stale["unexplained"],
        "stale_starts": stale_details[:20],
        "stale_term_drops": sum(c["stale_term_drops"] for c in robots_c.values()) if counters else None,
        "takeovers": len(took),
        "takeover_s": took,
        "takeover_s_p50": None if not took else round(percentile(took, 50), 3),  # type: ignore[arg-type]
        "takeover_s_max": None if not took else round(max(took), 3),
        "robots_stopped_by_lease": len(lease_stopped_robots(status_recs)),
        "adapter_lease_stops": sum(c["lease_stops"] for c in robots_c.values()) if counters else None,
        "adapter_lease_holds": sum(c["lease_holds"] for c in robots_c.values()) if counters else None,
        "in_flight_at_kill": len(in_flight_ids),
        "succeeded_of_in_flight": ok_in_flight,
        "succeeded_of_in_flight_pct": round(100.0 * ok_in_flight / len(in_flight_ids), 2) if in_flight_ids else None,
        "statuses": dict(sorted(statuses.items())),
        "in_flight_not_succeeded": missed[:40],
        "not_succeeded_why": dict(sorted(not_ok.items(), key=lambda kv: -kv[1])),
        "fenced_exit_status": fenced_status,
        "unprovoked_takeovers": len(unprovoked),
        "journal_gap_max_s": round(gap_max, 3),
        "journal_gaps_over_half_takeover_s": [
            {"at_s": round(t0 - t_phase, 2), "s": round(g, 3), "planner_pid": _pid_of(n)} for t0, g, n in gaps][:50],
        "engine": engine if not args.model else f"vllm:{args.model}",
        "robots": len(sender.kinds), "kills": sum(1 for e in events if e["event"] == "kill"),
        "stops": sum(1 for e in events if e["event"] == "stop"),
        "lease_s": args.lease_s, "takeover_s_target": takeover_target,
        "adapter_executions": counters["executions"] if counters else None,
        "segment_sends_seen": sum(1 for s in sends if s.kind == "segment"),
        "time_scale": args.time_scale, "security": args.security, "seed": args.seed,
        "quiet_loading": bool(args.quiet_loading),
        "events": events + unprovoked, "client_errors": sender.errors[:20],
        "goal_phase_s": round(time.monotonic() - t_phase, 1),
        "journal_bytes_max": max(rec.journal_bytes, default=0),
    }
    return r


def report(r: dict[str, Any]) -> str:
    pct = r["succeeded_of_in_flight_pct"]
    rows = [
        ("goals accepted", r["goals"], ""),
        ("succeeded", r["succeeded"], ""),
        ("lost (no result)", r["lost"], "target 0"),
        ("lost in a takeover (REJECTED)", r["lost_in_takeover"], "accepted after the last journal"),
        ("in flight at a kill/stop", r["in_flight_at_kill"], ""),
        ("  of them succeeded", f"{r['succeeded_of_in_flight']} ({pct if pct is not None else '-'} %)",
         "target >= 95 %"),
        ("duplicate segments (adapters)", r["duplicate_segments"], "target 0"),
        ("duplicate segments (statuses)", r["duplicate_segments_status"], "target 0"),
        ("stale commands obeyed", r["stale_commands_obeyed"], "target 0"),
        ("stale messages dropped (adapters)", r["stale_term_drops"], f"{r['stale_sends_seen']} seen sent"),
        ("takeovers", r["takeovers"], f"{r['kills']} kills + {r['stops']} stop"),
        ("takeover s p50 / max", f"{r['takeover_s_p50']} / {r['takeover_s_max']}",
         f"target {r['takeover_s_target']:g}, lease {r['lease_s']:g}"),
        ("robots stopped by the lease", r["robots_stopped_by_lease"], "target 0"),
        ("unprovoked takeovers", r["unprovoked_takeovers"], "target 0 (a living active judged silent)"),
        ("longest journal silence s", r["journal_gap_max_s"], "outside kills and stops"),
        ("fenced planner's exit status", r["fenced_exit_status"], "3: fenced" if r["stops"] else "no stop"),
        ("standbys replaced (never followed)", r.get("standbys_replaced"), "target 0"),
    ]
    w = max(len(a) for a, _, _ in rows)
    lines = [f"bench failover: {r['robots']} robots, engine {r['engine']}, time scale {r['time_scale']:g}"]
    lines += [f"  {a:<{w}}  {str(b):>12}  {c}" for a, b, c in rows]
    lines.append(f"  statuses: {r['statuses']}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--drones", type=int, default=30, help="simulated drones (default 30)")
    parser.add_argument("--arms", type=int, default=15, help="simulated arms (default 15)")
    parser.add_argument("--chats", type=int, default=5, help="chat robots (default 5)")
    parser.add_argument("--bases", type=int, default=0,
                        help="mobile bases (simulated; the Nav2 simulator's places; default 0)")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of the active planner (default 5)")
    parser.add_argument("--stop-once", dest="stop_once", action="store_true", default=True,
                        help="also SIGSTOP the active once, then SIGCONT it after the takeover: it must be "
                             "fenced (default)")
    parser.add_argument("--no-stop-once", dest="stop_once", action="store_false", help="no SIGSTOP event")
    parser.add_argument("--seed", type=int, default=1, help="seeds the event moments and the goals")
    parser.add_argument("--seconds", type=float, default=180.0,
                        help="the goal phase's budget, from the first goal to the end of the drain; events that "
                             "no longer fit are skipped (default 180: six events, each waiting for a new standby "
                             "to load its engine and the object check's meaning model)")
    parser.add_argument("--settle-s", type=float, default=5.0,
                        help="goals go on this long after the last takeover, before the drain (default 5)")
    parser.add_argument("--drain-s", type=float, default=20.0,
                        help="at most this long at the end: no new goals, the last ones end (default 20)")
    parser.add_argument("--gap-s", type=float, nargs=2, default=(2.0, 6.0), metavar=("MIN", "MAX"),
                        help="random wait before each event, after the standby is ready (default 2 6)")
    parser.add_argument("--time-scale", type=float, default=0.2,
                        help="simulated robots run each skill this x its modelled time (default 0.2)")
    parser.add_argument("--lease-s", type=float, default=3.0, help="security.lease_s (default 3)")
    parser.add_argument("--security", choices=("off", "sign"), default="off",
                        help="security.mode (default off, the project's default; sign: signed segments, "
                             "statuses and journal, keys made in the run's folder)")
    parser.add_argument("--robot-timeout-s", type=float, default=30.0, help="planner.robot_timeout_s")
    parser.add_argument("--engine", choices=("scripted", "sim"), default="scripted",
                        help="scripted: the instruction is the plan; sim: known instructions, simulated plans")
    parser.add_argument("--model", default=None,
                        help="run the planners on vLLM with this model (`timely-fleet models`) instead; "
                             "each planner process loads it (a minute or more on CPU)")
    parser.add_argument("--startup-s", type=float, default=None,
                        help="time a process may take to be ready (default 90, 400 with --model)")
    parser.add_argument("--quiet-loading", dest="quiet_loading", action="store_true", default=None,
                        help="send no new goals while a fresh standby loads (default with --model: on a small "
                             "machine a vLLM planner serving goals leaves a loading one no CPU)")
    parser.add_argument("--no-quiet-loading", dest="quiet_loading", action="store_false")
    parser.add_argument("--follow-s", type=float, default=10.0,
                        help="a new standby must follow the active planner this soon after its ready line, or it "
                             "is replaced (counted in standbys_replaced)")
    parser.add_argument("--accept-wait-s", type=float, default=40.0,
                        help="a goal not accepted after this long is abandoned and its robot gets a new one")
    parser.add_argument("--domain-id", type=int, default=None,
                        help="ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID if set, else a random one in 150-199)")
    parser.add_argument("--out-dir", default=None, help="keep the YAML and the processes' logs here")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    if args.startup_s is None:
        args.startup_s = 400.0 if args.model else 90.0
    if args.quiet_loading is None:
        args.quiet_loading = bool(args.model)
    if args.domain_id is None:
        env = os.environ.get("ROS_DOMAIN_ID")
        args.domain_id = int(env) if env else random.randint(150, 199)
    os.environ["ROS_DOMAIN_ID"] = str(args.domain_id)  # this process and every child
    if args.out_dir:
        workdir = Path(args.out_dir)
        workdir.mkdir(parents=True, exist_ok=True)
        r = run_bench(args, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_failover_") as d:
            r = run_bench(args, Path(d))
    r["domain_id"] = args.domain_id
    print(report(r))
    if args.json:
        from timely_tools import outfiles

        outfiles.write_json(args.json, r, indent=2)
    pct = r["succeeded_of_in_flight_pct"]
    ok = (r["lost"] == 0 and not r["duplicate_segments"] and r["duplicate_segments_status"] == 0
          and r["stale_commands_obeyed"] == 0 and r["robots_stopped_by_lease"] == 0
          and r["takeovers"] == r["kills"] + r["stops"] and (pct is None or pct >= 95.0)
          and (r["stops"] == 0 or r["fenced_exit_status"] == 3) and r["unprovoked_takeovers"] == 0
          and r["kills"] == args.kills and r["stops"] == int(args.stop_once))
    return 0 if ok else 1
