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
- :func:`replay`: re-send recorded GoalRecords as ``plan_task`` action goals and recorded
  missions as ``plan_mission`` goals, with their original relative timing.

Missions: ``/planner/missions`` (MissionRecord, one per mission the planner received) and
``/planner/mission_results`` (MissionResult: its status, and per task the robot, its goal and how
the goal ended) are recorded beside the goals. A mission's task runs as a goal, so its GoalRecord
and GoalResult are on the goal topics too (task type ``mission``): the metrics count it as the
goal it is, and :func:`replay` leaves it out (re-sending the mission makes it again).
:func:`missions_from_bag` lists the missions for ``timely-fleet report``.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from llm_planner_node.core.metrics import Outcome, outcome
from llm_planner_node.core.tuf import TUFParams
from llm_planner_node.service.missions import MISSION_STATUS_NAMES
from timely_tools.evaluation.results import policy_result, summarize_outcomes

MSG_DIR = Path(__file__).resolve().parents[2] / "msg"
PKG = "timely_fleet"
GOALS_TOPIC = "/planner/goals"
RESULTS_TOPIC = "/planner/results"
STATUS_TOPIC = "/robot_status"
SEGMENTS_TOPIC = "/robot_segments"  # ros_messages.SEGMENTS_TOPIC in the root namespace
MISSIONS_TOPIC = "/planner/missions"  # ros/mission_server.py in the root namespace
MISSION_RESULTS_TOPIC = "/planner/mission_results"
SEGMENTS_RE = re.compile(r"^/robots/([^/]+)/segments$")
TYPES = {GOALS_TOPIC: f"{PKG}/msg/GoalRecord", RESULTS_TOPIC: f"{PKG}/msg/GoalResult",
         STATUS_TOPIC: f"{PKG}/msg/RobotStatus", SEGMENTS_TOPIC: f"{PKG}/msg/SkillSegment",
         MISSIONS_TOPIC: f"{PKG}/msg/MissionRecord", MISSION_RESULTS_TOPIC: f"{PKG}/msg/MissionResult"}
SEGMENT_TYPE = f"{PKG}/msg/SkillSegment"
STATUS_SUCCEEDED = 0
#: MissionTask.status of a task that never reached a robot (ros/mission_server.py NO_GOAL)
TASK_NOT_STARTED = 255
#: the task type of the goals a mission's tasks run as (service/missions.py)
MISSION_TASK_TYPE = "mission"

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
        for topic in (GOALS_TOPIC, RESULTS_TOPIC, STATUS_TOPIC, SEGMENTS_TOPIC, MISSIONS_TOPIC, MISSION_RESULTS_TOPIC):
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
        if not conns:  # rosbags reads every connection for an empty list
            return
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


def _at(msg: Any, t_ns: int) -> float:
    """A record's time: its stamp (arrival at the planner), else when it was recorded."""
    stamp = msg.stamp.sec + msg.stamp.nanosec * 1e-9
    return stamp if stamp > 0 else t_ns * 1e-9


def goal_sequence(path: str | Path) -> list[tuple[float, Any]]:
    """Recorded GoalRecords as (seconds since the first goal, msg), in recording order."""
    out = [(_at(msg, t), msg) for _topic, t, msg in read_bag(path, (GOALS_TOPIC,))]
    if not out:
        return []
    t0 = min(t for t, _ in out)
    return [(t - t0, m) for t, m in out]


class Sent(NamedTuple):
    """One recorded request to re-send: a goal (GoalRecord) or a mission (MissionRecord)."""

    offset_s: float   # since the first one
    kind: str         # "goal" | "mission"
    record: Any


