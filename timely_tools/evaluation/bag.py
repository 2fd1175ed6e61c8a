"""rosbag2 recording, reading, replay and metrics (``rosbags``; mcap or sqlite3 storage).

Recorded topics: ``/planner/goals`` (GoalRecord, one per accepted goal), ``/planner/results``
(GoalResult, one per finished goal, with per-segment timing), ``/robot_status`` (RobotStatus),
``/robot_segments`` (SkillSegment: every robot's segments, where the planner publishes them by
default; ``robot_id`` says whose) and ``/robots/<id>/segments`` (SkillSegment, the per-robot topics
of ``security.per_robot_topics``) for the given robot ids or every such topic discovered while
recording.

- :class:`BagRecorder`: an rclpy node that subscribes with ``raw=True`` (serialized CDR is
  written as is) and writes the bag with ``rosbags``; custom types are registered from the
  package's ``.msg`` files (:func:`typestore`).
- :func:`read_bag`: (topic, timestamp ns, deserialized message) in time order.
- :func:`metrics_from_bag` / :func:`metrics_from_results`: per task type metrics through
  ``core/metrics.py`` (``outcome``) and :func:`.results.summarize_outcomes`.
- :func:`replay`: re-send recorded GoalRecords as ``plan_task`` action goals with their
  original relative timing.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from llm_planner_node.core.metrics import Outcome, outcome
from llm_planner_node.core.tuf import TUFParams
from timely_tools.evaluation.results import policy_result, summarize_outcomes

MSG_DIR = Path(__file__).resolve().parents[2] / "msg"
PKG = "timely_fleet"
GOALS_TOPIC = "/planner/goals"
RESULTS_TOPIC = "/planner/results"
STATUS_TOPIC = "/robot_status"
SEGMENTS_TOPIC = "/robot_segments"  # ros_messages.SEGMENTS_TOPIC in the root namespace
SEGMENTS_RE = re.compile(r"^/robots/([^/]+)/segments$")
TYPES = {GOALS_TOPIC: f"{PKG}/msg/GoalRecord", RESULTS_TOPIC: f"{PKG}/msg/GoalResult",
         STATUS_TOPIC: f"{PKG}/msg/RobotStatus", SEGMENTS_TOPIC: f"{PKG}/msg/SkillSegment"}
SEGMENT_TYPE = f"{PKG}/msg/SkillSegment"
STATUS_SUCCEEDED = 0

_TYPESTORE = None


def typestore() -> Any:
    """ROS 2 (Humble) typestore with the timely_fleet messages registered from ``msg/*.msg``."""
    global _TYPESTORE
    if _TYPESTORE is None:
        from rosbags.typesys import Stores, get_types_from_msg, get_typestore

        ts = get_typestore(Stores.ROS2_HUMBLE)
        types: dict[str, Any] = {}
        for f in sorted(MSG_DIR.glob("*.msg")):
            types.update(get_types_from_msg(f.read_text(), f"{PKG}/msg/{f.stem}"))
        ts.register(types)
        _TYPESTORE = ts
    return _TYPESTORE


#: what a robot sees and feels, under its id (robot/robot_adapters/robot_topics.py)
ROBOT_TOPIC_TYPES = {"camera/image_raw": "sensor_msgs/msg/Image", "detections": f"{PKG}/msg/DetectionArray",
                     "battery": "sensor_msgs/msg/BatteryState"}
ROBOT_TOPIC_RE = re.compile(r"^/(?:[A-Za-z0-9_]+/)*[A-Za-z][A-Za-z0-9_]*/(camera/image_raw|detections|battery)$")


def _msgtype_of_topic(topic: str) -> str | None:
    if topic in TYPES:
        return TYPES[topic]
    m = ROBOT_TOPIC_RE.match(topic)
    if m is not None:
        return ROBOT_TOPIC_TYPES[m.group(1)]
    return SEGMENT_TYPE if SEGMENTS_RE.match(topic) else None


class BagWriter:
    """Thread-safe rosbag2 writer for serialized (CDR) messages of the known topics."""

    def __init__(self, path: str | Path, storage: str = "mcap") -> None:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
        self.path = Path(path)
        self._w = Writer(self.path, version=8, storage_plugin=plugin)
        self._w.open()
        self._conns: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.count = Counter[str]()

    def write(self, topic: str, data: bytes, t_ns: int) -> None:
        msgtype = _msgtype_of_topic(topic)
        if msgtype is None:
            raise ValueError(f"topic {topic!r} is not recorded")
        with self._lock:
            if topic not in self._conns:
                self._conns[topic] = self._w.add_connection(topic, msgtype, typestore=typestore())
            self._w.write(self._conns[topic], int(t_ns), bytes(data))
            self.count[topic] += 1

    def close(self) -> None:
        with self._lock:
            self._w.close()


