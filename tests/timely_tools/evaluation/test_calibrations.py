"""Named engine calibrations: load by name or file, derive from the papers' numbers, print their source."""

from __future__ import annotations

import json

import pytest

from llm_planner_node.engines.calibration import (CALIBRATIONS, DEFAULT_CALIBRATION, Fit, get_calibration,
                                                  save_calibration)
from llm_planner_node.engines.sim_engine import LLAMA3_8B_RTX4090, LLAMA65B_NPU, IterationModel
from timely_tools.evaluation.eval_cmd import with_calibration
from timely_tools.evaluation.workload_spec import SpecError, load_spec, parse_spec


def test_names_and_default():
    assert {"paper-vllm", "hf-table1", "phi3-hf-table1", "npu-hybrid"} <= set(CALIBRATIONS)
    assert DEFAULT_CALIBRATION == "paper-vllm"
    assert get_calibration(None).name == "paper-vllm"
    for name, c in CALIBRATIONS.items():
        assert get_calibration(name) is c
        d = c.describe()
        assert d.startswith(name + ":") and "Source:" in d and len(c.source) > 40


def test_paper_vllm_reproduces_the_papers_numbers():
    m = CALIBRATIONS["paper-vllm"].engine.iteration
    # one decode at batch 1 = (370 - 133.31) / 14 ms; re-prefill of the 1,300-token context = 133.31 ms
    assert m.time(0, 1) == pytest.approx((0.370 - 0.13331) / 14)
    assert m.time(1300, 0) == pytest.approx(0.13331)
    # a 15-token plan: prefill (token 0) + 14 decodes = ~370 ms
    assert m.time(1300, 0) + 14 * m.time(0, 1) == pytest.approx(0.370)
    assert 0.0165 < m.time(0, 1) < 0.0175


def test_hf_and_npu_are_the_sources_constants():
    assert CALIBRATIONS["hf-table1"].engine.iteration == LLAMA3_8B_RTX4090
    assert CALIBRATIONS["hf-table1"].engine.iteration.time(0, 1) == pytest.approx(0.022)
    assert CALIBRATIONS["hf-table1"].engine.iteration.time(2884, 0) == pytest.approx(0.328)
    assert CALIBRATIONS["npu-hybrid"].engine.iteration == LLAMA65B_NPU
    assert CALIBRATIONS["phi3-hf-table1"].engine.iteration.time(2884, 0) == pytest.approx(0.563)


def test_chat_keeps_phi3_under_a_llama_calibration():
    chat = load_spec("CHAT").with_(calibration="paper-vllm")
    assert chat.engine_config() == CALIBRATIONS["phi3-hf-table1"].engine
    assert chat.calibration_info()["name"] == "phi3-hf-table1"
    wid1 = load_spec("WID1").with_(calibration="paper-vllm")
    assert wid1.engine_config() == CALIBRATIONS["paper-vllm"].engine
    assert load_spec("WID1").engine_config() == CALIBRATIONS["hf-table1"].engine  # spec without one


def test_calibrate_file_loads_with_its_source(tmp_path):
    path = save_calibration(tmp_path / "cpu.yaml", Fit(IterationModel(0.004, 4e-5, 1.6e-5), 0.96, 0.0004, 24),
                            source={"engine": "vllm 0.32.0", "model": "embedded", "device": "cpu",
                                    "date": "2026-11-23"}, kv_capacity_tokens=8192)
    c = get_calibration(str(path))
    assert c.engine.iteration == IterationModel(0.004, 4e-5, 1.6e-5)
    assert c.engine.kv_capacity_tokens == 8192
    assert "vllm 0.32.0" in c.describe() and "cpu" in c.describe() and str(path) in c.describe()
    # a file applies to every workload, chat included
    assert load_spec("CHAT").with_(calibration=str(path)).engine_config() == c.engine
    # and in a YAML spec
    spec = parse_spec({"name": "x", "duration_s": 10, "eps": 1, "max_tpe": 1, "traces": [1], "agents": 2,
                       "calibration": str(path)})
    assert spec.engine_config() == c.engine


def test_unknown_calibration_is_a_user_error():
    with pytest.raises(ValueError, match="paper-vllm"):
        get_calibration("gpt-5")
    with pytest.raises(SpecError, match="--calibration"):
        with_calibration(load_spec("WID1"), "gpt-5")
    with pytest.raises(SpecError, match="calibration"):
        parse_spec({"name": "x", "duration_s": 10, "eps": 1, "max_tpe": 1, "traces": [1], "agents": 2,
                    "calibration": "nope"})


def test_eval_prints_and_records_the_calibration(tmp_path, capsys):
    import argparse

    from timely_tools.evaluation import eval_cmd

    ap = argparse.ArgumentParser()
    eval_cmd.add_arguments(ap)
    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: tiny\nduration_s: 8\neps: 0.5\nmax_tpe: 2\ntraces: [6, 7]\nagents: 3\n")
    out = tmp_path / "r.json"
    args = ap.parse_args(["--workload", str(spec), "--policy", "vllm", "--calibration", "hf-table1",
                          "--json", str(out), "--no-progress"])
    assert eval_cmd.run(args) == 0
    text = capsys.readouterr().out
    assert "calibration hf-table1:" in text and "Table 1" in text
    doc = json.loads(out.read_text())
    assert doc["calibration"]["name"] == "hf-table1" and "Table 1" in doc["calibration"]["source"]
