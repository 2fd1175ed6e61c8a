"""User mistakes end a command with one sentence on stderr and a non-zero status, never a
traceback. Every case runs the real `timely-fleet` command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / ".venv" / "bin" / "timely-fleet"


def tf(*argv: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_sentence(proc: subprocess.CompletedProcess, expected: str, status: int = 2, *, stream: str = "stderr") -> None:
    out = proc.stderr if stream == "stderr" else proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert out == expected + "\n", out
    assert proc.returncode == status


def params_file(tmp_path: Path, planner: dict, name: str = "p.yaml") -> str:
    (tmp_path / name).write_text(yaml.safe_dump({"planner": planner}))
    return name


def test_record_into_an_existing_directory(tmp_path):
    (tmp_path / "run1").mkdir()
    one_sentence(tf("record", "run1", cwd=tmp_path),
                 "timely-fleet record: run1 already exists: give a new bag directory "
                 "(a recording never overwrites another)")


def test_report_into_a_closed_pipe_ends_quietly(tmp_path):
    # a report far larger than a pipe's buffer: `head -1` closes the pipe while it is written
    row = {"goals": 1, "completed": 1, "mean_utility": 1.0, "utility_pct_of_beta": 100.0,
           "mean_segment_utility": 1.0, "mean_response_s": 0.1, "p90_response_s": 0.1,
           "mean_waiting_s": 0.2, "tokens_per_s": None}
    doc = {"workload": {"name": "big"}, "engine": "sim",
           "policies": [{"policy": "vllm", "task_types": {f"type{i:05d}": row for i in range(3000)}}]}
    (tmp_path / "big.json").write_text(json.dumps(doc))
    proc = subprocess.run(["bash", "-c", f'"{EXE}" report big.json | head -1; echo "status ${{PIPESTATUS[0]}}" >&2'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.stdout == "big.json: workload big, engine sim\n"
    assert proc.stderr == "status 141\n"  # nothing else: no traceback, no "Exception ignored"


def test_engine_model_that_does_not_exist(tmp_path):
    f = params_file(tmp_path, {"engine": {"model": "/nonexistent"}})
    sentence = (f"{f}: planner.engine.model '/nonexistent' is not a directory: give 'embedded' "
                "(the shipped planner model), a model name of `timely-fleet models` or a Hugging Face model directory")
    one_sentence(tf("eval", "--engine", "vllm", "--params", f, "--policy", "timelyllm", "--no-progress",
                    cwd=tmp_path), f"timely-fleet eval: {sentence}")
    # `up` (up.py prints its own ParamError line)
    one_sentence(tf("up", "--params", f, "--seconds", "1", cwd=tmp_path), f"timely-fleet up: {sentence}",
                 stream="any")
    (tmp_path / "model").mkdir()
    f2 = params_file(tmp_path, {"engine": {"model": "model"}}, "p2.yaml")
    one_sentence(tf("up", "--params", f2, "--seconds", "1", cwd=tmp_path),
                 f"timely-fleet up: {f2}: planner.engine.model 'model' has no config.json: give 'embedded' "
                 "or a Hugging Face model directory", stream="any")


def test_batching_mode_under_planner(tmp_path):
    f = params_file(tmp_path, {"batching_mode": "fixed"})
    one_sentence(tf("up", "--params", f, "--seconds", "1", cwd=tmp_path),
                 f"timely-fleet up: {f}: planner.batching_mode is not a parameter: write it as planner.batching.mode",
                 stream="any")


def test_simulator_only_policy_on_vllm_is_refused_before_anything_loads(tmp_path):
    f = params_file(tmp_path, {"policy": "lamps", "engine": {"kind": "vllm"}})
    sentence = (f"{f}: planner.policy 'lamps' needs per-segment length predictions that only the simulated "
                "engine provides: use engine.kind: sim, `timely-fleet eval --engine sim`, or another policy")
    t0 = time.monotonic()
    one_sentence(tf("up", "--params", f, "--seconds", "1", cwd=tmp_path), f"timely-fleet up: {sentence}",
                 stream="any")
    assert time.monotonic() - t0 < 20  # vLLM was not started (it takes about a minute)
    # eval --engine vllm checks every policy before starting the first one
    g = params_file(tmp_path, {"engine": {"kind": "vllm"}}, "vllm.yaml")
    one_sentence(tf("eval", "--engine", "vllm", "--params", g, "--policy", "timelyllm,timelyllm-trail",
                    "--no-progress", cwd=tmp_path),
                 f"timely-fleet eval: {g}: planner.policy 'timelyllm-trail' needs per-segment length predictions "
                 "that only the simulated engine provides: use engine.kind: sim, `timely-fleet eval --engine sim`, "
                 "or another policy")
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("key, value, sentence", [
    ("robot_timeout_s", 0, "planner.robot_timeout_s must be > 0 (seconds), got 0"),
    ("network_latency_s", math.nan, "planner.network_latency_s must be a finite number, got nan"),
    ("network_latency_s", -0.1, "planner.network_latency_s must be >= 0 (seconds), got -0.1"),
    ("max_tokens", 0, "planner.max_tokens must be >= 1, got 0"),
])
def test_out_of_range_and_non_finite_values(tmp_path, key, value, sentence):
    f = params_file(tmp_path, {key: value, "engine": {"kind": "sim"}})
    one_sentence(tf("eval", "--engine", "vllm", "--params", f, "--policy", "timelyllm", cwd=tmp_path),
                 f"timely-fleet eval: {f}: {sentence}")


def test_yaml_nan_spelling_is_refused(tmp_path):
    (tmp_path / "p.yaml").write_text("planner:\n  network_latency_s: .nan\n")
    one_sentence(tf("up", "--params", "p.yaml", "--seconds", "1", cwd=tmp_path),
                 "timely-fleet up: p.yaml: planner.network_latency_s must be a finite number, got nan",
                 stream="any")


def test_kv_cache_too_small_for_one_sequence(tmp_path):
    f = params_file(tmp_path, {"engine": {"kind": "vllm", "kv_cache_gib": 0.001}})
    # the shipped model: 4 layers x 2 KV heads x 64 x fp32 x K and V = 4096 B/token x 1024 tokens = 4 MiB
    one_sentence(tf("up", "--params", f, "--seconds", "1", cwd=tmp_path),
                 f"timely-fleet up: {f}: planner.engine.kv_cache_gib 0.001 cannot hold one 1024-token sequence "
                 "(max_model_len) of model 'embedded': give at least 0.004 (4 MiB)", stream="any")


def test_unknown_keys_suggest_the_closest(tmp_path):
    f = params_file(tmp_path, {"engine": {"kind": "sim", "kv_cache_gb": 0.25}})
    one_sentence(tf("eval", "--engine", "vllm", "--params", f, "--policy", "timelyllm", cwd=tmp_path),
                 f"timely-fleet eval: {f}: planner.engine: unknown parameter 'kv_cache_gb' (did you mean 'kv_cache_gib'?)")
    g = params_file(tmp_path, {"robot_timeot_s": 5}, "g.yaml")
    one_sentence(tf("eval", "--engine", "vllm", "--params", g, "--policy", "timelyllm", cwd=tmp_path),
                 f"timely-fleet eval: {g}: planner: unknown parameter 'robot_timeot_s' (did you mean 'robot_timeout_s'?)")


def test_yaml_syntax_error_names_the_file_and_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("planner:\n  engine: {kind: sim\n  policy: x\n")
    one_sentence(tf("eval", "--engine", "vllm", "--params", "bad.yaml", "--policy", "timelyllm", cwd=tmp_path),
                 "timely-fleet eval: bad.yaml, line 3, column 9: not valid YAML (expected ',' or '}', but got ':')")


def test_goal_urgency_reads_the_parameter_files_tuf_presets(tmp_path):
    f = params_file(tmp_path, {"tuf_presets": {"calm": {"ert_s": 2.0, "alpha": -1.0, "beta": 1.0},
                                               "hurry": {"ert_s": 0.1, "alpha": -5.0, "beta": 3.0}}})
    one_sentence(tf("goal", "tello_1", "look for the cat", "--params", f, "--urgency", "urgent", cwd=tmp_path),
                 f"timely-fleet goal: --urgency 'urgent' is not in planner.tuf_presets of {f} (presets: calm, hurry)")
    # 'hurry' exists only in this file; the ERT override is checked against it before anything is sent
    one_sentence(tf("goal", "tello_1", "look for the cat", "--params", f, "--urgency", "hurry", "--ert", "-1",
                    cwd=tmp_path),
                 "timely-fleet goal: the TUF of --urgency hurry: ert_s must be > 0 and <= 86400 seconds, got -1")


def test_tuf_for_reads_presets():
    import argparse

    from llm_planner_node.cli.goal import tuf_for

    args = argparse.Namespace(params=str(ROOT / "config" / "fleet.yaml"), urgency="urgent", ert=None,
                              alpha=None, beta=1.5)
    assert tuf_for(args) == (0.2, -6.67, 1.5)


def test_a_real_bug_keeps_its_traceback(tmp_path):
    """The handler only catches user mistakes: anything else still shows where it happened."""
    code = ("import sys; from llm_planner_node import cli\n"
            "def boom(args): raise RuntimeError('bug')\n"
            "import timely_tools.evaluation.report_cmd as r; r.run = boom\n"
            "sys.exit(cli.main(['report', 'x']))\n")
    proc = subprocess.run([str(ROOT / "scripts" / "run"), "python", "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ})
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "RuntimeError: bug" in proc.stderr


@pytest.mark.slow
def test_kv_cache_gib_is_honoured_exactly_on_vllm_cpu(tmp_path):
    """kv_cache_gib 0.25 was rounded up to 1 GiB (vLLM CPU's whole-GiB VLLM_CPU_KVCACHE_SPACE);
    now it is 0.25 GiB even with that variable set: 0.25 GiB / 4096 B per token = 65536 tokens."""
    script = tmp_path / "kv.py"
    script.write_text(
        "from llm_planner_node.core.clock import WallClock\n"
        "from llm_planner_node.config.params import EngineParams\n"
        "if __name__ == '__main__':\n"
        "    from llm_planner_node.engines.vllm_engine import VllmEngine\n"
        "    eng = VllmEngine(EngineParams(kind='vllm', model='embedded', kv_cache_gib=0.25), WallClock())\n"
        "    print('capacity', eng.kv_capacity_tokens(), flush=True)\n"
        "    eng.close()\n")
    proc = subprocess.run([str(ROOT / "scripts" / "run"), "python", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=400,
                          env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "3"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "capacity 65536" in proc.stdout.splitlines()


def test_up_remote_engine_without_a_server_or_with_one_that_does_not_answer(tmp_path):
    import socket

    f = params_file(tmp_path, {"engine": {"kind": "vllm"}})
    one_sentence(tf("up", "--params", f, "--engine", "remote", "--seconds", "1", cwd=tmp_path),
                 "timely-fleet up: the remote engine needs at least one server: give --server URL (repeatable) or "
                 "planner.engine.servers in the parameter file (`timely-fleet serve-engine` starts one and prints "
                 "its URL)", stream="any")
    one_sentence(tf("up", "--params", f, "--engine", "sim", "--server", "http://127.0.0.1:8000", "--seconds", "1",
                    cwd=tmp_path),
                 "timely-fleet up: --server is for the remote engine, not --engine sim: drop one of them", stream="any")
    one_sentence(tf("up", "--params", f, "--server", "gpu-a:8000", "--seconds", "1", cwd=tmp_path),
                 "timely-fleet up: --server 'gpu-a:8000' is not an http:// or https:// URL (e.g. http://10.0.0.5:8000)",
                 stream="any")
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    one_sentence(tf("up", "--params", f, "--engine", "remote", "--server", url, "--seconds", "1", cwd=tmp_path),
                 f"timely-fleet up: the inference server {url} does not answer (connection refused): start it with "
                 "`timely-fleet serve-engine` and wait for its 'ready' line, or fix --server / planner.engine.servers",
                 stream="any")
    assert time.monotonic() - t0 < 30  # refused at once, before ROS or the engine start


@pytest.mark.parametrize("bound", ["--timeout", "--wait"])
def test_goal_with_no_planner_says_which_part_of_the_wait_failed(tmp_path, bound):
    """`timely-fleet goal` with no `timely-fleet up` running: one sentence naming what was missing
    (no action server seen, or one seen that never answered), within --wait (10 s by default) or
    --timeout, whichever is shorter."""
    import random

    # a domain of its own (the suite's processes use 1-100): no planner of another test is seen
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.randint(150, 230))}
    proc = subprocess.run([str(EXE), "goal", "tello_1", "look for the cat", bound, "1.5"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=env)
    one_sentence(proc, "timely-fleet goal: no planner answers on the 'plan_task' action (no action server "
                       "'plan_task' seen within 1.5 s); start one with `timely-fleet up`", status=1)
