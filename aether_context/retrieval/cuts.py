"""Which rows a search ranks: each retriever's best `candidate_pool` rows, cut the same way on any
replica (ties at the cut go to the smallest ids; fast scores only narrow the rows exact scores decide)."""

from __future__ import annotations

import numpy as np

__all__ = ["NEAR", "near_top", "top_rows"]

NEAR = 1e-4  # above any float32 product's error on unit vectors of a few hundred dimensions (~2e-5 at 384)


def near_top(scores: np.ndarray, rows: np.ndarray, m: int) -> np.ndarray:
    """Rows whose fast score is within `NEAR` of the m-th best: they hold the exact m best."""
    if len(rows) <= m:
        return rows
    kth = np.partition(scores[rows], len(rows) - m)[len(rows) - m]
    return rows[scores[rows] >= kth - NEAR]


def top_rows(scores: np.ndarray, rows: np.ndarray, m: int, ids: list[str]) -> np.ndarray:
    """The m best of `rows` by score; ties at the cut go to the smallest ids (order-independent)."""
    if len(rows) <= m:
        return rows
    part = rows[np.argpartition(-scores[rows], m - 1)[:m]]
    cut = scores[part].min()
    above = rows[scores[rows] > cut]
    tied = rows[scores[rows] == cut]
    tied = np.array(sorted(tied.tolist(), key=ids.__getitem__)[: m - len(above)], dtype=np.int64)
    return np.concatenate([above, tied])
