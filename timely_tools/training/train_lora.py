"""Train the ``smollm2-135m-planner`` LoRA adapter (PEFT) on ``smollm2-135m-instruct``.

    python -m timely_tools.training.train_lora [--steps N] [--out DIR] [--seed S]
    python -m timely_tools.training.train_lora --eval [--out DIR]   # base vs merged

Data: :func:`.plan_data.generate` (synthetic, seeded; never a held-out or worked-example
instruction). Each sample is rendered with exactly the prompt the node uses for this model,
``build_chat_prompt_ids(tokenizer, instruction, kind, objects=..., options=PLANNER_PROMPT_OPTIONS)``,
and the target is the plan text followed by ``<|im_end|>`` (the chat template's end of turn, the
tokenizer's eos and ``generation_config.eos_token_id``); the loss is on the target tokens only.

Speed (CPU, fp32, 2 threads): LoRA sits only on the upper ``--lora-layers`` decoder layers
(q, k, v, o, gate, up, down), so nothing below them needs a backward pass. The samples of one
batch share a robot kind and a known-objects list (none, or the union of the batch's objects plus
distractors), so they share the whole system message: its KV cache is computed once per batch
without gradients (batch 1) and repeated over the batch; only the user turn and the answer
(~30-60 tokens) run with gradients. The system message's skill list (the same for every prompt
of a kind) is itself cached and recomputed every ``--prefix-refresh`` steps (1: the forward pass
is exactly the model's; larger: the cached upper-layer keys/values lag the adapter by up to that
many steps, a small approximation the evaluation checks). Gradients do not flow into the cached
prefix (the adapter learns from the answer's view of it).

The adapter is written in PEFT format to ``llm_planner_node/planner_model/adapters/smollm2-135m-planner``
(checkpoints every ``--save-every`` steps, so an early adapter exists) with ``training.json``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

import llm_planner_node
from typing import Any, Sequence

from timely_tools.training import chat_replay
from timely_tools.training.plan_data import (ARM_OBJECTS, ARM_TARGETS, BASE_PLACES, BASE_THINGS, DRONE_OBJECTS,
                                             PlanSample, generate)
from llm_planner_node.prompts.prompt import PLANNER_PROMPT_OPTIONS, build_chat_prompt_ids

BASE_MODEL = "smollm2-135m-instruct"
MODEL_NAME = "smollm2-135m-planner"
DEFAULT_OUT = Path(llm_planner_node.__file__).resolve().parent / "planner_model" / "adapters" / MODEL_NAME
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PROMPT_OPTIONS = PLANNER_PROMPT_OPTIONS


def base_model_dir() -> str:
    """The prepared base model directory (``llm_planner_node.models.resolve_model`` when that
    module exists, else the cache path)."""
    try:
        from llm_planner_node.models import resolve_model  # type: ignore[attr-defined]

        return str(resolve_model(BASE_MODEL))
    except Exception as e:  # noqa: BLE001 - fall back to the cache path
        root = os.environ.get("TIMELY_FLEET_MODELS") or os.path.expanduser("~/.cache/timely_fleet/models")
        d = os.path.join(root, BASE_MODEL)
        if not os.path.isfile(os.path.join(d, "config.json")):
            raise SystemExit(f"base model {BASE_MODEL} not found ({e}); prepare it first") from e
        return d


def _log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


_OBJ_RE = re.compile(r"\b(?:scan|goto|go_to|orienting|is_visible|look|pick|push|wipe)\(([a-z0-9_]+)|place\(([a-z0-9_]+), ([a-z0-9_]+)\)")


def plan_objects(plan: str) -> list[str]:
    out: list[str] = []
    for m in _OBJ_RE.finditer(plan):
        out += [g for g in m.groups() if g]
    return list(dict.fromkeys(out))


def batch_objects(rng: random.Random, kind: str, samples: Sequence[PlanSample]) -> tuple[str, ...]:
    used = [o.replace("_", " ") for s in samples for o in plan_objects(s.plan)]
    # a base's known objects are its places (and what it looks for, when its YAML lists objects)
    vocab = {"drone": DRONE_OBJECTS, "base": BASE_PLACES + BASE_THINGS[:8]}.get(kind, ARM_OBJECTS + ARM_TARGETS)
    names = list(dict.fromkeys(used + rng.sample(vocab, rng.randint(1, 5))))
    rng.shuffle(names)
    return tuple(names)


def answer_ids(tok: Any, plan: str, eos_id: int) -> list[int]:
    return list(tok.encode(plan, add_special_tokens=False)) + [eos_id]


def _lcp(seqs: Sequence[Sequence[int]]) -> int:
    n = min(len(s) for s in seqs)
    for i in range(n):
        t = seqs[0][i]
        if any(s[i] != t for s in seqs[1:]):
            return i
    return n


def check_end_token(tok: Any, model_dir: str) -> int:
    """The end-of-turn id the answers end with; it must be the tokenizer's eos and one of
    generation_config's eos ids (vLLM stops there)."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    rendered = tok.apply_chat_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": "PLAN"}],
                                       tokenize=False)
    assert "PLAN<|im_end|>" in rendered, rendered
    assert tok.eos_token_id == end, (tok.eos_token, tok.eos_token_id, end)
    gc = json.loads(Path(model_dir, "generation_config.json").read_text())
    eos = gc.get("eos_token_id")
    eos = eos if isinstance(eos, list) else [eos]
    assert end in eos, f"generation_config eos {eos} lacks <|im_end|>={end}"
    return int(end)


