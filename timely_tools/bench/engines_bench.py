"""`timely-fleet bench engines`: the in-process engine vs ``vllm serve`` servers.

Same goals everywhere: the 11 canonical LRTrace tasks' prompts (the shipped model, the planner's
prompt builder), greedy, the plan grammar on (the planner's default), ``max_tokens`` 160.

1. **In-process vs one remote server** (one goal at a time, after a warm-up pass over the tasks so
   every grammar is compiled on both sides): per task, an unsegmented run (add -> end: per-token
   time = wall time / tokens) and a segmented run (suspend at every segment boundary, resume at
   once: time to first segment = add -> first SegmentEvent, and per-token time including every
   suspend/resume). ``overhead_ratio`` = remote / in-process per-token time (median over tasks);
   ``ttfs`` medians for both.
2. **One vs two servers**: a burst of ``--goals`` (22) segmented goals added at once and resumed at
   once at each boundary, on a remote engine with one server, then with both: generated tokens
   per second of wall time; ``throughput_ratio`` = two / one. Also half the burst on one server
   (does a server's throughput depend on its batch?) and the CPU each process used.

Servers: two ``timely-fleet serve-engine`` servers on free loopback ports, each with its engine
on its own core (``VLLM_CPU_OMP_THREADS_BIND`` 0 and 1); the in-process engine runs first and is
shut down before they start. Engine settings: ``max_model_len`` 512, ``block_size`` 32, KV 64 MiB,
``max_num_seqs`` 16 (tests/engines' settings).

JSON (``--json PATH``): ``{"inprocess": {...}, "remote1": {...}, "overhead_ratio",
"segmented_overhead_ratio", "ttfs_inprocess_s", "ttfs_remote_s", "burst": {"one": {...},
"two": {...}}, "throughput_ratio", "machine": {"cpus"}, "limits": "..."}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from llm_planner_node.core.engine_api import FailedEvent, FinishedEvent, GenerationSpec, SegmentEvent, TokensEvent
from llm_planner_node.config.params import EngineParams
from timely_tools import outfiles

PARAMS = EngineParams(kind="vllm", model="embedded", max_model_len=512, block_size=32, kv_cache_gib=0.0625,
                      max_num_seqs=16)
MAX_TOKENS = 160


def _goals() -> list[tuple[str, str, str]]:
    """(prompt, robot kind, skill set) of the canonical tasks."""
    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
    from llm_planner_node.planner_model.corpus import canonical_examples
    from llm_planner_node.prompts.prompt import build_prompt

    return [(build_prompt(e.instruction, e.robot_kind), e.robot_kind, DEFAULT_SKILL_SET_FOR_KIND[e.robot_kind])
            for e in canonical_examples()]


class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def _drive(engine: Any, specs: list[GenerationSpec], timeout_s: float = 600.0) -> dict[int, dict[str, Any]]:
    """Add every spec at once; resume each at once when suspended; per generation: add time,
    first token, first segment, end, tokens."""
    t0 = time.monotonic()
    out = {s.gen_id: {"t_add": t0, "first_token": None, "first_segment": None, "end": None, "tokens": 0,
                      "ok": False} for s in specs}
    for s in specs:
        engine.add(s)
    left = len(specs)
    deadline = t0 + timeout_s
    while left and time.monotonic() < deadline:
        for ev in engine.step():
            r = out.get(ev.gen_id)
            if r is None:
                continue
            now = time.monotonic()
            if isinstance(ev, TokensEvent):
                r["tokens"] += ev.count
                r["first_token"] = r["first_token"] or now
            elif isinstance(ev, SegmentEvent):
                r["first_segment"] = r["first_segment"] or now
                if ev.suspended:
                    engine.resume(ev.gen_id)
            elif isinstance(ev, (FinishedEvent, FailedEvent)):
                r["end"], r["ok"] = now, isinstance(ev, FinishedEvent)
                left -= 1
    if left:
        raise RuntimeError(f"{left} generations did not end within {timeout_s:.0f} s")
    return out


def warm_up(engine: Any, ids: _Ids) -> None:
    """Every task once, segmented: the server has compiled every grammar and resume grammar the
    goals need (0.5-2.5 s each the first time on this CPU), as on a planner that has been running."""
    for prompt, kind, ss in _goals():
        _drive(engine, [GenerationSpec(ids(), prompt, MAX_TOKENS, kind, ss, True)])


def single_goal_runs(engine: Any, ids: _Ids) -> dict[str, Any]:
    """One goal at a time over the canonical tasks: unsegmented and segmented (after a warm-up)."""
    goals = _goals()
    warm_up(engine, ids)
    per_token, per_token_seg, ttft, ttfs, tokens = [], [], [], [], 0
    for prompt, kind, ss in goals:
        (r,) = _drive(engine, [GenerationSpec(ids(), prompt, MAX_TOKENS, kind, ss, False)]).values()
        per_token.append((r["end"] - r["t_add"]) / max(1, r["tokens"]))
        ttft.append(r["first_token"] - r["t_add"])
        (s,) = _drive(engine, [GenerationSpec(ids(), prompt, MAX_TOKENS, kind, ss, True)]).values()
        per_token_seg.append((s["end"] - s["t_add"]) / max(1, s["tokens"]))
        ttfs.append(s["first_segment"] - s["t_add"])
        tokens += s["tokens"]
    med = statistics.median
    return {"tasks": len(goals), "tokens": tokens, "per_token_ms": 1e3 * med(per_token),
            "segmented_per_token_ms": 1e3 * med(per_token_seg), "ttft_s": med(ttft), "ttfs_s": med(ttfs)}


def _cpu_seconds(pids: list[int]) -> dict[str, float]:
    """CPU seconds so far of this process and of each server's process tree (API server = the
    server process itself; engine = its children: EngineCore and workers)."""
    import psutil

    def cpu(p: Any) -> float:
        t = p.cpu_times()
        return t.user + t.system

    out = {"client": cpu(psutil.Process())}
    for i, pid in enumerate(pids):
        try:
            p = psutil.Process(pid)
            out[f"server{i}_api"] = cpu(p)
            out[f"server{i}_engine"] = sum(cpu(c) for c in p.children(recursive=True))
        except psutil.Error:
            pass
    return out


def bursts(engine: Any, ids: _Ids, n: int, repeats: int, pids: list[int] = ()) -> dict[str, Any]:
    """``repeats`` bursts; the one with the median throughput, and every run's tokens/s; CPU
    seconds per process per second of burst (1.0 = one core busy), summed over the bursts."""
    c0, t0 = _cpu_seconds(list(pids)), time.monotonic()
    runs = [burst(engine, ids, n) for _ in range(repeats)]
    c1, wall = _cpu_seconds(list(pids)), time.monotonic() - t0
    cores = {k: (c1[k] - c0[k]) / wall for k in c1 if k in c0}
    runs.sort(key=lambda r: r["tokens_per_s"])
    out = dict(runs[len(runs) // 2])
    out["runs_tokens_per_s"] = [r["tokens_per_s"] for r in runs]
    out["cores_busy"] = cores
    return out


def burst(engine: Any, ids: _Ids, n: int) -> dict[str, Any]:
    goals = _goals()
    specs = [GenerationSpec(ids(), *_spec_args(goals[i % len(goals)]), priority=i) for i in range(n)]
    t0 = time.monotonic()
    res = _drive(engine, specs)
    wall = max(r["end"] for r in res.values()) - t0
    tokens = sum(r["tokens"] for r in res.values())
    return {"goals": n, "succeeded": sum(r["ok"] for r in res.values()), "tokens": tokens, "wall_s": wall,
            "tokens_per_s": tokens / wall,
            "ttfs_median_s": statistics.median(r["first_segment"] - t0 for r in res.values() if r["first_segment"])}


def _spec_args(goal: tuple[str, str, str]) -> tuple:
    prompt, kind, ss = goal
    return (prompt, MAX_TOKENS, kind, ss, True)


def run_bench(goals: int = 22, skip_inprocess: bool = False, repeats: int = 3, log=print) -> dict[str, Any]:
    from llm_planner_node.core.clock import WallClock
    from llm_planner_node.engines.remote_engine import RemoteEngine
    from llm_planner_node.vllm_server import free_port, start_server, stop_server, wait_ready

    ids = _Ids()
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg()},
                              "goals_per_burst": goals}
    if not skip_inprocess:
        from llm_planner_node.engines.vllm_engine import VllmEngine

        log("in-process vLLM: starting ...")
        eng = VllmEngine(PARAMS, WallClock())
        try:
            result["inprocess"] = single_goal_runs(eng, ids)
            log(f"  in-process: {result['inprocess']}")
        finally:
            eng.close()
    logs = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    procs = []
    try:
        log(f"starting 2 vLLM servers ({', '.join(urls)}; logs in {logs}) ...")
        for i, port in enumerate(ports):
            cores = str(i) if (os.cpu_count() or 1) > 1 else None
            procs.append(start_server(PARAMS, port, cpu_cores=cores, log_path=logs / f"server{i}.log"))
        for url, proc in zip(urls, procs):
            wait_ready(url, 600.0, proc)
        one = RemoteEngine(PARAMS, WallClock(), urls[:1])
        try:
            result["remote1"] = single_goal_runs(one, ids)
            log(f"  remote, 1 server: {result['remote1']}")
            result.setdefault("burst", {})["one"] = bursts(one, ids, goals, repeats, [p.pid for p in procs])
            result["burst"]["one_half"] = bursts(one, ids, max(1, goals // 2), repeats, [p.pid for p in procs])
            log(f"  burst on 1 server: {result['burst']['one']}")
        finally:
            one.close()
        second = RemoteEngine(PARAMS, WallClock(), urls[1:])
        try:
            warm_up(second, ids)  # the second server compiles its grammars before it is measured too
        finally:
            second.close()
        two = RemoteEngine(PARAMS, WallClock(), urls)
        try:
            result["burst"]["two"] = bursts(two, ids, goals, repeats, [p.pid for p in procs])
            result["burst"]["two"]["placements"] = {u: sum(1 for _, url, _w in two.placements if url == u) for u in urls}
            log(f"  burst on 2 servers: {result['burst']['two']}")
        finally:
            two.close()
    finally:
        for p in procs:
            stop_server(p)
    if "inprocess" in result:
        ip, rm = result["inprocess"], result["remote1"]
        result["overhead_ratio"] = rm["per_token_ms"] / ip["per_token_ms"]
        result["segmented_overhead_ratio"] = rm["segmented_per_token_ms"] / ip["segmented_per_token_ms"]
        result["ttfs_inprocess_s"], result["ttfs_remote_s"] = ip["ttfs_s"], rm["ttfs_s"]
    result["machine"]["load_avg_end"] = os.getloadavg()
    b = result["burst"]
    result["throughput_ratio"] = b["two"]["tokens_per_s"] / b["one"]["tokens_per_s"]
    for name in ("one", "two", "one_half"):
        busy = b[name]["cores_busy"]
        engine_cores = sum(v for k, v in busy.items() if k.endswith("_engine"))
        b[name]["tokens_per_engine_core_s"] = b[name]["tokens_per_s"] / engine_cores if engine_cores else None
        b[name]["our_cores_busy"] = sum(busy.values())
    half = b.get("one_half", {})
    result["limits"] = (
        f"this machine has {os.cpu_count()} CPU cores for everything. One server's engine alone kept "
        f"{sum(v for k, v in b['one']['cores_busy'].items() if k.endswith('_engine')):.2f} cores busy (only its "
        "compute thread is pinned; its scheduler, grammar-mask and output threads are not), its API process "
        f"{b['one']['cores_busy'].get('server0_api', 0):.2f} and this client "
        f"{b['one']['cores_busy'].get('client', 0):.2f}: two servers would need about twice that, and our "
        f"processes could keep only {b['two']['our_cores_busy']:.2f} of the 2 cores busy (load average "
        f"{os.getloadavg()[0]:.1f}: other work shares them), and each engine did less per core-second "
        f"({b['one']['tokens_per_engine_core_s'] or 0:.0f} tokens per engine-core-second on one server, "
        f"{b['two']['tokens_per_engine_core_s'] or 0:.0f} on two; our reading: their unpinned threads and the API "
        "processes preempt each other). It is not batching: one server "
        f"gave {half.get('tokens_per_s', 0):.0f} tokens/s with half the burst and {b['one']['tokens_per_s']:.0f} "
        "with all of it (per-sequence work dominates a step), so with their own cores two servers should add up. "
        "More servers pay off where each server has its own compute (GPU servers, other machines)")
    return result


def report(r: dict[str, Any]) -> str:
    lines = ["bench engines: in-process vLLM vs vllm serve (shipped model, plan grammar on, greedy)", ""]
    if "inprocess" in r:
        ip, rm = r["inprocess"], r["remote1"]
        lines += [f"{'':24}{'in-process':>12}{'1 server':>12}{'ratio':>8}",
                  f"{'per token (unsegm.) ms':24}{ip['per_token_ms']:12.2f}{rm['per_token_ms']:12.2f}"
                  f"{r['overhead_ratio']:8.2f}",
                  f"{'per token (segm.) ms':24}{ip['segmented_per_token_ms']:12.2f}{rm['segmented_per_token_ms']:12.2f}"
                  f"{r['segmented_overhead_ratio']:8.2f}",
                  f"{'first token s':24}{ip['ttft_s']:12.3f}{rm['ttft_s']:12.3f}",
                  f"{'first segment s':24}{ip['ttfs_s']:12.3f}{rm['ttfs_s']:12.3f}", ""]
    b = r["burst"]
    lines += [f"burst of {r['goals_per_burst']} segmented goals:",
              f"  1 server : {b['one']['tokens_per_s']:7.1f} tokens/s ({b['one']['succeeded']}/{b['one']['goals']} ended, "
              f"{b['one']['wall_s']:.1f} s, first segment median {b['one']['ttfs_median_s']:.2f} s)",
              f"  1 server, half the burst ({b['one_half']['goals']} goals): {b['one_half']['tokens_per_s']:7.1f} tokens/s",
              f"  2 servers: {b['two']['tokens_per_s']:7.1f} tokens/s ({b['two']['succeeded']}/{b['two']['goals']} ended, "
              f"{b['two']['wall_s']:.1f} s, first segment median {b['two']['ttfs_median_s']:.2f} s)",
              "  cores busy during the bursts (1.0 = one core): "
              + "; ".join(f"{name} server(s): " + ", ".join(f"{k} {v:.2f}" for k, v in b[name]["cores_busy"].items())
                          for name in ("one", "two")),
              f"  throughput ratio 2/1: {r['throughput_ratio']:.2f} (median of {len(b['one']['runs_tokens_per_s'])} bursts each)",
              f"  load average (other work on this machine): {r['machine']['load_avg_start'][0]:.1f} at start, "
              f"{r['machine']['load_avg_end'][0]:.1f} at end", "", "what limits it: " + r["limits"]]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--goals", type=int, default=22, help="goals per burst (default 22: the 11 tasks twice)")
    parser.add_argument("--skip-inprocess", action="store_true", help="only the remote servers")
    parser.add_argument("--repeats", type=int, default=3, help="bursts per configuration (median reported)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")


def run(args: argparse.Namespace) -> int:
    result = run_bench(goals=args.goals, skip_inprocess=args.skip_inprocess, repeats=args.repeats)
    print(report(result))
    if args.json:
        outfiles.write_json(args.json, result, indent=2)
    return 0
