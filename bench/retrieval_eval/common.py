"""What every retrieval section shares: the evaluation and pack settings, nDCG@10, index builders."""

from __future__ import annotations

import math
import re

from aether_context.profile import load_profile
from aether_context.retrieval import Analyzer, EmbeddingCache, HybridIndex, RetrievalSettings

EVAL = RetrievalSettings(mmr_lambda=1.0, dedup_threshold=1.0, freshness_weight=0.0, candidate_pool=100)
# What a pack ranks with: the default profile's retrieval settings (MiniLM, 128 tokens, one thread).
PACK = load_profile("default").retrieval
PACK_EVAL = PACK.model_copy(update={k: getattr(EVAL, k) for k in ("mmr_lambda", "dedup_threshold", "freshness_weight")})
# The tokenisation before identifier splitting, accent folding and CJK bigrams (same stems and stop words).
PLAIN_ANALYZER = Analyzer(split_identifiers=False, fold_accents=False, cjk_bigrams=False)
VARIANTS = {  # label -> embedder options; the first is the library default
    "MiniLM fp32, 256 tokens (default)": {},
    "MiniLM fp32, 128 tokens": {"max_seq_length": 128},
}


# ---------------------------------------------------------------- metrics

def ndcg_at_10(ranked: list[str], relevant: set[str]) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    return dcg / ideal if ideal else 0.0


def plain_tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class QueryMemo:
    """Query vectors through the on-disk cache, so reruns and settings variants embed each query once.

    Bench only: the library embeds queries fresh (with a small in-memory LRU); the latency section
    times that path.
    """

    def __init__(self, embedder, cache_url):
        self.inner = embedder
        self.cache = EmbeddingCache(embedder, url=cache_url)

    @property
    def name(self):
        return self.inner.name

    def embed(self, texts):
        return self.cache.embed(texts)


def make_index(settings, embedder, cache_url):
    return HybridIndex(settings, cache=EmbeddingCache(embedder, url=cache_url))


PLAIN_ROW = "BM25, tokens before identifier split, accent folding, CJK bigrams"


def lexical_index(corpus, analyzer, settings=EVAL):
    """A BM25-only index with its own analyzer (nothing embedded)."""
    from aether_context.retrieval import HashingEmbedder

    index = HybridIndex(settings.model_copy(update={"dense_weight": 0.0}), embedder=HashingEmbedder(),
                        analyzer=analyzer)
    index.add(corpus, embed=False)
    return index


def method_settings(tuned: RetrievalSettings) -> dict[str, RetrievalSettings]:
    return {
        "BM25 (analyzer, no stemming)": None,  # built separately: needs its own analyzer
        PLAIN_ROW: None,  # likewise
        "BM25": EVAL.model_copy(update={"dense_weight": 0.0}),
        "dense": EVAL.model_copy(update={"lexical_weight": 0.0}),
        "hybrid RRF (k=60)": EVAL.model_copy(update={"fusion": "rrf", "rrf_k": 60}),
        "hybrid weighted min-max": EVAL.model_copy(update={"fusion": "weighted", "normalization": "minmax"}),
        "hybrid weighted z-score": EVAL.model_copy(update={"fusion": "weighted", "normalization": "zscore"}),
        "hybrid (defaults) + MMR": tuned,
    }
