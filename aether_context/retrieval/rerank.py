"""The rerank seam: a second-stage scorer (e.g. a cross-encoder) over a search's best items.

The package ships no cross-encoder: none could be installed from a package and loaded offline (rerankers
such as flashrank or sentence-transformers' `CrossEncoder` fetch their weights from a model hub at run
time). Users who have a local model wrap it as a `Reranker` and apply it with `rerank`:

    class MyCrossEncoder:
        def __call__(self, query: str, texts: Sequence[str]) -> Sequence[float]:
            return model.predict([(query, t) for t in texts])

    result = index.search("capital of France", k=20)
    best = rerank(result.items, "capital of France", MyCrossEncoder(), top_n=10)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, Sequence, runtime_checkable

from .items import ScoredItem

__all__ = ["Reranker", "rerank"]


@runtime_checkable
class Reranker(Protocol):
    """Scores each text's relevance to `query` (higher is better); one score per text, in order."""

    def __call__(self, query: str, texts: Sequence[str]) -> Sequence[float]: ...


def rerank(items: Sequence[ScoredItem], query: str, reranker: Reranker, *, top_n: int | None = None
           ) -> tuple[ScoredItem, ...]:
    """The first `top_n` of `items` (all by default) reordered by `reranker`'s scores (ties keep the first
    stage's order), then the rest as they were; each reordered item's `score` is the reranker's and its
    `rank` its new position. A reranker that returns the wrong number of scores is refused."""
    head = list(items[:top_n] if top_n is not None else items)
    scores = [float(s) for s in reranker(query, [i.document.text for i in head])]
    if len(scores) != len(head):
        raise ValueError(f"the reranker returned {len(scores)} scores for {len(head)} texts: return one per text")
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    ranked = [replace(head[i], score=scores[i], rank=r) for r, i in enumerate(order)]
    rest = [replace(item, rank=len(ranked) + r) for r, item in enumerate(items[len(head):])]
    return tuple(ranked + rest)
