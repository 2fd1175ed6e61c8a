"""`bench live` splits each raw/node ratio into what the node's placement of vLLM costs raw vLLM
and what the node costs on top of it (docs/guides/benchmarks.md); values computed by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely_tools.bench.live_bench import add_placement_ratios


def test_ratios_from_hand_computed_times():
    # raw 0.60 s with vLLM's placement, 0.75 s placed as the node runs it, node 0.80 s
    row = {"raw_s": 0.60, "raw_colocated_s": 0.75, "node_vllm_s": 0.80, "node_timelyllm_s": 1.00}
    add_placement_ratios(row, ("vllm", "timelyllm"))
    assert row["ratio_placement"] == pytest.approx(0.80)          # 0.60 / 0.75
    assert row["ratio_vllm_same_placement"] == pytest.approx(0.9375)  # 0.75 / 0.80
    assert row["ratio_timelyllm_same_placement"] == pytest.approx(0.75)  # 0.75 / 1.00


def test_missing_times_give_no_ratio():
    row = {"raw_s": 0.60, "raw_colocated_s": None, "node_vllm_s": None}
    add_placement_ratios(row, ("vllm",))
    assert row["ratio_placement"] is None and row["ratio_vllm_same_placement"] is None


@given(st.floats(0.01, 100), st.floats(0.01, 100), st.floats(0.01, 100))
def test_the_two_parts_multiply_to_the_ratio(raw, colocated, node):
    row = {"raw_s": raw, "raw_colocated_s": colocated, "node_vllm_s": node}
    add_placement_ratios(row, ("vllm",))
    assert row["ratio_placement"] * row["ratio_vllm_same_placement"] == pytest.approx(raw / node)
