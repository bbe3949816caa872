"""Hybrid retrieval for the Memory and Evidence layers (BM25 + embeddings, fused, MMR).

A `Retriever` keeps one incremental index per session and layer, so items are analysed and
embedded once, when they first appear; each search runs over exactly the current candidate pool
(items that left the pool are removed, cheap to re-add: vectors are cached by content), which
keeps a pack a function of its inputs.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Callable, Iterable, Sequence

from ..retrieval import Document, EmbeddingCache, HybridIndex, RetrievalResult, RetrievalSettings
from ..retrieval.embeddings import Embedder, SentenceTransformerEmbedder

__all__ = ["Retriever", "default_retriever", "use_default_embedder"]

logger = logging.getLogger(__name__)


class Retriever:
    """Ranks candidates with hybrid retrieval; one embedding cache shared by every index."""

    def __init__(self, settings: RetrievalSettings | None = None, *, embedder: Embedder | None = None,
                 max_indexes: int = 256):
        self.settings = settings or RetrievalSettings()
        s = self.settings
        embedder = embedder or SentenceTransformerEmbedder.from_settings(s)
        self.cache = EmbeddingCache(embedder, url=s.embedding_cache_url)
        self._warming: threading.Thread | None = None
        self._indexes: OrderedDict[tuple[str, str], HybridIndex] = OrderedDict()
        self._max = max_indexes

    def warm_up(self) -> None:
        """Load the embedding model on a background thread, so the first pack does not wait for
        the import (seconds); a no-op for embedders without a model to load."""
        warm = getattr(self.cache.embedder, "warm_up", None)
        if warm is None or self._warming is not None:
            return

        def run() -> None:
            try:
                warm()
            except Exception:  # the first real embedding will raise it where it can be handled
                logger.debug("aether-context: embedding model warm-up failed", exc_info=True)

        self._warming = threading.Thread(target=run, name="aether-embedder-warm-up", daemon=True)
        self._warming.start()

    def _index(self, namespace: str, layer: str) -> HybridIndex:
        key = (namespace, layer)
        index = self._indexes.get(key)
        if index is None:
            index = HybridIndex(self.settings, cache=self.cache)
            self._indexes[key] = index
            while len(self._indexes) > self._max:
                self._indexes.popitem(last=False)
        self._indexes.move_to_end(key)
        return index

    def rank(self, namespace: str, layer: str, query: str, documents: Sequence[Document], *, k: int,
             count_tokens: Callable[[str], int], now: float | None, exclude: Iterable[str] = ()) -> RetrievalResult:
        """The best `k` of `documents` for `query`, in pick order, with their scores and signals."""
        index = self._index(namespace, layer)
        wanted = {d.id for d in documents}
        stale = [d for d in list(index._ids) if d not in wanted and d in index]
        if stale:
            index.remove(stale)
        index.add(documents)
        if not documents or k < 1:
            return RetrievalResult(query, (), {"retrieval_hit_rate": 0.0, "similarity": 0.0, "freshness": 0.0})
        return index.search(query, k=k, count_tokens=count_tokens, now=now, exclude=exclude)


_DEFAULT: dict[str, Retriever] = {}
_DEFAULT_EMBEDDER: list[Embedder] = []


def use_default_embedder(embedder: Embedder | None) -> None:
    """Process-wide embedder for retrievers built without one (None: the profile's model).

    For test suites and installs without torch, e.g. `use_default_embedder(HashingEmbedder())`.
    """
    _DEFAULT_EMBEDDER[:] = [embedder] if embedder is not None else []
    _DEFAULT.clear()


def default_retriever(profile) -> Retriever:
    """One shared retriever per retrieval settings (replay, repack and the plugin reuse its embeddings)."""
    key = profile.retrieval.model_dump_json()
    if key not in _DEFAULT:
        _DEFAULT[key] = Retriever(profile.retrieval, embedder=_DEFAULT_EMBEDDER[0] if _DEFAULT_EMBEDDER else None)
    return _DEFAULT[key]
