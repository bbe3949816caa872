"""Score fusion: reciprocal-rank fusion and a normalised weighted sum, plus freshness decay.

Why two: RRF needs no score calibration and is hard to break on a new collection; a weighted sum
of normalised scores keeps *how much* better a document is, and measured higher on SciFact and
LoCoMo (docs/benchmarks.md, retrieval section). Both are pure functions over candidate arrays.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .settings import Normalization

__all__ = ["normalize", "weighted_fusion", "rrf_fusion", "ranks", "freshness_decay", "ignored_timestamps"]

SECONDS_PER_DAY = 86_400.0


def normalize(scores: np.ndarray, method: Normalization) -> np.ndarray:
    """z-score or min-max over the given scores; a constant vector maps to zeros."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return scores
    if method == "zscore":
        std = float(scores.std())
        return (scores - scores.mean()) / std if std > 0 else np.zeros_like(scores)
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def weighted_fusion(signals: Sequence[np.ndarray], weights: Sequence[float], method: Normalization) -> np.ndarray:
    """sum_i w_i * normalize(signal_i), each signal normalised over the same candidates."""
    total = np.zeros(len(signals[0]), dtype=np.float64)
    for signal, weight in zip(signals, weights):
        if weight:
            total += weight * normalize(signal, method)
    return total


def ranks(scores: np.ndarray, eligible: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """1-based rank of each eligible candidate by score (ties by `tiebreak`), 0 when not eligible."""
    out = np.zeros(len(scores), dtype=np.int64)
    idx = np.flatnonzero(eligible)
    order = idx[np.lexsort((tiebreak[idx], -scores[idx]))]
    out[order] = np.arange(1, len(order) + 1)
    return out


def rrf_fusion(rank_lists: Sequence[np.ndarray], weights: Sequence[float], k: int) -> np.ndarray:
    """sum_i w_i / (k + rank_i) over the lists where a candidate appears (rank 0 = absent)."""
    total = np.zeros(len(rank_lists[0]), dtype=np.float64)
    for rank, weight in zip(rank_lists, weights):
        present = rank > 0
        total[present] += weight / (k + rank[present])
    return total


def _usable(ts: float | None, now: float) -> bool:
    return ts is not None and math.isfinite(ts) and ts <= now


def freshness_decay(timestamps: Sequence[float | None], now: float, half_life_days: float | None) -> np.ndarray:
    """0.5 ** (age / half-life) per item; 1 for items without a usable timestamp or when freshness is off.

    A timestamp that is not finite or lies after `now` (clock skew, milliseconds sent as seconds) is
    ignored: the item is timeless and no other item's freshness moves (`ignored_timestamps` counts them).
    """
    out = np.ones(len(timestamps), dtype=np.float64)
    if half_life_days is None or not math.isfinite(now):
        return out
    half_life = half_life_days * SECONDS_PER_DAY
    for i, ts in enumerate(timestamps):
        if _usable(ts, now):
            out[i] = 0.5 ** ((now - ts) / half_life)
    return out


def ignored_timestamps(timestamps: Sequence[float | None], now: float) -> int:
    """How many of `timestamps` are set but unusable for freshness (not finite, or after `now`)."""
    return sum(1 for ts in timestamps if ts is not None and not _usable(ts, now))
