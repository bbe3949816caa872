"""Query facets without a model call, their fusion, and word forms for keyword memory services.

Why: one query for a compound question ("What did Ana research, and when did Ben move?") or a request
naming several entities ranks the items that match most of its words first, so one facet's items crowd
out the other's. Each clause, quoted phrase, entity and task item is searched on its own as well and the
rankings are fused by reciprocal rank. All pure and bounded: a request is read up to `MAX_CHARS` and
gives at most `MAX_FACETS` facets, so no input makes the work grow faster than its size.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Sequence

from .analyzer import STOP_WORDS, stem
from .items import RetrievalResult

__all__ = ["facets", "fuse", "word_forms", "content_words"]

MAX_CHARS = 2_000  # of a request read for facets: a pasted log is no better a query past its start
MAX_FACETS = 4
MAX_WORDS = 60  # a longer request is a text, not a question: its clauses and entities are not facets
_CLAUSE = re.compile(r"[.?!;]+\s*|,?\s+(?:and|but|also|then)\s+(?=(?:what|when|where|who|which|why|how|did|does|do|"
                     r"is|are|was|were|has|have|had|can|could|would|will)\b)", re.IGNORECASE)
_QUOTED = re.compile(r"\"([^\"\n]{3,200})\"|“([^”\n]{3,200})”|(?<!\w)'([^'\n]{3,80})'(?!\w)")
# a capitalised word after a clause's first word; an id (letters then a digit, 3+ digits, camelCase, snake_case)
_ENTITY = re.compile(r"(?<=[\w,] )[A-Z][A-Za-z0-9_-]+|\b[A-Za-z]+-?\d[\w-]*|\b\d{3,}\b|\b[a-z]+[A-Z]\w*|\b\w+_\w+")
_WORD = re.compile(r"\w+")


def content_words(text: str, limit: int) -> list[str]:
    """The first `limit` distinct lower-case words of `text` longer than two letters, stop words out."""
    words: dict[str, None] = {}
    for match in _WORD.finditer(text[:MAX_CHARS]):
        word = match.group().lower()
        if len(word) > 2 and word not in STOP_WORDS:
            words.setdefault(word)
            if len(words) >= limit:
                break
    return list(words)


def facets(request: str, items: Sequence[str] = ()) -> list[str]:
    """The parts of a query searched on their own: each clause of a compound request, each quoted phrase,
    the request once per entity when it names several (the other entities left out), all only for a request
    of at most `MAX_WORDS` words; then each task item (goal, step, acceptance) when there is a request too.
    Distinct, at most `MAX_FACETS`, none the whole query."""
    text = request[:MAX_CHARS]
    found: list[str] = []
    if len(text.split(maxsplit=MAX_WORDS)) > MAX_WORDS:
        text = ""
    clauses = [c.strip(" ,") for c in _CLAUSE.split(text) if content_words(c, 2)]
    if len(clauses) > 1:
        found += clauses
    found += [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]
    entities = list(dict.fromkeys(e for e in _ENTITY.findall(text) if e.lower() not in STOP_WORDS))
    if len(entities) > 1 and len(clauses) < 2:  # a clause per entity already, or the request once per entity
        for entity in entities:
            others = re.compile(r"\b(?:%s)\b" % "|".join(re.escape(e) for e in entities if e != entity))
            found.append(" ".join(others.sub(" ", text).split()))
    if request.strip():
        found += [i[:MAX_CHARS] for i in items if i and i.strip()]
    whole = " ".join(x for x in (request, *items) if x)
    out = [f for f in dict.fromkeys(found) if f != whole and content_words(f, 1)]
    return out[:MAX_FACETS]


def fuse(results: Sequence[RetrievalResult], k: int, rrf_k: int = 60) -> RetrievalResult:
    """The whole query's items and the facets' interleaved, at most `k`: by the best rank an item has in any
    list (each facet's first items come before any list's second ones), then by its reciprocal-rank sum (the
    lists agreeing on it), then by first appearance. An item keeps the scores of the first result it appears
    in; its `score` becomes its reciprocal-rank sum scaled to the best's."""
    if len(results) == 1:
        return results[0]
    best: dict[str, int] = {}
    total: dict[str, float] = {}
    first: dict[str, object] = {}
    for result in results:
        for rank, item in enumerate(result.items, start=1):
            best[item.id] = min(best.get(item.id, rank), rank)
            total[item.id] = total.get(item.id, 0.0) + 1.0 / (rrf_k + rank)
            first.setdefault(item.id, item)
    order = sorted(total, key=lambda i: (best[i], -total[i]))[:k]  # stable: ties keep their first appearance
    top = max(total.values(), default=1.0)
    items = tuple(replace(first[i], rank=r, score=round(total[i] / top, 6)) for r, i in enumerate(order, start=1))
    return RetrievalResult(results[0].query, items, {**results[0].signals, "selected": float(len(items)),
                                                     "facets": float(len(results) - 1)})


def word_forms(word: str) -> list[str]:
    """`word` and its regular English inflections, from its stem ("camped" -> camp, camps, camped, camping):
    a keyword memory service matches whole words, so a query word should meet the forms a memory uses."""
    word = word.lower()
    s = stem(word)
    if len(s) < 3 or not s.isalpha():
        return [word]
    forms = {word, s}
    if s.endswith("e"):
        forms |= {s + "s", s + "d", s[:-1] + "ing"}
    elif s.endswith("i"):
        forms |= {s[:-1] + "y", s[:-1] + "ies", s + "ed"}
    else:
        forms |= {s + "s", s + "ed", s + "ing"}
    return sorted(forms)
