"""Robot adapters over real ROS 2 (rclpy): ordering, failures, safety, gaps, cancellation."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.ros

from timely_robot.skills import INDY7_ARM, TELLO_MINISPEC  # noqa: E402


class Harness:
    """Adapter node + a test node publishing segments (on the shared ``robot_segments`` topic, as
    the planner does by default) and collecting /robot_status."""

    def __init__(self, ctx):
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.node import Node
        from timely_fleet.msg import RobotStatus, SkillSegment

        from timely_robot.link.ros import SEGMENTS_TOPIC, SHARED_SEGMENT_QOS
        from robot_adapters.adapter_node import AdapterNode
        from timely_robot.link.ros import status_qos

        self.ctx = ctx
        self.adapter = AdapterNode("test_adapter", context=ctx)
        self.node = Node("test_mission", context=ctx)
        self.status = []
        self._lock = threading.Lock()
        self.node.create_subscription(RobotStatus, "/robot_status", self._on_status, status_qos())
        self._pub = self.node.create_publisher(SkillSegment, SEGMENTS_TOPIC, SHARED_SEGMENT_QOS)
        self.exec = MultiThreadedExecutor(num_threads=3, context=ctx)
        self.exec.add_node(self.adapter)
        self.exec.add_node(self.node)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._spin, daemon=True)
        self._t.start()

    def _spin(self):
        while not self._stop.is_set():
            self.exec.spin_once(timeout_sec=0.05)

    def _on_status(self, msg):
        with self._lock:
            self.status.append(msg)

    def add(self, core):
        self.adapter.add_robot(core)
        pub = self._pub
        deadline = time.monotonic() + 10
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pub.get_subscription_count() > 0
        # the status subscription must be matched too, or the first statuses are lost
        while self.adapter.status_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        return core

    def send(self, robot_id, goal, seq, calls=(), text="", final=False, cancel=False, skill_set=None):
        from timely_robot.link.ros import make_segment_msg

        self._pub.publish(make_segment_msg(goal, robot_id, seq, calls, text, final, cancel, skill_set))

    def wait(self, pred, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if pred(list(self.status)):
                    return list(self.status)
            time.sleep(0.02)
        with self._lock:
            got = [(m.robot_id, m.sequence, m.state, m.error) for m in self.status]
        raise AssertionError(f"condition not met; statuses: {got}")

    def close(self):
        self._stop.set()
        self._t.join(5)
        self.adapter.shutdown_robots()
        self.exec.shutdown()
        self.adapter.destroy_node()
        self.node.destroy_node()


@pytest.fixture()
def harness(ros_context):
    h = Harness(ros_context)
    try:
        yield h
    finally:
        h.close()


def _sim_core(adapter, robot_id, skill_set=TELLO_MINISPEC, dur=0.05, fail=None, **kw):
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.executor import SimulatedExecutor

    ex = SimulatedExecutor(robot_id, skill_set.robot_kind, skill_set, lambda c: dur, fail=fail)
    return AdapterCore(robot_id, ex, adapter.status_publisher(robot_id), use_minispec=False, **kw)


DONE, FAILED, CANCELLED, RECEIVED = 3, 4, 5, 1


def _states(msgs, robot, state):
    return [m for m in msgs if m.robot_id == robot and m.state == state]


def test_out_of_order_segments_execute_in_order(harness):
    core = harness.add(_sim_core(harness.adapter, "sim_1"))
    T = TELLO_MINISPEC
    segs = {0: [T.validate("to")], 1: [T.validate("mf", [100]), T.validate("tc", [90])], 2: [T.validate("lnd")]}
    for seq in (2, 0, 1):  # published out of order
        harness.send("sim_1", "g1", seq, segs[seq], final=seq == 2, skill_set=T)
    harness.send("sim_1", "g1", 1, segs[1], skill_set=T)  # a duplicate
    msgs = harness.wait(lambda m: len(_states(m, "sim_1", DONE)) == 3)
    done = _states(msgs, "sim_1", DONE)
    assert [m.sequence for m in done] == [0, 1, 2]
    assert [c.name for c in core.executor.executed] == ["takeoff", "move_forward", "turn_cw", "land"]
    assert list(done[1].skill_names) == ["move_forward", "turn_cw"]
    assert len(done[1].skill_durations_s) == 2 and all(d >= 0.04 for d in done[1].skill_durations_s)
    # the duplicate is not executed again; the adapter answers it with its latest status for that
    # segment (RECEIVED, 2 x EXECUTING, DONE + that one repeat)
    assert core.duplicates == 1
    assert len([m for m in msgs if m.robot_id == "sim_1" and m.sequence == 1]) == 5


def test_failing_skill_reports_failed_with_error_text(harness):
    core = harness.add(_sim_core(harness.adapter, "arm_sim", INDY7_ARM, fail={"pick": "gripper jammed: no vacuum"}))
    A = INDY7_ARM
    harness.send("arm_sim", "g2", 0, [A.validate("move_to", [300, 0, 200]), A.validate("pick", ["cup"])], skill_set=A)
    harness.send("arm_sim", "g2", 1, [A.validate("home")], final=True, skill_set=A)
    msgs = harness.wait(lambda m: len(_states(m, "arm_sim", FAILED)) >= 2)
    failed = _states(msgs, "arm_sim", FAILED)
    assert failed[0].sequence == 0 and "gripper jammed: no vacuum" in failed[0].error
    assert list(failed[0].skill_names) == ["move_to"]  # what did run is still reported
    assert failed[1].sequence == 1 and "aborted" in failed[1].error
    assert [c.name for c in core.executor.executed] == ["move_to"]  # home never ran


def test_unsafe_argument_refused_before_any_command(harness):
    from timely_robot.skills import SkillCall

    core = harness.add(_sim_core(harness.adapter, "sim_2"))
    harness.send("sim_2", "g3", 0, [SkillCall("takeoff", ()), SkillCall("move_forward", (900,))])
    harness.send("sim_2", "g4", 0, [SkillCall("self_destruct", ())], final=True)
    msgs = harness.wait(lambda m: len(_states(m, "sim_2", FAILED)) >= 2)
    errs = [m.error for m in _states(msgs, "sim_2", FAILED)]
    assert "above the safe maximum" in errs[0] and "self_destruct" in errs[1]
    assert core.executor.executed == []  # not even the takeoff before it


def test_gap_fails_goal_and_cancel_stops_execution(harness):
    harness.add(_sim_core(harness.adapter, "sim_3", gap_timeout_s=0.5))
    T = TELLO_MINISPEC
    harness.send("sim_3", "g5", 1, [T.validate("lnd")], final=True, skill_set=T)  # 0 never comes
    msgs = harness.wait(lambda m: _states(m, "sim_3", FAILED))
    assert "segment 0 of goal g5 never arrived" in _states(msgs, "sim_3", FAILED)[0].error
    # each skill takes 60 s: a CANCELLED within the wait's 15 s means the takeoff was stopped
    slow = harness.add(_sim_core(harness.adapter, "sim_4", dur=60.0))
    harness.send("sim_4", "g6", 0, [T.validate("to"), T.validate("mf", [100])], skill_set=T)
    harness.wait(lambda m: any(x.robot_id == "sim_4" and x.state == 2 for x in m))
    harness.send("sim_4", "g6", 1, cancel=True)
    harness.wait(lambda m: _states(m, "sim_4", CANCELLED), timeout=15.0)
    assert slow.executor.executed == []


def test_drone_adapter_over_ros_with_djitellopy_and_simulator(harness, tello_net):
    """Real ROS + real djitellopy + Tello simulator: MiniSpec segment text executed in order;
    an unsafe segment is refused before a UDP command leaves the adapter."""
    djitellopy = pytest.importorskip("djitellopy")
    from robot_adapters.adapter_core import AdapterCore
    from robot_adapters.drone_executor import TelloExecutor
    from robot_adapters.sim.tello_sim import TelloSim

    ip = tello_net.sim_ips[3]
    sim = tello_net.in_sim(lambda: TelloSim(ip, time_scale=0.2).start())
    try:
        ex = TelloExecutor(ip, client_factory=lambda: tello_net.in_client(
            lambda: djitellopy.Tello(host=ip, retry_count=1)), time_scale=0.2)
        ex.connect()
        harness.add(AdapterCore("tello_1", ex, harness.adapter.status_publisher("tello_1"), time_scale=0.2))
        T = TELLO_MINISPEC
        harness.send("tello_1", "g7", 1, [T.validate("mf", [100]), T.validate("tc", [90])],
                     text="mf,100;tc,90;", skill_set=T)
        harness.send("tello_1", "g7", 0, [T.validate("to")], text="to;", skill_set=T)
        harness.send("tello_1", "g7", 2, [T.validate("lnd")], text="lnd;", final=True, skill_set=T)
        msgs = harness.wait(lambda m: len(_states(m, "tello_1", DONE)) == 3, timeout=30)
        assert [m.sequence for m in _states(msgs, "tello_1", DONE)] == [0, 1, 2]
        assert [c for c in sim.commands() if not c.endswith("?")] == [
            "command", "takeoff", "forward 100", "cw 90", "land"]
        n_before = len(sim.commands())
        harness.send("tello_1", "g8", 0, [], text="to;mf,100;mf,900;", skill_set=T)
        msgs = harness.wait(lambda m: _states(m, "tello_1", FAILED), timeout=10)
        assert "refused" in _states(msgs, "tello_1", FAILED)[0].error
        time.sleep(0.2)
        assert len(sim.commands()) == n_before  # nothing was sent to the drone
    finally:
        sim.stop()


def test_shared_segment_topic_dispatches_by_robot_id(ros_context):
    """Fleet scale: one subscription to ``robot_segments`` for every robot of the node,
    dispatched by ``robot_id``; another process's robots are not ours (counted, not executed)."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from timely_fleet.msg import RobotStatus, SkillSegment

    from timely_robot.link.ros import SEGMENTS_TOPIC, SHARED_SEGMENT_QOS, STATUS_QOS
    from robot_adapters.adapter_node import AdapterNode
    from timely_robot.link.ros import make_segment_msg

    adapter = AdapterNode("shared_adapter", context=ros_context)  # shared: the default
    assert adapter.segment_topics == "shared"
    cores = [adapter.add_robot(_sim_core(adapter, f"sh_{i}", dur=0.01)) for i in range(3)]
    assert len(adapter._subs) == 1  # noqa: SLF001 - one subscription, whatever the fleet size
    node = Node("shared_driver", context=ros_context)
    done = []
    node.create_subscription(RobotStatus, "/robot_status", lambda m: done.append(m.robot_id)
                             if m.state == DONE else None, STATUS_QOS)
    pub = node.create_publisher(SkillSegment, SEGMENTS_TOPIC, SHARED_SEGMENT_QOS)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(adapter)
    ex.add_node(node)
    T = TELLO_MINISPEC
    try:
        deadline = time.monotonic() + 10
        while (pub.get_subscription_count() == 0 or adapter.status_pub.get_subscription_count() == 0) \
                and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
        for rid in ("sh_0", "sh_1", "sh_2", "elsewhere_7"):
            pub.publish(make_segment_msg("g", rid, 0, [T.validate("tc", [90])], final=True, skill_set=T))
        deadline = time.monotonic() + 10
        while len(set(done)) < 3 and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
    finally:
        adapter.shutdown_robots()
        ex.shutdown()
        node.destroy_node()
        adapter.destroy_node()
    assert sorted(set(done)) == ["sh_0", "sh_1", "sh_2"]
    assert all([c.name for c in core.executor.executed] == ["turn_cw"] for core in cores)
    assert adapter.not_hosted == 1
