"""The column-store generation queue."""

import numpy as np
import pytest

from llm_planner_node.core.queue import GenerationQueue
from llm_planner_node.core.tuf import NORMAL, URGENT


def _push(q, gid, k=0, tuf=NORMAL):
    q.push(gid, seq=gid, arrival=float(gid), k=k, ref=float(gid), tuf=tuf, g=0.09, kv_need=100 + gid)


def test_push_remove_keeps_rows_consistent():
    q = GenerationQueue(capacity=2)  # forces growth
    for gid in range(5):
        _push(q, gid, k=gid % 2, tuf=URGENT if gid == 3 else NORMAL)
    assert q.remove(1) and not q.remove(1)
    v = q.view()
    assert sorted(v.gen_id.tolist()) == [0, 2, 3, 4]
    for row, gid in enumerate(v.gen_id.tolist()):
        assert v.kv_need[row] == 100 + gid and v.arrival[row] == gid
        assert v.ert_k[row] == (0.0 if gid % 2 else (0.2 if gid == 3 else 1.0))
    assert 2 in q and 1 not in q and len(q) == 4


def test_set_ref_and_duplicate():
    q = GenerationQueue()
    _push(q, 7, k=1)
    q.set_ref(7, 3.5)
    assert q.view().ref.tolist() == [3.5]
    with pytest.raises(KeyError):
        _push(q, 7)


def test_view_refreshes_after_changes():
    q = GenerationQueue()
    _push(q, 1)
    assert len(q.view()) == 1
    _push(q, 2)
    assert np.array_equal(np.sort(q.view().gen_id), [1, 2])
    q.remove(1)
    assert q.view().gen_id.tolist() == [2]
