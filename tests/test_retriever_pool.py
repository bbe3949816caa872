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
