"""Robot link authentication (robot/timely_robot/link/signing.py), without ROS: keys, MACs, counters,
replay protection and the drop counts of the verifier."""

from __future__ import annotations

from pathlib import Path

import hashlib
import json
import math
import os
import stat
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from timely_robot.link import signing as sec
from timely_robot.link.signing import (
    BAD_MAC, OUT_OF_WINDOW, REPLAYED, UNKNOWN_KEY, UNSIGNED, Counter, Keystore, KeystoreError, LinkSigner,
    LinkVerifier, MissingKeyError, ReplayGuard, RobotKey, segment_fields, sign, status_fields, verify)

KEY = RobotKey("tello_1", sec.key_id_of(b"k" * 32), b"k" * 32)
OTHER = RobotKey("tello_2", sec.key_id_of(b"o" * 32), b"o" * 32)

SEGMENT = dict(goal_id="g1", robot_id="tello_1", sequence=3, text="mf(100);tc(90)",
               skills=[("move_forward", ["distance"], ["100"]), ("turn_cw", ["degrees"], ["90"])],
               final=False, cancel=False, stamp=(12, 34), term=1)
STATUS = dict(robot_id="tello_1", goal_id="g1", sequence=3, state=2, current_skill="move_forward", progress=0.5,
              elapsed_s=1.25, predicted_remaining_s=2.5, skill_names=["takeoff"], skill_durations_s=[3.0],
              error="", stamp=(12, 34))

# One changed value per field (strings, numbers, lists, NaN, -1e308, -0.0, the stamp)
SEGMENT_CHANGES = [("goal_id", "g2"), ("robot_id", "tello_2"), ("sequence", 4), ("text", "mf(101);tc(90)"),
                   ("skills", [("move_forward", ["distance"], ["101"]), ("turn_cw", ["degrees"], ["90"])]),
                   ("skills", [("move_forward", ["dist"], ["100"]), ("turn_cw", ["degrees"], ["90"])]),
                   ("skills", [("move_forward", ["distance"], ["100"])]),
                   ("skills", [("turn_cw", ["degrees"], ["90"]), ("move_forward", ["distance"], ["100"])]),
                   ("final", True), ("cancel", True), ("stamp", (12, 35)), ("stamp", None), ("term", 2), ("term", 0)]
STATUS_CHANGES = [("robot_id", "tello_2"), ("goal_id", "g2"), ("sequence", 2), ("state", 3),
                  ("current_skill", "turn_cw"), ("progress", 0.75), ("progress", math.nan), ("elapsed_s", -1e308),
                  ("elapsed_s", math.nan), ("predicted_remaining_s", -0.0), ("predicted_remaining_s", math.inf),
                  ("skill_names", ["takeoff", "land"]), ("skill_names", []), ("skill_durations_s", [3.0000001]),
                  ("error", "x"), ("stamp", (13, 34)), ("pose", (0.0, 0.0, 0.0, 0.0))]


def seg_bytes(**changes):
    return segment_fields(**{**SEGMENT, **changes})


def status_bytes(**changes):
    return status_fields(**{**STATUS, **changes})


# -- MAC -----------------------------------------------------------------------------------------

def test_sign_verify_round_trip_for_segments_and_statuses():
    for kind, data in (("segment", seg_bytes()), ("status", status_bytes())):
        mac = sign(KEY, kind, data, 1000)
        assert len(mac) == 32
        assert verify(KEY, kind, data, 1000, mac)
        assert verify(KEY, kind, data, 1000, mac, key_id=KEY.key_id)


@pytest.mark.parametrize("name,value", SEGMENT_CHANGES)
def test_any_changed_segment_field_fails_verification(name, value):
    mac = sign(KEY, "segment", seg_bytes(), 1000)
    assert not verify(KEY, "segment", seg_bytes(**{name: value}), 1000, mac)


@pytest.mark.parametrize("name,value", STATUS_CHANGES)
def test_any_changed_status_field_fails_verification(name, value):
    mac = sign(KEY, "status", status_bytes(), 1000)
    assert not verify(KEY, "status", status_bytes(**{name: value}), 1000, mac)


def test_counter_key_and_key_id_are_covered():
    data = seg_bytes()
    mac = sign(KEY, "segment", data, 1000)
    assert not verify(KEY, "segment", data, 1001, mac)
    assert not verify(OTHER, "segment", data, 1000, mac)
    assert not verify(KEY, "segment", data, 1000, mac, key_id="00000000")
    assert not verify(KEY, "segment", data, 1000, mac[:-1] + bytes([mac[-1] ^ 1]))
    assert not verify(KEY, "segment", data, -1, mac)  # out of range: False, no exception


