"""Code identifiers: recall of the files and definitions a coding run's later calls name."""

from __future__ import annotations

import re
import statistics

from aether_context.retrieval import Analyzer, EmbeddingCache, HybridIndex, SentenceTransformerEmbedder
from code_identifiers import load_code_identifiers

from .common import PACK, PACK_EVAL, PLAIN_ANALYZER, QueryMemo, ndcg_at_10

# ---------------------------------------------------------------- code identifiers

def eval_code(data, cache_url, log):
    """nDCG@10 on the code-identifier set: BM25 and hybrid, with the analyzer before and after."""
    items, queries, qrels, stats = load_code_identifiers(data)
    cache = EmbeddingCache(QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url), url=cache_url)
    camel = {q for q, rel in qrels.items() if any(re.search(r"[a-z][A-Z]|[A-Z]{2}[a-z]", r.split("::")[1])
                                                 for r in rel)}
    rows = {}
    for label, analyzer in (("before (no identifier split)", PLAIN_ANALYZER), ("after (this analyzer)", Analyzer())):
        index = HybridIndex(PACK_EVAL, cache=cache, analyzer=analyzer)
        index.add(items)
        for method, settings in (("BM25", PACK_EVAL.model_copy(update={"dense_weight": 0.0})),
                                 ("hybrid z-score", PACK_EVAL)):
            scores = {q: ndcg_at_10(index.search(text, k=10, settings=settings).ids, qrels[q])
                      for q, text in queries.items()}
            rows[f"{method}, {label}"] = (statistics.fmean(scores.values()),
                                          statistics.fmean(scores[q] for q in camel) if camel else float("nan"),
                                          statistics.fmean(scores[q] for q in queries if q not in camel))
            log(f"code {method} {label}: {rows[f'{method}, {label}']}")
    stats["camel_queries"] = len(camel)
    return rows, stats
