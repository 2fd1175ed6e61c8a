"""`timely-fleet paper --quick` writes a report with every section, figures and paper numbers."""

from __future__ import annotations

import json

from timely_tools.evaluation.paper import headline, run_all


def test_paper_quick(tmp_path):
    R = run_all(tmp_path, quick=True, progress=False)
    md = (tmp_path / "report.md").read_text()
    for section in ("Every headline beside the paper's number", "Fig. 5", "Fig. 7", "Fig. 8", "Fig. 9", "Fig. 10", "Tables 4-5",
                    "best-found", "Admission rules side by side"):
        assert section in md, section
    for paper_number in ("81.5%", "+191%", "1.21 at 6", "183%", "x1.97", "21.57x", "13.7", "2.03"):
        assert paper_number in md, paper_number
    for png in ("fig5_low.png", "fig5_high.png", "fig7_batch.png", "fig8_segmented.png",
                "fig9_utility.png", "fig9_waiting.png", "fig10_utility.png", "fig10_waiting.png"):
        assert (tmp_path / png).stat().st_size > 1000, png
        assert f"({png})" in md
    doc = json.loads((tmp_path / "results.json").read_text())
    assert set(doc["admission_rules"]) == {"WID1", "WID2", "stress"}
    assert set(doc["admission_rules"]["WID1"]) == {"literal", "improved"}
    assert [r["workload"] for r in headline(doc)] == ["WID1", "WID2", "WID3"]
    # the bound is never below a policy it includes
    for case in R["upper_bound"]:
        assert all(case["best_found_mean_utility"] >= u - 1e-9 for u in case["policies"].values())
    # timelyllm beats vllm for urgent drone tasks under load (direction of the paper's Fig. 5)
    assert headline(doc)[1]["utility_x"] > 1
    # the headline table: every figure, both admission rules, the paper's number, the calibration's source
    figs = {r["figure"].split(" (")[0] for r in doc["headlines"]}
    assert {"Fig. 5a", "Fig. 5d", "Fig. 7", "Fig. 8", "Fig. 9", "Fig. 10", "Table 4", "Table 5"} <= figs
    assert all(r["literal"] and r["improved"] and r["paper"] for r in doc["headlines"])
    assert "ours, literal 4.4 admission | ours, improved admission" in md
    assert doc["calibration"]["name"] == "paper-vllm" and "Calibration** (robot workloads): paper-vllm" in md
    assert "370 ms" in md and "Phi-3" in md
    # Table 3 workloads for the figures; the 4x load only as the labelled stress line
    assert doc["specs"]["WID2"]["eps"] == 0.25 and doc["specs"]["WID2"]["max_tpe"] == 16
    assert "stress" in doc["specs"]["stress"]["name"] and doc["specs"]["stress"]["eps"] == 1.0
