"""Query facets and the information floor, on and off: SciFact nDCG@10 and LoCoMo evidence recall as packed."""

from __future__ import annotations

import statistics

from aether_context.pipeline.retrieve import Retriever
from aether_context.retrieval import HashingEmbedder, SentenceTransformerEmbedder
from aether_context.retrieval.facets import facets
from aether_context.tokens import TokenCounter

from .common import PACK, QueryMemo, ndcg_at_10
from .data import load_locomo, load_scifact

VARIANTS = {"no facets, no floor": (False, 0.0), "facets": (True, 0.0), "floor": (False, PACK.information_floor),
            "facets + floor (default)": (True, PACK.information_floor)}


def eval_facets(data, cache_url, log, *, dense: bool = True):
    """Row -> {column: value}: the pack's retrieval settings through `Retriever.rank`, as the pack ranks."""
    embedder = QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url) if dense else HashingEmbedder()
    retriever = Retriever(PACK, embedder=embedder)
    counter = TokenCounter()
    corpus, queries, qrels = load_scifact(data)
    convs = load_locomo(data)
    rows = {}
    for label, (on, floor) in VARIANTS.items():
        def rank(ns, query, docs, k):
            return retriever.rank(ns, "memory", query, docs, k=k, count_tokens=None, now=None, dense=dense,
                                  facets=facets(query) if on else (), floor=floor)
        nd = statistics.fmean(ndcg_at_10(rank("scifact", t, corpus, 10).ids, qrels[q]) for q, t in queries.items())
        r10, r2k, faceted = [], [], 0
        for sample_id, turns, qas in convs:
            for question, category, evidence in qas:
                if category == 5 or not evidence:
                    continue
                faceted += bool(facets(question))
                ranked = rank(sample_id, question, turns, 400)
                r10.append(len(evidence & set(ranked.ids[:10])) / len(evidence))
                used, picked = 0, set()
                for item in ranked.items:
                    tokens = counter.count_text(item.text)
                    if used + tokens <= 2000:
                        picked.add(item.id)
                        used += tokens
                r2k.append(len(evidence & picked) / len(evidence))
        rows[label] = {"SciFact nDCG@10": nd, "LoCoMo R@10": statistics.fmean(r10),
                       "LoCoMo R@2k tok": statistics.fmean(r2k), "LoCoMo questions with facets": faceted}
        log(f"facets {label}: {rows[label]}")
    return rows
