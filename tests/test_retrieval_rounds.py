"""MMR and duplicate grouping, as written for speed, against the plain greedy rounds they stand for.

Why: a pack must not change when these get faster (requests are byte-identical across versions);
picks, their order, their mmr values to the bit, and the groups must equal the textbook loop's.
"""

from __future__ import annotations

import numpy as np

from aether_context.retrieval.dedup import group_duplicates
from aether_context.retrieval.mmr import mmr_select


def _plain_mmr(relevance, sims, lam, k, budget, cost):
    remaining, max_sim, picks, left = np.ones(len(relevance), bool), np.zeros(len(relevance)), [], budget
    while remaining.any() and (k is None or len(picks) < k) and (left is None or left > 0):
        mmr = np.where(remaining, lam * relevance - (1.0 - lam) * max_sim, -np.inf)
        best = int(np.argmax(mmr))
        remaining[best] = False
        if left is not None:
            if cost(best) > left:
                continue
            left -= cost(best)
        picks.append((best, float(mmr[best])))
        np.maximum(max_sim, sims[best], out=max_sim)
    return picks


def _plain_groups(keys, sims, threshold):
    groups, leaders, by_key = [], [], {}
    for i, key in enumerate(keys):
        group = by_key.get(key)
        if group is None and leaders:
            best = max(leaders, key=lambda j: (sims[i, j], -j))  # most similar leader, the earliest on ties
            if sims[i, best] >= threshold:
                group = next(g for g, members in enumerate(groups) if members[0] == best)
        if group is None:
            group = len(groups)
            groups.append([])
            leaders.append(i)
            by_key[key] = group
        groups[group].append(i)
    return groups


def _case(rng):
    n = int(rng.integers(0, 50))
    vectors = rng.normal(size=(n, 4)).astype(np.float32)
    if n:
        vectors[rng.integers(0, n, size=n // 3)] = vectors[0]  # exact duplicates
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    vectors = np.round(vectors, 1) if rng.random() < 0.3 else vectors  # tied cosines
    return n, vectors, vectors @ vectors.T


def test_mmr_picks_and_values_equal_the_plain_rounds():
    rng = np.random.default_rng(7)
    for _ in range(1500):
        n, vectors, sims = _case(rng)
        relevance = rng.random(n) if rng.random() < 0.6 else np.round(rng.random(n), 1)
        lam = float(rng.choice([0.0, 0.5, 0.9, 1.0]))
        k = None if rng.random() < 0.5 else int(rng.integers(1, 60))
        budget = None if rng.random() < 0.5 else int(rng.integers(0, 300))
        costs = rng.integers(1, 40, size=n)
        cost = (lambda i: int(costs[i])) if budget is not None else None
        got = mmr_select(relevance, vectors, lam=lam, k=k, budget=budget, cost=cost, sims=sims)
        want = _plain_mmr(relevance, sims, lam, k, budget, cost)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert np.array([v for _, v in got]).tobytes() == np.array([v for _, v in want]).tobytes()


def test_duplicate_groups_equal_the_plain_rounds():
    rng = np.random.default_rng(11)
    for _ in range(1500):
        n, vectors, sims = _case(rng)
        keys = [str(int(x)) for x in rng.integers(0, n // 2 + 1, size=n)]
        threshold = float(rng.choice([0.5, 0.9, 0.95, 1.0]))
        assert group_duplicates(keys, vectors, threshold, sims) == _plain_groups(keys, sims, threshold)
        assert group_duplicates(keys, None, threshold) == _plain_groups(keys, np.zeros((n, n)), 2.0)



def test_a_row_whose_shown_text_changes_is_counted_again():
    """`add` keeps a row when only the shown text changes (the same search text: text and context
    split otherwise); its cached token count must follow the new text."""
    from aether_context.retrieval import Document, HashingEmbedder, HybridIndex, RetrievalSettings

    index = HybridIndex(RetrievalSettings(), embedder=HashingEmbedder())
    count = lambda text: len(text.split())  # noqa: E731
    index.add([Document("d1", "alpha beta\ngamma delta epsilon", "memory")])
    assert index.search("alpha", budget_tokens=100, count_tokens=count).items[0].tokens == 5
    index.add([Document("d1", "alpha beta", "memory", context="gamma delta epsilon")])  # same search text
    assert index.search("alpha", budget_tokens=100, count_tokens=count).items[0].tokens == 2