def test_a_segment_mac_is_not_valid_as_a_status_mac():
    data = seg_bytes()
    mac = sign(KEY, "segment", data, 1000)
    assert not verify(KEY, "status", data, 1000, mac)
    with pytest.raises(ValueError):
        sign(KEY, "other", data, 1000)


def test_the_encoding_is_unambiguous_across_field_boundaries():
    # the same characters split differently between fields must encode differently
    assert seg_bytes(goal_id="ab", robot_id="c") != seg_bytes(goal_id="a", robot_id="bc")
    a = status_bytes(skill_names=["a,b"], skill_durations_s=[1.0])
    b = status_bytes(skill_names=["a", "b"], skill_durations_s=[1.0])
    assert a != b
    assert seg_bytes(skills=[("a", [], ["b"])]) != seg_bytes(skills=[("a", ["b"], [])])
    # a segment's bytes are never a status's bytes
    assert not seg_bytes().startswith(status_bytes()[:4])


text = st.text(max_size=12)
floats = st.floats(allow_nan=True, allow_infinity=True)


@settings(max_examples=150, deadline=None)
@given(a=st.tuples(text, text, st.integers(0, 2**32 - 1), text, st.lists(st.tuples(text, st.lists(text, max_size=3)), max_size=3),
                   st.booleans(), st.booleans()),
       b=st.tuples(text, text, st.integers(0, 2**32 - 1), text, st.lists(st.tuples(text, st.lists(text, max_size=3)), max_size=3),
                   st.booleans(), st.booleans()))
def test_different_segments_never_share_an_encoding(a, b):
    if a != b:
        assert segment_fields(*a) != segment_fields(*b)
    else:
        assert segment_fields(*a) == segment_fields(*b)


@settings(max_examples=150, deadline=None)
@given(x=floats, y=floats)
def test_floats_are_signed_bit_for_bit(x, y):
    import struct
    same_bits = struct.pack(">d", x) == struct.pack(">d", y)  # 0.0 and -0.0 differ, NaN equals NaN
    assert (status_bytes(elapsed_s=x) == status_bytes(elapsed_s=y)) == same_bits


def test_float32_progress_is_signed_as_the_receiver_sees_it():
    # the wire rounds progress to float32: the sender's float64 and the received float32 agree
    import struct
    received = struct.unpack(">f", struct.pack(">f", 0.1))[0]
    assert status_bytes(progress=0.1) == status_bytes(progress=received)
    assert status_bytes(progress=1e39) == status_bytes(progress=math.inf)  # beyond float32: no exception


# -- counters and replay ---------------------------------------------------------------------------

def test_counter_is_strictly_increasing_even_when_the_clock_stalls_or_goes_back():
    t = [1_000]
    c = Counter(clock_us=lambda: t[0])
    seen = [c.next() for _ in range(5)]
    t[0] = 500  # clock went back
    seen += [c.next() for _ in range(3)]
    t[0] = 10_000
    seen.append(c.next())
    assert all(b > a for a, b in zip(seen, seen[1:]))
    assert seen[-1] == 10_000


def test_counter_is_strictly_increasing_across_a_simulated_restart():
    t = [5_000_000]
    first = Counter(clock_us=lambda: t[0])
    sent = [first.next() for _ in range(100)]  # faster than the clock: runs ahead by 100 µs
    t[0] += 1_000  # the process restarts 1 ms later
    restarted = Counter(clock_us=lambda: t[0])
    assert restarted.next() > sent[-1]
    guard = ReplayGuard(clock_us=lambda: t[0])
    for n in sent:
        assert guard.accept("status:tello_1", KEY.key_id, n)
    assert guard.accept("status:tello_1", KEY.key_id, Counter(clock_us=lambda: t[0]).next())


def test_counter_is_thread_safe():
    c = Counter(clock_us=lambda: 7)
    out: list[int] = []
    lock = threading.Lock()

    def work():
        got = [c.next() for _ in range(500)]
        with lock:
            out.extend(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(out)) == 2000