def replay_sequence(path: str | Path) -> list[Sent]:
    """What a replay re-sends, in recording order, offsets from the first of them: the recorded
    missions, and the recorded goals except those a mission's task ran as (goal ids named by a
    recorded MissionResult, or task type ``mission`` in a bag that holds missions)."""
    goals, missions, task_goals = [], [], set()
    for topic, t, msg in read_bag(path, (GOALS_TOPIC, MISSIONS_TOPIC, MISSION_RESULTS_TOPIC)):
        if topic == GOALS_TOPIC:
            goals.append((_at(msg, t), msg))
        elif topic == MISSIONS_TOPIC:
            missions.append((_at(msg, t), msg))
        else:
            task_goals |= {str(task.goal_id) for task in msg.tasks if task.goal_id}
    has_missions = bool(missions or task_goals)
    items = [Sent(at, "goal", m) for at, m in goals
             if str(m.goal_id) not in task_goals and not (has_missions and str(m.task_type) == MISSION_TASK_TYPE)]
    items += [Sent(at, "mission", m) for at, m in missions]
    if not items:
        return []
    t0 = min(s.offset_s for s in items)
    return sorted((s._replace(offset_s=s.offset_s - t0) for s in items), key=lambda s: s.offset_s)


def missions_from_bag(path: str | Path) -> list[dict[str, Any]]:
    """The recorded missions in the order they arrived: instruction, selector, status and message,
    and per task its robot, goal, status, why that robot and the robots it left. A mission
    received but not ended while recording has status ``"no result"``."""
    from timely_robot.outcomes import STATUS_NAMES

    records: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for topic, _t, msg in read_bag(path, (MISSIONS_TOPIC, MISSION_RESULTS_TOPIC)):
        (records if topic == MISSIONS_TOPIC else results).setdefault(str(msg.mission_id), msg)
    out = []
    for mid in [*records, *(m for m in results if m not in records)]:
        rec, res = records.get(mid), results.get(mid)
        entry: dict[str, Any] = {
            "mission_id": mid, "instruction": str((rec or res).instruction),
            "robot_ids": list(rec.robot_ids) if rec is not None else [],
            "robot_kinds": list(rec.robot_kinds) if rec is not None else [],
            "status": MISSION_STATUS_NAMES.get(int(res.status), str(res.status)) if res is not None else "no result",
            "message": str(res.message) if res is not None else "", "tasks": []}
        for task in (res.tasks if res is not None else ()):
            code = int(task.status)
            entry["tasks"].append({
                "task": str(task.task), "robot_id": str(task.robot_id), "goal_id": str(task.goal_id),
                "status": "NOT_STARTED" if code == TASK_NOT_STARTED else STATUS_NAMES.get(code, str(code)),
                "message": str(task.message), "allocated_why": str(task.allocated_why),
                "tried": [[str(r), str(w)] for r, w in zip(task.tried_robots, task.tried_why)]})
        out.append(entry)
    return out


def mission_lines(missions: Sequence[dict[str, Any]]) -> list[str]:
    """``missions_from_bag``'s list as report lines: one per mission, one per task under it."""
    lines = [f"missions: {len(missions)}"] if missions else []
    for m in missions:
        sel = ", ".join([*m["robot_ids"], *m["robot_kinds"]])
        head = f"  {m['mission_id'][:8]} \"{m['instruction']}\"" + (f" (robots {sel})" if sel else "")
        lines.append(f"{head}: {m['status']}" + (f": {m['message']}" if m["message"] else ""))
        for t in m["tasks"]:
            goal = f" (goal {t['goal_id'][:8]})" if t["goal_id"] else ""
            left = "".join(f"; left {r}: {w}" for r, w in t["tried"])
            lines.append(f"    {t['task']} on {t['robot_id'] or 'no robot'}: {t['status']}{goal}{left}")
    return lines


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


def plan_mission_goal(record: Any) -> Any:
    """PlanMission.Goal with a MissionRecord's instruction, selector and TUF."""
    from timely_fleet.action import PlanMission

    return PlanMission.Goal(instruction=str(record.instruction), robot_ids=[str(r) for r in record.robot_ids],
                            robot_kinds=[str(k) for k in record.robot_kinds], ert_s=float(record.ert_s),
                            alpha=float(record.alpha), beta=float(record.beta))


