"""Hand-written fakes for tests of code that uses the retriever (ours and yours).

Why shipped: the Memory and Evidence layers, and users' own agents, need to assert "each item was
embedded once" or pin exact similarities without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .embeddings import Embedder, HashingEmbedder

__all__ = ["RecordingEmbedder", "TableEmbedder"]


@dataclass
class RecordingEmbedder:
    """Wraps an embedder (a `HashingEmbedder` by default) and records every batch it is asked for."""

    inner: Embedder = field(default_factory=HashingEmbedder)
    calls: list[list[str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def texts(self) -> list[str]:
        """Every text embedded, in call order (repeats show double work)."""
        return [t for batch in self.calls for t in batch]

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


@dataclass(frozen=True)
class TableEmbedder:
    """Vectors looked up from a table (normalised here); unknown texts map to `default` or zeros."""

    table: Mapping[str, Sequence[float]]
    default: Sequence[float] | None = None
    name: str = "table"

    def embed(self, texts: list[str]) -> np.ndarray:
        dim = len(self.default) if self.default is not None else len(next(iter(self.table.values())))
        rows = []
        for text in texts:
            vector = self.table.get(text, self.default if self.default is not None else [0.0] * dim)
            v = np.asarray(vector, dtype=np.float32)
            norm = float(np.linalg.norm(v))
            rows.append(v / norm if norm else v)
        return np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
