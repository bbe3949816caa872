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
    picks: list[tuple[int, float]] = []
    left = budget
    gain = lam * relevance  # the same each round: computed once
    # the penalty is (1 - lam) times the largest similarity to a pick, kept as the largest scaled similarity: one
    # ufunc a round, not two, the same bits (scaling by a positive number keeps the order)
    scale = 1.0 - lam
    scaled = scale * np.asarray(sims, dtype=np.float64) if sims is not None and lam < 1.0 else None
    penalty = np.zeros(n, dtype=np.float64)
    mmr = np.array(gain, dtype=np.float64)  # candidates taken out are -inf; the others' mmr is updated in place
    for _ in range(n):  # each round takes one candidate out
        if (k is not None and len(picks) >= k) or (left is not None and left <= 0):
            break
        best = int(mmr.argmax())  # first maximum: the earlier candidate wins ties
        value = float(mmr[best])
        remaining[best] = False
        mmr[best] = -np.inf
        if left is not None and cost is not None:
            tokens = cost(best)
            if tokens > left:
                continue
            left -= tokens
        picks.append((best, value))
        if lam < 1.0:
            row = scaled[best] if scaled is not None else scale * np.asarray(vectors @ vectors[best], dtype=np.float64)
            np.maximum(penalty, row, out=penalty)
            np.subtract(gain, penalty, out=mmr, where=remaining)
    return picks
