"""Hybrid retrieval for the Memory and Evidence layers (BM25 + embeddings, fused, MMR).

A `Retriever` keeps one incremental index per session and layer, so items are analysed and
embedded once, when they first appear; each search runs over exactly the current candidate pool
(items that left the pool are removed, cheap to re-add: vectors are cached by content), which
keeps a pack a function of its inputs and of whether dense ranking was on (signal `dense_off`).

Dense ranking never blocks a pack: until the embedding model is loaded (`warm_up` loads it on a
background thread), while a session met late waits for more vectors than the settings' `embed_in_pack`
(a background thread embeds them: `_too_many_to_embed`), or when sentence-transformers is not installed
(the light install), `rank` ranks by BM25 alone and says so in its signals (`dense_off`).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from itertools import compress, count
from operator import is_not
from typing import Callable, Iterable, Sequence

import numpy as np

from ..retrieval import Document, EmbeddingCache, HybridIndex, RetrievalResult, RetrievalSettings
from ..retrieval.analyzer import STOP_WORDS, Analyzer
from ..retrieval.embeddings import Embedder, SentenceTransformerEmbedder
from ..retrieval.facets import facets as query_facets, fuse
from ..retrieval.threads import bounded_threads
from .inputs import TaskSpec

__all__ = ["Retriever", "default_retriever", "use_default_embedder", "retrieval_query", "retrieval_facets",
           "session_namespace", "agent_namespace"]

logger = logging.getLogger(__name__)

BACKLOG_BATCH = 16  # texts the background thread gives the model at a time (a pack's own encode waits for one)
_EXITING = threading.Event()  # set at interpreter exit: a backlog stops between batches
_EMBEDDING: "set[threading.Thread]" = set()  # threads embedding a backlog now (`_embed_backlog`)


def _stop_backlogs() -> None:
    """At exit, stop the backlogs between two batches: a daemon thread still inside torch when the interpreter
    finalizes aborts the process ("terminate called without an active exception"). A warm-up still loading
    the model is left alone (joining it would finish torch's import during shutdown)."""
    _EXITING.set()
    for thread in list(_EMBEDDING):
        thread.join(timeout=5)


atexit.register(_stop_backlogs)


def retrieval_query(request: str, task: TaskSpec) -> str:
    """What a call ranks Evidence and Memory for: its user request's text, the goal, the step and the acceptance
    checklist (`select.query_text`)."""
    return "\n".join(x for x in (request, task.goal, task.step, *task.acceptance) if x)


def retrieval_facets(request: str, task: TaskSpec) -> list[str]:
    """The parts of `retrieval_query` also searched alone (`facets.facets`)."""
    return query_facets(request, (task.goal, task.step, *task.acceptance))


def _same_objects(old: "Sequence[Document]", new: "Sequence[Document]") -> int:
    """How many leading items of `old` and `new` are the same objects: one C-level pass (`map` of `is_not`), no
    list of their id()s (building one for a 5,000-document pool cost 0.4 ms a compaction)."""
    return next(compress(count(), map(is_not, old, new)), min(len(old), len(new)))


def _same_metadata(old: "Sequence[Document]", new: "Sequence[Document]") -> bool:
    """Equal documents (`==` ignores metadata) that also carry the same metadata: an evidence item whose URI
    changed under the same id and text must replace the indexed one."""
    return all(a is b or a.metadata == b.metadata for a, b in zip(old, new))


def agent_namespace(app: str, user: str, session: str, agent: str) -> str:
    """The namespace of one agent's indexes in one session: the session's prefix, then the agent's name."""
    return session_namespace(app, user, session) + agent


def session_namespace(app: str, user: str, session: str) -> str:
    """What the namespaces of one session's indexes start with (each: this, then the agent's name)."""
    return f"{app}/{user}/{session}/"


class Retriever:
    """Ranks candidates with hybrid retrieval; one embedding cache shared by every index."""

    def __init__(self, settings: RetrievalSettings | None = None, *, embedder: Embedder | None = None,
                 max_indexes: int = 256):
        self.settings = settings or RetrievalSettings()
        s = self.settings
        embedder = embedder or SentenceTransformerEmbedder.from_settings(s)
        self.cache = EmbeddingCache(embedder, url=s.embedding_cache_url)
        # one analyzer for every index (as each would build it): its per-word memo is shared
        self.analyzer = Analyzer(stop_words=STOP_WORDS if s.stop_words else frozenset(), stem=s.stem)
        self._warming: threading.Thread | None = None
        self._catching_up: threading.Thread | None = None  # while one runs (`_catch_up`)
        self._catch_up_wanted = False
        self._warm_lock = threading.Lock()
        self._indexes: OrderedDict[tuple[str, str], HybridIndex] = OrderedDict()
        self._max = max_indexes
        # per index: the pool it was last synced to (held: its documents stay the objects compared), whether its
        # ids were unique (`_sync`)
        self._pools: dict[int, tuple[HybridIndex, tuple[Document, ...], bool]] = {}

    def available(self) -> bool:
        """False when the embedder cannot run here (the light install): ranking is lexical for good."""
        check = getattr(self.cache.embedder, "available", None)
        return True if check is None else bool(check())

    def ready(self) -> bool:
        """Non-blocking: True when dense ranking can run now without waiting for a model load or for
        the documents indexed before it to be embedded.

        Starts the background warm-up the first time it finds the model missing.
        """
        check = getattr(self.cache.embedder, "ready", None)
        if check is None:
            return True
        if check():
            return self._warming is None or not self._warming.is_alive()
        if self.available():
            self.warm_up()
        return False

    def warm_up(self) -> None:
        """Load the embedding model on a background thread, so the first pack does not wait for
        the import (seconds), then embed the documents indexed lexically meanwhile (`_embed_backlog`);
        a no-op for embedders without a model to load or not installed."""
        warm = getattr(self.cache.embedder, "warm_up", None)
        if warm is None or self._warming is not None or not self.available():
            return

        def run() -> None:
            try:
                warm()
            except Exception:  # the first real embedding will raise it where it can be handled
                logger.debug("aether-context: embedding model warm-up failed", exc_info=True)
                return
            self._embed_backlog()

        with self._warm_lock:
            if self._warming is None:
                self._warming = threading.Thread(target=run, name="aether-embedder-warm-up", daemon=True)
                self._warming.start()

    def _embed_backlog(self, passes: int = 3) -> None:
        """Embed, on a background thread, the documents the indexes took in without vectors: before the model was
        loaded (the warm-up thread), or a long session met for the first time (`_catch_up`). Without it the
        first dense search of a long session embeds its whole history inside a pack, one text at a time
        (a minute at 1,000 events), while every other pack waits. Vectors are kept by content, so the search
        that follows finds them; packs rank by BM25 until this is done (`ready`, `_too_many_to_embed`). Indexes
        are taken most recently used first; a later pass takes the sessions indexed meanwhile. An index that
        fails is logged and left to its next search."""
        _EMBEDDING.add(threading.current_thread())
        try:
            for _ in range(passes):
                found = False
                for index in reversed(list(self._indexes.values())):  # a snapshot: the pack thread may add indexes
                    try:
                        texts = [t for t in dict.fromkeys(index.waiting_texts()) if t not in self.cache]
                        found = found or bool(texts)
                        # Small batches outside the cache's lock (a pack embedding its own turns waits for one
                        # encode at most); kept in the cache, and written under `embedding_cache_url`, a few
                        # hundred at a time.
                        for start in range(0, len(texts), self.cache.batch_size):
                            part = texts[start:start + self.cache.batch_size]
                            vectors = []
                            for at in range(0, len(part), BACKLOG_BATCH):
                                if _EXITING.is_set():
                                    return
                                with bounded_threads(self.settings.embedding_threads):
                                    vectors.append(self.cache.embedder.embed(part[at:at + BACKLOG_BATCH]))
                            self.cache.put(part, np.concatenate(vectors))
                    except Exception:
                        logger.warning("aether-context: embedding an index's waiting documents failed; its next "
                                       "search embeds them", exc_info=True)
                if not found:
                    return
        finally:
            _EMBEDDING.discard(threading.current_thread())

    def _too_many_to_embed(self, index: HybridIndex, fresh: "Sequence[Document]") -> bool:
        """Whether this pack should rank by BM25 and leave its texts to the catch-up thread, for an embedder with a
        model to load (10–30 ms of CPU a text): while more than the settings' `embed_in_pack` texts the index
        took in earlier still wait for vectors (a catch-up under way), or when this call brings more than that
        many texts to embed in more new documents than the index holds (a session met late, the first compaction
        of a long chat). New documents joining a larger pool go in inline, however many: no session stays
        lexical."""
        bound = self.settings.embed_in_pack
        if bound is None or getattr(self.cache.embedder, "warm_up", None) is None:
            return False

        def more_missing(texts: "Iterable[str]", than: int) -> bool:
            missing = 0
            for text in dict.fromkeys(texts):
                missing += text not in self.cache
                if missing > than:
                    return True
            return False

        if len(index._pending) > bound and more_missing(index.waiting_texts(), bound):
            return True
        return len(fresh) > max(bound, len(index)) and more_missing((d.search_text for d in fresh), bound)

    def _catch_up(self) -> None:
        """Embed the waiting documents on a background thread (`_embed_backlog`), one thread at a time. A request
        made while a thread runs is served by it: the thread leaves only when no request came since its last
        round, decided under the same lock."""
        with self._warm_lock:
            self._catch_up_wanted = True
            if self._catching_up is not None:
                return

            def run() -> None:
                while True:
                    with self._warm_lock:
                        if not self._catch_up_wanted or _EXITING.is_set():
                            self._catching_up = None
                            return
                        self._catch_up_wanted = False
                    try:
                        self._embed_backlog()
                    except Exception:  # the thread must reach the check above, or no catch-up would start again
                        logger.warning("aether-context: the embedding catch-up failed", exc_info=True)

            self._catching_up = threading.Thread(target=run, name="aether-embedder-catch-up", daemon=True)
            self._catching_up.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the model is loaded and the waiting documents embedded (or `timeout` seconds pass, for
        both together); True when dense ranking is ready and no catch-up is running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.ready()  # starts the warm-up if it has not started
        for thread in (self._warming, self._catching_up):
            if thread is not None:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        catching_up = self._catching_up
        return self.ready() and (catching_up is None or not catching_up.is_alive())

    def _sync(self, index: HybridIndex, documents: "tuple[Document, ...]", held: "tuple | None"
              ) -> "tuple[tuple[Document, ...], bool]":
        """Bring `index` to the pool `documents`: drop the ids no longer in it; returns the documents to add and
        whether the pool's ids are unique. `held` is what the last sync of `index` recorded (None: nothing is
        known). A pool that is the last pool plus new documents adds those. When the last pool's ids were
        unique, its leading documents that are the same objects, in order (an equal document may carry other
        metadata), are what the index holds already: a pool that changed near its end (a compaction rebuilds the
        last compacted turn's document) drops and adds its tail alone, read from the tail only while the tail's
        ids are unique and new to the leading documents. Otherwise every id is checked. The last pool is held
        with its record, so its documents are compared with the new pool's by identity, in one C-level pass."""
        known = held is not None and held[0] is index
        n = len(held[1]) if known else 0
        if known and n <= len(documents) and documents[:n] == held[1] and _same_metadata(held[1], documents):
            fresh = documents[n:]  # the last pool, grown (one C-level pass, identity first)
            ids = {d.id for d in fresh}
            return fresh, held[2] and len(ids) == len(fresh) and not any(i in index for i in ids)
        same = _same_objects(held[1], documents) if known and held[2] else 0
        if known and held[2]:
            old, fresh = held[1], documents[same:]
            gone, ids = {d.id for d in old[same:]}, {d.id for d in fresh}
            if len(ids) == len(fresh) and not any(i in index and i not in gone for i in ids):
                # in the order `index.ids()` lists them (by row): the index's sums then run as a full sync's do
                stale = sorted((i for i in gone if i not in ids), key=index._row_of.__getitem__)
                if stale:
                    index.remove(stale)
                return fresh, True
        wanted = {d.id for d in documents}
        stale = [d for d in index.ids() if d not in wanted]
        if stale:
            index.remove(stale)
        unique = len(wanted) == len(documents)
        return documents[same if unique else 0:], unique

    def _index(self, namespace: str, layer: str) -> HybridIndex:
        key = (namespace, layer)
        index = self._indexes.get(key)
        if index is None:
            index = HybridIndex(self.settings, cache=self.cache, analyzer=self.analyzer)
            self._indexes[key] = index
            while len(self._indexes) > self._max:
                gone = id(self._indexes.popitem(last=False)[1])
                self._pools.pop(gone, None)
        self._indexes.move_to_end(key)
        return index

    def forget(self, namespace: str) -> None:
        """Drop the indexes of one namespace (a session the caller released) and the pools they were synced to;
        vectors stay cached by content."""
        for key in [k for k in list(self._indexes) if k[0] == namespace]:  # a snapshot: the pack thread may add
            index = self._indexes.pop(key, None)
            if index is not None:
                self._pools.pop(id(index), None)

    def rank(self, namespace: str, layer: str, query: str, documents: Sequence[Document], *, k: int,
             count_tokens: Callable[[str], int] | None, now: float | None, exclude: Iterable[str] = (),
             dense: bool | None = None, pool: int | None = None, facets: Sequence[str] = (),
             floor: float = 0.0) -> RetrievalResult:
        """The best `k` of `documents` for `query`, in pick order, with their scores and signals.

        A repeated id in `documents` counts once (its last version). `dense`: None ranks densely
        when the model is ready and lexically until then (never waiting); True waits for the
        model; False ranks lexically. `now` should be the session's own latest time, never the
        wall clock (packs must replay). `count_tokens` None: items carry no token count (the pack counts
        the lines it renders from them instead). `pool`: how many of each retriever's best join fusion in this
        search (default: the settings' `candidate_pool`). `facets`: parts of the query also searched alone, the
        rankings fused (`facets.fuse`). `floor`: the settings' `information_floor` for this search (0: none).
        """
        chosen = dense is None
        if dense is None:
            dense = self.ready()
        elif dense and not self.available():
            dense = False
        with bounded_threads(self.settings.embedding_threads):
            index = self._index(namespace, layer)
            documents = tuple(documents)  # a tuple given (the Memory pool carried from the last call) is not copied
            exclude = tuple(exclude)
            # one critical section: the pool recorded is the pool the index holds, and the search reads it
            with index._lock:
                slot = id(index)
                # forgotten until synced: a sync or an add that fails half way leaves an index that is no
                # known pool, and the next call syncs it whole (`index.ids()`), not from a tail
                held = self._pools.pop(slot, None)
                fresh, unique = self._sync(index, documents, held)
                if chosen and dense and self._too_many_to_embed(index, fresh):
                    dense = False  # this call ranks by BM25 and says so; the next ones densely, once embedded
                    self._catch_up()
                index.add(fresh, embed=dense)
                self._pools[slot] = (index, documents, unique)
                if not documents or k < 1:
                    return RetrievalResult(query, (), {"retrieval_hit_rate": 0.0, "similarity": 0.0,
                                                       "freshness": 0.0, "selected": 0.0, "dense_off": float(not dense),
                                                       "empty_query": 0.0, "timestamps_ignored": 0.0})
                settings = self.settings.model_copy(update={"information_floor": floor,
                                                            **({"candidate_pool": pool} if pool else {})})
                results = [index.search(q, k=k, count_tokens=count_tokens, now=now, exclude=exclude, dense=dense,
                                        settings=settings) for q in (query, *facets)]
                return fuse(results, k)

_DEFAULT: dict[str, Retriever] = {}
_DEFAULT_EMBEDDER: list[Embedder] = []


def use_default_embedder(embedder: Embedder | None) -> None:
    """Process-wide embedder for retrievers built without one (None: the profile's model).

    For test suites and installs without torch, e.g. `use_default_embedder(HashingEmbedder())`.
    """
    _DEFAULT_EMBEDDER[:] = [embedder] if embedder is not None else []
    _DEFAULT.clear()


def default_retriever(profile) -> Retriever:
    """One shared retriever per retrieval settings (replay, repack and the plugin reuse its embeddings)."""
    key = profile.retrieval.model_dump_json()
    if key not in _DEFAULT:
        _DEFAULT[key] = Retriever(profile.retrieval, embedder=_DEFAULT_EMBEDDER[0] if _DEFAULT_EMBEDDER else None)
    return _DEFAULT[key]
