"""Execution-time model (robot/timely_robot/execution_time.py)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

from timely_robot.execution_time import (
    ARM_HOME_POSE, ExecutionTimeEstimator, ExecutionTimeModel, SCENE_WINDOW, TimeScaledEstimator, _quantile,
    default_profiles, scaled_profiles)
from timely_robot.skills import CHAT, INDY7_ARM, TELLO_MINISPEC as T

mf = lambda d: T.validate("mf", [d])  # noqa: E731


def test_implements_protocol_and_aliases():
    m: ExecutionTimeEstimator = ExecutionTimeModel()
    a = m.predict("d", "drone", [T.validate("mf", [100])])
    assert a == pytest.approx(1.2 + 100 / 60)
    # alias names resolve to the same profile (sim robots fly MiniSpec too)
    assert m.predict("s", "sim", [T.validate("move_forward", [100])]) == pytest.approx(a)
    assert m.predict("d", "drone", []) == 0.0


def test_duration_grows_with_distance_and_angle():
    m = ExecutionTimeModel()
    d = [m.predict("d", "drone", [mf(x)]) for x in (20, 100, 300, 500)]
    assert d == sorted(d) and d[0] < d[-1]
    t = [m.predict("d", "drone", [T.validate("tc", [a])]) for a in (10, 90, 360)]
    assert t == sorted(t)
    assert m.predict("d", "drone", [T.validate("d", [1500])]) == pytest.approx(1.5)


def test_scene_dependent_uses_minimum_and_sample_is_never_below():
    m = ExecutionTimeModel()
    rng = np.random.default_rng(1)
    scan = [T.validate("s", ["cat"])]
    p = m.predict("d", "drone", scan)
    prof = default_profiles()["drone"]["scan"]
    assert p == pytest.approx(min(prof.scene))
    draws = [m.sample("d", "drone", scan, rng) for _ in range(300)]
    # noise is 5 %: nothing meaningfully below the minimum, and a wide spread above it
    assert min(draws) > 0.8 * p
    assert max(draws) > 5 * p


def test_arm_pose_tracking_and_chat_reading_time():
    m = ExecutionTimeModel()
    far = INDY7_ARM.validate("move_to", [-600, -600, 700])
    near = INDY7_ARM.validate("move_to", [ARM_HOME_POSE[0], ARM_HOME_POSE[1], ARM_HOME_POSE[2] + 50])
    assert m.predict("a", "arm", [far]) > m.predict("a", "arm", [near])
    # the second move of a segment starts where the first ended
    per = m.predict_calls("a", "arm", [far, far])
    assert per[1] == pytest.approx(0.6)
    words = " ".join(["w"] * 30)
    assert m.predict("c", "chat", [CHAT.validate("say", [words])]) == pytest.approx(6.0)


def test_unknown_skill_and_bad_observation_do_not_raise():
    m = ExecutionTimeModel(unknown_skill_s=2.0)
    from timely_robot.skills import SkillCall

    assert m.predict("d", "drone", [SkillCall("teleport", ())]) == 2.0
    m.observe("d", "drone", mf(100), float("nan"))
    m.observe("d", "drone", mf(100), -1)
    m.observe("d", "drone", SkillCall("teleport", ()), 1.0)
    assert m.rejected_observations == 3
    assert m.predict("d", "drone", [mf(100)]) == pytest.approx(1.2 + 100 / 60)


def _truth(factor):
    return ExecutionTimeModel(scaled_profiles(default_profiles(), factor), online=False)


def test_online_update_learns_a_slower_robot():
    rng = np.random.default_rng(3)
    truth = _truth(0.7)
    m = ExecutionTimeModel()
    for _ in range(40):
        c = mf(int(rng.integers(20, 400)))
        m.observe("d1", "drone", c, truth.sample("d1", "drone", [c], rng))
    for d in (50, 250, 450):
        want = truth.predict("x", "drone", [mf(d)])
        assert m.predict("d1", "drone", [mf(d)]) == pytest.approx(want, rel=0.08)
    # other robots are unaffected; unseen motion skills of d1 inherit its speed ratio
    assert m.predict("d2", "drone", [mf(250)]) == pytest.approx(1.2 + 250 / 60)
    assert m.predict("d1", "drone", [T.validate("ml", [250])]) > 1.15 * (1.2 + 250 / 60)


def test_robust_to_outliers():
    m = ExecutionTimeModel()
    c = mf(200)
    true = 1.2 + 200 / 60
    for i in range(30):
        m.observe("d", "drone", c, true * (10.0 if i % 10 == 5 else 1.0))
    assert m.predict("d", "drone", [c]) == pytest.approx(true, rel=0.1)


def test_converges_quickly_after_speed_change():
    rng = np.random.default_rng(5)
    m = ExecutionTimeModel()
    nominal, slow = _truth(1.0), _truth(0.5)
    skills = ("mf", "ml", "mu", "tc")
    for _ in range(30):
        c = T.validate(str(rng.choice(skills)), [int(rng.integers(40, 300))])
        m.observe("d", "drone", c, nominal.sample("d", "drone", [c], rng))
    errs = []
    for _ in range(15):
        c = T.validate(str(rng.choice(skills)), [int(rng.integers(40, 300))])
        actual = slow.sample("d", "drone", [c], rng)
        errs.append(abs(m.predict("d", "drone", [c]) - actual) / actual)
        m.observe("d", "drone", c, actual)
    assert errs[0] > 0.2  # the change really happened
    assert max(errs[5:]) < 0.25 and float(np.mean(errs[5:])) < 0.08
    assert m.robot_changes.get("d", 0) + sum(
        v.get("changes", 0) for v in m.learned("d").values()) >= 1


def test_scene_skill_online_minimum():
    m = ExecutionTimeModel()
    s = T.validate("s", ["cat"])
    for v in [4.0, 6.0, 9.0, 12.0, 5.0, 7.0, 8.0, 4.5, 10.0, 4.2]:
        m.observe("d", "drone", s, v)
    assert 4.0 <= m.predict("d", "drone", [s]) <= 4.5
    # the window's 5 % quantile by hand: sorted 4.0, 4.2, 4.5, ...; h = 9 * 0.05 = 0.45
    assert m.predict("d", "drone", [s]) == pytest.approx(4.0 + 0.45 * (4.2 - 4.0))
    m.observe("d", "drone", s, 3.0)  # a new observation replaces the cached prediction
    assert m.predict("d", "drone", [s]) == pytest.approx(3.0 + 0.5 * (4.0 - 3.0))


@given(st.lists(st.floats(0.0, 3600.0), min_size=1, max_size=SCENE_WINDOW), st.floats(0.0, 1.0))
def test_scene_quantile_is_numpys(xs, q):
    """The scene minimum's quantile equals np.quantile (method linear) bit for bit."""
    assert _quantile(sorted(xs), q) == float(np.quantile(np.array(xs), q))


