"""HybridIndex end to end, with cheap deterministic embedders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aether_context.content import sha256_hex
from aether_context.retrieval import (
    Document, HashingEmbedder, HybridIndex, RecordingEmbedder, RetrievalResult, RetrievalSettings, TableEmbedder,
)

DAY = 86_400.0
PLAIN = RetrievalSettings(mmr_lambda=1.0, freshness_weight=0.0, dedup_threshold=1.0)

DOCS = [
    Document("d1", "The user's flight to Lisbon departs at 9am on Friday.", "memory"),
    Document("d2", "The user prefers a window seat on long flights.", "memory"),
    Document("d3", "Hotel booking in Lisbon confirmed for three nights.", "evidence"),
    Document("d4", "The weather in Oslo is cold and rainy.", "evidence"),
    Document("d5", "Refund policy: tickets are refundable within 24 hours.", "evidence"),
]


def words(text: str) -> int:
    return len(text.split())


def make(settings: RetrievalSettings = PLAIN, embedder=None, docs=DOCS) -> HybridIndex:
    index = HybridIndex(settings, embedder=embedder or HashingEmbedder())
    index.add(docs)
    return index


def test_bm25_only_dense_only_and_fused_orders():
    # dense space where d4 is closest to the query although it shares no word with it
    table = {d.text: v for d, v in zip(DOCS, ([1, 0, 0], [0, 1, 0], [0.6, 0.8, 0], [0.8, 0.6, 0], [0, 0, 1]))}
    table["flight Lisbon"] = [0.8, 0.6, 0]
    embedder = TableEmbedder(table)
    lexical = make(PLAIN.model_copy(update={"dense_weight": 0.0}), embedder)
    # d2 ("flights") and d3 ("Lisbon") tie on BM25: same idf, tf and length; the smaller id wins
    assert lexical.search("flight Lisbon", k=3).ids == ["d1", "d2", "d3"]
    dense = make(PLAIN.model_copy(update={"lexical_weight": 0.0}), embedder)
    assert dense.search("flight Lisbon", k=5).ids == ["d4", "d3", "d1", "d2", "d5"]
    fused = make(PLAIN.model_copy(update={"fusion": "rrf"}), embedder)
    # d1: lexical 1 + dense 3; d3: lexical 3 + dense 2; d2: lexical 2 + dense 4; d4: dense 1 only
    assert fused.search("flight Lisbon", k=5).ids == ["d1", "d3", "d2", "d4", "d5"]
    weighted = make(PLAIN, embedder)
    # z-scores over the 5 candidates: d2 = 0.27 (lexical) - 0.20 (dense) beats d4 = -1.07 + 0.90
    assert weighted.search("flight Lisbon", k=5).ids == ["d1", "d3", "d2", "d4", "d5"]


def test_items_record_their_scores_and_replay_from_json():
    result = make().search("flight to Lisbon", k=2)
    top = result.items[0]
    assert (top.id, top.source, top.rank) == ("d1", "memory", 1)
    assert top.bm25 > 0 and 0 < top.dense <= 1 and top.score == 1.0 and top.mmr == pytest.approx(1.0)
    payload = json.loads(json.dumps(result.to_json()))
    assert RetrievalResult.from_json(payload) == result


def test_each_document_is_embedded_once_at_add_time():
    recorder = RecordingEmbedder()
    index = HybridIndex(PLAIN, embedder=recorder)
    index.add(DOCS[:3])
    index.add(DOCS[3:] + [DOCS[0]])  # d1 again, same text: no new work
    assert sorted(recorder.texts) == sorted(d.text for d in DOCS)
    index.search("Lisbon hotel", k=2)
    index.search("Lisbon hotel", k=2)
    assert recorder.texts[len(DOCS):] == ["Lisbon hotel"]  # only the query, and only once


def test_deferred_embedding_happens_in_one_batch_on_first_search():
    recorder = RecordingEmbedder()
    index = HybridIndex(PLAIN.model_copy(update={"embed_on_add": False}), embedder=recorder)
    for doc in DOCS:
        index.add([doc])
    assert recorder.calls == []
    index.search("Lisbon", k=1)
    assert recorder.calls[0] == [d.text for d in DOCS]


def test_near_duplicates_collapse_and_note_both_sources():
    docs = DOCS + [Document("d6", "the USER'S flight to Lisbon departs at 9am on friday.", "tool")]
    result = make(RetrievalSettings(freshness_weight=0.0), docs=docs).search("flight Lisbon", k=3)
    assert result.ids[0] == "d1"
    assert result.items[0].duplicates == ("d1", "d6")
    assert result.items[0].sources == ("memory", "tool")
    assert "d6" not in result.ids and result.signals["duplicates_collapsed"] == 1.0


def test_excluded_texts_and_hashes_are_never_returned():
    index = make()
    result = index.search("Lisbon", k=5, exclude={"the user's FLIGHT to lisbon departs at 9am on friday.",
                                                  sha256_hex(DOCS[2].text)})
    assert "d1" not in result.ids and "d3" not in result.ids
    assert result.signals["excluded"] == 2.0


def test_budget_selection_respects_and_fills_the_budget():
    index = make()
    sizes = {d.id: words(d.text) for d in DOCS}
    result = index.search("Lisbon flight seat refund weather", budget_tokens=25, count_tokens=words)
    used = sum(sizes[i] for i in result.ids)
    assert used <= 25 and result.signals["tokens"] == used
    assert all(sizes[d.id] > 25 - used for d in DOCS if d.id not in result.ids)
    assert index.search("Lisbon", budget_tokens=5, count_tokens=words).ids == []
    with pytest.raises(ValueError, match="count_tokens"):
        index.search("Lisbon", budget_tokens=10)


def test_freshness_orders_equal_items_by_age_and_feeds_the_signal():
    docs = [Document("old", "Meeting moved to Tuesday.", "memory", timestamp=0.0),
            Document("new", "Meeting moved to Tuesday!", "memory", timestamp=30 * DAY),
            Document("mid", "Meeting moved to Tuesday?", "memory", timestamp=20 * DAY)]
    settings = RetrievalSettings(freshness_half_life_days=10.0, freshness_weight=1.0, mmr_lambda=1.0,
                                 dedup_threshold=1.0)
    # equally similar to the query, not to each other (so nothing collapses)
    table = {"meeting Tuesday": [1, 0, 0], docs[0].text: [1, 1, 0], docs[1].text: [1, -1, 0], docs[2].text: [1, 0, 1]}
    index = make(settings, TableEmbedder(table), docs)
    result = index.search("meeting Tuesday", k=3)
    assert result.ids == ["new", "mid", "old"]
    assert [i.freshness for i in result.items] == [1.0, 0.5, 0.125]
    assert result.signals["freshness"] == pytest.approx(1.625 / 3)
    later = index.search("meeting Tuesday", k=1, now=40 * DAY)
    assert later.items[0].freshness == 0.5
    unaged = index.search("meeting Tuesday", k=3, settings=settings.model_copy(update={"freshness_weight": 0.0}))
    assert unaged.ids == ["mid", "new", "old"]  # equal scores: ties break by id


def test_results_do_not_depend_on_insertion_order():
    forward = make(RetrievalSettings())
    backward = make(RetrievalSettings(), docs=list(reversed(DOCS)))
    for query in ("Lisbon", "flight seat", "rainy weather refund", "nothing matches zzz"):
        a, b = forward.search(query, k=4), backward.search(query, k=4)
        assert a.ids == b.ids
        assert [i.to_json() for i in a.items] == [i.to_json() for i in b.items]


def test_signals_come_from_real_scores():
    result = make(RetrievalSettings(hit_threshold=0.3)).search("hotel booking Lisbon", k=3)
    dense = [i.dense for i in result.items]
    assert result.signals["similarity"] == pytest.approx(float(np.mean(dense)))
    assert result.signals["retrieval_hit_rate"] == sum(d >= 0.3 for d in dense) / 3
    assert result.signals["lexical_match_rate"] == sum(i.bm25 > 0 for i in result.items) / 3
    empty = make().search("Lisbon", k=3, exclude={d.text for d in DOCS})
    assert empty.items == () and empty.signals["retrieval_hit_rate"] == 0.0


def test_replace_and_remove_documents():
    index = make()
    index.add([Document("d4", "The weather in Lisbon is sunny.", "evidence")])
    assert index.get("d4").text.endswith("sunny.") and len(index) == 5
    assert "d4" in index.search("sunny Lisbon weather", k=1).ids
    assert index.remove(["d4", "missing"]) == 1
    assert "d4" not in index and "d4" not in index.search("sunny weather", k=5).ids


def test_min_score_and_per_call_settings():
    index = make()
    everything = index.search("Lisbon hotel", k=5)
    strict = index.search("Lisbon hotel", k=5, settings=index.settings.model_copy(update={"min_score": 0.9}))
    assert len(strict.items) < len(everything.items) and strict.ids[0] == everything.ids[0]
    assert all(item.score >= 0.9 for item in strict.items)


def test_context_is_searched_but_not_returned_or_counted():
    docs = [Document("t1", "Caroline: Yes, it was amazing!", "conv", context="Melanie: How was the pride parade?"),
            Document("t2", "Melanie: The kids loved the museum.", "conv")]
    index = make(docs=docs)
    result = index.search("pride parade", budget_tokens=6, count_tokens=words)
    assert result.ids == ["t1"]
    assert result.items[0].text == "Caroline: Yes, it was amazing!" and result.items[0].tokens == 5
    assert Document.from_json(docs[0].to_json()) == docs[0]


def test_settings_configure_the_default_embedder_lazily(tmp_path):
    from aether_context.retrieval import SentenceTransformerEmbedder

    settings = RetrievalSettings(embedding_model=str(tmp_path / "no-model-here"), embedding_max_seq_length=128,
                                 embedding_cache_url=str(tmp_path / "vectors"))
    index = HybridIndex(settings)  # nothing is loaded until the first embedding
    assert index.embedder == SentenceTransformerEmbedder(str(tmp_path / "no-model-here"), max_seq_length=128)
    assert index.cache.url == str(tmp_path / "vectors")
    assert "seq=128" in index.embedder.name


def test_a_question_ranked_in_two_layers_is_embedded_once():
    """Evidence and Memory are two indexes over one retriever's cache: a call's question reaches the model once."""
    from aether_context.pipeline.retrieve import Retriever

    recorder = RecordingEmbedder()
    retriever = Retriever(PLAIN, embedder=recorder)
    for layer, docs in (("evidence", DOCS[2:]), ("memory", DOCS[:2])):
        result = retriever.rank("app/u/s/agent", layer, "Lisbon hotel", docs, k=2, count_tokens=words, now=None,
                                dense=True)
        assert result.items  # ranked densely in both layers
    assert recorder.texts.count("Lisbon hotel") == 1
    assert sorted(recorder.texts) == sorted([d.text for d in DOCS] + ["Lisbon hotel"])


def test_dense_scores_do_not_depend_on_where_the_vectors_sit_in_the_shared_matrix():
    """A replica, or a process that embedded other sessions first, holds the same vectors at other rows
    of the process-wide matrix; a matrix-vector product's bits depend on a row's position, so the
    scores a search reports (and ranks by) must not come from it."""
    from aether_context.retrieval import EmbeddingCache

    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(vocab, 12)) for _ in range(1500)]
    others = [f"other {i}" for i in range(3001)]
    queries = [" ".join(rng.choice(vocab, 5)) for _ in range(12)]
    table = {t: rng.standard_normal(384) for t in texts + others + queries}  # dense vectors, like a model's
    docs = [Document(f"n{i:04d}", t, "memory") for i, t in enumerate(texts)]
    settings = RetrievalSettings(candidate_pool=60)

    def index(first: list[str], order: list[Document]) -> HybridIndex:
        cache = EmbeddingCache(TableEmbedder(table))
        cache.embed(first)  # what the process embedded before this session: the rows shift
        built = HybridIndex(settings, cache=cache)
        built.add(order)
        return built

    fresh, busy = index([], docs), index(others, list(reversed(docs)))
    for query in queries:
        a, b = fresh.search(query, k=40), busy.search(query, k=40)
        assert [i.dense for i in a.items] == [i.dense for i in b.items]  # every bit
        assert [i.to_json() for i in a.items] == [i.to_json() for i in b.items]


def test_a_search_over_new_documents_multiplies_only_their_vectors(monkeypatch):
    """A query's fast scores over the shared matrix are kept (`QueryVectors.product`): a later search for it after
    documents were added (a compaction's folded turns) multiplies only the vectors embedded since, and gives every
    item, score and signal a fresh index gives (fast scores only narrow the rows exact cosines score)."""
    from aether_context.retrieval import EmbeddingCache

    multiplied: list[int] = []  # rows of each matrix-vector product

    class Counted(np.ndarray):
        def __matmul__(self, other):  # type: ignore[no-untyped-def]
            if np.ndim(other) == 1:
                multiplied.append(self.shape[0])
            return np.asarray(self) @ other
    matrix = EmbeddingCache.matrix
    monkeypatch.setattr(EmbeddingCache, "matrix", property(lambda self: matrix.fget(self).view(Counted)))
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(vocab, 12)) for _ in range(900)]
    query = " ".join(rng.choice(vocab, 5))
    table = {t: rng.standard_normal(384) for t in texts + [query]}
    docs = [Document(f"n{i:04d}", t, "memory", timestamp=1.7e9 + i) for i, t in enumerate(texts)]
    settings = RetrievalSettings(candidate_pool=40)
    index = HybridIndex(settings, embedder=TableEmbedder(table))
    for end in (600, 700, 703, 900):
        index.add(docs[:end])
        multiplied.clear()
        result, rows = index.search(query, k=30), list(multiplied)
        assert rows == [end - {600: 0, 700: 600, 703: 700, 900: 703}[end]], rows
        fresh = HybridIndex(settings, embedder=TableEmbedder(table))
        fresh.add(docs[:end])
        again = fresh.search(query, k=30)
        assert [i.to_json() for i in result.items] == [i.to_json() for i in again.items]
        assert result.signals == again.signals
