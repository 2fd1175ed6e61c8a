"""PUD priority (Eq. 4) with G = 90 ms and 8 ms network latency, computed by hand."""

import numpy as np
import pytest

from llm_planner_node.core.priority import pud_priorities, pud_priority, slack, waiting_time
from llm_planner_node.core.tuf import NORMAL, URGENT

G, NET = 0.09, 0.008

# (now, ref, k, tuf, expected priority)
CASES = [
    # normal first segment, arrived at 0, now 0.1: W = 0.1 + 0.09 + 0.008 = 0.198, TUF0 = 1,
    # L = 1 - 0.198 = 0.802 -> 1 / (0.09 * 0.802) = 13.8543
    (0.1, 0.0, 0, NORMAL, 1 / (0.09 * 0.802)),
    # urgent first segment just arrived at 0.1: W = 0.098, TUF0 = 2, L = 0.2 - 0.098 = 0.102
    # -> 2 / (0.09 * 0.102) = 217.865
    (0.1, 0.1, 0, URGENT, 2 / (0.09 * 0.102)),
    # normal segment 1, previous segment predicted to end executing at 2.0, now 0.5:
    # W = 0.598 - 2 = -1.402, TUF1 = 1, L = 0 + 1.402 -> 1 / (0.09 * 1.402) = 7.9252
    (0.5, 2.0, 1, NORMAL, 1 / (0.09 * 1.402)),
    # urgent first segment late: arrived 0, now 0.3: W = 0.398,
    # TUF0 = -6.67 * (0.398 - 0.2) + 2 = 0.67934, L floored at 0.01 -> 0.67934 / 0.0009 = 754.82
    (0.3, 0.0, 0, URGENT, 0.67934 / 0.0009),
    # normal segment 1 while its robot already waits (prev end 0.4), now 0.5: W = 0.198,
    # TUF1 = -2 * 0.198 + 1 = 0.604, L floored at 0.01 -> 0.604 / 0.0009 = 671.11
    (0.5, 0.4, 1, NORMAL, 0.604 / 0.0009),
]


@pytest.mark.parametrize("now, ref, k, tuf, expected", CASES)
def test_hand_computed_priority(now, ref, k, tuf, expected):
    assert pud_priority(now, ref, k, tuf, G, NET) == pytest.approx(expected, rel=1e-9)


def test_waiting_time_and_slack():
    assert waiting_time(0.1, 0.0, G, NET) == pytest.approx(0.198)
    assert slack(0.1, 0.0, 0, 1.0, G, NET) == pytest.approx(0.802)
    assert slack(0.5, 2.0, 3, 1.0, G, NET) == pytest.approx(1.402)   # ERT_k = 0 for k > 0
    assert slack(5.0, 0.0, 0, 1.0, G, NET) == pytest.approx(0.01)    # floor


def test_vectorised_equals_scalar_and_orders_urgent_first():
    now = np.array([c[0] for c in CASES])
    # evaluate each case at its own time by shifting refs to a common now = 1.0
    shift = 1.0 - now
    ref = np.array([c[1] for c in CASES]) + shift
    ert_k = np.array([c[3].ert if c[2] == 0 else 0.0 for c in CASES])
    alpha = np.array([c[3].alpha for c in CASES])
    beta = np.array([c[3].beta for c in CASES])
    got = pud_priorities(1.0, ref, ert_k, alpha, beta, np.full(len(CASES), G), NET)
    assert got == pytest.approx([c[4] for c in CASES], rel=1e-9)
    # fresh urgent (217.9) > fresh normal (13.9) > suspended normal far from needed (7.9)
    assert got[1] > got[0] > got[2]
