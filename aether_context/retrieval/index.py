"""`HybridIndex`: incremental BM25 + dense retrieval, fused, aged, de-duplicated, MMR-diversified
and fitted to a token budget.

Why one object: the Memory and Evidence layers add items as a session runs and ask for the best
context under a budget on every model call. Items are analysed and embedded once, when they
arrive; a search costs one query embedding plus array work over the postings of the query's
terms and one matrix-vector product (p50 in docs/benchmarks.md, retrieval section). Same index, query and
settings give the same items in the same order: every tie breaks by document id.

Usage::

    index = HybridIndex(RetrievalSettings(), embedder=HashingEmbedder())
    index.add([Document("m1", "The user prefers window seats.", "memory", timestamp=1.7e9)])
    result = index.search("seat preference", budget_tokens=500, count_tokens=counter.count_text)
    for item in result.items:
        print(item.id, item.bm25, item.dense, item.fused, item.mmr)
    result.signals["retrieval_hit_rate"]
"""

from __future__ import annotations

import logging
import math
import re
import threading
from typing import Callable, Iterable

import numpy as np

from .analyzer import STOP_WORDS, Analyzer, content_key
from .dedup import group_duplicates
from .embeddings import Embedder, EmbeddingCache, SentenceTransformerEmbedder, text_hash
from .cuts import near_top, top_rows
from .fusion import freshness_decay, ignored_timestamps, normalize, ranks, rrf_fusion, weighted_fusion
from .items import Document, RetrievalResult, ScoredItem
from .lexical import LexicalIndex
from .mmr import mmr_select
from .settings import RetrievalSettings
from .threads import bounded_threads

__all__ = ["HybridIndex"]

logger = logging.getLogger(__name__)

_HEX64 = re.compile(r"[0-9a-f]{64}")
LAST_SEARCHES = 4  # searches an index keeps by their inputs (a call ranks Memory twice at most, and wider once)


