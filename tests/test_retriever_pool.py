"""A retriever keeps one index per session and layer in step with each call's pool: whatever changed,
the ranking is that of an index built afresh for the pool, and a pool that changed near its end (a
compaction rebuilds the last compacted turn's document and adds the newly compacted ones) costs its
tail, not the whole pool."""

from __future__ import annotations

import random

from aether_context.pipeline.retrieve import Retriever
from aether_context.retrieval import Document, HashingEmbedder

WORDS = ("booking flight refund seat baggage upgrade cancel delay meal gold silver economy business "
         "Austin Denver Boston invoice card points voucher").split()
QUERY = "refund for the cancelled Denver flight"


def _doc(rng: random.Random, k: int, uri: str = "") -> Document:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
    return Document(f"turn-{k}", text, "history", 1_700_000_000.0 + k, {"uri": uri} if uri else {})


def _ranked(retriever: Retriever, pool: "list[Document]") -> list:
    result = retriever.rank("app/u/s/agent", "memory", QUERY, pool, k=8, count_tokens=None, now=None, dense=True)
    return [(i.document.id, i.document.text, dict(i.document.metadata), round(i.score, 9)) for i in result.items]


def test_a_pool_in_step_ranks_as_a_fresh_index_does():
    """Pools that grow, lose documents, rebuild their last ones (the same text with other metadata too)
    and repeat an id: the kept index ranks each as an index built for it alone."""
    rng = random.Random(11)
    kept = Retriever(embedder=HashingEmbedder())
    pool = [_doc(rng, k) for k in range(30)]
    for step in range(40):
        n = len(pool)
        pool = pool[:n - 2] + [_doc(rng, n - 2), Document(pool[-1].id, pool[-1].text, "history", pool[-1].timestamp,
                                                          {"uri": f"artifact://{step}"})]
        pool += [_doc(rng, n + j) for j in range(rng.randint(0, 3))]
        if step % 7 == 3:
            pool = [d for d in pool if rng.random() > 0.1]
        if step % 9 == 5:
            pool = pool + [_doc(rng, int(pool[0].id.split("-")[1]))]  # an id twice: its last version counts
        assert _ranked(kept, pool) == _ranked(Retriever(embedder=HashingEmbedder()), pool), step


def test_a_pool_changed_near_its_end_adds_its_tail_alone():
    """The last document rebuilt and two new ones: the index is given those three, not the whole pool."""
    rng = random.Random(5)
    retriever = Retriever(embedder=HashingEmbedder())
    pool = [_doc(rng, k) for k in range(50)]
    _ranked(retriever, pool)
    index = retriever._indexes[("app/u/s/agent", "memory")]
    given: list[int] = []
    add = index.add

    def counted(documents, **kw):  # type: ignore[no-untyped-def]
        documents = list(documents)
        given.append(len(documents))
        return add(documents, **kw)

    index.add = counted  # type: ignore[method-assign]
    pool = pool[:-1] + [_doc(rng, 49), _doc(rng, 50), _doc(rng, 51)]
    assert _ranked(retriever, pool) == _ranked(Retriever(embedder=HashingEmbedder()), pool)
    assert given == [3]


def test_a_pool_changed_near_its_end_is_synced_from_its_tail():
    """The last document rebuilt and one new: the ids to drop are found among the last pool's tail, not by
    listing every id the index holds (a 10,000-event session's pool is thousands of compacted turns)."""
    rng = random.Random(7)
    retriever, fresh = Retriever(embedder=HashingEmbedder()), Retriever(embedder=HashingEmbedder())
    pool = [_doc(rng, k) for k in range(60)]
    _ranked(retriever, pool)
    index = retriever._indexes[("app/u/s/agent", "memory")]

    def listed():  # type: ignore[no-untyped-def]
        raise AssertionError("the whole pool was listed")
    index.ids = listed  # type: ignore[method-assign]
    pool = pool[:-1] + [Document(pool[-1].id, pool[-1].text + " refund", "history", pool[-1].timestamp), _doc(rng, 60)]
    assert _ranked(retriever, pool) == _ranked(fresh, pool)
    pool = pool[:-3] + [_doc(rng, 61)]  # documents gone from the tail are dropped
    assert _ranked(retriever, pool) == _ranked(fresh, pool)


class _FailingOnce(HashingEmbedder):
    """Fails the embedding that holds `poison`, once: a store or model error in the middle of a sync."""

    def __init__(self, poison: str):
        super().__init__()
        self.poison, self.failed = poison, False

    def embed(self, texts):  # type: ignore[no-untyped-def]
        if not self.failed and any(self.poison in t for t in texts):
            self.failed = True
            raise RuntimeError("embedding failed")
        return super().embed(texts)


