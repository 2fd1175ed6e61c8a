"""G(s_k) online estimate, token time and the table-driven execution-time default."""

import numpy as np
import pytest

from llm_planner_node.core.exec_table import TableExecutionTime
from llm_planner_node.core.generation_time import SegmentTimeEstimator, TokenTimeEstimator
from timely_robot.skills import CHAT, TELLO_MINISPEC


def test_segment_time_ewma_per_kind_and_first_segment():
    g = SegmentTimeEstimator(default_s=0.09, weight=0.2)
    assert g.estimate("drone", 0) == 0.09
    g.observe("drone", 0, 0.2)        # 0.09 + 0.2 * (0.2 - 0.09) = 0.112
    g.observe("drone", 3, 0.05)       # later segments: 0.09 + 0.2 * (0.05 - 0.09) = 0.082
    assert g.estimate("drone", 0) == pytest.approx(0.112)
    assert g.estimate("drone", 1) == g.estimate("drone", 7) == pytest.approx(0.082)
    assert g.estimate("arm", 0) == 0.09
    g.observe("drone", 0, 0.0)        # ignored
    assert g.estimate("drone", 0) == pytest.approx(0.112)
    with pytest.raises(ValueError):
        SegmentTimeEstimator(default_s=0.0)


def test_token_time_ewma():
    t = TokenTimeEstimator(default_s=0.022, weight=0.5)
    t.observe(0.030)                  # 0.022 + 0.5 * 0.008 = 0.026
    assert t.value == pytest.approx(0.026)


def test_table_predict_and_sample():
    m = TableExecutionTime()
    mf = TELLO_MINISPEC.validate("mf", [100])
    scan = TELLO_MINISPEC.validate("s", ["cat"])
    assert m.predict("d0", "drone", [mf]) == pytest.approx(3.0)          # 1.0 + 0.02 * 100
    assert m.predict("d0", "drone", [mf, scan]) == pytest.approx(4.0)    # scan: minimum 1.0 s
    assert m.predict("c0", "chat", [CHAT.validate("say", ["one two three"])]) == pytest.approx(0.6)
    rng = np.random.default_rng(0)
    scans = [m.sample("d0", "drone", [scan], rng) for _ in range(200)]
    assert min(scans) >= 1.0 and max(scans) <= 6.0 and np.std(scans) > 0.5
    moves = [m.sample("d0", "drone", [mf], rng) for _ in range(200)]
    assert 2.7 <= min(moves) and max(moves) <= 3.3                     # +-10 % jitter
