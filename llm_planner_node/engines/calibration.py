"""Engine calibration files: fit, save and load ``iteration_time = a + b*prefill + c*decode_batch``.

``timely-fleet calibrate`` (:mod:`timely_tools.bench.calibrate`) measures a real engine and
writes a calibration file; the simulated engine takes the fitted model through
:func:`load_iteration_model`::

    from llm_planner_node.engines.calibration import load_iteration_model
    from llm_planner_node.engines.sim_engine import SimEngineConfig
    cfg = SimEngineConfig(iteration=load_iteration_model("calibration.yaml"))

File format (YAML or JSON; YAML is a superset of JSON so either loads)::

    iteration_model:            # seconds
      a_s: 0.0031
      b_s_per_prefill_token: 2.1e-05
      c_s_per_decode_seq: 0.0004
    fit: {r2: 0.98, rmse_s: 0.0005, n_samples: 24}
    source: {model: ..., engine: vllm 0.32.0, device: cpu, date: ..., command: ...}
    kv_capacity_tokens: 8192    # optional: the measured engine's KV capacity
    samples: [{prefill_tokens: 256, decode_batch: 0, seconds: 0.009, kind: prefill}, ...]

Named calibrations (:data:`CALIBRATIONS`, :func:`get_calibration`): every evaluation report
(``eval`` / ``paper`` / ``compare``, option ``--calibration NAME|PATH``) prints the calibration's
name and source line. Each constant is derived below from the source's own numbers:

- ``paper-vllm`` (default of ``eval``, ``paper`` and ``compare``): Llama3-8B fp16 on an RTX 4090
  served by vLLM, the setup of TimelyLLM's evaluation (Sec. 5: "We implement TimelyLLM on ...
  vLLM"). The paper gives, for one robot-control generation (Sec. 4.1): generation ~370 ms,
  re-prefill of its context 133.31 ms, context = 170.35 MB of KV = 1,300 tokens at Llama3-8B's
  128 KiB/token; and Table 1's request emits 15 tokens (token 0 from the prefill, 14 decodes).
  So one decode iteration at batch 1 = (370 - 133.31) / 14 = 16.9 ms; with the per-sequence
  decode slope c = 0.2 ms (assumption: the hybrid paper's 0.21 ms/request) a = 16.7 ms; and
  a + b * 1,300 = 133.31 ms gives b = 0.0897 ms/token. Check: Table 4's overhead ms / % give
  total segmented generation times of 351-354 ms for the urgent traces 6-8 (13-19 tokens here).
  KV capacity and host<->GPU copy as ``hf-table1`` (same GPU and model).
- ``hf-table1``: the same model and GPU under HF transformers, one request (Table 1): prefill of
  2,884 tokens 328 ms, each decode ~22 ms: a + c = 21.8 + 0.2 ms, b = (328 - 21.8) / 2,884 ms.
  (``SimEngineConfig()``'s default; what the simulator used before named calibrations.)
- ``phi3-hf-table1``: Phi-3-mini under HF (Table 1: prefill 563 ms, decode ~22 ms); the chat
  workload's model (Fig. 10). The paper gives no vLLM figure for Phi-3, so chat keeps this one
  whenever a Llama3 calibration is chosen.
- ``npu-hybrid``: LLaMA-65B on 8 Ascend NPUs, the hybrid offline-online paper's latency model
  (prefill 25 ms + 0.13 ms/token, decode round 29 ms + 0.21 ms/client); KV for its 200 clients
  of ~1,100 tokens.
- a file written by ``timely-fleet calibrate`` (a path): its fitted model, its measured KV
  capacity, and its ``source`` mapping (engine, model, device, date) as the source line; it
  applies to every workload, chat included (it measured one engine).

No vLLM import here: the simulator and tests use this module without vLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from llm_planner_node.engines.sim_engine import (LLAMA3_8B_RTX4090, LLAMA3_8B_RTX4090_KV_TOKENS, LLAMA3_8B_SWAP_S_PER_TOKEN,
                         LLAMA65B_NPU, IterationModel, SimEngineConfig)

MODEL_KEY = "iteration_model"
FIELDS = ("a_s", "b_s_per_prefill_token", "c_s_per_decode_seq")


@dataclass(frozen=True)
class Fit:
    """A least-squares fit of the iteration model with its quality."""

    model: IterationModel
    r2: float
    rmse_s: float
    n_samples: int

    def to_dict(self) -> dict:
        return {"r2": self.r2, "rmse_s": self.rmse_s, "n_samples": self.n_samples}


def fit_iteration_model(samples: Iterable[tuple[float, float, float]]) -> Fit:
    """Least-squares fit of ``seconds = a + b*prefill_tokens + c*decode_batch``.

    ``samples`` are ``(prefill_tokens, decode_batch, seconds)``. Needs at least three samples
    that vary in both prefill tokens and decode batch (else the system is rank-deficient and a
    ValueError says which column does not vary). R^2 is 1 - SS_res/SS_tot (1.0 when all times
    are equal and fitted exactly).
    """
    import numpy as np

    rows = np.asarray([tuple(map(float, s)) for s in samples], dtype=float)
    if rows.ndim != 2 or rows.shape[0] < 3 or rows.shape[1] != 3:
        raise ValueError("need at least 3 samples of (prefill_tokens, decode_batch, seconds)")
    X = np.column_stack([np.ones(len(rows)), rows[:, 0], rows[:, 1]])
    y = rows[:, 2]
    if np.linalg.matrix_rank(X) < 3:
        which = "prefill_tokens" if np.ptp(rows[:, 0]) == 0 else "decode_batch"
        raise ValueError(f"samples do not determine a, b, c: vary {which} (and keep the two columns independent)")
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    pred = X @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res < 1e-24 else 0.0)
    rmse = float(np.sqrt(ss_res / len(y)))
    a, b, c = (float(v) for v in coef)
    return Fit(IterationModel(a, b, c), r2, rmse, len(rows))


def model_to_dict(model: IterationModel) -> dict[str, float]:
    return {k: float(getattr(model, k)) for k in FIELDS}


def save_calibration(path: str | Path, fit: Fit, *, source: dict[str, Any] | None = None,
                     samples: Sequence[dict[str, Any]] = (), kv_capacity_tokens: int | None = None,
                     extra: dict[str, Any] | None = None) -> Path:
    """Write a calibration file: JSON if ``path`` ends with .json, else YAML."""
    path = Path(path)
    doc: dict[str, Any] = {MODEL_KEY: model_to_dict(fit.model), "fit": fit.to_dict(), "source": dict(source or {})}
    if kv_capacity_tokens is not None:
        doc["kv_capacity_tokens"] = int(kv_capacity_tokens)
    if extra:
        doc.update(extra)
    doc["samples"] = [dict(s) for s in samples]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps(doc, indent=1) + "\n")
    else:
        import yaml

        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def load_calibration(path: str | Path) -> dict[str, Any]:
    """The whole calibration document (YAML or JSON)."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a calibration file (expected a mapping)")
    return doc


