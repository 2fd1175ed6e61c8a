"""Engine calibration: the least-squares fit, the calibration file, and (slow) the real engine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_planner_node.engines.calibration import (fit_iteration_model, load_calibration, load_iteration_model,
                                                  load_kv_capacity_tokens, save_calibration)
from llm_planner_node.engines.sim_engine import LLAMA3_8B_RTX4090, IterationModel, SimEngineConfig

ROOT = Path(__file__).resolve().parents[3]


def _synthetic(a: float, b: float, c: float):
    grid = [(p, 0) for p in (16, 64, 256, 512, 1000)] + [(0, d) for d in (1, 2, 4, 8, 16)] + [(300, 4), (700, 8)]
    return [(p, d, a + b * p + c * d) for p, d in grid]


def test_fit_recovers_known_coefficients_exactly():
    a, b, c = 0.0218, 0.000106, 0.0002
    fit = fit_iteration_model(_synthetic(a, b, c))
    assert fit.model.a_s == pytest.approx(a, rel=1e-9, abs=1e-12)
    assert fit.model.b_s_per_prefill_token == pytest.approx(b, rel=1e-9)
    assert fit.model.c_s_per_decode_seq == pytest.approx(c, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.rmse_s < 1e-12 and fit.n_samples == 12


def test_fit_on_hand_made_points():
    # a = 5 ms, b = 0.01 ms/token, c = 0.5 ms/seq, by hand:
    samples = [(100, 0, 0.006), (500, 0, 0.010), (0, 4, 0.007), (0, 10, 0.010), (200, 2, 0.008)]
    fit = fit_iteration_model(samples)
    assert (fit.model.a_s, fit.model.b_s_per_prefill_token, fit.model.c_s_per_decode_seq) == pytest.approx(
        (0.005, 0.00001, 0.0005), rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)


def test_fit_with_noise_reports_r2_below_one_and_rejects_degenerate_samples():
    import random

    rng = random.Random(0)
    noisy = [(p, d, t + rng.gauss(0, 0.0005)) for p, d, t in _synthetic(0.01, 0.0001, 0.001)]
    fit = fit_iteration_model(noisy)
    assert 0.9 < fit.r2 < 1.0
    assert fit.model.b_s_per_prefill_token == pytest.approx(0.0001, rel=0.1)
    with pytest.raises(ValueError, match="decode_batch"):
        fit_iteration_model([(p, 0, 0.01 + 1e-5 * p) for p in (10, 20, 30, 40)])
    with pytest.raises(ValueError, match="at least 3"):
        fit_iteration_model([(1, 1, 0.1)])


@pytest.mark.parametrize("name", ["cal.yaml", "cal.json"])
def test_calibration_file_round_trips(tmp_path, name):
    fit = fit_iteration_model(_synthetic(0.003, 2.5e-5, 4e-4))
    samples = [{"kind": "prefill", "prefill_tokens": 16, "decode_batch": 0, "seconds": 0.0034}]
    path = save_calibration(tmp_path / name, fit, source={"model": "embedded", "engine": "vllm test"},
                            samples=samples, kv_capacity_tokens=4096)
    model = load_iteration_model(path)
    assert isinstance(model, IterationModel)
    assert model == fit.model  # floats survive YAML/JSON exactly
    assert load_kv_capacity_tokens(path) == 4096
    doc = load_calibration(path)
    assert doc["source"]["model"] == "embedded" and doc["samples"] == samples
    assert doc["fit"]["r2"] == pytest.approx(1.0)
    # the simulator takes it as is
    assert SimEngineConfig(iteration=model).iteration.time(100, 2) == pytest.approx(0.003 + 2.5e-3 + 8e-4)


def test_loader_accepts_top_level_fields_and_explains_mistakes(tmp_path):
    p = tmp_path / "flat.yaml"
    p.write_text("a_s: 0.0218\nb_s_per_prefill_token: 0.000106\nc_s_per_decode_seq: 0.0002\n")
    assert load_iteration_model(p) == IterationModel(0.0218, 0.000106, 0.0002)
    p.write_text("iteration_model: {a_s: 0.01, b_s_per_prefill_token: 0.001}\n")
    with pytest.raises(ValueError, match="missing 'c_s_per_decode_seq'"):
        load_iteration_model(p)
    p.write_text("iteration_model: {a_s: fast, b_s_per_prefill_token: 0.001, c_s_per_decode_seq: 0}\n")
    with pytest.raises(ValueError, match="'a_s' must be a number"):
        load_iteration_model(p)


def test_report_shows_the_shipped_calibration_beside_the_fit():
    from timely_tools.bench.calibrate import report

    fit = fit_iteration_model(_synthetic(0.003, 2.5e-5, 4e-4))
    text = report(fit, [{"kind": "prefill", "prefill_tokens": 16, "decode_batch": 0, "seconds": 0.0034}],
                  {"engine": "vllm test", "model": "embedded", "device": "cpu"})
    assert "Llama3-8B fp16 RTX 4090" in text and "R^2" in text
    assert f"{1e3 * LLAMA3_8B_RTX4090.time(2884, 0):.3f}" in text  # 328 ms


def test_cli_registers_calibrate():
    from llm_planner_node.cli import COMMANDS, build_parser

    assert COMMANDS["calibrate"][1] == "timely_tools.bench.calibrate"
    args = build_parser("calibrate").parse_args(["calibrate", "--prefill-lengths", "32,64", "--decode-batches", "1,2"])
    assert args.prefill_lengths == [32, 64] and args.decode_batches == [1, 2]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_real_calibration_on_vllm(tmp_path):
    """Tiny settings on the shipped model: the prefill cost is resolved and the linear model fits."""
    out = tmp_path / "cal.yaml"
    cmd = [sys.executable, "-m", "timely_tools.bench.calibrate", "--out", str(out), "--max-model-len", "1024",
           "--prefill-lengths", "32,256,512,1000", "--decode-batches", "1,8", "--decode-steps", "6",
           "--repeats", "2", "--no-mixed", "--json", str(tmp_path / "cal.json")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=500, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and out.is_file(), (p.stdout[-3000:], p.stderr[-3000:])
    model = load_iteration_model(out)
    doc = load_calibration(out)
    assert model.b_s_per_prefill_token > 0
    assert doc["fit"]["r2"] > 0.5, p.stdout
    assert len(doc["samples"]) == 6 and "vllm" in doc["source"]["engine"]
    assert json.loads((tmp_path / "cal.json").read_text())["fit"]["r2"] == doc["fit"]["r2"]
    assert "Llama3-8B" in p.stdout