def test_replay_guard_rejects_repeated_and_older_counters_per_stream():
    now = 10**15
    g = ReplayGuard(clock_us=lambda: now)
    assert g.check("a", "k1", now) is None
    assert g.check("a", "k1", now) == REPLAYED
    assert g.check("a", "k1", now - 1) == REPLAYED
    assert g.check("a", "k1", now + 1) is None
    assert g.check("b", "k1", now) is None  # other sender: own stream
    assert g.check("a", "k2", now) is None  # other key (after rotation): own stream


def test_replay_guard_time_window():
    now = 10**15
    g = ReplayGuard(max_future_s=600, max_past_s=600, clock_us=lambda: now)
    assert g.check("a", "k", now + 601 * 10**6) == OUT_OF_WINDOW  # a forged huge counter cannot lock the link
    assert g.check("a", "k", 2**64 - 1) == OUT_OF_WINDOW
    assert g.check("a", "k", now - 601 * 10**6) == OUT_OF_WINDOW  # an old recording, fresh receiver
    assert g.check("a", "k", now) is None
    assert ReplayGuard(max_future_s=None, max_past_s=None, start_grace_s=None,
                       clock_us=lambda: now).check("a", "k", 1) is None


def test_a_restarted_receiver_refuses_what_was_signed_before_it_started():
    """Senders sign every send afresh, so a message signed before the receiver started is a
    recording: an adapter restarted 5 minutes after a goal must not run that goal's segments
    again (the 10-minute window alone would let it). Within the start grace (clock skew) a
    first message is still taken, and a sender's new messages are accepted."""
    t = [10**15]
    recorded = [t[0] + i for i in range(3)]  # a goal's segments, signed and recorded
    t[0] += 300 * 10**6  # 5 minutes later the adapter restarts
    g = ReplayGuard(clock_us=lambda: t[0], start_grace_s=5.0)
    assert [g.check("segment:tello_1", "k", c) for c in recorded] == [OUT_OF_WINDOW] * 3
    assert g.check("segment:tello_1", "k", t[0] - 4 * 10**6) is None  # clock skew of 4 s: taken
    t[0] += 10**6
    assert g.check("segment:tello_1", "k", t[0]) is None  # the planner's next send
    assert g.check("status:other", "k", t[0] - 6 * 10**6 - 10**6) == OUT_OF_WINDOW


def test_a_restarted_adapter_does_not_run_a_recorded_segment_again(store):
    """Over the verifier: a segment signed and accepted by an adapter is refused by that
    adapter's restarted verifier 60 s later: a fresh verifier takes counters from a few seconds
    before its start on (its replay guard's start grace, for clock skew), not anything inside a
    signature's 10-minute validity."""
    t = [10**15]
    seg = sec.sign_segment_msg(FakeSegment(), store.key("tello_1"), t[0])
    assert LinkVerifier(store, "sign", ReplayGuard(clock_us=lambda: t[0])).check_segment(seg, "tello_1") is None
    t[0] += 60 * 10**6
    restarted = LinkVerifier(store, "sign", ReplayGuard(clock_us=lambda: t[0]))
    assert restarted.check_segment(seg, "tello_1") == OUT_OF_WINDOW
    fresh = sec.sign_segment_msg(FakeSegment(sequence=1), store.key("tello_1"), t[0])
    assert restarted.check_segment(fresh, "tello_1") is None


def test_replay_guard_memory_is_bounded():
    now = 10**15
    g = ReplayGuard(max_streams=8, clock_us=lambda: now)
    for i in range(100):
        assert g.accept(f"s{i}", "k", now)
    assert len(g) == 8


# -- keystore ------------------------------------------------------------------------------------

def test_keystore_files_are_private_and_the_key_id_does_not_reveal_the_key(tmp_path):
    ks = Keystore(tmp_path / "keys")
    assert ks.ensure(["tello_1", "indy_1"]) == ["tello_1", "indy_1"]
    assert ks.ensure(["tello_1", "indy_1", "chat_1"]) == ["chat_1"]  # existing keys are kept
    assert stat.S_IMODE(os.stat(tmp_path / "keys").st_mode) == 0o700
    for rid in ("tello_1", "indy_1", "chat_1"):
        path = tmp_path / "keys" / f"{rid}.key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        data = json.loads(path.read_text())
        assert set(data) == {"robot_id", "key_id", "key", "created"}
        key = ks.key(rid)
        assert len(key.secret) == 32 and data["key"] == key.secret.hex()
        assert key.key_id == hashlib.sha256(key.secret).hexdigest()[:8]
        assert key.key_id not in key.secret.hex() and key.secret.hex() not in repr(key)
    assert ks.key("tello_1").secret != ks.key("indy_1").secret
    assert ks.robot_ids() == ["chat_1", "indy_1", "tello_1"]