def load_iteration_model(path: str | Path) -> IterationModel:
    """The :class:`IterationModel` of a calibration file written by ``timely-fleet calibrate``.

    Accepts the ``iteration_model:`` mapping (or the three fields at the top level). Raises
    ValueError naming a missing or non-numeric field.
    """
    doc = load_calibration(path)
    m = doc.get(MODEL_KEY, doc)
    if not isinstance(m, dict):
        raise ValueError(f"{path}: '{MODEL_KEY}' must be a mapping of {', '.join(FIELDS)}")
    vals = []
    for k in FIELDS:
        if k not in m:
            raise ValueError(f"{path}: missing '{k}' in '{MODEL_KEY}' (seconds)")
        try:
            vals.append(float(m[k]))
        except (TypeError, ValueError):
            raise ValueError(f"{path}: '{k}' must be a number, got {m[k]!r}") from None
    return IterationModel(*vals)


def load_kv_capacity_tokens(path: str | Path) -> int | None:
    """The measured engine's KV capacity in tokens, if the file records it."""
    v = load_calibration(path).get("kv_capacity_tokens")
    return int(v) if v is not None else None


# ----------------------------------------------------------------------------- named calibrations

#: TimelyLLM 4.1 / Table 1 numbers behind ``paper-vllm`` (seconds, tokens)
PAPER_GENERATION_S = 0.370      # "the total generation time (~370 ms)"
PAPER_REPREFILL_S = 0.13331     # "re-prefilling the inputs takes ... 133.31 ms"
PAPER_CONTEXT_TOKENS = 1300     # 170.35 MB of KV / 128 KiB per token (Llama3-8B fp16)
PAPER_PLAN_TOKENS = 15          # Table 1: 15 tokens decoded and detokenized
DECODE_SLOPE_S = 0.0002         # c: per extra sequence in a decode batch (assumption, see above)
_PAPER_DECODE_S = (PAPER_GENERATION_S - PAPER_REPREFILL_S) / (PAPER_PLAN_TOKENS - 1)  # 16.9 ms
_PAPER_A = _PAPER_DECODE_S - DECODE_SLOPE_S
LLAMA3_8B_VLLM_RTX4090 = IterationModel(_PAPER_A, (PAPER_REPREFILL_S - _PAPER_A) / PAPER_CONTEXT_TOKENS,
                                        DECODE_SLOPE_S)
