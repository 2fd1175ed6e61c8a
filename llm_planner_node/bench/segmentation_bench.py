"""Segmenter cost per token (TimelyLLM Table 4's stop-checking overhead; target < 20 us/token).

    timely-fleet bench segmentation [--repeat N] [--json PATH] [--model PATH]

For each segmenter (minispec, arm, chat-sentence, chat-paragraph) the plan corpus (or a
synthetic story for chat) is split into the pieces an engine would feed: the embedded planner
model's tokenizer decoded incrementally (falls back to 3-character chunks when the tokenizer
cannot be loaded). Only ``feed``/``finish`` are timed (detokenisation is done beforehand).
Reports microseconds per token (best and median of ``--repeat`` passes; the target is judged on
the best pass, timeit-style, because the machine may be shared) and per segment.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

TARGET_US_PER_TOKEN = 20.0

_STORY = (
    "The robot rolled into the kitchen at 7.30 a.m. and stopped. Dr. Lee had asked it to find the "
    "cat, e.g. by checking under the table first! Was the cat hiding again? It scanned the room "
    "slowly, turning 45 degrees at a time.\n\nNothing moved. The U.S. made vacuum hummed in the "
    "corner, and a cup of tea cooled on the counter. \"Where are you?\" it asked quietly.\n\n"
    "Finally, a tail appeared behind the sofa. The robot logged the position, took a picture and "
    "sent it to Dr. Lee... Mission complete. "
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="timed passes over the inputs (default 5)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--model", metavar="PATH", default=None,
                        help="tokenizer to split text into tokens (default: the embedded planner model)")
    parser.add_argument("--chars-per-token", type=int, default=3,
                        help="chunk size when no tokenizer is available (default 3)")


def _pieces(text: str, tokenizer: Any, chunk: int) -> list[str]:
    if tokenizer is None:
        return [text[i : i + chunk] for i in range(0, len(text), chunk)]
    from ..segmenters.detok import IncrementalDetokenizer

    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    d = IncrementalDetokenizer(tokenizer)
    out = [d.push(t) for t in ids]
    if "".join(out) != text:  # pragma: no cover - byte-level BPE round-trips
        raise RuntimeError("tokenizer does not round-trip the text")
    return out


def _load_tokenizer(path: str | None) -> tuple[Any, str]:
    try:
        from transformers import AutoTokenizer

        from ..planner_model import DEFAULT_MODEL_PATH

        p = path or DEFAULT_MODEL_PATH
        return AutoTokenizer.from_pretrained(p), p
    except Exception as e:  # noqa: BLE001 - fall back to fixed-size chunks
        return None, f"unavailable ({type(e).__name__}); {e}"[:200]


def measure(kind: str, inputs: list[list[str]], repeat: int) -> dict:
    from ..segmenters import get_segmenter

    n_tokens = sum(len(p) for p in inputs)
    n_segments = 0
    times = []
    for _ in range(repeat):
        segs = 0
        t0 = time.perf_counter()
        for pieces in inputs:
            s = get_segmenter(kind)
            for p in pieces:
                segs += len(s.feed(p))
            segs += len(s.finish())
        times.append(time.perf_counter() - t0)
        n_segments = segs
    best = min(times)
    med = statistics.median(times)
    return {
        "segmenter": kind,
        "inputs": len(inputs),
        "tokens": n_tokens,
        "segments": n_segments,
        "segments_per_input": n_segments / max(1, len(inputs)),
        "us_per_token_median": 1e6 * med / max(1, n_tokens),
        "us_per_token_best": 1e6 * best / max(1, n_tokens),
        "us_per_segment_median": 1e6 * med / max(1, n_segments),
        # best of the repeats (timeit convention): the machine may be shared with other work
        "meets_target": 1e6 * best / max(1, n_tokens) < TARGET_US_PER_TOKEN,
    }


def run(args: argparse.Namespace) -> int:
    from ..planner_model.corpus import canonical_examples, generate_corpus

    tok, tok_src = _load_tokenizer(getattr(args, "model", None))
    chunk = getattr(args, "chars_per_token", 3)
    corpus = generate_corpus() + canonical_examples()
    drone = sorted({e.plan for e in corpus if e.robot_kind == "drone"})
    arm = sorted({e.plan for e in corpus if e.robot_kind == "arm"})
    chat = [_STORY * 3] * 20
    cases = {
        "minispec": [_pieces(p, tok, chunk) for p in drone],
        "arm": [_pieces(p, tok, chunk) for p in arm],
        "chat-sentence": [_pieces(t, tok, chunk) for t in chat],
        "chat-paragraph": [_pieces(t, tok, chunk) for t in chat],
    }
    rows = [measure(k, v, max(1, args.repeat)) for k, v in cases.items()]
    print(f"segmenter cost per token (tokenizer: {tok_src}; target < {TARGET_US_PER_TOKEN:g} us/token)")
    print(f"{'segmenter':<16}{'inputs':>8}{'tokens':>9}{'segments':>10}{'us/tok best':>12}{'us/tok med':>11}"
          f"{'us/segment':>12}  ok")
    for r in rows:
        print(f"{r['segmenter']:<16}{r['inputs']:>8}{r['tokens']:>9}{r['segments']:>10}"
              f"{r['us_per_token_best']:>12.2f}{r['us_per_token_median']:>11.2f}{r['us_per_segment_median']:>12.1f}  "
              f"{'yes' if r['meets_target'] else 'NO'}")
    result = {"benchmark": "segmentation", "tokenizer": tok_src, "target_us_per_token": TARGET_US_PER_TOKEN,
              "repeat": args.repeat, "segmenters": rows}
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0 if all(r["meets_target"] for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
