"""`timely-fleet serve-engine`: start a ``vllm serve`` server for the ``remote`` engine.

The server runs the planner's model (the shipped one by default, or ``engine.model`` of the
parameter file / ``--model``) with what the remote engine needs and the in-process engine's
settings (:mod:`llm_planner_node.vllm_server` lists them and starts, waits for and stops servers
for this command, ``timely-fleet bench engines`` and the remote engine's tests).

It prints the URL to put in ``planner.engine.servers`` once the server answers, and runs in the
foreground until interrupted (the server and its engine processes are stopped with it).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
from dataclasses import replace

from llm_planner_node.config.params import EngineParams
from llm_planner_node.vllm_server import serve_command, server_env, stop_server, wait_ready


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
