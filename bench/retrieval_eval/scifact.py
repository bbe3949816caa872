"""SciFact nDCG@10 per method and embedder variant, and the fusion/MMR sweep behind the defaults."""

from __future__ import annotations

import statistics
import time

from aether_context.retrieval import (Analyzer, EmbeddingCache, HybridIndex, RetrievalSettings,
                                      SentenceTransformerEmbedder)
from aether_context.tokens import TokenCounter

from .common import (EVAL, PACK, PACK_EVAL, PLAIN_ANALYZER, PLAIN_ROW, VARIANTS, QueryMemo, lexical_index, make_index,
                     method_settings, ndcg_at_10, plain_tokens)
from .data import load_locomo, load_scifact

# ---------------------------------------------------------------- SciFact

def eval_scifact(data, cache_url, log):
    corpus, queries, qrels = load_scifact(data)
    rows = {}
    from rank_bm25 import BM25Okapi
    bm = BM25Okapi([plain_tokens(d.text) for d in corpus])
    ids = [d.id for d in corpus]
    scores = []
    for qid, text in queries.items():
        s = bm.get_scores(plain_tokens(text))
        top = sorted(range(len(ids)), key=lambda i: (-s[i], ids[i]))[:10]
        scores.append(ndcg_at_10([ids[i] for i in top], qrels[qid]))
    rows["rank_bm25, plain lower-cased tokens"] = statistics.fmean(scores)
    log(f"scifact plain rank_bm25 {rows['rank_bm25, plain lower-cased tokens']:.4f}")
    variants = {}
    for label, options in VARIANTS.items():
        embedder = QueryMemo(SentenceTransformerEmbedder(**options), cache_url)
        index = make_index(EVAL, embedder, cache_url)
        t = time.perf_counter()
        index.add(corpus)
        log(f"scifact index ({label}) built in {time.perf_counter() - t:.1f}s")
        methods = method_settings(RetrievalSettings())
        if label != next(iter(VARIANTS)):
            methods = {m: methods[m] for m in ("dense", "hybrid weighted z-score")}
        for method, settings in methods.items():
            if settings is None:
                analyzer = PLAIN_ANALYZER if method == PLAIN_ROW else Analyzer(stem=False)
                idx = lexical_index(corpus, analyzer)
            else:
                idx = index
            value = statistics.fmean(ndcg_at_10(idx.search(text, k=10, settings=settings).ids, qrels[qid])
                                     for qid, text in queries.items())
            (rows if label == next(iter(VARIANTS)) else variants)[f"{method}" if label == next(iter(VARIANTS))
                                                                  else f"{method} [{label}]"] = value
            log(f"scifact {label} {method}: {value:.4f}")
        if label == next(iter(VARIANTS)):
            variants[f"dense [{label}]"] = rows["dense"]
            variants[f"hybrid weighted z-score [{label}]"] = rows["hybrid weighted z-score"]
    return rows, variants


def sweep(data, cache_url, log):
    """Fusion and MMR variants on both collections, with the pack's embedder: the evidence for the defaults."""
    corpus, queries, qrels = load_scifact(data)
    embedder = QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url)
    cache = EmbeddingCache(embedder, url=cache_url)
    index = HybridIndex(PACK_EVAL, cache=cache)
    index.add(corpus)
    conversations = []
    for _, turns, qas in load_locomo(data):
        idx = HybridIndex(PACK_EVAL, cache=cache)
        idx.add(turns)
        conversations.append((turns, qas, idx))
    grid = {"rrf k=20": {"fusion": "rrf", "rrf_k": 20}, "rrf k=60": {"fusion": "rrf", "rrf_k": 60}}
    for norm in ("zscore", "minmax"):
        for lw, dw in ((1.0, 1.0), (1.0, 1.5), (1.5, 1.0)):
            grid[f"{norm} {lw:g}:{dw:g}"] = {"fusion": "weighted", "normalization": norm,
                                             "lexical_weight": lw, "dense_weight": dw}
    for pool in (50, 200):
        grid[f"zscore 1:1 pool={pool}"] = {"fusion": "weighted", "candidate_pool": pool}
    for lam in (0.95, 0.9, 0.8, 0.7, 0.5):
        grid[f"zscore 1:1 mmr={lam}"] = {"fusion": "weighted", "mmr_lambda": lam, "dedup_threshold": 0.95}
    counter = TokenCounter()
    out = {}
    for name, update in grid.items():
        s = PACK_EVAL.model_copy(update=update)
        nd = statistics.fmean(ndcg_at_10(index.search(t, k=10, settings=s).ids, qrels[q]) for q, t in queries.items())
        r10, rb = [], []
        for turns, qas, idx in conversations:
            for question, category, evidence in qas:
                if category == 5 or not evidence:
                    continue
                got = idx.search(question, k=10, settings=s).ids
                r10.append(len(evidence & set(got)) / len(evidence))
                got = idx.search(question, budget_tokens=1000, count_tokens=counter.count_text, settings=s).ids
                rb.append(len(evidence & set(got)) / len(evidence))
        out[name] = (nd, statistics.fmean(r10), statistics.fmean(rb))
        log(f"sweep {name}: scifact {nd:.4f} locomo R@10 {out[name][1]:.4f} R@1k {out[name][2]:.4f}")
    return out