def test_a_sync_that_failed_half_way_is_followed_by_a_whole_sync():
    """An add that fails after the sync dropped and added rows leaves an index that is no known pool:
    the next calls hold the pool and rank its documents as a fresh index does (before, the tail sync
    trusted the last pool it recorded and raised KeyError for good, or kept a document the pool no
    longer has)."""
    import pytest

    for shape in ("dropped", "added"):
        rng = random.Random(7)
        pool = [_doc(rng, k) for k in range(6)]
        poison = Document("turn-66", "poisoned " + pool[0].text, "history", 1_700_000_066.0)
        retriever = Retriever(embedder=_FailingOnce("poisoned"))
        _ranked(retriever, pool)
        failing = pool[:2] + [poison] if shape == "dropped" else pool + [poison]
        with pytest.raises(RuntimeError):
            _ranked(retriever, failing)
        later = pool[:2] + [_doc(rng, 7), _doc(rng, 8)] if shape == "dropped" else \
            pool[:-1] + [Document(pool[-1].id, pool[-1].text, "history", pool[-1].timestamp, {"uri": "artifact://x"}),
                         _doc(rng, 9)]
        index = retriever._indexes[("app/u/s/agent", "memory")]
        for step in range(2):  # the same documents, in the same order (the scores after a failure may differ
            fresh = _ranked(Retriever(embedder=HashingEmbedder()), later)  # in their last digits)
            assert [r[:3] for r in _ranked(retriever, later)] == [r[:3] for r in fresh], (shape, step)
            assert sorted(index.ids()) == sorted(d.id for d in later), (shape, step)


def test_documents_whose_embedding_failed_are_embedded_at_the_next_search():
    """A failed embedding leaves its rows waiting for a vector (before, they were dropped from the
    waiting list and ranked without a dense score for good)."""
    import pytest

    rng = random.Random(9)
    pool = [_doc(rng, k) for k in range(6)] + [Document("turn-6", "poisoned refund Denver flight", "history", 1.7e9)]
    retriever = Retriever(embedder=_FailingOnce("poisoned"))
    with pytest.raises(RuntimeError):
        _ranked(retriever, pool)
    fresh = _ranked(Retriever(embedder=HashingEmbedder()), pool)
    assert [r[:3] for r in _ranked(retriever, pool)] == [r[:3] for r in fresh]


def test_a_forgotten_session_leaves_no_index_or_pool_behind():
    """A released session's indexes go, and so do the pools they were synced to (each holds its index and
    documents: kept, they grew with every session the process served)."""
    rng = random.Random(5)
    retriever = Retriever(embedder=HashingEmbedder())
    _ranked(retriever, [_doc(rng, k) for k in range(12)])
    other = retriever.rank("app/u/t/agent", "memory", QUERY, [_doc(rng, 50)], k=4, count_tokens=None, now=None)
    assert len(retriever._pools) == 2 and other.items
    retriever.forget("app/u/s/agent")
    assert len(retriever._indexes) == 1 and len(retriever._pools) == 1
    retriever.forget("app/u/t/agent")
    assert not retriever._indexes and not retriever._pools


def test_a_search_ranks_as_a_fresh_index_does_whatever_pools_the_index_held_before():
    """An index synced to a larger pool, then to one without a document, then back: each search (with or
    without an exclusion that takes a document out) gives what an index built afresh for its pool gives."""
    rng = random.Random(5)
    kept = Retriever(embedder=HashingEmbedder())
    pool = tuple(_doc(rng, k) for k in range(40))
    larger = pool + tuple(_doc(rng, k) for k in range(40, 44))

    def rank(retriever: Retriever, docs: "tuple[Document, ...]", exclude: "tuple[str, ...]" = ()) -> list:
        result = retriever.rank("app/u/s/agent", "memory", QUERY, docs, k=8, count_tokens=None,
                                now=1_700_000_100.0, exclude=exclude, dense=True)
        return [(i.document.id, round(i.score, 9)) for i in result.items]

    first = rank(kept, pool, ("a verbatim text no document holds",))
    rank(kept, larger)
    assert rank(kept, pool, ("a new verbatim turn",)) == first
    assert first == rank(Retriever(embedder=HashingEmbedder()), pool)
    rank(kept, pool[:3] + pool[4:])  # another pool, without the fourth document
    excluded = rank(kept, pool, (pool[3].text,))
    assert excluded == rank(Retriever(embedder=HashingEmbedder()), pool, (pool[3].text,))
    assert pool[3].id not in [i for i, _ in excluded]
