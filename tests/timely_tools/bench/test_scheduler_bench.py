"""The scheduler benchmark runs and writes its JSON (timings are printed, not asserted)."""

import argparse
import json

from timely_tools.bench import scheduler_bench


def test_bench_json(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    scheduler_bench.add_arguments(parser)
    out = tmp_path / "out" / "bench" / "bench.json"  # a folder that does not exist yet
    args = parser.parse_args(["--rounds", "1", "--min-round-s", "0.001", "--json", str(out)])
    assert scheduler_bench.run(args) == 0
    data = json.loads(out.read_text())
    assert [r["queued"] for r in data["results"]] == [1, 2, 4, 6, 8, 100, 1000, 5000]
    assert {r["queued"]: r["paper_ms"] for r in data["results"]}[8] == 2.03
    assert all(r["ours_ms"] > 0 for r in data["results"])
    assert "paper (ms)" in capsys.readouterr().out


def test_bench_queue_is_mixed():
    import numpy as np

    from timely_tools.decision_cost import make_queue

    v = make_queue(300, np.random.default_rng(0)).view()
    assert len(v) == 300 and (v.k == 0).any() and (v.k > 0).any() and len(set(v.ert)) == 2