def _ros_msg_class(topic: str) -> Any:
    import importlib

    pkg, _msg, name = _msgtype_of_topic(topic).split("/")  # type: ignore[union-attr]
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


class BagRecorder:
    """rclpy node recording the evaluation topics to a rosbag2.

    The shared ``/robot_segments`` topic is always recorded. ``robots``: robot ids whose per-robot
    ``/robots/<id>/segments`` to record (``security.per_robot_topics``); with ``discover=True`` new
    per-robot segment topics, and each robot's ``<id>/camera/image_raw`` (unless ``images`` is
    False), ``<id>/detections`` and ``<id>/battery``, found in the graph are added (checked every
    ``discover_period_s``).
    Use :meth:`close` to stop and finalise the bag.
    """

    def __init__(self, path: str | Path, *, context: Any = None, robots: Sequence[str] = (),
                 discover: bool = True, storage: str = "mcap", discover_period_s: float = 0.5,
                 node_name: str = "timely_fleet_recorder", images: bool = True) -> None:
        from rclpy.node import Node
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        self.writer = BagWriter(path, storage)
        self.images = images
        self.node = Node(node_name, context=context)
        self._qos = QoSProfile(depth=1000, history=HistoryPolicy.KEEP_LAST,
                               reliability=ReliabilityPolicy.RELIABLE)
        self._subs: dict[str, Any] = {}
        self.counts: Counter[str] = Counter()  # messages written per topic
        for topic in (GOALS_TOPIC, RESULTS_TOPIC, STATUS_TOPIC, SEGMENTS_TOPIC):
            self._subscribe(topic)
        for r in robots:
            self._subscribe(f"/robots/{r}/segments")
        self._timer = self.node.create_timer(discover_period_s, self.discover) if discover else None

    def _subscribe(self, topic: str) -> None:
        if topic in self._subs:
            return
        cls = _ros_msg_class(topic)
        clock = self.node.get_clock()

        def cb(data: bytes, topic: str = topic) -> None:
            self.writer.write(topic, data, clock.now().nanoseconds)
            self.counts[topic] += 1

        self._subs[topic] = self.node.create_subscription(cls, topic, cb, self._qos, raw=True)

    def discover(self) -> None:
        for topic, _types in self.node.get_topic_names_and_types():
            m = ROBOT_TOPIC_RE.match(topic)
            if SEGMENTS_RE.match(topic) or (m is not None and (self.images or m.group(1) != "camera/image_raw")):
                self._subscribe(topic)

    @property
    def topics(self) -> list[str]:
        return sorted(self._subs)

    def close(self) -> None:
        self.node.destroy_node()
        self.writer.close()


def read_bag(path: str | Path, topics: Iterable[str] | None = None) -> Iterator[tuple[str, int, Any]]:
    """(topic, timestamp ns, message) in time order; messages are rosbags dataclasses."""
    from rosbags.highlevel import AnyReader

    want = set(topics) if topics is not None else None
    with AnyReader([Path(path)], default_typestore=typestore()) as reader:
        conns = [c for c in reader.connections if want is None or c.topic in want]
        for conn, t, raw in reader.messages(connections=conns):
            yield conn.topic, t, reader.deserialize(raw, conn.msgtype)


# ----------------------------------------------------------------------------- metrics

def outcome_from_result(res: Any, network_latency_s: float = 0.008) -> Outcome | None:
    """Outcome of a succeeded GoalResult (rclpy or rosbags message), times relative to arrival.

    Each segment's execution start is the measured ``execution_start_s`` when present (then the
    network latency is already in it), else ``dispatch_s`` + network latency; durations are
    measured execution end - start. Goal arrival = 0 (segment times are relative to it).
    """
    if int(res.status) != STATUS_SUCCEEDED or not len(res.segments):
        return None
    segs = sorted(res.segments, key=lambda s: s.index)
    measured = all(s.execution_start_s >= 0 and s.execution_end_s >= 0 for s in segs)
    if measured:
        at = [float(s.execution_start_s) for s in segs]
        net = 0.0
    else:
        at = [float(s.dispatch_s) for s in segs]
        net = network_latency_s
    dur = [max(0.0, float(s.execution_end_s - s.execution_start_s)) if s.execution_end_s >= 0 else 0.0
           for s in segs]
    return outcome(0.0, TUFParams(float(res.ert_s), float(res.alpha), float(res.beta)), at, dur, net,
                   task_type=str(res.task_type))


