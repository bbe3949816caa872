"""Maximal marginal relevance, filling a token budget or a count.

Why: fused rankings put near-paraphrases next to each other (a memory restated in three turns);
MMR trades relevance against similarity to what is already chosen, so a small budget covers more
distinct facts. Why budget-aware: layers are sized in tokens, so an item that does not fit is
skipped and smaller ones may still fill the rest.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["mmr_select"]


def mmr_select(relevance: np.ndarray, vectors: np.ndarray, *, lam: float, k: int | None = None,
               budget: int | None = None, cost: Callable[[int], int] | None = None,
               sims: np.ndarray | None = None) -> list[tuple[int, float]]:
    """Greedy MMR over candidates given in preference order; returns (index, mmr score) in pick order.

    mmr(i) = lam * relevance(i) - (1 - lam) * max cosine(i, picked). Ties go to the earlier
    candidate, so callers sort candidates by (score desc, id) for determinism. With `budget`,
    `cost(i)` gives item i's tokens; an item that does not fit the remaining budget is dropped and
    the next best is tried. Stops at `k` picks, an exhausted budget, or no candidates left.
    `sims` (the cosine matrix of `vectors`) may be passed in to save recomputing it.
    """
    n = len(relevance)
    if budget is not None and cost is None:
        raise ValueError("mmr_select got a budget but no cost function")
    remaining = np.ones(n, dtype=bool)
    max_sim = np.zeros(n, dtype=np.float64)
    picks: list[tuple[int, float]] = []
    left = budget
    while remaining.any() and (k is None or len(picks) < k) and (left is None or left > 0):
        mmr = lam * relevance - (1.0 - lam) * max_sim
        mmr = np.where(remaining, mmr, -np.inf)
        best = int(np.argmax(mmr))  # first maximum: the earlier candidate wins ties
        remaining[best] = False
        if left is not None and cost is not None:
            tokens = cost(best)
            if tokens > left:
                continue
            left -= tokens
        picks.append((best, float(mmr[best])))
        if lam < 1.0:
            np.maximum(max_sim, sims[best] if sims is not None else vectors @ vectors[best], out=max_sim)
    return picks
