"""The embedded planner model: tokenizer, greedy plans for the 11 tasks, token-level segmentation.

Runs with transformers on CPU (a ~1M-parameter model: seconds). The vLLM variant runs a small
script in a subprocess (vLLM spawns processes) and is skipped when vllm is not importable.
"""

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND, DEFAULT_SKILL_SETS
from llm_planner_node.planner_model import DEFAULT_MODEL_PATH
from llm_planner_node.planner_model.corpus import (canonical_chat_examples, canonical_examples, generate_corpus,
                                                   segmenter_for)
from llm_planner_node.prompts.prompt import build_prompt, prompt_prefix
from llm_planner_node.segmenters import get_segmenter, segment_all
from llm_planner_node.segmenters.detok import IncrementalDetokenizer
from timely_robot.minispec import statement_boundaries

W = Path(DEFAULT_MODEL_PATH)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(W)


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(W).eval()


def test_weights_are_shipped_and_small():
    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (W / f).is_file(), f
    size = sum(p.stat().st_size for p in W.iterdir())
    assert size < 10 * 2**20
    cfg = json.loads((W / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 64 == cfg.get("head_dim", 64)


def test_tokenizer_specials_and_prefix(tokenizer):
    assert tokenizer.bos_token == "<s>" and tokenizer.eos_token == "</s>" and tokenizer.pad_token == "<pad>"
    ids = tokenizer("look for the cat")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    for kind in ("drone", "arm"):
        pre = tokenizer(prompt_prefix(kind))["input_ids"]
        full = tokenizer(build_prompt("look for the cat", kind))["input_ids"]
        assert full[: len(pre)] == pre  # prefix caching: identical leading token ids
        assert len(full) < 400


def _arm_ends(plan):
    return [i + 1 for i, c in enumerate(plan) if c == ";"]


def test_token_by_token_segmentation_matches_grammar(tokenizer):
    plans = sorted({(e.robot_kind, e.plan) for e in generate_corpus() + canonical_examples()})
    for kind, plan in plans:
        ids = tokenizer(" " + plan, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        det = IncrementalDetokenizer(tokenizer)
        seg = get_segmenter(segmenter_for(kind))
        segs = []
        for t in ids:
            segs.extend(seg.feed(det.push(t)))
        segs.extend(seg.finish())
        assert det.text == " " + plan
        ss = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[kind]]
        ref = statement_boundaries(plan, ss) if kind == "drone" else _arm_ends(plan)
        assert [s.end - 1 for s in segs] == ref, plan  # offsets include the leading space


def _greedy(model, tokenizer, instruction, kind):
    import torch

    ids = tokenizer(build_prompt(instruction, kind), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=192, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    new = out[0, ids.shape[1]:].tolist()
    return new, tokenizer.decode(new, skip_special_tokens=True)


@pytest.mark.parametrize("ex", canonical_examples(), ids=lambda e: f"task{e.task_id}")
def test_greedy_plans_for_the_11_tasks_parse_and_pass_whitelist(model, tokenizer, ex):
    new, text = _greedy(model, tokenizer, ex.instruction, ex.robot_kind)
    assert new[-1] == tokenizer.eos_token_id, "plan must end with EOS"
    ss = DEFAULT_SKILL_SETS[DEFAULT_SKILL_SET_FOR_KIND[ex.robot_kind]]
    segs = segment_all(get_segmenter(segmenter_for(ex.robot_kind), ss), [text])
    assert segs and all(c.name in ss.names() for s in segs for c in s.calls)
    assert text.strip() == ex.plan  # the embedded model reproduces the canonical plan


@pytest.mark.parametrize("ex", canonical_chat_examples(), ids=lambda e: e.instruction.split()[-1])
def test_greedy_chat_story_has_at_least_three_sentences(model, tokenizer, ex):
    """Chat robot: the story for a canonical chat instruction is >= 3 sentences, each cut by the
    chat sentence segmenter fed token by token (as the engine does)."""
    new, text = _greedy(model, tokenizer, ex.instruction, "chat")
    assert new[-1] == tokenizer.eos_token_id, "the story must end with EOS"
    det = IncrementalDetokenizer(tokenizer)
    seg = get_segmenter("chat")
    segs = []
    for t in new[:-1]:
        segs.extend(seg.feed(det.push(t)))
    segs.extend(seg.finish())
    assert len(segs) >= 3, text
    assert all(s.text.strip()[-1] in ".!?" for s in segs), [s.text for s in segs]
    assert all(c.name == "say" for s in segs for c in s.calls)
    assert " ".join(s.text.strip() for s in segs) == text.strip()
    assert 30 <= len(text.split()) <= 80


VLLM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM, SamplingParams
    from llm_planner_node.planner_model.corpus import canonical_examples
    from llm_planner_node.prompts.prompt import build_prompt

    if __name__ == "__main__":
        llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=512, block_size=32,
                  enforce_eager=True, gpu_memory_utilization=0.5, seed=0)
        ex = canonical_examples()
        outs = llm.generate([build_prompt(e.instruction, e.robot_kind) for e in ex],
                            SamplingParams(temperature=0.0, max_tokens=192))
        print("RESULT" + json.dumps([o.outputs[0].text for o in outs]))
    """
)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_loads_model_and_gives_same_greedy_plans(tmp_path):
    script = tmp_path / "run_vllm.py"
    script.write_text(VLLM_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, str(script), str(W)], capture_output=True, text=True, timeout=500,
                       cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root), "VLLM_CPU_KVCACHE_SPACE": "1"})
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT")]
    assert p.returncode == 0 and line, p.stderr[-3000:]
    texts = json.loads(line[0][len("RESULT"):])
    assert [t.strip() for t in texts] == [e.plan for e in canonical_examples()]


class _DecodeOnly:
    """The tokenizer seen through ``decode`` only: the detokeniser's Python window path."""

    def __init__(self, tok) -> None:
        self.decode = tok.decode


def _pieces(tok, ids):
    det = IncrementalDetokenizer(tok)
    return [det.push(t) for t in ids], det


def test_decode_stream_and_window_paths_emit_the_same_pieces_on_the_corpus(tokenizer):
    """The Rust DecodeStream path (fast tokenizers) and the Python window path emit the same
    text piece for piece on every corpus plan, and the whole equals tokenizer.decode."""
    assert IncrementalDetokenizer(tokenizer)._stream is not None
    assert IncrementalDetokenizer(_DecodeOnly(tokenizer))._stream is None
    plans = sorted({e.plan for e in generate_corpus() + canonical_examples()})
    for plan in plans[:400]:
        ids = tokenizer(" " + plan, add_special_tokens=False)["input_ids"]
        fast, det = _pieces(tokenizer, ids)
        slow, _ = _pieces(_DecodeOnly(tokenizer), ids)
        assert fast == slow, plan
        assert det.text == tokenizer.decode(ids, skip_special_tokens=True)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab ,;{}()_=?->0123456789") + ["é", "→", "😀", "中", "\n"]),
                    min_size=1, max_size=40),
       cut=st.integers(min_value=0, max_value=3))
def test_decode_stream_holds_back_split_characters_like_the_window(tokenizer, text, cut):
    """Multi-byte characters split over byte tokens: both paths hold back the incomplete
    character and emit the same pieces; nothing is lost or emitted twice."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = ids[: len(ids) - cut] if cut < len(ids) else ids
    fast, det = _pieces(tokenizer, ids)
    slow, _ = _pieces(_DecodeOnly(tokenizer), ids)
    assert fast == slow
    full = tokenizer.decode(ids, skip_special_tokens=True)
    assert full.startswith(det.text) and (det.text == full or full.endswith("\ufffd"))
