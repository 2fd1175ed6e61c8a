"""The project's own tiny planner model: plan corpus, prompt format, training, weights.

* :mod:`.corpus` — instruction -> plan pairs for the 11 LRTrace tasks (TimelyLLM Table 2) plus
  generated variations.
* :mod:`.prompt` — the node's prompt (skill set + guidance + examples + task); the part before the
  task is an identical prefix per robot kind (prefix caching).
* :mod:`.train` — reproducible CPU training of a small Llama-architecture model + tokenizer.
* ``weights/`` — the trained model (safetensors + tokenizer), loadable with transformers and
  vLLM: ``DEFAULT_MODEL_PATH``.
"""

from pathlib import Path

DEFAULT_MODEL_PATH = str(Path(__file__).resolve().parent / "weights")

__all__ = ["DEFAULT_MODEL_PATH"]
