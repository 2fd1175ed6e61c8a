"""bench live's record of the garbage collector's pauses in the planner's process."""

from __future__ import annotations

import gc

from timely_tools.bench.live_bench import GcPauses


def test_pauses_are_counted_by_generation_only_inside_the_block():
    with GcPauses() as pauses:
        gc.collect(0)
        gc.collect(1)
        gc.collect(2)
        gc.collect(2)
    s = pauses.summary()
    assert s["count"] >= 4 and s["full"] >= 2
    assert s["max_s"] <= s["total_s"]
    gc.collect(2)  # after the block: not recorded
    assert pauses.summary()["count"] == s["count"]


def test_no_pause_gives_zeros():
    assert GcPauses().summary() == {"count": 0, "full": 0, "total_s": 0.0, "max_s": 0.0}
