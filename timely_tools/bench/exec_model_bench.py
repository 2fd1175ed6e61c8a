"""Execution-time model benchmark: held-out prediction error and online-update convergence.

Run: ``python -m timely_tools.bench.exec_model_bench [--json PATH] [--seed N]``
(wired as ``timely-fleet bench exec-model``).

1. *Held-out error.* A fleet of simulated robots whose true speeds differ from the profile
   (factor drawn in [0.7, 1.3] per robot) executes random segments; durations carry log-normal
   noise and a few gross outliers (x3, e.g. a retried command). The model observes a training
   part and predicts held-out segments. Reported: error of the profile-only model and of the
   updated model on simple-skill segments (MAPE, P90 absolute % error), and for segments with
   scene-dependent skills the never-late rate (prediction <= 1.05 x actual: the model must
   predict the minimum so a resumed generation is never late; 5 % allows for the execution noise
   of the simple skills in the same segment) and the mean slack (actual - predicted).
2. *Convergence.* A drone trained at its nominal speed is slowed to ``--speed-after`` (0.5 =
   half speed); the script prints the prediction error of each execution after the change and
   the number of executions until the error (rolling mean of 5) stays below 10 %, for this
   model and for a plain
   EWMA of the duration ratio (alpha 0.1) as a reference.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np

from timely_robot.execution_time import ExecutionTimeModel
from timely_robot.skills import INDY7_ARM, TELLO_MINISPEC, SkillCall

from timely_tools import outfiles

SIMPLE_DRONE = ("move_forward", "move_backward", "move_left", "move_right", "move_up", "move_down")


def _drone_segment(rng: np.random.Generator, scene: bool) -> list[SkillCall]:
    calls = []
    for _ in range(int(rng.integers(1, 4))):
        if rng.random() < 0.3:
            calls.append(TELLO_MINISPEC.validate(str(rng.choice(["turn_cw", "turn_ccw"])), [int(rng.integers(15, 181))]))
        else:
            calls.append(TELLO_MINISPEC.validate(str(rng.choice(SIMPLE_DRONE)), [int(rng.integers(20, 301))]))
    if scene:
        calls.insert(int(rng.integers(0, len(calls) + 1)), TELLO_MINISPEC.validate("scan", ["cat"]))
    return calls


def _arm_segment(rng: np.random.Generator, scene: bool) -> list[SkillCall]:
    calls = []
    for _ in range(int(rng.integers(1, 3))):
        calls.append(INDY7_ARM.validate("move_to", [float(rng.uniform(-400, 400)), float(rng.uniform(-400, 400)),
                                                    float(rng.uniform(100, 600))]))
    if rng.random() < 0.3:
        calls.append(INDY7_ARM.validate("push", ["cup", float(rng.uniform(20, 200))]))
    if scene:
        calls += [INDY7_ARM.validate("pick", ["apple"]), INDY7_ARM.validate("place", ["apple", "bowl"])]
    return calls


def _execute(truth: ExecutionTimeModel, rid: str, kind: str, calls, rng, outlier_p: float) -> list[float]:
    durs = truth.sample_calls(rid, kind, calls, rng)
    return [d * 3.0 if rng.random() < outlier_p else d for d in durs]


def held_out(seed: int, robots: int, train: int, test: int, outlier_p: float) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    truth = ExecutionTimeModel(online=False)
    fleet = []
    for i in range(robots):
        kind = "drone" if i % 2 == 0 else "arm"
        rid = f"{kind}{i}"
        f = float(rng.uniform(0.7, 1.3))
        truth.set_speed_factor(rid, f)
        fleet.append((rid, kind, f))
    prior = ExecutionTimeModel(online=False)
    model = ExecutionTimeModel()
    gen = {"drone": _drone_segment, "arm": _arm_segment}
    for rid, kind, _f in fleet:
        for _ in range(train):
            calls = gen[kind](rng, scene=rng.random() < 0.3)
            model.set_arm_pose(rid, None)  # every segment starts at home (as in the truth)
            for c, d in zip(calls, _execute(truth, rid, kind, calls, rng, outlier_p)):
                model.observe(rid, kind, c, d)
    res: dict[str, Any] = {}
    for kind in ("drone", "arm"):
        err_prior, err_model, late, slack, late_prior = [], [], [], [], []
        for rid, k, _f in fleet:
            if k != kind:
                continue
            for _ in range(test):
                scene = rng.random() < 0.4
                calls = gen[kind](rng, scene=scene)
                actual = float(sum(_execute(truth, rid, kind, calls, rng, 0.0)))
                model.set_arm_pose(rid, None)
                p_model = model.predict(rid, kind, calls)
                p_prior = prior.predict(rid, kind, calls)
                if scene:
                    late.append(p_model > actual * 1.05)
                    late_prior.append(p_prior > actual * 1.05)
                    slack.append(actual - p_model)
                else:
                    err_prior.append(abs(p_prior - actual) / actual)
                    err_model.append(abs(p_model - actual) / actual)
        res[kind] = {
            "simple_segments": len(err_model),
            "mape_profile_only_pct": 100 * float(np.mean(err_prior)),
            "mape_online_pct": 100 * float(np.mean(err_model)),
            "p90_abs_err_profile_only_pct": 100 * float(np.quantile(err_prior, 0.9)),
            "p90_abs_err_online_pct": 100 * float(np.quantile(err_model, 0.9)),
            "scene_segments": len(late),
            "never_late_rate_online": 1.0 - float(np.mean(late)),
            "never_late_rate_profile_only": 1.0 - float(np.mean(late_prior)),
            "mean_slack_s": float(np.mean(slack)),
        }
    res["config"] = {"seed": seed, "robots": robots, "train_segments_per_robot": train,
                     "test_segments_per_robot": test, "outlier_probability": outlier_p}
    return res


def convergence(seed: int, before: int, after: int, speed_after: float, outlier_p: float) -> dict[str, Any]:
    rng = np.random.default_rng(seed + 1)
    rid, kind = "tello0", "drone"
    truth = ExecutionTimeModel(online=False)
    model = ExecutionTimeModel()
    ratio_log = 0.0  # EWMA baseline on log(actual / profile)
    baseline_prior = ExecutionTimeModel(online=False)
    alpha = 0.1
    errs, errs_base = [], []
    skills = ("move_forward", "move_left", "move_up")
    for step in range(before + after):
        if step == before:
            truth.set_speed_factor(rid, speed_after)
        call = TELLO_MINISPEC.validate(str(rng.choice(skills)), [int(rng.integers(50, 301))])
        actual = truth.sample_calls(rid, kind, [call], rng)[0]
        if step >= before:
            p = model.predict(rid, kind, [call])
            pb = baseline_prior.predict(rid, kind, [call]) * math.exp(ratio_log)
            errs.append(abs(p - actual) / actual)
            errs_base.append(abs(pb - actual) / actual)
        observed = actual * 3.0 if (step < before and rng.random() < outlier_p) else actual
        model.observe(rid, kind, call, observed)
        nominal = baseline_prior.predict(rid, kind, [call])
        ratio_log = (1 - alpha) * ratio_log + alpha * math.log(observed / nominal)

    def settle(e: list[float], thr: float = 0.10, w: int = 5) -> int:
        """First execution from which every rolling mean of ``w`` errors stays below ``thr``
        (single executions scatter by the 5 % execution noise)."""
        roll = [float(np.mean(e[i:i + w])) for i in range(len(e) - w + 1)]
        for i in range(len(roll)):
            if all(v < thr for v in roll[i:]):
                return i
        return len(e)

    return {
        "speed_factor_after": speed_after,
        "executions_before_change": before,
        "errors_after_change_pct": [round(100 * v, 1) for v in errs],
        "executions_to_within_10pct": settle(errs),
        "ewma_baseline_errors_after_change_pct": [round(100 * v, 1) for v in errs_base],
        "ewma_baseline_executions_to_within_10pct": settle(errs_base),
        "mean_err_last_10_pct": 100 * float(np.mean(errs[-10:])),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--robots", type=int, default=20)
    parser.add_argument("--train", type=int, default=40, help="training segments per robot")
    parser.add_argument("--test", type=int, default=60, help="held-out segments per robot")
    parser.add_argument("--outliers", type=float, default=0.03, help="probability of a x3 outlier")
    parser.add_argument("--speed-after", type=float, default=0.5)
    parser.add_argument("--after", type=int, default=30, help="executions after the speed change")


def run(args: argparse.Namespace) -> int:
    ho = held_out(args.seed, args.robots, args.train, args.test, args.outliers)
    cv = convergence(args.seed, 40, args.after, args.speed_after, args.outliers)
    print("Execution-time model: held-out prediction error "
          f"({args.robots} robots with true speed x0.7-1.3, {args.train} training / {args.test} "
          f"held-out segments each, {100 * args.outliers:.0f}% x3 outliers in training)")
    print(f"{'kind':6} {'segs':>5} {'MAPE prof%':>10} {'MAPE onl%':>10} {'P90 prof%':>10} {'P90 onl%':>9}"
          f" | {'scene segs':>10} {'never-late':>10} {'(profile)':>9} {'slack s':>8}")
    for kind in ("drone", "arm"):
        r = ho[kind]
        print(f"{kind:6} {r['simple_segments']:5d} {r['mape_profile_only_pct']:10.1f} {r['mape_online_pct']:10.1f}"
              f" {r['p90_abs_err_profile_only_pct']:10.1f} {r['p90_abs_err_online_pct']:9.1f}"
              f" | {r['scene_segments']:10d} {r['never_late_rate_online']:10.3f}"
              f" {r['never_late_rate_profile_only']:9.3f} {r['mean_slack_s']:8.2f}")
    print(f"\nOnline update after a speed change to x{cv['speed_factor_after']} "
          f"(after {cv['executions_before_change']} executions at nominal speed):")
    print("  model error per execution (%):", " ".join(f"{v:.0f}" for v in cv["errors_after_change_pct"][:15]), "...")
    print("  EWMA(0.1) reference        (%):", " ".join(f"{v:.0f}" for v in cv["ewma_baseline_errors_after_change_pct"][:15]), "...")
    print(f"  executions until the error (rolling mean of 5) stays < 10%: model {cv['executions_to_within_10pct']}, "
          f"EWMA reference {cv['ewma_baseline_executions_to_within_10pct']}; "
          f"mean error of the last 10: {cv['mean_err_last_10_pct']:.1f}%")
    if args.json:
        outfiles.write_json(args.json, {"held_out": ho, "convergence": cv}, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
