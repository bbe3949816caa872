"""Which texts may share a forward pass through a SentenceTransformer without changing each other's vectors.

Why: a vector must depend on its text alone (the embedding cache keeps whichever call embedded a text
first: the work ahead in one batch, the pack in another). Batching broke that twice: padding to the
longest text changes the shapes of the matrix products (float32 vectors moved by up to 1.6e-7), and int8
dynamic quantisation scales activations over the whole batch (up to 0.045); near-ties in a ranking then
flipped between two replays of one session. Texts that tokenize to the same length batch with no
padding and get the bits they get alone in float32 (checked in tests/test_retrieval_minilm.py); under
int8 each text runs alone.
"""

from __future__ import annotations

from typing import Any

__all__ = ["exact_groups"]


def exact_groups(model: Any, texts: list[str], *, batch_size: int, quantized: bool) -> list[list[int]]:
    """Row numbers of `texts` in groups of at most `batch_size`, each safe to encode as one batch."""
    if quantized or len(texts) <= 1:  # one text is its own batch: no need to tokenize it here
        return [[i] for i in range(len(texts))]
    by_length: dict[int, list[int]] = {}
    preprocess = getattr(model, "preprocess", None) or model.tokenize  # `tokenize` before sentence-transformers 5
    features = preprocess(list(texts))
    for row, length in enumerate(features["attention_mask"].sum(dim=1).tolist()):
        by_length.setdefault(length, []).append(row)
    return [rows[s:s + batch_size] for rows in by_length.values() for s in range(0, len(rows), batch_size)]
