"""Work ahead: what the next compaction will read, computed while the model answers.

A compaction reads the turns it moves out of the verbatim zone: their secrets masked, the values
they carried (KNOWN VALUES) and the words of those it leaves verbatim (which those values are not
repeated from), their fold lines (counted, and quoted as the block shows them) and the running
summary's reading of each (`decay.fold_ahead`), and, once they are Memory candidates, their retrieval
documents' BM25 analysis and embeddings (also as the next invocation's pruning of old tool outputs will
change them: a prune clears many compacted turns at once, dozens of documents to embed again). Done at
the compaction, that is a burst (a tool loop's compaction embedded and scanned three or four large turns
at once, ten times a normal call). Every one of those results is kept by content (the `PackCache`, the
counter's and `quote`'s caches, the retriever's embedding cache and its analyzer), so computing them for
the turns still verbatim, after a call's request has gone out, leaves the compaction only lookups.
What is not per turn, the merge of the values, is planned for the compaction the next call would
make (`values_ahead`): the compaction then merges only what its real new turn changed; and when that
compaction would keep the payload as sent, its Memory search is ranked too (`memory_ahead`).

`warm_ahead` never changes a pack: it only fills caches whose hits equal their misses (and syncs a
retrieval index to a pool, which no search's result depends on).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import partial

from ..profile import BudgetProfile
from ..retrieval import Document
from ..tokens import TokenCounting
from .cache import PackCache
from .collect import PackInputs, PackState, turn_start
from .conversation import CompactedReader, Verbatim, compacted_reader, verbatim_zone
from .decay import RunningSummary, cleared_turn, fold_ahead
from .fit import bounded_turn
from .known_values import known_values_of, turn_text, visible_words
from .memory_ahead import memory_ahead
from .prepare import Prepared, prepare, pruned_next
from .render import masking
from .retrieve import Retriever
from .select import documents_reading, history_document, pinned_neighbours, request_documents
from .values_ahead import values_ahead

__all__ = ["warm_ahead"]


def warm_ahead(inputs: PackInputs, state: PackState, profile: BudgetProfile, *, counter: TokenCounting,
               retriever: Retriever, cache: PackCache) -> int:
    """Mask, extract the values of, fold, and analyse and embed the documents of the turns `state` left
    verbatim (the pack built from `inputs`), and the newest compacted turn's document as the next compaction
    reads it; read the block's fold lines as the summary will; returns how many verbatim turns were read."""
    with masking(profile.redaction):
        prepared = prepare(inputs, profile, counter, cache)
        zone = verbatim_zone(state, inputs.request.messages)
        kept = zone.kept(prepared.turns)
        if not kept:
            return 0
        reader = compacted_reader(inputs, prepared, cache)
        for turn in kept:  # what the known values' merge reads of the text a compaction leaves verbatim
            visible_words(turn_text(turn), cache)
        for turn in map(reader.read, kept):
            known_values_of(turn, cache)
            fold_ahead(turn, reader.uris, counter, cache)  # as `decay_zones` folds and summarizes it
        _block_ahead(prepared, zone, state, reader, counter, cache)
        planned = values_ahead(inputs, prepared, zone, profile, counter=counter, cache=cache)  # merged as it will be
        if planned is not None:  # and Memory ranked for it
            memory_ahead(inputs, *planned, state, profile, counter=counter, retriever=retriever, cache=cache)
    # each kept turn's document as a compaction will build it (kept in `cache`, where the compaction looks it
    # up), analysed and embedded for the index (`Retriever.ahead`): with the turn after it, and without it (the
    # newest turn a compaction moves); and the newest compacted turn's with the turn after it, which it reads
    # once that turn moves too (`kept` leads with the pinned requests, which may sit at the start of a long
    # history: they are added by position, the tail from the newest compacted turn on). A pinned request
    # among compacted turns is folded by a later invocation's compaction: its compacted neighbours' documents
    # then read it as context (`pinned_neighbours`), so those are built and embedded ahead as well; and while
    # this invocation's request is pinned, its own and its neighbours' as the next invocation's history holds it
    turns = prepared.turns
    tail = max(0, bisect_left(turns, zone.through, key=turn_start) - 1)
    pinned = {i for i in (bisect_left(turns, p, 0, tail, key=turn_start) for p in zone.pinned)
              if i < tail and turns[i].start in zone.pinned}
    rows = sorted(pinned | set(range(tail, len(turns))))
    document = partial(history_document, turns, times=inputs.message_times, count_tokens=counter.count_text,
                       cache=cache)
    retriever.ahead([*(document(i, following=following) for i in rows for following in (True, False)),
                     *(document(i) for i in pinned_neighbours(pinned, tail) if i not in rows),
                     *request_documents(inputs, turns, zone.pinned, counter.count_text, cache),
                     *_pruned_documents(inputs, prepared, zone, state, profile, counter, cache)])
    return len(kept)


def _pruned_documents(inputs: PackInputs, prepared: Prepared, zone: Verbatim, state: PackState,
                      profile: BudgetProfile, counter: TokenCounting, cache: PackCache) -> "list[Document]":
    """The Memory documents of the compacted turns that the next invocation's pruning changes, as it will
    build them: a prune clears the outputs of many turns at once (those past `pruning.protect_tokens`, once
    they reclaim `pruning.minimum_tokens`), and each cleared turn changes its own document and its
    neighbours' (their context reads it); met at that call, they were dozens of texts embedded on its path.
    None while the turns as they stand would not be pruned (the next call adds to them: a few more may be)."""
    with masking(profile.redaction):
        due = pruned_next(inputs, profile, frozenset(state.pruned), counter, cache)
    if not due:
        return []
    cap = profile.conversation.max_turn_tokens
    cleared = {t.start: bounded_turn(cleared_turn(t, inputs.uris, cache), cap, counter, cache) for t in due}
    compacted = zone.split(tuple(cleared.get(t.start, t) for t in prepared.turns))[0]
    at = (bisect_left(compacted, start, key=turn_start) for start in cleared)
    rows = documents_reading((i for i in at if i < len(compacted) and compacted[i].start in cleared), len(compacted))
    return [history_document(compacted, j, inputs.message_times, counter.count_text, cache) for j in sorted(rows)]


def _block_ahead(prepared: Prepared, zone: Verbatim, state: PackState, reader: CompactedReader,
                 counter: TokenCounting, cache: PackCache) -> None:
    """The block's fold lines read as the summary will, once per block: a later compaction folds them into
    the summary, and a first compaction's turns were never verbatim at a call before it."""
    if not zone.block or cache.lookup("block_ahead", zone.block) is not None:
        return
    compacted = zone.split(prepared.turns)[0]
    covered = RunningSummary.from_json(state.summary).covered_until
    for turn in map(reader.read, compacted[bisect_right(compacted, covered, key=turn_start):]):
        fold_ahead(turn, reader.uris, counter, cache)
    cache.put("block_ahead", zone.block, True)