class HybridIndex:
    """Documents in, `RetrievalResult`s out. Thread-safe for one writer and many readers (one lock).

    Pass `embedder` (any `Embedder`) or a shared `cache` (an `EmbeddingCache`, which carries its
    embedder); by default the settings' model is used, loaded lazily on the first embedding. An
    embedder whose `available()` is False (sentence-transformers not installed) leaves ranking
    lexical (signal `dense_off`).
    The analyzer is fixed at construction (`stem`, `stop_words` settings).
    """

    def __init__(self, settings: RetrievalSettings | None = None, *, embedder: Embedder | None = None,
                 cache: EmbeddingCache | None = None, analyzer: Callable[[str], list[str]] | None = None):
        self.settings = settings or RetrievalSettings()
        s = self.settings
        if cache is None:
            if embedder is None:
                embedder = SentenceTransformerEmbedder.from_settings(s)
            cache = EmbeddingCache(embedder, url=s.embedding_cache_url)
        elif embedder is not None and embedder is not cache.embedder:
            raise ValueError("pass either embedder= or cache= (a cache carries its own embedder), not both")
        self.cache = cache
        self.embedder: Embedder = cache.embedder
        available = getattr(self.embedder, "available", None)
        self.dense_available = True if available is None else bool(available())  # False: a light install
        self.analyzer = analyzer or Analyzer(stop_words=STOP_WORDS if s.stop_words else frozenset(),
                                             stem=s.stem)
        self._lexical = LexicalIndex(self.analyzer, context_weight=s.context_weight)
        self._docs: list[Document] = []
        self._ids: list[str] = []
        self._keys: list[str] = []
        self._row_of: dict[str, int] = {}
        self._rows_by_hash: dict[str, int | set[int]] = {}
        self._vec_rows = np.zeros(0, dtype=np.int64)  # row -> row of cache.matrix; -1 until embedded
        self._pending: list[int] = []
        self._newest: float | None = None
        self._dense_on = True
        self._version = 0  # bumped by every change to the documents: a search's result is valid for one version
        self._last: dict[tuple, RetrievalResult] = {}  # the last searches' results by their inputs (a few)
        self._pools: dict[tuple, tuple] = {}  # the last searches' fusion pools and scores, without the clock (a few)
        self._exclude_keys: dict[str, str] = {}  # the last search's excluded texts -> their content keys
        self._text_terms: dict[int, np.ndarray] = {}  # row -> its text's distinct term ids (`_information`)
        self._median: tuple[tuple, float] = ((), 0.0)  # (version, epsilon) -> the live rows' median information
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return self._lexical.alive_count

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._row_of

    def get(self, doc_id: str) -> Document | None:
        row = self._row_of.get(doc_id)
        return None if row is None else self._docs[row]

    def ids(self) -> list[str]:
        """Ids of the live documents (each once)."""
        return list(self._row_of)

    def add(self, documents: Iterable[Document], *, embed: bool | None = None) -> int:
        """Index new documents; returns how many rows were added.

        Ids are unique: a repeated id (in this batch or already indexed) keeps only its last
        version. Re-adding an id with the same text and context updates its source, timestamp and
        metadata in place; otherwise it replaces the old version. Documents are embedded now when
        `embed` is True (None: the `embed_on_add` setting), else at the first search that uses
        dense ranking."""
        batch: dict[str, Document] = {}
        for doc in documents:
            batch.pop(doc.id, None)  # last wins, in the position it was last sent
            batch[doc.id] = doc
        with self._lock:
            fresh: list[Document] = []
            for doc in batch.values():
                row = self._row_of.get(doc.id)
                if row is not None and self._docs[row] is doc:  # the same document again: nothing to do
                    continue
                if row is not None and self._docs[row].search_text == doc.search_text:
                    self._docs[row] = doc
                    self._note_timestamp(doc)
                    self._version += 1
                    continue
                if row is not None:
                    self._remove_row(row)
                fresh.append(doc)
            if not fresh:
                return 0
            self._version += 1
            rows = self._lexical.add([(d.text, d.context) for d in fresh])
            for row, doc in zip(rows, fresh):
                self._docs.append(doc)
                self._ids.append(doc.id)
                self._row_of[doc.id] = row
                self._note_timestamp(doc)
                key = content_key(doc.text)
                self._keys.append(key)
                for h in (key, text_hash(doc.text)):
                    self._link(h, row)
            self._vec_rows = np.concatenate([self._vec_rows, np.full(len(rows), -1, dtype=np.int64)])
            self._pending.extend(rows)
            if (self.settings.embed_on_add if embed is None else embed) and self.dense_available:
                self.prefetch()
            return len(rows)

    def _link(self, key: str, row: int) -> None:
        """Map a content hash to a row; one int for the common single row, a set beyond."""
        held = self._rows_by_hash.get(key)
        if held is None:
            self._rows_by_hash[key] = row
        elif isinstance(held, set):
            held.add(row)
        elif held != row:
            self._rows_by_hash[key] = {held, row}

    def _unlink(self, key: str, row: int) -> None:
        held = self._rows_by_hash.get(key)
        if held == row:
            del self._rows_by_hash[key]
        elif isinstance(held, set):
            held.discard(row)
            if len(held) == 1:
                self._rows_by_hash[key] = next(iter(held))

    def _hash_rows(self, key: str) -> set[int]:
        held = self._rows_by_hash.get(key)
        return set() if held is None else (set(held) if isinstance(held, set) else {held})

    def remove(self, ids: Iterable[str]) -> int:
        """Drop documents by id; unknown ids are ignored. Returns how many were removed."""
        with self._lock:
            removed = 0
            for doc_id in ids:
                row = self._row_of.get(doc_id)
                if row is not None:
                    self._remove_row(row)
                    removed += 1
            return removed

    def _remove_row(self, row: int) -> None:
        self._version += 1
        doc = self._docs[row]
        self._lexical.remove(row)
        del self._row_of[doc.id]
        self._text_terms.pop(row, None)
        for h in (self._keys[row], text_hash(doc.text)):
            self._unlink(h, row)

    def waiting_texts(self) -> list[str]:
        """The texts of the documents still waiting for a vector (what `prefetch` would embed)."""
        with self._lock:
            alive = self._lexical.alive_mask()
            return [self._docs[r].search_text for r in self._pending if alive[r]]

    def prefetch(self) -> int:
        """Embed every document still waiting for a vector, in batches; returns how many."""
        with self._lock:
            alive = self._lexical.alive_mask()
            rows = [r for r in self._pending if alive[r]]
            if rows:
                with bounded_threads(self.settings.embedding_threads):
                    self._vec_rows[rows] = self.cache.rows([self._docs[r].search_text for r in rows])
            self._pending = []  # once embedded: a failed embedding leaves them pending for the next search
            return len(rows)

    def _dense_scores(self, query: str, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Fast cosine of every row to the query vector (0 for rows not asked for): one product over the shared
        matrix when this index holds most of it or a product of this query is held (`QueryVectors.product`: its
        new rows only), else over the rows' own vectors. Fast, not exact: a product's bits depend on where a row
        sits in the matrix (another process, another history), so these only choose the rows `_cosines` scores."""
        out = np.zeros(len(self._docs), dtype=np.float32)
        matrix = self.cache.matrix
        product = self.cache.queries.product(text_hash(query), q, matrix, start=matrix.shape[0] <= 2 * len(rows))
        out[rows] = product[self._vec_rows[rows]] if product is not None else matrix[self._vec_rows[rows]] @ q
        return out

    def _cosines(self, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The rows' cosines to the query vector as float32 values, the same bits wherever a vector
        sits: each a float64 sum in one fixed order (einsum's own loop, no BLAS blocking)."""
        vectors = self.cache.matrix[self._vec_rows[rows]].astype(np.float64)
        return np.einsum("ij,j->i", vectors, q.astype(np.float64)).astype(np.float32)

    def _vectors(self, rows: np.ndarray) -> np.ndarray:
        """The candidates' vectors (a small copy), zeros when dense ranking is off."""
        if not self._dense_on:
            return np.zeros((len(rows), 1), dtype=np.float32)
        return self.cache.matrix[self._vec_rows[rows]]

    def _excluded_rows(self, exclude: Iterable[str]) -> set[int]:
        """Rows holding an excluded text. Each text's key is kept until the next search: a session's
        verbatim texts are excluded again on every call (normalising and hashing them is the cost)."""
        rows: set[int] = set()
        held, keys = self._exclude_keys, {}
        for entry in exclude:
            key = keys.get(entry) or held.get(entry)
            if key is None:
                key = entry if _HEX64.fullmatch(entry) else content_key(entry)
            keys[entry] = key
            rows |= self._hash_rows(key)
        self._exclude_keys = keys
        return rows

    def _note_timestamp(self, doc: Document) -> None:
        ts = doc.timestamp
        if ts is not None and math.isfinite(ts) and (self._newest is None or ts > self._newest):
            self._newest = ts

    def search(self, query: str, *, k: int | None = None, budget_tokens: int | None = None,
               count_tokens: Callable[[str], int] | None = None, now: float | None = None,
               exclude: Iterable[str] = (), settings: RetrievalSettings | None = None,
               dense: bool = True) -> RetrievalResult:
        """The best documents for `query`, at most `k` and/or within `budget_tokens`.

        `exclude` holds texts, or sha256 hex digests of raw or normalised text (`content_key`),
        already present in another layer. `now` (epoch seconds; pass the session's own clock)
        ages timestamped items; None means the newest finite timestamp ever added, so results
        never depend on the wall clock. Timestamps that are not finite or lie after `now` are
        ignored for freshness (signal `timestamps_ignored`). A query without a content word
        (empty, punctuation, stop words) selects nothing (signal `empty_query`). `dense=False`
        ranks by BM25 alone without embedding anything (signal `dense_off`), e.g. while the model
        loads. `settings` overrides the index's settings for this call (the analyzer stays fixed).
        """
        s = settings or self.settings
        if budget_tokens is not None and count_tokens is None:
            raise ValueError("search got budget_tokens but no count_tokens: pass e.g. TokenCounter().count_text")
        if budget_tokens is not None and budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
        if k is not None and k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if k is None and budget_tokens is None:
            k = s.top_k
        dense = dense and s.dense_weight > 0 and self.dense_available
        with self._lock, bounded_threads(s.embedding_threads):
            self._dense_on = dense
            excluded = self._excluded_rows(exclude)
            eligible = self._lexical.alive_mask().copy()
            n_excluded = int(sum(1 for r in excluded if eligible[r]))
            eligible[list(excluded)] = False
            rows = np.flatnonzero(eligible)
            terms = self.analyzer(query)
            flags = {"dense_off": float(not dense), "empty_query": float(not terms)}
            if len(rows) == 0 or budget_tokens == 0 or not terms:
                return RetrievalResult.of(query, [], 0, n_excluded, 0, flags=flags)
            # The same search again (a zone ranked twice; a payload kept as sent, at its clock): a function of these
            # inputs and the version. Its pool and scores do not read the clock: a later clock only ranks again.
            pooled = (self._version, query, frozenset(excluded), dense, s)
            key = (*pooled, k, budget_tokens, count_tokens, now)
            result = self._last.get(key)
            if result is None:
                pool, bm25, scores, s = held = self._pools.get(pooled) or self._pool(query, s, rows, terms, dense)
                self._pools = self._remember(self._pools, pooled, held)
                result = (self._rank(query, s, pool, bm25, scores, k, budget_tokens, count_tokens, now, n_excluded,
                                     flags) if len(pool) else
                          RetrievalResult.of(query, [], 0, n_excluded, 0, flags=flags))
                self._last = self._remember(self._last, key, result)
            return result

    def _remember(self, held: dict, key: tuple, value: object) -> dict:
        """`held` with `key` last, without other versions' entries, the oldest out beyond `LAST_SEARCHES`."""
        held = {**{old: v for old, v in held.items() if old[0] == self._version}, key: value}
        return dict(list(held.items())[-LAST_SEARCHES:])

    def _pool(self, query: str, s: RetrievalSettings, rows: np.ndarray, terms: list[str], dense: bool) -> tuple:
        """Fusion's pool (each retriever's best `candidate_pool` of `rows`), its BM25 and dense scores, the settings."""
        bm25 = self._lexical.scores(terms, k1=s.bm25_k1, b=s.bm25_b, epsilon=s.bm25_epsilon)
        lexical_rows = rows[bm25[rows] > 0]
        if dense:
            self.prefetch()
            q = self.cache.queries.vector(text_hash(query), query)  # shared by the indexes of this cache
            scores = np.zeros(len(self._docs), dtype=np.float64)
            near = near_top(self._dense_scores(query, q, rows), rows, s.candidate_pool)
            scores[near] = self._cosines(q, near)
            pool = np.union1d(top_rows(bm25, lexical_rows, s.candidate_pool, self._ids),
                              top_rows(scores, near, s.candidate_pool, self._ids))
            scored = np.zeros(len(self._docs), dtype=bool)  # a mask, not `np.isin` (150 µs for 200 rows)
            scored[near] = True
            lexical_only = pool[~scored[pool]]
            scores[lexical_only] = self._cosines(q, lexical_only)
        else:
            scores = np.zeros(len(self._docs), dtype=np.float32)
            pool = top_rows(bm25, lexical_rows, s.candidate_pool, self._ids)
            s = s.model_copy(update={"dense_weight": 0.0, "lexical_weight": s.lexical_weight or 1.0})
        return pool, bm25[pool], scores[pool].astype(np.float64, copy=False), s

    def _rank(self, query: str, s: RetrievalSettings, pool: np.ndarray, bm25: np.ndarray, dense: np.ndarray,
              k: int | None, budget: int | None, count_tokens: Callable[[str], int] | None, now: float | None,
              n_excluded: int, flags: dict[str, float]) -> RetrievalResult:
        # Candidates in id order: sums, means and ties then never depend on insertion order.
        ids, docs = self._ids, self._docs  # rows read as Python ints: indexing a list by numpy scalars costs 3x
        by_id = np.argsort(np.array([ids[r] for r in pool.tolist()]), kind="stable")
        pool, bm25, dense = pool[by_id], bm25[by_id], dense[by_id]
        id_order = np.arange(len(pool))
        weights = (s.lexical_weight, s.dense_weight)
        if s.fusion == "rrf":
            rank_lists = (ranks(bm25, bm25 > 0, id_order), ranks(dense, np.ones(len(pool), bool), id_order))
            fused = rrf_fusion(rank_lists, weights, s.rrf_k)
        else:
            fused = weighted_fusion((bm25, dense), weights, s.normalization)
        relevance = normalize(fused, "minmax") if np.ptp(fused) > 0 else np.ones(len(pool))
        if now is None:
            now = self._newest
        stamps = [docs[r].timestamp for r in pool.tolist()]
        decay = freshness_decay(stamps, now if now is not None else 0.0,
                                s.freshness_half_life_days if now is not None else None)
        ignored = ignored_timestamps(stamps, now) if now is not None else 0
        flags = {**flags, "timestamps_ignored": float(ignored)}
        score = relevance * (1.0 - s.freshness_weight + s.freshness_weight * decay)
        keep = relevance >= s.min_score
        if s.information_floor > 0 and len(pool) > 1:
            keep &= self._information(pool, s.bm25_epsilon) >= s.information_floor * self._median_information(s.bm25_epsilon)
        keep = np.flatnonzero(keep)
        order = keep[np.lexsort((id_order[keep], -score[keep]))]
        ranked = pool[order].tolist()
        vectors = self._vectors(pool[order])
        sims = vectors @ vectors.T  # shared by dedup and MMR
        groups = group_duplicates([self._keys[r] for r in ranked], vectors, s.dedup_threshold, sims)
        leaders = np.array([g[0] for g in groups], dtype=np.int64)
        at = order[leaders].tolist()  # each group's leader, as an index into pool

        rows = pool.tolist()  # cost(i): the tokens of candidate i, an index into pool (a counter caches its own)
        cost = (lambda i: count_tokens(docs[rows[i]].text)) if count_tokens is not None else None
        picks = mmr_select(score[order[leaders]], vectors[leaders], lam=s.mmr_lambda, k=k, budget=budget,
                           cost=(lambda i: cost(at[i])) if budget is not None and cost else None,
                           sims=sims[np.ix_(leaders, leaders)])
        scores = [a.tolist() for a in (bm25, dense, fused, decay, score)]  # as Python floats, once (as float() gives)
        items = [self._item(rank, [docs[ranked[j]] for j in groups[i]], [f[at[i]] for f in scores], value,
                            cost(at[i]) if cost else None)
                 for rank, (i, value) in enumerate(picks, start=1)]
        logger.debug("search %r: %d candidates, %d groups, %d picked", query[:60], len(pool), len(groups), len(items))
        return RetrievalResult.of(query, items, len(pool), n_excluded, len(order) - len(groups), s.hit_threshold, flags)

    def _information(self, rows: np.ndarray, epsilon: float) -> np.ndarray:
        """Each row's information: the idf of its text's distinct words summed (its context not counted)."""
        idf = self._lexical._idf(epsilon)
        vocab, out = self._lexical._vocab, np.zeros(len(rows), dtype=np.float64)
        for n, row in enumerate(rows.tolist()):
            terms = self._text_terms.get(row)
            if terms is None:
                ids = sorted({vocab.get(t) for t in self.analyzer(self._docs[row].text)} - {None})
                terms = self._text_terms[row] = np.array(ids, dtype=np.int64)
            out[n] = float(idf[terms].sum()) if len(terms) else 0.0
        return out

    def _median_information(self, epsilon: float) -> float:
        """The median information of the live documents (once per version of the index)."""
        key = (self._version, epsilon)
        if self._median[0] != key:
            self._median = (key, float(np.median(self._information(np.flatnonzero(self._lexical.alive_mask()), epsilon))))
        return self._median[1]

    @staticmethod
    def _item(rank: int, members: list[Document], scores: list[float], mmr: float, tokens: int | None) -> ScoredItem:
        """A picked group as an item: its leader, its bm25, dense, fused, freshness and score, its members."""
        return ScoredItem.of(members[0], rank, *scores, mmr, tokens,
                             tuple([d.id for d in members]), tuple([d.source for d in members]))

