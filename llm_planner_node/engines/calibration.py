"""Engine calibration files: fit, save and load ``iteration_time = a + b*prefill + c*decode_batch``.

``timely-fleet calibrate`` (:mod:`llm_planner_node.bench.calibrate`) measures a real engine and
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

No vLLM import here: the simulator and tests use this module without vLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .sim_engine import IterationModel

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