def metrics_from_results(results: Sequence[Any], goals: Sequence[Any] = (), *, policy: str = "recorded",
                         network_latency_s: float = 0.008) -> dict[str, Any]:
    """Per-task-type metrics (one :func:`policy_result` dict) from GoalResult (+ GoalRecord) msgs.

    Goals = accepted GoalRecords plus results without a record; completed = succeeded results.
    tokens/s is not in these messages (reported as unknown).
    """
    types: dict[str, str] = {str(g.goal_id): str(g.task_type) for g in goals}
    for r in results:
        types.setdefault(str(r.goal_id), str(r.task_type))
    outs = [o for o in (outcome_from_result(r, network_latency_s) for r in results) if o is not None]
    return policy_result(policy, summarize_outcomes(policy, outs, Counter(types.values()), {}, 0.0))


def metrics_from_bag(path: str | Path, *, policy: str | None = None,
                     network_latency_s: float = 0.008) -> dict[str, Any]:
    goals, results = [], []
    for topic, _t, msg in read_bag(path, (GOALS_TOPIC, RESULTS_TOPIC)):
        (goals if topic == GOALS_TOPIC else results).append(msg)
    return metrics_from_results(results, goals, policy=policy or Path(path).name,
                                network_latency_s=network_latency_s)


def goal_sequence(path: str | Path) -> list[tuple[float, Any]]:
    """Recorded GoalRecords as (seconds since the first goal, msg), in recording order."""
    out = []
    for _topic, t, msg in read_bag(path, (GOALS_TOPIC,)):
        stamp = msg.stamp.sec + msg.stamp.nanosec * 1e-9
        out.append((stamp if stamp > 0 else t * 1e-9, msg))
    if not out:
        return []
    t0 = min(t for t, _ in out)
    return [(t - t0, m) for t, m in out]


# ----------------------------------------------------------------------------- replay

GOAL_FIELDS = ("robot_id", "robot_kind", "task_type", "instruction", "ert_s", "alpha", "beta",
               "skill_set", "max_tokens")


def plan_task_goal(record: Any) -> Any:
    """PlanTask.Goal with a GoalRecord's fields (GoalRecord minus goal_id/stamp)."""
    from timely_fleet.action import PlanTask

    g = PlanTask.Goal()
    for f in GOAL_FIELDS:
        setattr(g, f, type(getattr(g, f))(getattr(record, f)))
    return g


def send_timed_goals(node: Any, goals: Sequence[tuple[float, Any]], *, action_name: str = "plan_task",
                     time_scale: float = 1.0, server_timeout_s: float = 10.0, executor: Any = None,
                     progress: bool = False, result_timeout_s: float = 60.0) -> list[Any]:
    """Send (offset s, PlanTask.Goal) pairs at their offsets (x ``time_scale``); wait for results.

    Spins ``executor`` (or a new single-threaded one on ``node``'s context) while waiting.
    Returns the result wrappers (``.result`` = PlanTask.Result; None if not accepted/timed out).
    """
    from llm_planner_node.ros.goal_client import answering_action_client

    client, ex = answering_action_client(node, action_name, server_timeout_s, executor)
    bar = None
    if progress:
        import sys

        from tqdm import tqdm

        bar = tqdm(total=len(goals), desc="goals", unit="goal", file=sys.stderr)
    order = sorted(range(len(goals)), key=lambda i: goals[i][0])
    send_futs: list[Any] = [None] * len(goals)
    t0 = time.monotonic()
    for i in order:
        due = t0 + goals[i][0] * time_scale
        while time.monotonic() < due:
            ex.spin_once(timeout_sec=max(0.0, min(0.01, due - time.monotonic())))
        send_futs[i] = client.send_goal_async(goals[i][1])
    result_futs: list[Any] = [None] * len(goals)
    done: list[Any] = [None] * len(goals)
    deadline = time.monotonic() + result_timeout_s
    pending = set(range(len(goals)))
    while pending and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
        for i in list(pending):
            if result_futs[i] is None and send_futs[i].done():
                h = send_futs[i].result()
                if h is None or not h.accepted:
                    pending.discard(i)
                    if bar:
                        bar.update(1)
                    continue
                result_futs[i] = h.get_result_async()
            if result_futs[i] is not None and result_futs[i].done():
                done[i] = result_futs[i].result()
                pending.discard(i)
                if bar:
                    bar.update(1)
    if bar:
        bar.close()
    client.destroy()
    return done


def replay(path: str | Path, *, context: Any = None, time_scale: float = 1.0,
           action_name: str = "plan_task", progress: bool = True,
           result_timeout_s: float = 60.0) -> list[Any]:
    """Re-send a bag's GoalRecords as PlanTask goals with their original relative timing."""
    from rclpy.node import Node

    seq = goal_sequence(path)
    node = Node("timely_fleet_replay", context=context)
    try:
        return send_timed_goals(node, [(t, plan_task_goal(m)) for t, m in seq], action_name=action_name,
                                time_scale=time_scale, progress=progress,
                                result_timeout_s=result_timeout_s)
    finally:
        node.destroy_node()
