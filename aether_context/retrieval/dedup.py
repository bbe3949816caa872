"""Near-duplicate collapsing: identical normalised text, or embedding cosine above a threshold.

Why: the same fact reaches a pack through several paths (a tool result quoted in a later turn, a
memory saved twice); sending it twice spends budget for nothing. A collapsed item keeps the first
(best) member and notes every member's id and source, so the pack can still cite both.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .analyzer import content_key
from .items import Document

__all__ = ["group_duplicates", "collapse_near_duplicates"]


def group_duplicates(keys: Sequence[str], vectors: np.ndarray | None, threshold: float,
                     sims: np.ndarray | None = None) -> list[list[int]]:
    """Greedy grouping in the given order: each item joins the earlier group whose leader has the
    same key, else the one whose leader is most similar if that cosine is >= threshold; returns
    groups of indices, leaders first. `sims` (the cosine matrix of `vectors`) may be passed in."""
    if sims is None and vectors is not None and len(keys):
        sims = vectors @ vectors.T
    # an item with no earlier item at the threshold has no leader at it either: it is only checked by key
    near = np.tril(sims >= threshold, -1).any(axis=1) if sims is not None and len(keys) else None
    near_of = near.tolist() if near is not None else [False] * len(keys)  # read per item: a list, not numpy scalars
    groups: list[list[int]] = []
    leader_of_key: dict[str, int] = {}
    leaders: list[int] = []  # the leaders so far, in order (each group's first item)
    for i, key in enumerate(keys):
        group = leader_of_key.get(key)
        if group is None and near_of[i]:
            similar = sims[i, leaders]  # type: ignore[index]  # the first most similar leader, as over all items
            best = int(np.argmax(similar))
            if similar[best] >= threshold:
                group = best  # leaders are numbered as their groups
        if group is None:
            group = len(groups)
            groups.append([])
            leaders.append(i)
            leader_of_key[key] = group
        groups[group].append(i)
    return groups


def collapse_near_duplicates(documents: Sequence[Document], vectors: np.ndarray | None = None, *,
                             threshold: float = 0.95) -> list[Document]:
    """Collapse duplicates in `documents` (best first); each kept document's metadata gains
    `duplicate_ids` and `sources` listing every member, itself first. Without `vectors` only
    identical normalised text collapses."""
    keys = [content_key(d.text) for d in documents]
    out = []
    for group in group_duplicates(keys, vectors, threshold):
        leader = documents[group[0]]
        if len(group) == 1:
            out.append(leader)
            continue
        metadata = dict(leader.metadata)
        metadata["duplicate_ids"] = [documents[i].id for i in group]
        metadata["sources"] = [documents[i].source for i in group]
        out.append(Document(leader.id, leader.text, leader.source, leader.timestamp, metadata, leader.context))
    return out
