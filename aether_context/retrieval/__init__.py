"""Hybrid retrieval core: BM25 + dense embeddings, fused, aged, de-duplicated and budget-fitted.

Self-contained (no ADK or google types): the Context Pack's Memory and Evidence layers wrap it.

Usage::

    from aether_context.retrieval import Document, HashingEmbedder, HybridIndex, RetrievalSettings

    index = HybridIndex(RetrievalSettings(), embedder=HashingEmbedder())   # default: offline MiniLM
    index.add([Document("d1", "Paris is the capital of France.", "notes")])
    index.search("capital of France", k=3).items[0].id                     # -> 'd1'
"""

from .analyzer import STOP_WORDS, Analyzer, content_key, fold, normalize_text, stem
from .dedup import collapse_near_duplicates, group_duplicates
from .embeddings import (
    Embedder,
    EmbeddingCache,
    HashingEmbedder,
    SentenceTransformerEmbedder,
    default_model_path,
    dense_available,
    load_sentence_transformer,
)
from .fusion import freshness_decay, ignored_timestamps, normalize, rrf_fusion, weighted_fusion
from .index import HybridIndex
from .items import Document, RetrievalResult, ScoredItem
from .lexical import LexicalIndex
from .mmr import mmr_select
from .rerank import Reranker, rerank
from .settings import RetrievalSettings
from .testing import RecordingEmbedder, TableEmbedder
from .threads import bounded_threads
from .turns import turn_document

__all__ = [
    "Analyzer", "STOP_WORDS", "content_key", "normalize_text", "fold", "stem",
    "LexicalIndex",
    "Embedder", "EmbeddingCache", "HashingEmbedder", "SentenceTransformerEmbedder", "default_model_path",
    "load_sentence_transformer", "dense_available", "bounded_threads", "turn_document",
    "normalize", "weighted_fusion", "rrf_fusion", "freshness_decay", "ignored_timestamps",
    "mmr_select", "group_duplicates", "collapse_near_duplicates",
    "Document", "ScoredItem", "RetrievalResult", "RetrievalSettings", "HybridIndex",
    "RecordingEmbedder", "TableEmbedder", "Reranker", "rerank",
]