def test_unknown_robot_is_a_key_error_naming_the_keys_command(tmp_path):
    ks = Keystore(tmp_path)
    with pytest.raises(KeyError) as e:
        ks.key("tello_9")
    assert isinstance(e.value, MissingKeyError)
    msg = str(e.value)
    assert "tello_9" in msg and "timely-fleet keys" in msg and msg.count("\n") == 0 and not msg.startswith("'")


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x" * 65, ".hidden", "a b", "é"])
def test_robot_ids_are_validated_before_they_name_files(tmp_path, bad):
    ks = Keystore(tmp_path)
    with pytest.raises(ValueError):
        ks.ensure([bad])
    with pytest.raises(ValueError):
        ks.key(bad)
    assert list(tmp_path.iterdir()) == []


def test_rotation_changes_key_and_is_seen_by_a_running_keystore(tmp_path):
    ks = Keystore(tmp_path)
    ks.ensure(["tello_1"])
    old = ks.key("tello_1")
    t = [100.0]
    other_process = Keystore(tmp_path, recheck_s=1.0, clock=lambda: t[0])
    assert other_process.key("tello_1") == old
    new = ks.rotate("tello_1")
    assert new.key_id != old.key_id and new.secret != old.secret
    assert ks.key("tello_1") == new                 # the rotating keystore knows at once
    t[0] += 0.9
    assert other_process.key("tello_1") == old     # within recheck_s: the cached key, no stat
    t[0] += 0.2
    assert other_process.key("tello_1") == new     # re-read because the file changed
    assert stat.S_IMODE((tmp_path / "tello_1.key").stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["tello_1.key"]  # no temporary files left


def test_a_key_edited_in_place_is_seen_within_file_recheck_and_the_directory_is_looked_at_once_per_recheck(tmp_path):
    """A rename into the directory (rotation) is seen within recheck_s; a file rewritten in place
    (the directory unchanged) after FILE_RECHECK x recheck_s; meanwhile many robots' keys cost
    one look at the directory per recheck_s, not a stat of each file."""
    ks = Keystore(tmp_path / "a")
    ks.ensure(["tello_1", "tello_2"])
    t = [100.0]
    reader = Keystore(tmp_path / "a", recheck_s=1.0, clock=lambda: t[0])
    old = reader.key("tello_1")
    reader.key("tello_2")
    elsewhere = Keystore(tmp_path / "b")
    elsewhere.ensure(["tello_1"])
    (tmp_path / "a" / "tello_1.key").write_text((tmp_path / "b" / "tello_1.key").read_text())  # in place
    stats = []
    real_stat = Path.stat

    def counting_stat(self, *a, **kw):
        stats.append(self.name)
        return real_stat(self, *a, **kw)

    import unittest.mock

    with unittest.mock.patch.object(Path, "stat", counting_stat):
        for step in range(1, 10):  # 9 s: the directory looked at once a second, no key file
            t[0] = 100.0 + step + 0.05
            assert reader.key("tello_1") == old and reader.key("tello_2").robot_id == "tello_2"
        assert stats == ["a"] * 9
        t[0] = 110.1
        assert reader.key("tello_1") == elsewhere.key("tello_1")  # FILE_RECHECK x recheck_s: read again
    assert Keystore.FILE_RECHECK == 10


def test_a_key_file_readable_by_others_or_tampered_is_refused(tmp_path):
    ks = Keystore(tmp_path)
    ks.ensure(["tello_1"])
    path = tmp_path / "tello_1.key"
    path.chmod(0o644)
    with pytest.raises(KeystoreError, match="chmod 600"):
        Keystore(tmp_path).key("tello_1")
    path.chmod(0o600)
    data = json.loads(path.read_text())
    data["key_id"] = "00000000"
    path.write_text(json.dumps(data))
    with pytest.raises(KeystoreError, match="--rotate tello_1"):
        Keystore(tmp_path).key("tello_1")


def test_concurrent_ensure_creates_each_key_once(tmp_path):
    results: list[list[str]] = []
    lock = threading.Lock()

    def work():
        got = Keystore(tmp_path / "k").ensure([f"r{i}" for i in range(20)])
        with lock:
            results.append(got)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    created = sorted(r for got in results for r in got)
    assert created == sorted(f"r{i}" for i in range(20))
    assert all(Keystore(tmp_path / "k").key(f"r{i}") for i in range(20))


# -- message helpers and the two ends of the link ---------------------------------------------------

@dataclass
class FakeSkill:
    name: str
    arg_names: list
    arg_values: list


@dataclass
class FakeSegment:
    goal_id: str = "g1"
    robot_id: str = "tello_1"
    sequence: int = 0
    text: str = "mf(100)"
    skills: list = field(default_factory=lambda: [FakeSkill("move_forward", ["distance"], ["100"])])
    final: bool = False
    cancel: bool = False
    stamp: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(sec=1, nanosec=2))
    term: int = 1
    key_id: str = ""
    counter: int = 0
    mac: bytes = b""


