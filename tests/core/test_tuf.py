"""TUF0 / TUF1 (TimelyLLM Eq. 1 and 4.2) with the paper's presets, values computed by hand."""

import math

import numpy as np
import pytest

from llm_planner_node.core.tuf import NORMAL, URGENT, TUFParams, tuf0, tuf1, tuf_k


@pytest.mark.parametrize("t, expected", [
    (0.5, 1.0),    # min(1, -2 * (0.5 - 1) + 1 = 2) = 1
    (1.0, 1.0),    # at the ERT: beta
    (1.25, 0.5),   # -2 * 0.25 + 1
    (1.5, 0.0),    # -2 * 0.5 + 1: utility 0 at 1.5 s
    (2.0, -1.0),   # not clipped: -2 * 1 + 1
])
def test_tuf0_normal(t, expected):
    assert tuf0(t, NORMAL) == pytest.approx(expected)


@pytest.mark.parametrize("t, expected", [
    (0.1, 2.0),        # before the 200 ms ERT: beta
    (0.35, 0.9995),    # -6.67 * 0.15 + 2 = 2 - 1.0005
    (0.5, -0.001),     # -6.67 * 0.3 + 2 = 2 - 2.001
])
def test_tuf0_urgent(t, expected):
    assert tuf0(t, URGENT) == pytest.approx(expected)


@pytest.mark.parametrize("p, t, expected", [
    (NORMAL, -0.3, 1.0),     # ready early: max(t, 0) = 0 -> beta
    (NORMAL, 0.0, 1.0),
    (NORMAL, 0.25, 0.5),     # -2 * 0.25 + 1
    (URGENT, 0.1, 1.333),    # -6.67 * 0.1 + 2 = 1.333
    (URGENT, -1.0, 2.0),
])
def test_tuf1_has_zero_ert(p, t, expected):
    assert tuf1(t, p) == pytest.approx(expected)


def test_zero_time():
    assert NORMAL.zero_time == pytest.approx(1.5)               # 1 - 1 / -2
    assert URGENT.zero_time == pytest.approx(0.2 + 2 / 6.67)    # 0.49985
    assert TUFParams(1.0, 0.0, 1.0).zero_time == math.inf


@pytest.mark.parametrize("ert, alpha, beta", [
    (0.0, -1.0, 1.0), (-1.0, -1.0, 1.0), (1.0, 0.5, 1.0), (1.0, -1.0, 0.0), (math.nan, -1.0, 1.0),
])
def test_invalid_params_rejected(ert, alpha, beta):
    with pytest.raises(ValueError):
        TUFParams(ert, alpha, beta)


def test_vectorised_matches_scalar():
    w = np.array([-0.5, 0.0, 0.1, 0.35, 1.25, 2.0])
    for p in (NORMAL, URGENT):
        ones = np.ones_like(w)
        first = tuf_k(w, ones * p.ert, ones * p.alpha, ones * p.beta)
        later = tuf_k(w, ones * 0.0, ones * p.alpha, ones * p.beta)
        assert first == pytest.approx([tuf0(x, p) for x in w])
        assert later == pytest.approx([tuf1(x, p) for x in w])
