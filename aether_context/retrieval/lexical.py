"""An incremental BM25 index with rank_bm25's BM25Okapi formula, scored through an inverted index.

Why not `rank_bm25.BM25Okapi` itself: it fixes idf when built, so every new memory would mean a
rebuild (O(corpus) per turn), and its `get_scores` loops over every document in Python for every
query term (about 24 ms a query at 5K documents, linear in corpus size). Here documents are
appended to postings lists; df, document lengths and the idf table are kept so a query touches
only the postings of its own terms, with numpy. The scores equal BM25Okapi's on the same
tokenised corpus (tested), including its idf floor `epsilon * mean idf` for very common terms.
One deliberate deviation: when the mean idf is <= 0 (corpora of a handful of documents, where
every term is "common"), BM25Okapi's floor turns negative and ranks matching documents *below*
non-matching ones; there, terms with idf <= 0 get a small positive floor instead.
k1, b and epsilon are query-time arguments, so per-call settings can change them.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Callable, Sequence

import numpy as np

__all__ = ["LexicalIndex"]

_DEGENERATE_FLOOR = 1e-3


class _Growable:
    """A numpy vector with amortised O(1) append."""

    def __init__(self, dtype: type):
        self.data = np.zeros(16, dtype=dtype)
        self.size = 0

    def append(self, value: float) -> None:
        if self.size == len(self.data):
            self.data = np.concatenate([self.data, np.zeros_like(self.data)])
        self.data[self.size] = value
        self.size += 1

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.size]


class LexicalIndex:
    """BM25 over rows numbered in insertion order; removed rows stay as tombstones scoring 0.

    A document may come with a context (text searched with it, e.g. a turn's neighbours): its
    terms count `context_weight` times as much as the document's own (a BM25F-style field
    weight), so a turn outranks its neighbours on the neighbours' own words. Postings are
    compact typed arrays (4 bytes per row and per frequency): 100K documents fit in tens of MB.
    """

    def __init__(self, analyzer: Callable[[str], list[str]], *, context_weight: float = 1.0):
        if not 0.0 <= context_weight <= 1.0:
            raise ValueError(f"context_weight must be within 0..1, got {context_weight}")
        self.analyzer = analyzer
        self.context_weight = context_weight
        self._vocab: dict[str, int] = {}
        self._df = _Growable(np.int64)
        self._rows: list[array] = []  # per term: rows holding it ('i')
        self._tfs: list[array] = []  # per term: its weighted frequency in each of those rows ('f')
        self._doc_len = _Growable(np.float64)
        self._doc_terms: list[array | None] = []  # per row: its term ids, to undo on remove
        self._alive = _Growable(np.bool_)
        self._n_alive = 0
        self._total_len = 0.0
        self._idf_cache: tuple[tuple[int, float], np.ndarray] | None = None
        self._version = 0

    def __len__(self) -> int:
        """Number of rows, tombstones included (row ids run from 0 to len - 1)."""
        return self._alive.size

    @property
    def alive_count(self) -> int:
        return self._n_alive

    def alive_mask(self) -> np.ndarray:
        """A read-only boolean view: True for live rows."""
        view = self._alive.view
        view.flags.writeable = False
        return view

    def _counts(self, doc: str | tuple[str, str]) -> Counter:
        if isinstance(doc, str):
            return Counter(self.analyzer(doc))
        text, context = doc
        counts: Counter = Counter(self.analyzer(text))
        if context and self.context_weight > 0:
            for term, tf in Counter(self.analyzer(context)).items():
                counts[term] += self.context_weight * tf
        return counts

    def add(self, texts: Sequence[str | tuple[str, str]]) -> list[int]:
        """Analyse and append documents (a text, or a (text, context) pair); returns their row numbers."""
        rows = []
        for text in texts:
            row = self._alive.size
            counts = self._counts(text)
            known = [self._vocab.get(term) for term in counts]  # most terms are known: one dict look-up each
            terms = array("i", known if None not in known else map(self._term_id, counts))
            postings, freqs = self._rows, self._tfs
            for tid, tf in zip(terms, counts.values()):
                postings[tid].append(row)
                freqs[tid].append(tf)
            self._df.data[np.frombuffer(terms, dtype=np.int32)] += 1  # a document's terms are distinct: one pass
            self._doc_terms.append(terms)
            length = float(sum(counts.values()))
            self._doc_len.append(length)
            self._alive.append(True)
            self._n_alive += 1
            self._total_len += length
            rows.append(row)
        self._version += 1
        return rows

    def _term_id(self, term: str) -> int:
        """The term's id, a new one (with empty postings) for a term never seen."""
        tid = self._vocab.get(term)
        if tid is None:
            tid = self._vocab[term] = len(self._rows)
            self._rows.append(array("i"))
            self._tfs.append(array("f"))
            self._df.append(0)
        return tid

    def remove(self, row: int) -> None:
        """Tombstone a row: it leaves df, N and the mean length, so scores match a rebuild without it."""
        if not self._alive.data[row]:
            return
        self._alive.data[row] = False
        self._df.data[np.frombuffer(self._doc_terms[row] or array("i"), dtype=np.int32)] -= 1
        self._doc_terms[row] = None
        self._n_alive -= 1
        self._total_len -= self._doc_len.data[row]
        self._version += 1

    def _idf(self, epsilon: float) -> np.ndarray:
        """BM25Okapi idf per term id; terms absent from every live document get 0."""
        key = (self._version, epsilon)
        if self._idf_cache is not None and self._idf_cache[0] == key:
            return self._idf_cache[1]
        df = self._df.view
        present = df > 0
        # a term's idf reads only its df: computed once per df value (a few hundred) and looked up for every term
        # (tens of thousands), the same bits as computed per term
        counts = np.arange(int(df.max(initial=0)) + 1, dtype=np.float64)
        by_count = np.log(self._n_alive - counts + 0.5) - np.log(counts + 0.5)
        idf = np.where(present, by_count[df], 0.0)
        if present.any():
            mean = float(idf[present].mean())
            if mean > 0:
                idf[present & (idf < 0)] = epsilon * mean
            else:  # tiny corpus: BM25Okapi would rank matches below non-matches; keep matches positive
                idf[present & (idf <= 0)] = _DEGENERATE_FLOOR * epsilon
        self._idf_cache = (key, idf)
        return idf

    def scores(self, query: str | list[str], *, k1: float = 1.5, b: float = 0.75,
               epsilon: float = 0.25) -> np.ndarray:
        """BM25Okapi score of every row for `query` (text, or terms already analysed); 0 for tombstones.

        A term repeated in the query counts once per repetition, as in BM25Okapi.
        """
        terms = self.analyzer(query) if isinstance(query, str) else query
        scores = np.zeros(self._alive.size, dtype=np.float64)
        if self._n_alive == 0:
            return scores
        idf = self._idf(epsilon)
        avgdl = self._total_len / self._n_alive
        doc_len = self._doc_len.view
        for term, count in sorted(Counter(terms).items()):
            tid = self._vocab.get(term)
            if tid is None or idf[tid] == 0:
                continue
            rows = np.frombuffer(self._rows[tid], dtype=np.int32)  # views: no copy, released below
            tfs = np.frombuffer(self._tfs[tid], dtype=np.float32).astype(np.float64)
            norm = k1 * (1.0 - b + b * doc_len[rows] / avgdl) if avgdl > 0 else k1
            scores[rows] += count * idf[tid] * (tfs * (k1 + 1.0) / (tfs + norm))
            del rows
        scores[~self._alive.view] = 0.0
        return scores
