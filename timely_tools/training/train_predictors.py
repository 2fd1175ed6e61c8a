"""Train Trail's probe and the LTR ranking head on the planner corpus (CPU, ~1-2 minutes).

    python -m timely_tools.training.train_predictors            # writes weights/ + weights/report.json
    python -m timely_tools.training.train_predictors --evaluate # re-measures the shipped weights on the
                                                           # held-out set, writes nothing (~1 min)

Data: :func:`~..planner_model.corpus.generate_corpus` (training variations) and
:func:`~..planner_model.corpus.held_out_variations` (test), teacher-forced through the planner
model (prompt + " " + plan + EOS), so output lengths are the planner model's own tokens.
Deterministic under ``--seed``; single process, one thread.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import llm_planner_node

import numpy as np
import torch

from llm_planner_node.core.predictors import LengthBins, TrailRefiner
from llm_planner_node.planner_model.corpus import PlanExample, generate_corpus, held_out_variations
from llm_planner_node.predictors import ltr_ranker, trail_probe
from llm_planner_node.predictors.features import DEFAULT_LAYER, PlannerModel

OUT = Path(llm_planner_node.__file__).resolve().parent / "predictors" / "weights"
BINS = LengthBins(k=10, max_len=80.0)  # plans are 18-70 planner tokens (Trail: 10 bins / 512)


def featurize(pm: PlannerModel, examples: list[PlanExample], layer: int) -> dict[str, list]:
    """Per example: task-part mean at ``layer`` (Trail's first input) and at the last layer
    (LTR backbone), per-token states at ``layer`` with their remaining lengths."""
    last = len(pm.model.model.layers) - 1
    out: dict[str, list] = {"init": [], "emb": [], "tok": [], "rem": [], "len": []}
    for e in examples:
        prompt, start = pm.task_span(e.instruction, e.robot_kind)
        plan = pm.ids(" " + e.plan) + [pm.tok.eos_token_id]
        ids = prompt + plan
        with torch.no_grad():
            h_mid = pm.states(ids, layer)
            h_last = pm.states(prompt, last)
        n = len(plan)
        out["init"].append(h_mid[start:len(prompt)].mean(0).numpy())
        out["emb"].append(h_last[start:].mean(0).numpy())
        # after t generated tokens (t = 1..n-1) the last token's state; remaining n - t
        out["tok"].append(h_mid[len(prompt):len(prompt) + n - 1].numpy())
        out["rem"].append(n - np.arange(1, n))
        out["len"].append(n)
    return out


def trail_eval(net: trail_probe.ProbeMLP, f: dict[str, list]) -> dict[str, float]:
    """MAE (tokens) of the initial prediction and of per-token remaining predictions: raw probe
    (expected bin midpoint) vs Bayesian-refined; plus a constant-mean baseline."""
    mids = BINS.midpoints
    with torch.no_grad():
        p0 = torch.softmax(net(torch.tensor(np.array(f["init"]))), -1).numpy()
    lens = np.array(f["len"], float)
    init_err = np.abs(p0 @ mids - lens)
    raw, ref = [], []
    for i, (h, rem) in enumerate(zip(f["tok"], f["rem"], strict=True)):
        r = TrailRefiner(BINS)
        r.start(i, p0[i])
        with torch.no_grad():
            p = torch.softmax(net(torch.tensor(h)), -1).numpy()
        for t in range(len(rem)):
            raw.append(abs(p[t] @ mids - rem[t]))
            ref.append(abs(r.step(i, p[t]) - rem[t]))
    return {"mae_initial": float(init_err.mean()), "mae_constant_mean": float(np.abs(lens - lens.mean()).mean()),
            "mae_per_token_raw": float(np.mean(raw)), "mae_per_token_bayes": float(np.mean(ref))}


def ltr_eval(w: np.ndarray, b: float, mean: np.ndarray, std: np.ndarray, f: dict[str, list]) -> dict[str, float]:
    """Kendall tau-b of the rank keys (-score) against the true lengths, exact and in buckets of
    10 tokens, plus the bucketed oracle's (the ceiling bucketing leaves)."""
    score = ((np.array(f["emb"]) - mean) / std) @ w + b
    lens = np.array(f["len"])
    return {"kendall_tau_b": ltr_ranker.kendall_tau_b(-score, lens),
            "kendall_tau_b_bucketed": ltr_ranker.kendall_tau_b(-score, ltr_ranker.bucket(lens)),
            "oracle_tau_b_bucketed": ltr_ranker.kendall_tau_b(lens, ltr_ranker.bucket(lens))}


def evaluate(weights: Path, n_per_task: int, seed: int) -> dict:
    """The shipped weights re-measured on the same held-out set training used (no training)."""
    pm = PlannerModel()
    net, bins, layer = trail_probe.load(weights / trail_probe.WEIGHTS.name)
    if (bins.k, bins.max_len) != (BINS.k, BINS.max_len):
        raise SystemExit(f"{weights}: bins {bins.k}/{bins.max_len}, trail_eval expects {BINS.k}/{BINS.max_len}")
    train_ex = generate_corpus(n_per_task=n_per_task, seed=seed, canonical_repeats=1)
    test_ex = held_out_variations(n_per_task=10, exclude={e.instruction for e in train_ex})
    fte = featurize(pm, test_ex, layer)
    z = np.load(weights / ltr_ranker.WEIGHTS.name)
    return {"weights": str(weights), "test_prompts": len(test_ex),
            "trail": {"layer": layer, **trail_eval(net, fte)},
            "ltr": ltr_eval(z["w"], float(z["b"][0]), z["mean"], z["std"], fte)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-per-task", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layer", type=int, default=DEFAULT_LAYER)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--evaluate", action="store_true",
                    help="re-measure the weights in --out on the held-out set; train and write nothing")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    if args.evaluate:
        print(json.dumps(evaluate(args.out, args.n_per_task, args.seed), indent=2))
        return 0
    pm = PlannerModel()
    train_ex = generate_corpus(n_per_task=args.n_per_task, seed=args.seed, canonical_repeats=1)
    test_ex = held_out_variations(n_per_task=10, exclude={e.instruction for e in train_ex})
    ftr, fte = featurize(pm, train_ex, args.layer), featurize(pm, test_ex, args.layer)

    # Trail: initial states + per-token states, labels = bin of remaining length
    x = np.concatenate([np.array(ftr["init"])] + ftr["tok"])
    y = BINS.index(np.concatenate([np.array(ftr["len"])] + ftr["rem"]))
    net = trail_probe.train_probe(x, y, BINS.k, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    trail_probe.save(net, BINS, args.layer, args.out / trail_probe.WEIGHTS.name)
    trail = {"layer": args.layer, "bins": BINS.k, "max_len": BINS.max_len, "train_samples": int(len(x)),
             **trail_eval(net, fte)}

    # LTR: ListMLE head on standardised embeddings; tau-b on held-out prompts
    emb = np.array(ftr["emb"])
    mean, std = emb.mean(0), emb.std(0) + 1e-6
    head = ltr_ranker.train_head((emb - mean) / std, np.array(ftr["len"]), seed=args.seed)
    ltr_ranker.save(head, mean, std, args.out / ltr_ranker.WEIGHTS.name)
    ltr = {"train_prompts": len(train_ex), "test_prompts": len(test_ex),
           **ltr_eval(head.weight.detach().numpy()[0], float(head.bias.detach().numpy()[0]), mean, std, fte)}
    report = {"seed": args.seed, "n_per_task": args.n_per_task, "trail": trail, "ltr": ltr}
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
