"""LoCoMo evidence recall as the pack indexes turns (with their context), against bare turns."""

from __future__ import annotations

from collections import defaultdict

from aether_context.retrieval import EmbeddingCache, HybridIndex, SentenceTransformerEmbedder
from aether_context.tokens import TokenCounter

from .common import PACK, PACK_EVAL, PLAIN_ANALYZER, PLAIN_ROW, QueryMemo, lexical_index, plain_tokens
from .data import CONTEXTS, load_locomo

# ---------------------------------------------------------------- LoCoMo

def locomo_methods() -> dict[str, tuple[str, RetrievalSettings | None]]:
    """Row label -> (which turn documents, settings); settings None = BM25 with the plain analyzer."""
    return {
        "BM25, no turn context": ("bare", PACK_EVAL.model_copy(update={"dense_weight": 0.0})),
        "hybrid z-score, no turn context": ("bare", PACK_EVAL),
        "hybrid z-score, date + previous turn only": ("previous", PACK_EVAL),
        PLAIN_ROW: ("packed", None),
        "BM25": ("packed", PACK_EVAL.model_copy(update={"dense_weight": 0.0})),
        "dense": ("packed", PACK_EVAL.model_copy(update={"lexical_weight": 0.0})),
        "hybrid RRF (k=60)": ("packed", PACK_EVAL.model_copy(update={"fusion": "rrf", "rrf_k": 60})),
        "hybrid weighted min-max": ("packed", PACK_EVAL.model_copy(update={"normalization": "minmax"})),
        "hybrid weighted z-score": ("packed", PACK_EVAL),
        "as packed (the pack's settings, MMR and dedup)": ("packed", PACK),
    }


def eval_locomo(data, cache_url, log):
    docs = {context: load_locomo(data, context=context) for context in CONTEXTS}
    counter = TokenCounter()
    cache = EmbeddingCache(QueryMemo(SentenceTransformerEmbedder.from_settings(PACK), cache_url), url=cache_url)
    methods = locomo_methods()
    cuts = ("R@5", "R@10", "R@25", "R@1k tok", "R@2k tok")
    results: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in ["rank_bm25, plain tokens", *methods]}
    counts = defaultdict(int)
    missing_evidence = 0
    from rank_bm25 import BM25Okapi
    for c, (sample_id, turns, qas) in enumerate(docs["packed"]):
        indexes = {}
        for context in CONTEXTS:
            indexes[context] = HybridIndex(PACK, cache=cache)
            indexes[context].add(docs[context][c][1])
        plain = lexical_index(turns, PLAIN_ANALYZER, PACK_EVAL)
        known = {t.id for t in turns}
        bm = BM25Okapi([plain_tokens(t.text) for t in turns])
        for question, category, evidence in qas:
            if category == 5 or not evidence:
                continue
            missing_evidence += len(evidence - known)
            counts[category] += 1
            s = bm.get_scores(plain_tokens(question))
            order = [turns[i].id for i in sorted(range(len(turns)), key=lambda i: (-s[i], turns[i].id))]
            plain_budget = []
            for cap in (1000, 2000):
                used, picked = 0, []
                for doc_id in order:
                    tokens = counter.count_text(plain.get(doc_id).text)
                    if used + tokens <= cap:
                        picked.append(doc_id)
                        used += tokens
                plain_budget.append(picked)
            lists = {"rank_bm25, plain tokens": [order[:5], order[:10], order[:25], *plain_budget]}
            for method, (context, settings) in methods.items():
                idx = plain if settings is None else indexes[context]
                ranked = idx.search(question, k=25, settings=settings).ids
                budgeted = [idx.search(question, budget_tokens=cap, count_tokens=counter.count_text,
                                       settings=settings).ids for cap in (1000, 2000)]
                lists[method] = [ranked[:5], ranked[:10], ranked[:25], *budgeted]
            for method, got in lists.items():
                for cut, ids in zip(cuts, got):
                    r = len(evidence & set(ids)) / len(evidence)
                    results[method][cut].append(r)
                    results[method][f"{cut} c{category}"].append(r)
        log(f"locomo {sample_id}: {len(turns)} turns")
    described = {"conversations": len(docs["packed"]), "turns": sum(len(t) for _, t, _ in docs["packed"]),
                 "sessions": sum(len({d.id.split(":")[0] for d in t}) for _, t, _ in docs["packed"])}
    return results, counts, missing_evidence, cuts, described