@dataclass
class FakeStatus:
    robot_id: str = "tello_1"
    goal_id: str = "g1"
    sequence: int = 0
    state: int = 2
    current_skill: str = "move_forward"
    progress: float = 0.25
    elapsed_s: float = 1.0
    predicted_remaining_s: float = 3.0
    skill_names: list = field(default_factory=list)
    skill_durations_s: list = field(default_factory=list)
    error: str = ""
    stamp: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(sec=1, nanosec=2))
    battery_pct: float = 80.0
    link_age_s: float = 0.1
    has_pose: bool = False
    x_m: float = 0.0
    y_m: float = 0.0
    z_m: float = 0.0
    yaw_rad: float = 0.0
    key_id: str = ""
    counter: int = 0
    mac: bytes = b""


@pytest.fixture
def store(tmp_path):
    ks = Keystore(tmp_path / "keys")
    ks.ensure(["tello_1", "tello_2"])
    return ks


def test_planner_signed_segments_are_accepted_once_by_their_adapter(store):
    planner = LinkSigner(store, "sign")
    adapter = LinkVerifier(store, "sign")
    msg = planner.sign_segment(FakeSegment())
    assert msg.key_id == store.key("tello_1").key_id and len(bytes(msg.mac)) == 32 and msg.counter > 0
    assert adapter.check_segment(msg, "tello_1") is None
    assert adapter.check_segment(msg, "tello_1") == REPLAYED
    nxt = planner.sign_segment(FakeSegment(sequence=1))
    assert adapter.check_segment(nxt, "tello_1") is None
    assert adapter.counts() == {"accepted": 2, UNSIGNED: 0, UNKNOWN_KEY: 0, BAD_MAC: 0, REPLAYED: 1, OUT_OF_WINDOW: 0}


def test_a_segment_whose_term_was_changed_after_signing_fails_verification(store):
    adapter = LinkVerifier(store, "sign")
    for term in (2, 0):  # a stale planner's segment made to look current, or a current one made stale
        msg = LinkSigner(store).sign_segment(FakeSegment(term=1))
        msg.term = term
        assert adapter.check_segment(msg, "tello_1") == BAD_MAC
    ok = LinkSigner(store).sign_segment(FakeSegment(term=2))
    assert adapter.check_segment(ok, "tello_1") is None
    # the term is in the signed encoding (SEG2): a MAC over the encoding without it never verifies
    assert sec.segment_msg_fields(ok).startswith(b"SEG2u" + (2).to_bytes(8, "big"))


def test_unsigned_forged_and_misdirected_messages_are_dropped_and_counted(store):
    planner = LinkVerifier(store, "sign")
    adapter_signer = LinkSigner(store, "sign")
    assert planner.check_status(FakeStatus()) == UNSIGNED
    good = adapter_signer.sign_status(FakeStatus())
    forged = FakeStatus(**{**good.__dict__, "progress": 1.0})  # a changed field, old MAC
    assert planner.check_status(forged) == BAD_MAC
    for measured in ({"battery_pct": 95.0}, {"link_age_s": 0.0}):  # a drone's state is signed too
        assert planner.check_status(FakeStatus(**{**good.__dict__, **measured})) == BAD_MAC
    wrong_kid = FakeStatus(**{**good.__dict__, "key_id": "deadbeef"})
    assert planner.check_status(wrong_kid) == UNKNOWN_KEY
    short = FakeStatus(**{**good.__dict__, "mac": b"\x00" * 5})
    assert planner.check_status(short) == BAD_MAC
    stranger = adapter_signer.sign_status(FakeStatus(robot_id="tello_1"))
    stranger.robot_id = "ghost_7"  # a robot without a key
    assert planner.check_status(stranger) == UNKNOWN_KEY
    # tello_2's adapter signs a status claiming to be tello_1: tello_2's key is not tello_1's
    impostor = sec.sign_status_msg(FakeStatus(robot_id="tello_1"), store.key("tello_2"), sec.now_us())
    assert planner.check_status(impostor) == UNKNOWN_KEY
    # a segment signed for tello_2 received by tello_1's adapter
    seg = LinkSigner(store).sign_segment(FakeSegment(robot_id="tello_2"))
    assert LinkVerifier(store).check_segment(seg, "tello_1") == UNKNOWN_KEY
    # a status MAC presented as a segment
    as_segment = FakeSegment(robot_id="tello_1", key_id=good.key_id, counter=good.counter, mac=good.mac)
    assert LinkVerifier(store).check_segment(as_segment, "tello_1") == BAD_MAC
    assert planner.check_status(good) is None  # forgeries did not advance the counter
    counts = planner.counts()
    assert counts == {"accepted": 1, UNSIGNED: 1, UNKNOWN_KEY: 3, BAD_MAC: 4, REPLAYED: 0, OUT_OF_WINDOW: 0}
    assert planner.dropped_total == 8 and planner.dropped_by_robot == {"tello_1": 7, "ghost_7": 1}


