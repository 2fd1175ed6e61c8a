"""What a plan grammar costs vLLM's engine core per decoded token.

With structured outputs on, vLLM's engine core asks xgrammar, at every decoding step and for
every constrained request, for the mask of the tokens the grammar allows next
(``GrammarMatcher.fill_next_token_bitmask``) and then advances the matcher by the sampled token
(``accept_token``). On a CPU host whose engine core shares a core with the model's worker (the
node's placement, engines/cpu_placement.py) this is paid in series with the forward pass, so a
grammar that xgrammar masks slowly slows every constrained burst.

:func:`matcher_cost` replays the canonical plans of each robot kind (planner_model/corpus.py),
tokenised by the model's tokenizer, through a matcher of the grammar the engine sends for that
kind (the skill set's resume grammar at the plan's start, :func:`~llm_planner_node.prompts.grammar.derivatives_for`)
and times the two calls per token. No vLLM, no model weights beyond the tokenizer.

``timely-fleet bench grammar`` prints it (``--matcher-only``: nothing else, in seconds).
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _tokenizer(model: str) -> tuple[Any, int]:
    from transformers import AutoConfig, AutoTokenizer

    from llm_planner_node.engines.vllm_engine import resolve_model_path

    path = resolve_model_path(model)
    tok = AutoTokenizer.from_pretrained(path)
    try:
        vocab = int(AutoConfig.from_pretrained(path).vocab_size)
    except (OSError, ValueError, AttributeError):
        vocab = len(tok)
    return tok, vocab


def plans_by_kind() -> dict[str, list[str]]:
    """The canonical plans of each robot kind (drone, arm, chat)."""
    from llm_planner_node.planner_model.corpus import canonical_chat_examples, canonical_examples

    out: dict[str, list[str]] = {}
    for ex in canonical_examples() + canonical_chat_examples():
        out.setdefault(ex.robot_kind, []).append(ex.plan)
    return out


def _replay(matcher: Any, ids: list[int], bitmask: Any) -> list[float] | None:
    """Seconds of mask fill + accept per token of ``ids`` through ``matcher`` (a fresh one per
    replay, as vLLM has one per request), or None if the grammar refuses a token."""
    times: list[float] = []
    for token in ids:
        t = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        ok = matcher.accept_token(token)
        times.append(time.perf_counter() - t)
        if not ok:
            return None
    return times


def matcher_cost(model: str = "embedded", plans: dict[str, list[str]] | None = None,
                 repeats: int = 5) -> dict[str, dict[str, Any]]:
    """Per robot kind: the grammar's compile time and the microseconds per token of
    ``fill_next_token_bitmask`` + ``accept_token`` over ``plans`` (default: the canonical plans),
    each plan replayed ``repeats`` times through a fresh matcher (as vLLM has one per request);
    ``tokens`` counts each plan's tokens once. ``rejected`` lists plans the grammar refused
    (expected empty); they are not timed."""
    import xgrammar as xg

    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
    from llm_planner_node.prompts.grammar import derivatives_for

    tok, vocab = _tokenizer(model)
    info = xg.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
    compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    bitmask = xg.allocate_token_bitmask(1, info.vocab_size)
    result: dict[str, dict[str, Any]] = {}
    for kind, kind_plans in (plans or plans_by_kind()).items():
        ebnf = derivatives_for(DEFAULT_SKILL_SET_FOR_KIND[kind], kind).state().ebnf()
        t = time.perf_counter()
        compiled = compiler.compile_grammar(ebnf)
        compile_s = time.perf_counter() - t
        per_token: list[float] = []
        rejected: list[str] = []
        tokens = 0
        for plan in kind_plans:
            ids = tok.encode(plan, add_special_tokens=False)
            replays = [_replay(xg.GrammarMatcher(compiled), ids, bitmask) for _ in range(max(1, repeats))]
            if any(r is None for r in replays):
                rejected.append(plan)
                continue
            tokens += len(ids)
            per_token += [x for r in replays for x in r]
        us = [1e6 * x for x in per_token]
        result[kind] = {"skill_set": DEFAULT_SKILL_SET_FOR_KIND[kind], "plans": len(kind_plans),
                        "tokens": tokens, "compile_ms": 1e3 * compile_s, "grammar_chars": len(ebnf),
                        "mean_us": statistics.fmean(us) if us else None,
                        "median_us": statistics.median(us) if us else None,
                        "max_us": max(us) if us else None, "rejected": rejected}
    return result


def report_lines(cost: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["grammar matcher cost per token (xgrammar mask fill + accept, as vLLM's engine core pays it "
             "for every constrained request at every step; canonical plans):"]
    for kind, c in cost.items():
        if c["mean_us"] is None:
            lines.append(f"  {kind:<6} {c['skill_set']:<15} no tokens")
            continue
        lines.append(f"  {kind:<6} {c['skill_set']:<15} mean {c['mean_us']:6.1f} us, median {c['median_us']:5.1f} us, "
                     f"max {c['max_us']:6.1f} us over {c['tokens']} tokens; compile {c['compile_ms']:.0f} ms"
                     + (f"; REJECTED {len(c['rejected'])} plan(s)" if c["rejected"] else ""))
    return lines