def test_remaining_and_completion():
    m = ExecutionTimeModel()
    calls = [T.validate("to", []), mf(100), T.validate("lnd", [])]
    per = m.predict_calls("d", "drone", calls)
    assert m.predict_completion("d", "drone", calls, 10.0) == pytest.approx(10.0 + sum(per))
    assert m.remaining("d", "drone", calls, 1, 1.0) == pytest.approx(per[1] - 1.0 + per[2])
    assert m.remaining("d", "drone", calls, 3) == 0.0
    assert m.remaining("d", "drone", calls, 0, 100.0) == pytest.approx(per[1] + per[2])


def test_speed_factor_sampling_and_tolerance():
    m = ExecutionTimeModel()
    rng = np.random.default_rng(0)
    m.set_speed_factor("d", 0.5)
    c = mf(300)
    draws = [m.sample("d", "drone", [c], rng) for _ in range(200)]
    assert float(np.mean(draws)) == pytest.approx(1.2 + 300 / 30, rel=0.03)
    tol = m.tolerance("drone", c)
    assert math.isclose(tol, 3 * 0.05 * (1.2 + 5) + 0.2)
    with pytest.raises(ValueError):
        m.set_speed_factor("d", 0)


def test_thread_safety_smoke():
    m = ExecutionTimeModel()
    rng = np.random.default_rng(0)
    errors = []

    def writer():
        try:
            for i in range(300):
                m.observe(f"d{i % 3}", "drone", mf(100 + i % 50), 3.0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=writer) for _ in range(3)]
    for t in ts:
        t.start()
    for _ in range(300):
        m.predict("d1", "drone", [mf(100)])
        m.sample("d2", "drone", [mf(100)], rng)
    for t in ts:
        t.join(timeout=10)
    assert not errors


def test_bench_script_runs(tmp_path, capsys):
    from timely_tools.bench import exec_model_bench as b
    import argparse, json

    p = argparse.ArgumentParser()
    b.add_arguments(p)
    out = tmp_path / "out" / "r.json"  # a folder that does not exist yet
    assert b.run(p.parse_args(["--robots", "4", "--train", "20", "--test", "20", "--json", str(out)])) == 0
    data = json.loads(out.read_text())
    assert data["held_out"]["drone"]["mape_online_pct"] < data["held_out"]["drone"]["mape_profile_only_pct"]
    assert data["convergence"]["executions_to_within_10pct"] <= 6
    assert "held-out" in capsys.readouterr().out


def test_time_scaled_estimator_predicts_and_learns_in_the_robots_time():
    """Simulated robots at time scale 0.02: predictions x0.02 (mf 100 cm: 1.2 s + 100/60 s real),
    observations /0.02 into the real-time model (as the simulated adapters do)."""
    inner, twin = ExecutionTimeModel(), ExecutionTimeModel()
    ts = TimeScaledEstimator(inner, 0.02)
    assert ts.predict("d", "drone", [mf(100)]) == pytest.approx((1.2 + 100 / 60) * 0.02)
    for d in (0.05, 0.052, 0.049, 0.051):
        ts.observe("d", "drone", mf(100), d)
        twin.observe("d", "drone", mf(100), d / 0.02)
    assert inner.predict("d", "drone", [mf(100)]) == twin.predict("d", "drone", [mf(100)])
    assert ts.predict("d", "drone", [mf(100)]) == pytest.approx(twin.predict("d", "drone", [mf(100)]) * 0.02)
    rng1, rng2 = np.random.default_rng(3), np.random.default_rng(3)
    assert ts.sample("d", "drone", [mf(100)], rng1) == pytest.approx(0.02 * twin.sample("d", "drone", [mf(100)], rng2))
    with pytest.raises(ValueError, match="time_scale must be > 0"):
        TimeScaledEstimator(inner, 0.0)