def test_rotation_takes_effect_on_both_ends_without_restart(store):
    signer, verifier = LinkSigner(store), LinkVerifier(store)
    assert verifier.check_status(signer.sign_status(FakeStatus())) is None
    Keystore(store.path).rotate("tello_1")  # `timely-fleet keys --rotate tello_1`, another process
    assert verifier.check_status(signer.sign_status(FakeStatus(sequence=1))) is None


def test_mode_off_signs_nothing_and_accepts_everything(store):
    msg = LinkSigner(None, "off").sign_segment(FakeSegment())
    assert msg.mac == b"" and msg.key_id == ""
    v = LinkVerifier(None, "off")
    assert v.check_segment(msg, "tello_1") is None and v.check_status(FakeStatus()) is None
    assert v.counts()["accepted"] == 2 and v.dropped_total == 0
    with pytest.raises(ValueError, match="security.mode"):
        LinkVerifier(store, "on")
    with pytest.raises(ValueError, match="keystore"):
        LinkSigner(None, "sign")


def test_signing_for_a_robot_without_a_key_names_the_keys_command(tmp_path):
    with pytest.raises(KeyError, match="timely-fleet keys"):
        LinkSigner(Keystore(tmp_path)).sign_segment(FakeSegment())


def test_default_keystore_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TIMELY_FLEET_KEYS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert sec.default_keystore_dir() == tmp_path / "timely_fleet" / "keys"
    monkeypatch.setenv("TIMELY_FLEET_KEYS", str(tmp_path / "k"))
    assert sec.default_keystore_dir() == tmp_path / "k"


def test_each_value_of_a_pose_is_signed():
    pose = (1.5, -2.0, 0.8, 0.5)
    mac = sign(KEY, "status", status_bytes(pose=pose), 1000)
    assert verify(KEY, "status", status_bytes(pose=pose), 1000, mac)
    for i in range(4):
        changed = tuple(v + 0.001 if k == i else v for k, v in enumerate(pose))
        assert not verify(KEY, "status", status_bytes(pose=changed), 1000, mac)
    assert not verify(KEY, "status", status_bytes(), 1000, mac)  # the pose dropped
    with pytest.raises(ValueError, match="x, y, z, yaw"):
        status_bytes(pose=(1.0, 2.0))


def test_a_status_with_a_pose_survives_signing_and_verification(store):
    signer, verifier = LinkSigner(store), LinkVerifier(store)
    msg = signer.sign_status(FakeStatus(has_pose=True, x_m=1.5, y_m=-2.0, z_m=0.8, yaw_rad=0.5))
    assert verifier.check_status(msg) is None
    assert sec.pose_of(msg) == (1.5, -2.0, 0.8, 0.5)
    for changed in ({"x_m": 1.6}, {"y_m": 2.0}, {"z_m": 0.0}, {"yaw_rad": -0.5}, {"has_pose": False}):
        assert verifier.check_status(FakeStatus(**{**msg.__dict__, **changed})) == BAD_MAC, changed
    # a status that says it has no pose carries none, whatever its pose fields hold
    unposed = signer.sign_status(FakeStatus(x_m=3.0, sequence=1))
    assert verifier.check_status(unposed) is None and sec.pose_of(unposed) is None
