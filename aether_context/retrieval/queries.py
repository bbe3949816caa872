"""The vectors of the last search queries, kept apart from the documents' vectors.

Why: a call ranks Evidence and Memory for the same question, each layer in its own index, and a tool
loop's calls ask it again; embedding it is the costliest step of a search (about 8 ms for an int8
MiniLM question on one core). One `QueryVectors` per `EmbeddingCache`, so every index sharing that
cache shares them: a question is embedded once. Never persisted, never a row of the cache's matrix
(the documents' matrix-vector product keeps its shape). Each of the last questions' products over that
matrix is kept too (`product`): rows never move, so a later search multiplies only the rows added since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

__all__ = ["QueryVectors"]

PRODUCTS = 2  # queries whose products over the matrix are kept (a turn's question, and the one before it)


class QueryVectors:
    """The last `size` queries' vectors by text hash (least recently used dropped first). Thread-safe;
    a query is embedded outside the lock, so a search never waits for another query's embedding, and
    once: a thread asking for a query another thread is embedding waits for that vector."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray], size: int = 256):
        self._embed = embed
        self._size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._embedding: dict[str, threading.Event] = {}  # queries being embedded now, by key
        self._products: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()  # key -> (vector, product)
        self._lock = threading.Lock()

    def vector(self, key: str, query: str) -> np.ndarray:
        """The vector of `query` (`key`: its text hash), embedded on the first ask."""
        while True:
            with self._lock:
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                    return vector
                running = self._embedding.get(key)
                if running is None:
                    self._embedding[key] = done = threading.Event()
                    break
            running.wait()  # then found, or embedded here if that thread failed
        try:
            vector = np.asarray(self._embed([query]), dtype=np.float32)[0]  # the same bits whichever thread embeds
            with self._lock:
                self._vectors[key] = vector
                self._vectors.move_to_end(key)
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
            return vector
        finally:
            with self._lock:
                del self._embedding[key]
            done.set()

    def product(self, key: str, vector: np.ndarray, matrix: np.ndarray, *, start: bool) -> "np.ndarray | None":
        """`matrix @ vector`, the fast score of every cached text (any float32 product's bits serve: they only
        narrow the rows exact cosines score, `cuts.NEAR`), extended from the last product of this query, which
        covers the rows the matrix had then (rows never move): a search over a grown matrix (a compaction's, the
        turns it folds embedded since) multiplies its new rows only. None when none is held and not `start`."""
        with self._lock:
            held = self._products.get(key)
        if held is not None and held[0] is vector and len(held[1]) <= len(matrix):
            done = held[1]
            product = done if len(done) == len(matrix) else np.concatenate([done, matrix[len(done):] @ vector])
        elif start:
            product = matrix @ vector
        else:
            return None
        with self._lock:
            self._products[key] = (vector, product)
            self._products.move_to_end(key)
            while len(self._products) > PRODUCTS:
                self._products.popitem(last=False)
        return product