def train(args: argparse.Namespace) -> None:
    import torch
    import transformers
    import peft
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()
    model_dir = base_model_dir()
    _log(f"base model: {model_dir}")
    tok = AutoTokenizer.from_pretrained(model_dir)
    eos_id = check_end_token(tok, model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    n_layers = model.config.num_hidden_layers
    layers = list(range(n_layers - args.lora_layers, n_layers))
    if args.init:  # go on training an adapter (its rank, alpha and layers are its own)
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.init, is_trainable=True)
        layers = list(model.peft_config["default"].layers_to_transform or layers)
        _log(f"continuing from the adapter in {args.init}")
    else:
        cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, target_modules=list(TARGET_MODULES),
                         layers_to_transform=layers, bias="none", task_type="CAUSAL_LM")
        model = get_peft_model(model, cfg)
    model.print_trainable_parameters()
    inner = model.base_model.model  # LlamaForCausalLM
    samples = generate(args.samples, args.seed, scene_fraction=args.scene_fraction,
                       replan_fraction=args.replan_fraction, use_fraction=args.use_fraction,
                       base_fraction=args.base_fraction)
    by_kind = {k: [s for s in samples if s.robot_kind == k] for k in ("drone", "arm", "base")}
    if not by_kind["base"]:
        del by_kind["base"]
    replay = [PlanSample("chat", q, a) for q, a in chat_replay.load()] if args.chat_fraction > 0 else []
    if replay:
        by_kind["chat"] = replay
    _log(f"data: {len(samples)} samples ({len(by_kind['drone'])} drone, {len(by_kind['arm'])} arm, "
         f"{len(by_kind.get('base', ()))} base), "
         f"{len(replay)} chat replay answers")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    warm = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return args.lr * (step + 1) / warm
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm))))

    kind_cache: dict[str, tuple[list[int], Any, int]] = {}  # kind -> (ids, cache, step computed)

    def kind_prefix(kind: str, step: int) -> tuple[list[int], Any]:
        hit = kind_cache.get(kind)
        if hit is None:
            a = build_chat_prompt_ids(tok, "aaa", kind, objects=(), options=PROMPT_OPTIONS)
            b = build_chat_prompt_ids(tok, "zzz", kind, objects=("qqq",), options=PROMPT_OPTIONS)
            ids = a[:_lcp([a, b])]
        else:
            ids = hit[0]
        if hit is None or step - hit[2] >= args.prefix_refresh:
            with torch.no_grad():
                out = inner(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
            kind_cache[kind] = (ids, out.past_key_values, step)
        return kind_cache[kind][0], kind_cache[kind][1]

    pos = {k: 0 for k in by_kind}
    order = {k: list(range(len(v))) for k, v in by_kind.items()}
    for k in order:
        rng.shuffle(order[k])
    losses: list[float] = []
    model.train()
    t_train = time.time()
    ema = None
    for step in range(args.steps):
        if replay and rng.random() < args.chat_fraction:
            kind = "chat"
        elif "base" in by_kind and rng.random() < args.base_fraction:
            kind = "base"
        else:
            kind = "drone" if rng.random() < args.drone_fraction else "arm"
        batch = []
        for _ in range(args.batch):
            if pos[kind] >= len(order[kind]):
                rng.shuffle(order[kind])
                pos[kind] = 0
            batch.append(by_kind[kind][order[kind][pos[kind]]])
            pos[kind] += 1
        objects = batch_objects(rng, kind, batch) if kind != "chat" and rng.random() < args.objects_fraction else ()
        prompts = [build_chat_prompt_ids(tok, s.instruction, kind, objects=objects, options=PROMPT_OPTIONS,
                                         scene=s.scene, done=s.done)
                   for s in batch]
        shared = _lcp(prompts)
        p_ids, p_cache = kind_prefix(kind, step)
        assert all(p[:len(p_ids)] == p_ids for p in prompts) and shared >= len(p_ids)
        # the batch's shared system message: extend the kind's cached prefix (no grad, batch 1)
        cache = copy.deepcopy(p_cache)
        mid = prompts[0][len(p_ids):shared]
        with torch.no_grad():
            if mid:
                inner.model(input_ids=torch.tensor([mid]), past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(len(batch))
        # per-sample suffix: rest of the prompt + answer + <|im_end|>, right-padded
        suf, starts = [], []
        for p, s in zip(prompts, batch):
            rest = p[shared:]
            ans = answer_ids(tok, s.plan, eos_id)
            suf.append(rest + ans)
            starts.append(len(rest))
        T = max(len(x) for x in suf)
        inp = torch.full((len(batch), T), eos_id, dtype=torch.long)
        lab = torch.full((len(batch), T), -100, dtype=torch.long)
        for i, (x, st) in enumerate(zip(suf, starts)):
            inp[i, :len(x)] = torch.tensor(x)
            # hidden at j predicts token j+1: the answer tokens x[st:] are predicted from j = st-1 ..
            # (st >= 1: the suffix always starts with the user turn)
            lab[i, st - 1:len(x) - 1] = torch.tensor(x[st:])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        h = inner.model(input_ids=inp, past_key_values=cache, use_cache=True).last_hidden_state
        sel = lab != -100
        logits = inner.lm_head(h[sel])
        loss = torch.nn.functional.cross_entropy(logits.float(), lab[sel])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        lv = float(loss)
        losses.append(lv)
        ema = lv if ema is None else 0.9 * ema + 0.1 * lv
        done = step + 1
        if done % args.log_every == 0 or done == 1 or done == args.steps:
            el = time.time() - t_train
            sps = done / el
            _log(f"step {done}/{args.steps} loss {lv:.4f} ema {ema:.4f} lr {lr_at(step):.2e} "
                 f"{sps:.3f} steps/s ETA {(args.steps - done) / sps / 60:.1f} min")
        if done % args.save_every == 0 or done == args.steps:
            save(model, args, {
                "complete": done == args.steps, "steps_done": done, "steps": args.steps, "seed": args.seed,
                "data_size": len(samples), "batch": args.batch, "lr": args.lr, "rank": args.rank,
                "alpha": args.alpha, "lora_layers": layers, "target_modules": list(TARGET_MODULES),
                "init": args.init or None, "prefix_refresh": args.prefix_refresh, "objects_fraction": args.objects_fraction,
                "drone_fraction": args.drone_fraction, "scene_fraction": args.scene_fraction,
                "replan_fraction": args.replan_fraction, "use_fraction": args.use_fraction,
                "base_fraction": args.base_fraction, "chat_fraction": args.chat_fraction if replay else 0.0,
                "chat_replay": len(replay),
                "wall_time_s": round(time.time() - t0, 1), "train_time_s": round(time.time() - t_train, 1),
                "final_loss": lv, "final_loss_ema": ema,
                "loss_mean_last_50": sum(losses[-50:]) / len(losses[-50:]),
                "loss_mean_first_10": sum(losses[:10]) / len(losses[:10]),
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                             "peft": peft.__version__},
                "threads": args.threads, "prompt_options": dataclasses.asdict(PROMPT_OPTIONS),
                "end_token": "<|im_end|>", "end_token_id": eos_id,
            })
    _log(f"done in {time.time() - t0:.0f} s")


def save(model: Any, args: argparse.Namespace, info: dict[str, Any]) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = BASE_MODEL
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    readme = out / "README.md"
    if readme.exists():
        readme.unlink()
    (out / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    _log(f"saved adapter to {out} (step {info['steps_done']})")


# ------------------------------------------------------------------------------------------
# quick evaluation: base vs merged, greedy
# ------------------------------------------------------------------------------------------
#: Freshly written instructions (not generator templates verbatim, not the held-out set), with
#: the calls a correct plan must contain, in order (home()/look() around arm picks not required).
EVAL_SET: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("drone", "please go up by seventy centimeters", ("move_up(70)",)),
    ("drone", "head 3 meters forward and then land the aircraft", ("move_forward(300)", "land()")),
    ("drone", "lift off and rotate right 30 degrees", ("takeoff()", "turn_cw(30)")),
    ("drone", "back away 80 cm", ("move_backward(80)",)),
    ("drone", "could you descend by one meter", ("move_down(100)",)),
    ("drone", "turn your body left by 120 degrees", ("turn_ccw(120)",)),
    ("drone", "capture a photograph", ("take_picture()",)),
    ("drone", "keep still for four seconds", ("delay(4000)",)),
    ("drone", "fly over to the sofa", ("goto(sofa)",)),
    ("drone", "where is the laptop? find it", ("scan(laptop)", "goto(laptop)")),
    ("drone", "move sideways to the right 2.5 m", ("move_right(250)",)),
    ("drone", "go up 40 cm, turn around and take a snapshot", ("move_up(40)", "turn_cw(180)", "take_picture()")),
    ("drone", "do a lap around a square with 2 meter sides", ("move_forward(200)", "turn_cw(90)")),
    ("drone", "hop left 60 centimeters twice", ("move_left(60)",)),
    ("drone", "take off, fly forward 1 meter, snap a picture of the door", ("takeoff()", "move_forward(100)", "goto(door)", "take_picture()")),
    ("drone", "rotate anticlockwise a quarter turn then come down 50 cm", ("turn_ccw(90)", "move_down(50)")),
    ("drone", "search the room for my keys", ("scan(keys)", "goto(keys)")),
    ("drone", "ascend 2 m and hover 5 seconds", ("move_up(200)", "delay(5000)")),
    ("arm", "put the orange in the fruit bowl", ("pick(orange)", "place(orange, fruit_bowl)")),
    ("arm", "move the stapler onto the top shelf", ("pick(stapler)", "place(stapler, top_shelf)")),
    ("arm", "push the calculator 4 cm", ("push(calculator, 40)",)),
    ("arm", "nudge the coffee mug by 25 millimeters", ("push(coffee_mug, 25)",)),
    ("arm", "clean the workbench surface", ("wipe(",)),
    ("arm", "release the object", ("open_gripper()",)),
    ("arm", "go back to your home pose", ("home()",)),
    ("arm", "position the tool at x 100, y 200, z 300", ("move_to(100, 200, 300)",)),
    ("arm", "grab the rubber duck", ("pick(rubber_duck)",)),
    ("arm", "pause for 3 seconds", ("wait(3)",)),
    ("arm", "put the fork and the knife in the drawer", ("place(fork, drawer)", "place(knife, drawer)")),
    ("arm", "place the tomato on the cutting board and wipe the counter",
     ("place(tomato, cutting_board)", "wipe(counter)")),
)


def _contains_in_order(plan: str, calls: Sequence[str]) -> bool:
    i = 0
    for c in calls:
        j = plan.find(c, i)
        if j < 0:
            return False
        i = j + len(c)
    return True


_CALL_RE = re.compile(r"[a-z_]+\([^()]*\)")


def _strict(plan: str, calls: Sequence[str], grammatical: bool) -> bool:
    """The right calls in order, grammatical, and no other calls (home() and look(..) aside)."""
    if not (grammatical and _contains_in_order(plan, calls)):
        return False
    got = {c for c in _CALL_RE.findall(plan) if c != "home()" and not c.startswith("look(")}
    want = {c for c in calls if c.endswith(")")}
    extra = {c for c in got if c not in want and not any(c.startswith(w) for w in calls if not w.endswith(")"))}
    return not extra


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.prompts.grammar import GrammarChecker, build_plan_grammar

    torch.set_num_threads(args.threads)
    model_dir = base_model_dir()
    tok = AutoTokenizer.from_pretrained(model_dir)
    eos_id = check_end_token(tok, model_dir)
    checkers = {k: GrammarChecker(build_plan_grammar(DEFAULT_SKILL_SETS[s]))
                for k, s in (("drone", "tello_minispec"), ("arm", "indy7_arm"))}
    results: dict[str, Any] = {}
    for label in (("merged",) if args.merged_only else ("base", "merged")):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if label == "merged":
            model = PeftModel.from_pretrained(model, str(args.out)).merge_and_unload()
        model.eval()
        ok = gram = strict = 0
        rows = []
        t0 = time.time()
        for kind, instr, calls in EVAL_SET:
            ids = build_chat_prompt_ids(tok, instr, kind, options=PROMPT_OPTIONS)
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=60, do_sample=False,
                                     eos_token_id=eos_id, pad_token_id=eos_id)
            plan = tok.decode(out[0, len(ids):], skip_special_tokens=True).strip()
            good = _contains_in_order(plan, calls)
            g = checkers[kind].accepts(plan)
            st = _strict(plan, calls, g)
            ok += good
            gram += g
            strict += st
            rows.append({"kind": kind, "instruction": instr, "plan": plan, "correct": good, "grammar": g,
                         "strict": st})
            if args.verbose:
                print(f"[{label}] {'OK ' if good else 'BAD'} {'S' if st else '-'} {'G' if g else '-'} {instr!r} -> {plan!r}",
                      flush=True)
        results[label] = {"correct": ok, "strict": strict, "grammar_ok": gram, "n": len(EVAL_SET),
                          "seconds": round(time.time() - t0, 1), "rows": rows}
        _log(f"{label}: {ok}/{len(EVAL_SET)} contain the right calls in order, {strict}/{len(EVAL_SET)} strictly "
             f"(grammatical, no other calls), {gram}/{len(EVAL_SET)} grammatical")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", default="", help="an adapter directory to go on training (default: a new adapter)")
    ap.add_argument("--samples", type=int, default=8000)
    ap.add_argument("--batch", type=int, default=6)
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=int, default=32)
    ap.add_argument("--lora-layers", type=int, default=8)
    ap.add_argument("--prefix-refresh", type=int, default=20)
    ap.add_argument("--objects-fraction", type=float, default=0.4)
    ap.add_argument("--drone-fraction", type=float, default=0.6)
    ap.add_argument("--scene-fraction", type=float, default=0.4,
                    help="share of drone samples with a scene after the instruction (the plan is the same)")
    ap.add_argument("--replan-fraction", type=float, default=0.08,
                    help="share of drone draws that are a re-plan's two generations")
    ap.add_argument("--use-fraction", type=float, default=0.0,
                    help="drone samples asking for a detector class by kind or purpose (default none)")
    ap.add_argument("--base-fraction", type=float, default=0.0,
                    help="share of the samples, and of the plan batches, that are a mobile base's (nav2_base; "
                         "the 2026-12-03 run used 0.35); default 0: drones and arms only, as the shipped adapter")
    ap.add_argument("--chat-fraction", type=float, default=0.15,
                    help="share of batches from the chat replay (chat_replay.jsonl: the base model's own chat "
                         "answers, so the adapter keeps talking); 0: plans only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--eval", action="store_true", help="evaluate base vs merged adapter instead of training")
    ap.add_argument("--eval-json", default="", help="with --eval: write the results here")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--merged-only", action="store_true", help="with --eval: skip the base model")
    args = ap.parse_args(argv)
    if args.eval:
        res = evaluate(args)
        if args.eval_json:
            Path(args.eval_json).write_text(json.dumps(res, indent=2) + "\n")
        return 0
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