# Phi-3-mini on the RTX 4090 under HF (Table 1): a + c = 22 ms, a + b * 2,884 = 563 ms.
PHI3_MINI_RTX4090 = IterationModel(0.0218, (0.563 - 0.0218) / 2884, 0.0002)
# 3.8 B params fp16 = 7.6 GB; KV 2 x 32 layers x 32 heads x 96 x 2 B = 384 KiB/token;
# (23.2 - 7.6 - 1) GB / 384 KiB ~ 37,000 tokens.
PHI3_MINI_RTX4090_KV_TOKENS = 37_000
DEFAULT_CALIBRATION = "paper-vllm"


@dataclass(frozen=True)
class Calibration:
    """A simulated engine with where its numbers come from.

    ``engine`` serves workloads of ``model``; ``chat`` (if set) serves the chat workload's
    Phi-3 (``engine_model: phi3``) when this calibration is chosen; None = ``engine`` serves
    every workload (calibration files).
    """

    name: str
    model: str
    engine: SimEngineConfig
    source: str
    chat: "Calibration | None" = None
    path: str | None = None

    def engine_for(self, engine_model: str) -> SimEngineConfig:
        """The engine for a workload whose spec names ``engine_model`` (llama3-8b | phi3)."""
        return self.for_model(engine_model).engine

    def for_model(self, engine_model: str) -> "Calibration":
        if self.path is None and engine_model == "phi3" and self.model != "phi3" and self.chat is not None:
            return self.chat
        return self

    def describe(self) -> str:
        """``name``: a, b, c and KV, then the source (one line; printed in every report)."""
        m = self.engine.iteration
        return (f"{self.name}: a {1e3 * m.a_s:.2f} ms + b {1e3 * m.b_s_per_prefill_token:.4f} ms/prefill token "
                f"+ c {1e3 * m.c_s_per_decode_seq:.2f} ms/sequence (decode at batch 1 "
                f"{1e3 * m.time(0, 1):.1f} ms/token), KV {self.engine.kv_capacity_tokens:,} tokens. "
                f"Source: {self.source}")

    def as_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "model": self.model, "source": self.source, "path": self.path,
             "iteration_model": model_to_dict(self.engine.iteration),
             "kv_capacity_tokens": self.engine.kv_capacity_tokens, "description": self.describe()}
        if self.chat is not None:
            d["chat"] = self.chat.as_dict()
        return d


