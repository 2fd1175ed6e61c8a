"""The planners' journal on the wire (llm_planner_node/ros/failover.py): a journal entry survives
the message round trip, and a signed journal verifies after ROS serialization (every time: a
serialization's padding bytes may differ between sender and receiver, so it is not what is
signed), while a changed field, a missing signature or another key is refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

pytestmark = pytest.mark.ros


def _entry():
    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.core.task_model import Progress, Segment
    from llm_planner_node.service.ports import GoalIn
    from llm_planner_node.service.takeover import JournalEntry

    ss = DEFAULT_SKILL_SETS["tello_minispec"]
    segs = (Segment(0, "tc,90;", (ss.validate("turn_cw", [90]),), (11, 12, 13)),
            Segment(1, "mf,50;", (ss.validate("move_forward", [50]),), (14, 15), final=True))
    return JournalEntry("a" * 32, GoalIn("d1", "turn then go", robot_kind="drone", ert_s=1.5, alpha=-2.0, beta=1.0,
                                         skill_set="tello_minispec", max_tokens=77), 0.25,
                        scene=("cat x:0.5",), prompt_token_ids=(1, 2, 3),
                        progress=Progress(segments=segs, gen_start=(0.1, 0.2), gen_end=(0.2, 0.3),
                                          dispatched_at=(0.2, 0.3), exec_start=(0.25, None), exec_end=(0.9, None),
                                          answers={0: (("turn_cw(90)", "None"),)}, seq_base=2,
                                          earlier_plans=("tc,10;rp;",)), replans=1, cancel_key_sha256="f" * 64)


def test_a_journal_entry_survives_the_message_round_trip():
    from rclpy.serialization import deserialize_message, serialize_message
    from timely_fleet.msg import JournalGoal

    from llm_planner_node.ros.failover import entry_msg, entry_of_msg

    e = _entry()
    back = entry_of_msg(deserialize_message(serialize_message(entry_msg(e)), JournalGoal))
    assert back == e


def test_a_signed_journal_verifies_after_serialization_and_a_changed_one_does_not():
    from rclpy.serialization import deserialize_message, serialize_message
    from timely_fleet.msg import PlannerJournal

    from llm_planner_node.ros.failover import entry_msg, journal_problem, sign_journal
    from timely_robot.link.signing import Counter, RobotKey

    key = RobotKey("planner", "k1", b"k" * 32)
    counter = Counter()
    for seq in range(10):
        msg = sign_journal(PlannerJournal(node="p@h:1", term=2, sequence=seq, lease_s=3.0, link_counter=5,
                                          goals=[entry_msg(_entry())] * 3), key, counter)
        got = deserialize_message(serialize_message(msg), PlannerJournal)
        assert journal_problem(got, key) is None
    got.goals[1].instruction = "land"
    assert journal_problem(got, key) == "journal signature does not verify"
    other = RobotKey("planner", "k1", b"x" * 32)
    assert journal_problem(deserialize_message(serialize_message(msg), PlannerJournal), other) is not None
    unsigned = PlannerJournal(node="p@h:1", term=9)
    assert journal_problem(unsigned, key) == "unsigned journal"
    assert journal_problem(unsigned, None) is None  # security.mode off: nothing to check


_TEXTS = st.lists(st.text(max_size=6), max_size=4)


@settings(max_examples=60, deadline=None)
@given(texts=_TEXTS, other=_TEXTS, ids=st.lists(st.integers(0, 2**32 - 1), max_size=8),
       times=st.lists(st.floats(allow_nan=False), max_size=4), age=st.floats(allow_nan=False))
def test_the_signed_bytes_survive_serialization_and_tell_any_two_contents_apart(texts, other, ids, times, age):
    from rclpy.serialization import deserialize_message, serialize_message
    from timely_fleet.msg import JournalGoal, PlannerJournal

    from timely_robot.link.signing import message_fields

    def journal(texts, ids, times, age):
        goal = JournalGoal(goal_id="g", segment_texts=texts, token_ids=ids, gen_start_s=times, age_s=age)
        return PlannerJournal(node="p@h:1", term=1, sequence=2**64 - 1, goals=[goal, JournalGoal()])

    msg = journal(texts, ids, times, age)
    signed = message_fields(msg)
    assert message_fields(deserialize_message(serialize_message(msg), PlannerJournal)) == signed
    # moving text across a boundary ("ab", "c" / "a", "bc"), a string more or less, another id;
    # a string is what the wire carries of it (a C string ends at a NUL)
    def wire(ts):
        return [t.split("\x00")[0] for t in ts]

    assert (message_fields(journal(other, ids, times, age)) == signed) == (wire(other) == wire(texts))
    assert message_fields(journal(texts, [*ids, 0], times, age)) != signed
    assert message_fields(journal(texts, ids, [*times, 0.0], age)) != signed


def test_a_planner_tells_its_own_journal_by_the_node_field_of_the_serialized_bytes():
    from rclpy.serialization import serialize_message
    from timely_fleet.msg import PlannerJournal

    from llm_planner_node.ros.failover import entry_msg, journal_node_of

    for node in ("/llm_planner@host:1234", "/ns/llm_planner_standby@vm:7", "p"):
        raw = serialize_message(PlannerJournal(node=node, term=3, goals=[entry_msg(_entry())]))
        assert journal_node_of(raw) == node
    assert journal_node_of(b"\x00\x01\x00\x00") is None  # too short: deserialized and checked instead


def test_standbys_take_over_in_the_order_of_their_names_and_a_tie_at_one_term_leaves_one_active(ros_context):
    import time
    from types import SimpleNamespace

    import rclpy
    from timely_fleet.msg import PlannerJournal, PlannerRole

    from llm_planner_node.ros import failover
    from llm_planner_node.ros.failover import FailoverLink
    from timely_robot.link.signing import Counter

    claims, nodes = [], []

    def link(name, term):
        node = rclpy.create_node(name, context=ros_context)
        nodes.append(node)
        role = SimpleNamespace(term=term, role="standby", on_higher_term=lambda t, n: claims.append((name, t, n)))
        return role, FailoverLink(node, 3.0, None, Counter(), role)

    (na, a), (nb, b) = link("standby_a", 1), link("standby_b", 1)
    try:
        assert a.name < b.name and a.rank() == b.rank() == 0
        a._on_role(PlannerRole(node=b.name, role="standby", term=1))
        b._on_role(PlannerRole(node=a.name, role="standby", term=1))
        assert (a.rank(), b.rank()) == (0, 1)  # a first; b waits TAKEOVER_STAGGER_S more
        b._on_role(PlannerRole(node=a.name, role="active", term=2))  # a took over: b is first in line now
        assert b.rank() == 0
        b._on_role(PlannerRole(node="/standby_0@gone:1", role="standby", term=1))
        assert b.rank() == 1
        b.standbys["/standby_0@gone:1"] = time.monotonic() - failover.STANDBY_GONE_S - 0.1  # not heard since
        assert b.rank() == 0
        # two planners active at term 2: the one whose name sorts later yields, the other stays
        na.term = nb.term = 2
        b._on_journal(PlannerJournal(node=a.name, term=2))
        a._on_journal(PlannerJournal(node=b.name, term=2))
        assert claims == [("standby_b", 2, a.name)]
        a._on_journal(PlannerJournal(node=b.name, term=3))  # a higher term: a was replaced
        assert claims[-1] == ("standby_a", 3, b.name)
    finally:
        for lk in (a, b):
            lk.destroy()
        for n in nodes:
            n.destroy_node()


def test_a_standby_that_joins_late_or_misses_a_journal_asks_for_a_snapshot_and_acknowledges_it(ros_context):
    """Over DDS, signed: the active planner's deltas reach a standby that joined late (its first
    journal is a delta: it asks for a snapshot on planner/journal_ack); the snapshot makes it
    whole and it acknowledges it; a journal whose sequence skips one makes it ask again."""
    import time
    from types import SimpleNamespace

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from timely_fleet.msg import PlannerJournal

    from llm_planner_node.ros.failover import FailoverLink, journal_qos, sign_journal
    from llm_planner_node.service.failover_role import JournalOut
    from llm_planner_node.ros.messages import JOURNAL_TOPIC
    from timely_robot.link.signing import Counter, RobotKey

    key = RobotKey("planner", "k1", b"j" * 32)

    def make(name, role):
        node = rclpy.create_node(name, context=ros_context)
        return node, FailoverLink(node, 3.0, key, Counter(), SimpleNamespace(term=1, role=role,
                                                                            on_higher_term=lambda t, n: None))

    (na, active), (ns, standby) = make("journal_active", "active"), make("journal_standby", "standby")
    forger = rclpy.create_node("journal_gap", context=ros_context)
    gap_pub = forger.create_publisher(PlannerJournal, JOURNAL_TOPIC, journal_qos(3.0))
    ex = SingleThreadedExecutor(context=ros_context)
    for n in (na, ns, forger):
        ex.add_node(n)

    def spin_until(pred, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not pred():
            ex.spin_once(timeout_sec=0.05)
        return pred()

    try:
        assert spin_until(lambda: active._journal_pub.get_subscription_count() >= 2
                          and standby._ack_pub.get_subscription_count() >= 1)
        e = _entry()
        assert active.publish_now(JournalOut(1, False, (e,)))  # a delta: the standby has no snapshot yet
        assert spin_until(lambda: active.stats.snapshot_requests)
        assert active.snapshot_due() is not None  # answered at once: none was sent before
        assert active.stats.snapshot_requests == 1 and standby.replica.needs_snapshot is not None
        assert len(standby.replica) == 1  # applied all the same: the best it has
        assert active.followers() == 1
        assert active.publish_now(JournalOut(1, True, (e,)))  # a whole entry with its client's cancel key
        assert spin_until(lambda: active.acked.get(standby.name) == 2)  # the snapshot, acknowledged
        assert standby.replica.needs_snapshot is None and standby.replica.snapshots == 1
        (held,) = standby.adoptable()
        assert held.goal_id == e.goal_id and held.progress == e.progress and held.cancel_key_sha256 == "f" * 64
        assert held.age_s >= e.age_s

        # journal 3 never arrives; journal 4 (signed by the key, as the active's) shows the gap
        skipped = sign_journal(PlannerJournal(node=active.name, term=1, sequence=4, lease_s=3.0), key, Counter())
        gap_pub.publish(skipped)
        requests = active.stats.snapshot_requests
        assert spin_until(lambda: active.stats.snapshot_requests > requests)
        assert standby.replica.gaps == 1 and "1 missed" in standby.replica.needs_snapshot
        assert active.drops == {} and standby.drops == {}
    finally:
        ex.shutdown()
        for n, lk in ((na, active), (ns, standby)):
            lk.destroy()
            n.destroy_node()
        forger.destroy_node()


def test_a_standby_acts_on_the_active_planners_silence_at_the_second_tick_that_finds_it_past_the_takeover_time():
    """The silence is the real time since the last journal; the first tick that finds it past the
    takeover time only arms the watch (the executor takes the journals waiting in its reader
    before the next tick), the second acts on it; a journal heard in between disarms it."""
    from pytest import approx

    from llm_planner_node.service.failover_role import SilenceWatch

    w = SilenceWatch()
    assert w.observe(None, 10.0, 1.5) is None        # no journal heard yet
    assert w.observe(10.0, 11.45, 1.5) is None       # 1.45 s: not past
    assert w.observe(10.0, 11.50, 1.5) is None       # 1.50 s: past, first found
    assert w.observe(10.0, 11.55, 1.5) == approx(1.55)  # the next tick acts: a tick after the real silence
    # a standby that did not run for 2 s: its first tick finds the silence past, the journal that
    # waited in its reader is read before the next one, which finds it anew
    assert w.observe(20.0, 22.05, 1.5) is None
    assert w.observe(22.06, 22.10, 1.5) is None
    assert w.observe(22.06, 23.56, 1.5) is None      # 1.50 s after that journal: first found again
    assert w.observe(22.06, 25.0, 1.5) == approx(2.94)  # acted on whenever the next tick runs