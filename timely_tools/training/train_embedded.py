"""Train the embedded planner model: tokenizer + tiny Llama on the plan corpus (CPU, minutes).

    python -m timely_tools.training.train_embedded [--out DIR] [--steps N] [--threads 2]

Reproducible: fixed seeds for the corpus, the tokenizer and torch; one process. Steps:

1. corpus = :func:`generate_corpus` (11 LRTrace tasks, canonical plans repeated, variations)
   + :func:`generate_chat_corpus` (chat robot: "tell a <mood> story about <subject>" -> a 3-5
   sentence story); each training text is ``build_prompt(instruction, kind) + " " + plan + EOS``.
2. tokenizer: byte-level BPE (HF ``tokenizers``) trained on the corpus texts; specials
   ``<pad>`` ``<s>`` ``</s>``; BOS is added by the post-processor. Saved as a fast tokenizer
   (``tokenizer.json`` + ``tokenizer_config.json``) loadable by ``AutoTokenizer`` and vLLM.
3. model: ``LlamaForCausalLM`` — hidden 128, 2 heads (head_dim 64, what vLLM CPU supports),
   4 layers, MLP 384, tied embeddings, 1024 positions. Loss only on plan tokens + EOS.
   Each batch holds one robot kind (drone / arm / chat, ``--chat-fraction`` of the batches chat).
4. greedy evaluation on the 11 canonical prompts, the 3 canonical chat prompts and on held-out
   variations; the weights
   (safetensors), config.json, generation_config.json and ``training_report.json`` go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

from llm_planner_node.planner_model import DEFAULT_MODEL_PATH
from llm_planner_node.planner_model.corpus import (PlanExample, canonical_chat_examples, canonical_examples, generate_chat_corpus,
                     generate_corpus, held_out_chat_variations, held_out_variations, segmenter_for)
from llm_planner_node.prompts.prompt import build_prompt, prompt_prefix

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]
KINDS = ("drone", "arm", "chat")
#: a chat answer is valid when the chat sentence segmenter cuts at least this many sentences
MIN_CHAT_SENTENCES = 3


def training_text(ex: PlanExample) -> tuple[str, str]:
    """(prompt, completion) — the completion is what the model must generate before EOS."""
    return build_prompt(ex.instruction, ex.robot_kind), " " + ex.plan


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    return fast


def build_model(tokenizer, *, layers: int, hidden: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        head_dim=64,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    return LlamaForCausalLM(cfg)


def encode_examples(tokenizer, examples: list[PlanExample]) -> list[tuple[list[int], int]]:
    """(ids, n_prompt) per example: ids = <s> prompt completion </s>."""
    out = []
    for ex in examples:
        prompt, completion = training_text(ex)
        p_ids = tokenizer(prompt)["input_ids"]
        full = tokenizer(prompt + completion)["input_ids"] + [tokenizer.eos_token_id]
        if full[: len(p_ids)] != p_ids:  # BPE merged across the boundary: never for our format
            raise RuntimeError(f"prompt/completion tokenisation boundary mismatch for {ex.instruction!r}")
        out.append((full, len(p_ids)))
    return out


def greedy_plan(model, tokenizer, instruction: str, robot_kind: str, max_new_tokens: int = 160) -> str:
    import torch

    ids = tokenizer(build_prompt(instruction, robot_kind), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()


def plan_is_valid(plan: str, robot_kind: str) -> bool:
    from llm_planner_node.segmenters import PlanError, get_segmenter, segment_all

    try:
        segs = segment_all(get_segmenter(segmenter_for(robot_kind)), [plan])
        return len(segs) >= (MIN_CHAT_SENTENCES if robot_kind == "chat" else 1)
    except PlanError:
        return False


def evaluate(model, tokenizer, examples: list[PlanExample]) -> dict:
    model.eval()
    rows = []
    for ex in examples:
        got = greedy_plan(model, tokenizer, ex.instruction, ex.robot_kind)
        rows.append({
            "task_id": ex.task_id, "instruction": ex.instruction, "expected": ex.plan, "got": got,
            "exact": got == ex.plan, "valid": plan_is_valid(got, ex.robot_kind),
        })
    n = max(1, len(rows))
    return {
        "n": len(rows),
        "exact": sum(r["exact"] for r in rows) / n,
        "valid": sum(r["valid"] for r in rows) / n,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_MODEL_PATH)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--n-per-task", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arm-fraction", type=float, default=0.5,
                    help="share of batches drawn from arm examples (longer plans need more steps)")
    ap.add_argument("--canonical-repeats", type=int, default=8)
    ap.add_argument("--chat-n", type=int, default=400, help="distinct chat (story) variations in the corpus")
    ap.add_argument("--chat-fraction", type=float, default=0.25, help="share of batches drawn from chat examples")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: 2 threads oversubscribe a shared 2-core machine)")
    ap.add_argument("--heldout", type=int, default=5, help="held-out variations per task to evaluate")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    # import every segmenter now: evaluation at the end must not pick up half-edited modules
    from llm_planner_node.segmenters import get_segmenter

    for name in ("minispec", "arm", "chat-sentence"):
        get_segmenter(name)
    t0 = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    corpus = generate_corpus(n_per_task=args.n_per_task, seed=args.seed, canonical_repeats=args.canonical_repeats)
    if args.chat_n > 0:
        corpus = corpus + generate_chat_corpus(args.chat_n, seed=args.seed, canonical_repeats=args.canonical_repeats)
    texts = [prompt_prefix(k) for k in KINDS] + [
        p + c for p, c in (training_text(ex) for ex in corpus)
    ]
    tokenizer = train_tokenizer(texts, args.vocab)
    data = encode_examples(tokenizer, corpus)
    lens = [len(ids) for ids, _ in data]
    print(f"corpus {len(corpus)} examples, vocab {len(tokenizer)}, tokens/example mean {np.mean(lens):.0f} "
          f"max {max(lens)}, plan tokens mean {np.mean([len(i) - p for i, p in data]):.0f}", flush=True)

    model = build_model(tokenizer, layers=args.layers, hidden=args.hidden, seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return args.lr * (step + 1) / warm
        return args.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm)))

    # The prompt prefix (skills + guidance + examples) is identical for all examples of one robot
    # kind: each batch holds one kind, the prefix runs once and its KV cache (with gradients) is
    # shared by the batch. Loss and gradients equal the plain full-sequence computation.
    prefix_ids = {k: tokenizer(prompt_prefix(k))["input_ids"] for k in KINDS}
    by_kind: dict[str, list[int]] = {k: [] for k in KINDS}
    for i, ex in enumerate(corpus):
        ids, _ = data[i]
        if ids[: len(prefix_ids[ex.robot_kind])] != prefix_ids[ex.robot_kind]:
            raise RuntimeError("prompt prefix is not a token prefix of the prompt")
        by_kind[ex.robot_kind].append(i)
    rng = random.Random(args.seed)
    queues: dict[str, list[int]] = {k: [] for k in KINDS}
    pad = tokenizer.pad_token_id
    model.train()
    loss_ema = None
    ce = torch.nn.functional.cross_entropy
    for step in range(args.steps):
        if by_kind["chat"] and rng.random() < args.chat_fraction:
            kind = "chat"
        else:
            kind = "arm" if rng.random() < args.arm_fraction else "drone"
        q = queues[kind]
        if len(q) < args.batch:
            q.extend(rng.sample(by_kind[kind], len(by_kind[kind])))
        idx = q[: args.batch]
        del q[: args.batch]
        batch = [data[i] for i in idx]
        P = len(prefix_ids[kind])
        L = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), L), pad, dtype=torch.long)
        labels = torch.full((len(batch), L), -100, dtype=torch.long)
        attn = torch.zeros((len(batch), L), dtype=torch.long)
        for b, (ids, n_prompt) in enumerate(batch):
            t = torch.tensor(ids)
            input_ids[b, : len(ids)] = t
            attn[b, : len(ids)] = 1
            labels[b, n_prompt : len(ids)] = t[n_prompt:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        pre = model(input_ids=torch.tensor([prefix_ids[kind]]), use_cache=True)
        cache = pre.past_key_values
        cache.batch_repeat_interleave(len(batch))
        logits = model(input_ids=input_ids[:, P:], attention_mask=attn, past_key_values=cache).logits
        # logits predicting tokens P..L-1: last prefix position, then suffix positions but the last
        pred = torch.cat([pre.logits[:, -1:].expand(len(batch), 1, -1), logits[:, :-1]], dim=1)
        loss = ce(pred.reshape(-1, pred.shape[-1]), labels[:, P:].reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if loss_ema is None else 0.9 * loss_ema + 0.1 * loss.item()
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step:4d}/{args.steps} loss {loss_ema:.4f} lr {lr_at(step):.2e} "
                  f"elapsed {time.time() - t0:.0f}s", flush=True)
    train_s = time.time() - t0

    canon = evaluate(model, tokenizer, canonical_examples())
    seen = {ex.instruction for ex in corpus}
    held = evaluate(model, tokenizer, held_out_variations(args.heldout, exclude=seen)) if args.heldout else None
    for r in canon["rows"]:
        print(f"task {r['task_id']:2d} exact={r['exact']} valid={r['valid']}: {r['got']}", flush=True)
    print(f"canonical: exact {canon['exact']:.2f} valid {canon['valid']:.2f}", flush=True)
    if held:
        print(f"held-out variations: exact {held['exact']:.2f} valid {held['valid']:.2f} (n={held['n']})", flush=True)
    chat = chat_held = None
    if args.chat_n > 0:
        chat = evaluate(model, tokenizer, canonical_chat_examples())
        for r in chat["rows"]:
            print(f"chat exact={r['exact']} valid={r['valid']}: {r['got']}", flush=True)
        chat_held = evaluate(model, tokenizer, held_out_chat_variations(args.heldout * 2, exclude=seen))
        print(f"chat canonical: exact {chat['exact']:.2f} valid {chat['valid']:.2f}; held-out: exact "
              f"{chat_held['exact']:.2f} valid {chat_held['valid']:.2f} (n={chat_held['n']})", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.do_sample = False
    model.generation_config.max_new_tokens = 192
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    # portable class name: transformers 5 writes "TokenizersBackend", unknown to transformers 4.x
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    tc_path.write_text(json.dumps(tc, indent=2) + "\n")
    report = {
        "command": "python -m timely_tools.training.train_embedded " + " ".join(argv if argv is not None else sys.argv[1:]),
        "args": vars(args),
        "corpus_examples": len(corpus),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "final_loss_ema": loss_ema,
        "train_seconds": round(train_s, 1),
        "torch": torch.__version__,
        "canonical": {k: v for k, v in canon.items()},
        "held_out": held,
        "chat_canonical": chat,
        "chat_held_out": chat_held,
    }
    (out / "training_report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"saved to {out} in {time.time() - t0:.0f}s total", flush=True)
    ok = canon["valid"] == 1.0 and (chat is None or chat["valid"] == 1.0)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
