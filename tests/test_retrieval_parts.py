"""Embedders and their cache, fusion, MMR, dedup and settings, each on its own."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from aether_context.retrieval import (
    Document, EmbeddingCache, HashingEmbedder, RecordingEmbedder, RetrievalSettings, collapse_near_duplicates,
    freshness_decay, mmr_select, normalize, rrf_fusion, weighted_fusion,
)
from aether_context.retrieval.fusion import ranks


def test_hashing_embedder_is_deterministic_and_normalised():
    a = HashingEmbedder().embed(["the cat sat on the mat", "dogs bark", ""])
    b = HashingEmbedder().embed(["the cat sat on the mat", "dogs bark", ""])
    assert a.dtype == np.float32 and a.shape == (3, 256)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a[:2], axis=1), 1.0, rtol=1e-6)
    assert not a[2].any()
    cats = HashingEmbedder().embed(["cats sitting on mats"])[0]
    assert float(a[0] @ cats) > float(a[1] @ cats)


def test_cache_embeds_each_text_once_in_batches():
    recorder = RecordingEmbedder()
    cache = EmbeddingCache(recorder, batch_size=2)
    first = cache.embed(["a b", "c d", "a b", "e f", "g h"])
    assert sorted(recorder.texts) == ["a b", "c d", "e f", "g h"]
    assert all(len(batch) <= 2 for batch in recorder.calls)
    again = cache.embed(["g h", "a b"])
    assert len(recorder.texts) == 4
    np.testing.assert_array_equal(again, first[[4, 0]])
    assert cache.stats == {"hits": 3, "computed": 4, "size": 4}


@pytest.mark.parametrize("scheme", ["memory", "dir"])
def test_cache_persists_through_fsspec(scheme, tmp_path):
    url = "memory://retrieval-test-cache" if scheme == "memory" else str(tmp_path / "vectors")
    writer = RecordingEmbedder()
    vectors = EmbeddingCache(writer, url=url).embed(["one text", "another text"])
    reader = RecordingEmbedder()
    loaded = EmbeddingCache(reader, url=url).embed(["another text", "one text"])
    assert reader.calls == []
    np.testing.assert_array_equal(loaded, vectors[[1, 0]])
    other_space = RecordingEmbedder(HashingEmbedder(dim=64))
    EmbeddingCache(other_space, url=url).embed(["one text"])
    assert other_space.texts == ["one text"]  # vectors of another embedder are never reused


def test_normalisations_and_weighted_fusion():
    np.testing.assert_allclose(normalize(np.array([1.0, 2.0, 3.0]), "minmax"), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(normalize(np.array([1.0, 2.0, 3.0]), "zscore"), [-1.2247449, 0.0, 1.2247449])
    assert not normalize(np.array([4.0, 4.0]), "zscore").any()
    fused = weighted_fusion([np.array([10.0, 0.0, 5.0]), np.array([0.1, 0.9, 0.5])], [1.0, 1.0], "minmax")
    np.testing.assert_allclose(fused, [1.0, 1.0, 1.0])
    fused = weighted_fusion([np.array([10.0, 0.0, 5.0]), np.array([0.1, 0.9, 0.5])], [2.0, 1.0], "minmax")
    assert list(np.argsort(-fused)) == [0, 2, 1]


def test_rrf_fusion_exact_values_and_ties_by_id():
    scores = np.array([3.0, 3.0, 1.0])
    tiebreak = np.array([1, 0, 2])  # candidate 1 has the smaller id
    lexical = ranks(scores, np.array([True, True, False]), tiebreak)
    assert list(lexical) == [2, 1, 0]
    dense = ranks(np.array([0.1, 0.2, 0.9]), np.ones(3, bool), tiebreak)
    fused = rrf_fusion([lexical, dense], [1.0, 1.0], k=60)
    np.testing.assert_allclose(fused, [1 / 62 + 1 / 63, 1 / 61 + 1 / 62, 1 / 61])


def test_freshness_decay_halves_each_half_life():
    day = 86_400.0
    decay = freshness_decay([100 * day, 90 * day, 70 * day, None, 110 * day], 100 * day, 10.0)
    np.testing.assert_allclose(decay, [1.0, 0.5, 0.125, 1.0, 1.0])
    assert list(freshness_decay([0.0], 100 * day, None)) == [1.0]


def test_mmr_skips_a_near_duplicate_and_fills_a_budget():
    vectors = np.array([[1, 0, 0], [0.99, 0.141, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    relevance = np.array([1.0, 0.95, 0.6, 0.5])
    assert [i for i, _ in mmr_select(relevance, vectors, lam=1.0, k=3)] == [0, 1, 2]
    assert [i for i, _ in mmr_select(relevance, vectors, lam=0.5, k=3)] == [0, 2, 3]
    costs = {0: 50, 1: 10, 2: 80, 3: 30}
    picks = mmr_select(relevance, vectors, lam=0.5, budget=90, cost=costs.__getitem__)
    assert [i for i, _ in picks] == [0, 3, 1]  # 2 does not fit after 0; smaller ones still do
    assert picks[0][1] == pytest.approx(0.5)


def test_collapse_near_duplicates_notes_every_source():
    docs = [Document("a", "The flight is at 9am.", "memory"), Document("b", "the flight is at  9AM.", "tool"),
            Document("c", "Seat 12A is booked.", "memory"), Document("d", "Seat 12A has been booked.", "evidence")]
    vectors = np.array([[1, 0], [1, 0], [0, 1], [0.1, 0.995]], dtype=np.float32)
    by_text = collapse_near_duplicates(docs)
    assert [d.id for d in by_text] == ["a", "c", "d"]
    assert by_text[0].metadata == {"duplicate_ids": ["a", "b"], "sources": ["memory", "tool"]}
    by_vector = collapse_near_duplicates(docs, vectors, threshold=0.95)
    assert [d.id for d in by_vector] == ["a", "c"]
    assert by_vector[1].metadata["sources"] == ["memory", "evidence"]


def test_settings_validate_and_are_frozen():
    with pytest.raises(ValidationError, match="extra"):
        RetrievalSettings(mmr=0.5)
    with pytest.raises(ValidationError, match="both 0"):
        RetrievalSettings(lexical_weight=0, dense_weight=0)
    with pytest.raises(ValidationError):
        RetrievalSettings(fusion="sum")
    settings = RetrievalSettings()
    with pytest.raises(ValidationError):
        settings.mmr_lambda = 0.1
    assert all(field.description for field in RetrievalSettings.model_fields.values())


def test_a_scored_item_made_in_one_step_is_the_constructors():
    """`ScoredItem.of` (what a search builds its items with) makes the item `ScoredItem(...)` makes."""
    import pickle

    from aether_context.retrieval import ScoredItem

    doc = Document("m1", "The user prefers window seats.", "memory", 1.7e9, {"uri": "mem://1"})
    args = (doc, 3, 1.25, 0.5, 0.75, 0.9, 0.6, 0.55, None, ("m1", "m2"), ("memory", "history"))
    made, built = ScoredItem.of(*args), ScoredItem(*args)
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    assert made.to_json() == built.to_json() and pickle.loads(pickle.dumps(made)) == built
    assert vars(made) == vars(built) and list(vars(made)) == list(vars(built))
    with pytest.raises(AttributeError):
        made.rank = 4  # type: ignore[misc]  # still frozen