_PHI3 = Calibration(
    "phi3-hf-table1", "phi3",
    SimEngineConfig(iteration=PHI3_MINI_RTX4090, kv_capacity_tokens=PHI3_MINI_RTX4090_KV_TOKENS),
    "TimelyLLM Table 1, Phi-3-mini-128k fp16 on an RTX 4090 under HF transformers, one request: "
    "prefill 2,884 tokens 563 ms, decode ~22 ms/token (no vLLM figure for Phi-3 in the paper)")

CALIBRATIONS: dict[str, Calibration] = {c.name: c for c in (
    Calibration(
        "paper-vllm", "llama3-8b",
        SimEngineConfig(iteration=LLAMA3_8B_VLLM_RTX4090, kv_capacity_tokens=LLAMA3_8B_RTX4090_KV_TOKENS,
                        swap_s_per_token=LLAMA3_8B_SWAP_S_PER_TOKEN),
        "TimelyLLM's evaluation setup, Llama3-8B fp16 on an RTX 4090 served by vLLM: one robot "
        "generation ~370 ms = 133.31 ms re-prefill of the 1,300-token context + 14 decodes "
        "(Table 1's 15-token plan) -> 16.9 ms/token (Sec. 4.1, Table 1); c = 0.2 ms/sequence assumed",
        chat=_PHI3),
    Calibration(
        "hf-table1", "llama3-8b",
        SimEngineConfig(iteration=LLAMA3_8B_RTX4090, kv_capacity_tokens=LLAMA3_8B_RTX4090_KV_TOKENS,
                        swap_s_per_token=LLAMA3_8B_SWAP_S_PER_TOKEN),
        "TimelyLLM Table 1, Llama3-8B fp16 on an RTX 4090 under HF transformers, one request: "
        "prefill 2,884 tokens 328 ms, decode ~22 ms/token; c = 0.2 ms/sequence assumed",
        chat=_PHI3),
    _PHI3,
    Calibration(
        "npu-hybrid", "llama-65b",
        SimEngineConfig(iteration=LLAMA65B_NPU, kv_capacity_tokens=200 * 1100),
        "hybrid offline-online paper, LLaMA-65B on 8 Ascend NPUs: prefill 25 ms + 0.13 ms/token, "
        "decode round 29 ms + 0.21 ms/active client; KV for its 200 clients x ~1,100 tokens",
        chat=None),
)}


def calibration_from_file(path: str | Path) -> Calibration:
    """A :class:`Calibration` from a file written by ``timely-fleet calibrate``."""
    doc = load_calibration(path)
    model = load_iteration_model(path)
    kv = doc.get("kv_capacity_tokens")
    src = doc.get("source") or {}
    if isinstance(src, dict):
        parts = [f"{k} {src[k]}" for k in ("engine", "model", "device", "date") if src.get(k) is not None]
        fit = doc.get("fit") or {}
        if fit.get("r2") is not None:
            parts.append(f"fit R^2 {float(fit['r2']):.3f} over {fit.get('n_samples', '?')} configurations")
        text = "timely-fleet calibrate file " + str(path) + (": " + ", ".join(parts) if parts else "")
    else:
        text = f"timely-fleet calibrate file {path}: {src}"
    cfg = SimEngineConfig(iteration=model,
                          kv_capacity_tokens=int(kv) if kv is not None else LLAMA3_8B_RTX4090_KV_TOKENS)
    return Calibration(Path(path).stem, str(src.get("model", "measured")) if isinstance(src, dict) else "measured",
                       cfg, text, None, str(path))


def get_calibration(name_or_path: str | Path | None = None) -> Calibration:
    """A named calibration (:data:`CALIBRATIONS`) or a calibration file; None = the default."""
    key = DEFAULT_CALIBRATION if name_or_path is None else str(name_or_path)
    if key in CALIBRATIONS:
        return CALIBRATIONS[key]
    p = Path(key)
    if p.is_file():
        return calibration_from_file(p)
    raise ValueError(f"calibration {key!r}: not a name ({', '.join(CALIBRATIONS)}) and not a file "
                     "(write one with `timely-fleet calibrate --out PATH`)")
