"""`timely-fleet bench segmentation`: the fast (--no-vllm) part and the paper's reference numbers."""

from __future__ import annotations

import json

from timely_tools.bench import segmentation_bench as sb


def test_no_vllm_runs_the_segmenter_part_only(tmp_path):
    out = tmp_path / "seg.json"
    rc = sb.main(["--no-vllm", "--repeat", "1", "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["vllm"] is None
    assert [r["segmenter"] for r in res["segmenters"]] == ["minispec", "arm", "chat-sentence", "chat-paragraph"]
    assert rc in (0, 1) and all(r["tokens"] > 0 and r["segments"] > 0 for r in res["segmenters"])


def test_paper_reference_numbers():
    assert sorted(sb.PAPER_TABLE4) == list(range(1, 9))
    ms = [v[0] for v in sb.PAPER_TABLE4.values()]
    assert min(ms) == 13.1 and max(ms) == 24.1 and all(v[1] < 6 for v in sb.PAPER_TABLE4.values())
    assert (sb.PAPER_RESUME_MS, sb.PAPER_REPREFILL_MS) == (9.50, 133.31)


def test_print_live_formats_a_table(capsys):
    row = {"task_id": 1, "task": "look for the cat", "robot_kind": "drone", "tokens": 19, "segments": 4,
           "unsegmented_ms": 100.0, "segmented_ms": 110.0, "overhead_ms": 10.0, "overhead_pct": 9.1,
           "same_tokens": True, "paper_overhead_ms": 13.7, "paper_overhead_pct": 3.0}
    resume = {"resumes": 3, "reprefills": 3, "resume_ttft_ms_median": 5.0, "resume_ttft_ms_p90": 6.0,
              "reprefill_ttft_ms_median": 9.0, "reprefill_ttft_ms_p90": 10.0, "ratio_reprefill_over_resume": 1.8,
              "prefix_cache_hit_fraction": 0.9, "context_tokens_mean": 200}
    sb.print_live({"model": "embedded", "repeat": 1, "tasks": [row], "resume": resume, "block_size": 32,
                   "startup_s": 30.0, "seconds": 60.0})
    text = capsys.readouterr().out
    assert "Table 4" in text and "13.7" in text and "133.31" in text and "1.80" in text