def send_timed_goals(node: Any, goals: Sequence[tuple[float, Any]], *, action_name: str = "plan_task",
                     time_scale: float = 1.0, server_timeout_s: float = 10.0, executor: Any = None,
                     progress: bool = False, result_timeout_s: float = 60.0) -> list[Any]:
    """Send (offset s, PlanTask.Goal) pairs at their offsets (x ``time_scale``); wait for results.

    Spins ``executor`` (or a new single-threaded one on ``node``'s context) while waiting.
    Returns the result wrappers (``.result`` = PlanTask.Result; None if not accepted/timed out).
    """
    from llm_planner_node.ros.goal_client import answering_action_client

    client, ex = answering_action_client(node, action_name, server_timeout_s, executor)
    try:
        return _send_timed(ex, [(t, client, g) for t, g in goals], time_scale, progress, result_timeout_s)
    finally:
        client.destroy()


def _send_timed(ex: Any, items: Sequence[tuple[float, Any, Any]], time_scale: float, progress: bool,
                result_timeout_s: float) -> list[Any]:
    """Send (offset s, action client, goal) triples at their offsets (x ``time_scale``), spinning
    ``ex``; the result wrappers in the items' order (None: not accepted or no result in time)."""
    bar = None
    if progress:
        import sys

        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="goals", unit="goal", file=sys.stderr)
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    send_futs: list[Any] = [None] * len(items)
    t0 = time.monotonic()
    for i in order:
        due = t0 + items[i][0] * time_scale
        while time.monotonic() < due:
            ex.spin_once(timeout_sec=max(0.0, min(0.01, due - time.monotonic())))
        send_futs[i] = items[i][1].send_goal_async(items[i][2])
    result_futs: list[Any] = [None] * len(items)
    done: list[Any] = [None] * len(items)
    deadline = time.monotonic() + result_timeout_s
    pending = set(range(len(items)))
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
    return done


class Replayed(list):
    """What :func:`replay` returns: the goals' result wrappers (``.result`` = PlanTask.Result,
    None without a result) in recording order, and ``missions``: the missions' (``.result`` =
    PlanMission.Result)."""

    def __init__(self, goals: Iterable[Any] = (), missions: Iterable[Any] = ()) -> None:
        super().__init__(goals)
        self.missions: list[Any] = list(missions)


def replay(path: str | Path, *, context: Any = None, time_scale: float = 1.0,
           action_name: str = "plan_task", progress: bool = True,
           result_timeout_s: float = 60.0, mission_action: str = "plan_mission") -> Replayed:
    """Re-send a bag's goals as PlanTask goals and its missions as PlanMission goals, with their
    original relative timing (:func:`replay_sequence`: a mission's task goals are not re-sent)."""
    from rclpy.node import Node
    from timely_fleet.action import PlanMission

    from llm_planner_node.ros.goal_client import answering_action_client

    seq = replay_sequence(path)
    node = Node("timely_fleet_replay", context=context)
    clients: dict[str, Any] = {}
    try:
        ex = None
        for kind, name, action_type in (("goal", action_name, None), ("mission", mission_action, PlanMission)):
            if any(s.kind == kind for s in seq):
                clients[kind], ex = answering_action_client(node, name, 10.0, ex, action_type)
        if ex is None:
            return Replayed()
        build = {"goal": plan_task_goal, "mission": plan_mission_goal}
        done = _send_timed(ex, [(s.offset_s, clients[s.kind], build[s.kind](s.record)) for s in seq], time_scale,
                           progress, result_timeout_s)
        return Replayed([r for s, r in zip(seq, done) if s.kind == "goal"],
                        [r for s, r in zip(seq, done) if s.kind == "mission"])
    finally:
        for c in clients.values():
            c.destroy()
        node.destroy_node()
