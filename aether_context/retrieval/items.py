"""The retriever's own item types: what goes in (`Document`) and what comes out, with its reasons.

Why frozen dataclasses with `to_json`: a Context Pack must explain and replay its choices, so each
selected item carries every score that placed it, in one canonical JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

__all__ = ["Document", "ScoredItem", "RetrievalResult"]


@dataclass(frozen=True)
class Document:
    """One retrievable item; `id` is unique within an index, `timestamp` is epoch seconds.

    `context` is extra text that is searched (lexically and densely) but never returned or
    counted against a budget: the turn a reply answers, a session date, a document title. On
    LoCoMo, the previous turn and the session date as context lift evidence recall a lot.
    """

    id: str
    text: str
    source: str
    timestamp: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    context: str = ""

    @property
    def search_text(self) -> str:
        """What the index analyses and embeds: the text, then its context."""
        return f"{self.text}\n{self.context}" if self.context else self.text

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "source": self.source, "timestamp": self.timestamp,
                "metadata": dict(self.metadata), "context": self.context}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Document":
        return cls(data["id"], data["text"], data["source"], data.get("timestamp"), dict(data.get("metadata") or {}),
                   data.get("context", ""))


@dataclass(frozen=True)
class ScoredItem:
    """A selected document and the scores that placed it.

    `bm25` is the raw BM25Okapi score, `dense` the cosine to the query, `fused` the fusion score,
    `freshness` the decay factor (1 = fresh or timeless), `score` the relevance after freshness
    (0..1), `mmr` the MMR value when it was picked. `duplicates`/`sources` list the collapsed
    near-duplicates it stands for, itself first.
    """

    document: Document
    rank: int
    bm25: float
    dense: float
    fused: float
    freshness: float
    score: float
    mmr: float
    tokens: int | None = None
    duplicates: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    @classmethod
    def of(cls, document: Document, rank: int, bm25: float, dense: float, fused: float, freshness: float,
           score: float, mmr: float, tokens: int | None, duplicates: tuple[str, ...], sources: tuple[str, ...]
           ) -> "ScoredItem":
        """The item `ScoredItem(...)` makes, for the hundreds one search ranks: its fields set in one step, as
        unpickling sets them (a frozen dataclass's `__init__` sets each through `object.__setattr__`: 2.5x the CPU)."""
        item = object.__new__(cls)
        item.__dict__.update(document=document, rank=rank, bm25=bm25, dense=dense, fused=fused, freshness=freshness,
                             score=score, mmr=mmr, tokens=tokens, duplicates=duplicates, sources=sources)
        return item

    @property
    def id(self) -> str:
        return self.document.id

    @property
    def text(self) -> str:
        return self.document.text

    @property
    def source(self) -> str:
        return self.document.source

    def to_json(self) -> dict[str, Any]:
        return {"document": self.document.to_json(), "rank": self.rank, "bm25": self.bm25, "dense": self.dense,
                "fused": self.fused, "freshness": self.freshness, "score": self.score, "mmr": self.mmr,
                "tokens": self.tokens, "duplicates": list(self.duplicates), "sources": list(self.sources)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ScoredItem":
        return cls(Document.from_json(data["document"]), data["rank"], data["bm25"], data["dense"], data["fused"],
                   data["freshness"], data["score"], data["mmr"], data.get("tokens"),
                   tuple(data.get("duplicates", ())), tuple(data.get("sources", ())))


@dataclass(frozen=True)
class RetrievalResult:
    """The selection, in pick order, and signals for the budget allocator (all floats).

    Signals: `retrieval_hit_rate` (share of selected items whose dense cosine to the query is at
    least `hit_threshold`), `lexical_match_rate` (share with BM25 > 0), `similarity` (mean dense
    cosine of the selection), `freshness` (mean decay factor of selected timestamped items; 1.0
    when none has a timestamp), `candidates`, `selected`, `tokens`, `duplicates_collapsed`, `excluded`.
    """

    query: str
    items: tuple[ScoredItem, ...]
    signals: Mapping[str, float]

    @property
    def ids(self) -> list[str]:
        return [item.id for item in self.items]

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "items": [i.to_json() for i in self.items], "signals": dict(self.signals)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RetrievalResult":
        return cls(data["query"], tuple(ScoredItem.from_json(i) for i in data["items"]), dict(data["signals"]))

    @classmethod
    def of(cls, query: str, items: "list[ScoredItem]", candidates: int, excluded: int, collapsed: int,
           hit_threshold: float = 0.0, flags: "dict[str, float] | None" = None) -> "RetrievalResult":
        """A search's result: its items and the signals they give."""
        n = len(items)
        dense_off = bool((flags or {}).get("dense_off"))  # without cosines, a hit is a lexical match
        stamped = [i.freshness for i in items if i.document.timestamp is not None]
        signals = {
            "retrieval_hit_rate": (sum(i.bm25 > 0 if dense_off else i.dense >= hit_threshold for i in items) / n
                                   if n else 0.0),
            "lexical_match_rate": sum(i.bm25 > 0 for i in items) / n if n else 0.0,
            "similarity": float(np.mean([i.dense for i in items])) if n else 0.0,
            "freshness": float(np.mean(stamped)) if stamped else 1.0,
            "candidates": float(candidates),
            "selected": float(n),
            "tokens": float(sum(i.tokens or 0 for i in items)),
            "duplicates_collapsed": float(collapsed),
            "excluded": float(excluded),
            "empty_query": 0.0,
            "dense_off": 0.0,
            "timestamps_ignored": 0.0,
            **(flags or {}),
        }
        return cls(query, tuple(items), signals)
