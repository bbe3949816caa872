"""`PackCache`: the one memo of a packer, so a call costs what is new since the previous call.

What the pipeline computes from unchanged history (a message's conversion, a turn's grouping, a fold
line, a turn's values) is kept here, keyed by the content it was computed from, so a hit gives the
same bytes as a miss.

One object, owned by the `ContextPacker`. Stages take no memo parameter: they read the call's memo
from its context (`current_memo()`, None outside a pack: then they compute everything), which the
packer sets for the call (`memo_scope`). Every kind of entry is registered in `KINDS` (its key, the
module that owns it, how it is bounded and why it exists); a kind not registered is refused.
Thread-safe (one lock) and bounded (least recently used entries leave first). A few keys hold the
objects they name by identity (ADK's payload objects, whose digest is the very cost to avoid): such
an entry keeps those objects alive, so their ids cannot be reused while it lives.

Usage::

    cache = PackCache()
    with memo_scope(cache):
        pack = build_pack(inputs, profile)  # stages read `current_memo()`
    cache.stats()   # {"entries": ..., "hits": ..., "misses": ..., "by_kind": {...}}
    cache.clear()   # the same packs, only slower until refilled
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, TypeVar

__all__ = ["PackCache", "DEFAULT_MAX_ENTRIES", "counter_key", "Kind", "KINDS", "current_memo", "memo_scope"]


@dataclass(frozen=True)
class Kind:
    """One kind of memo entry: what its key is made of, the module that owns it, how it is bounded, and why."""

    name: str
    key: str
    owner: str
    bound: str
    why: str


_LRU = "the memo's LRU (max_entries)"
_ONE_PER = "the memo's LRU; one entry per pass and first item, replaced each call"
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("message", "id of ADK's Content and its parts (the leaves held)", "adk.convert", _LRU,
         "converting a content is the costliest per-message step; ADK hands back the same objects"),
    Kind("run", "the slot and the first content's id (the contents held)", "adk.convert", _ONE_PER,
         "a sampled check of a grown history instead of a full comparison"),
    Kind("tool_spec", "the tool object", "adk.collect", _LRU, "a tool's declaration is read once"),
    Kind("grouping", "offset, span start and the first message's id (the messages held)",
         "pipeline.incremental", _ONE_PER, "turns of an unchanged leading run are not regrouped"),
    Kind("prefix", "id of the new sequence's first item (the sequences held)", "pipeline.incremental",
         "the newest 8 answers per first item", "passes of one call compare the same history once"),
    Kind("carried", "a pass's name and the id of its first item (the items held)", "pipeline.incremental",
         _ONE_PER, "a pass over the history (mapped, extended, running totals) reads the new items only"),
    Kind("cut_turn", "turn digests, cap and counter", "pipeline.fit", _LRU, "a turn over the cap is cut once"),
    Kind("cleared_turn", "turn digests and its outputs' URIs", "pipeline.decay", _LRU,
         "a pruned turn is rebuilt once"),
    Kind("fold_line", "turn digests, URIs and counter", "pipeline.decay", _LRU,
         "a compacted turn's fold line is written once"),
    Kind("summary_reading", "a fold line and the summary's line cap and counter", "pipeline.decay", _LRU,
         "the running summary reads each fold line once"),
    Kind("masked_turn", "turn digests and the redaction settings", "pipeline.render", _LRU,
         "secrets are scanned once per turn"),
    Kind("sent_turn", "message digest and what was kept of it", "pipeline.as_sent", _LRU,
         "an earlier invocation's request is rebuilt as sent once"),
    Kind("history_run", "id of the first compacted turn and counter (the turns held)", "pipeline.select",
         _ONE_PER, "Memory documents of unchanged compacted turns are not rebuilt"),
    Kind("history_document", "digests of the turns it reads, its time and counter", "pipeline.select", _LRU,
         "a compacted turn's Memory document is built once"),
    Kind("turn_text", "turn digest and counter", "pipeline.select", _LRU,
         "a compacted turn's brief is read by its own Memory document and by its neighbours'"),
    Kind("fact_document", "the fact's content", "pipeline.select", _LRU, "a memory fact's document is built once"),
    Kind("line", "the document's render, id, text, time, URI and counter", "pipeline.lines", _LRU,
         "a ranked document's line is rendered and counted once"),
    Kind("opening", "the opening request's text, cap and counter", "pipeline.compaction.policy", _LRU,
         "every compaction pins the same opening request, cut middle-out once per cap"),
    Kind("parameter_names", "the tools' declarations", "pipeline.compaction.policy", _LRU,
         "the tools' parameter names are read once per tool set"),
    Kind("visible_part", "one part of the visible text", "pipeline.compaction.known_values", _LRU,
         "the verbatim turns' words are read once per turn text"),
    Kind("turn_values", "turn digests", "pipeline.compaction.known_values", _LRU, "a turn's values are extracted once"),
)}

_MEMO: ContextVar["PackCache | None"] = ContextVar("aether_context_memo", default=None)


def current_memo() -> "PackCache | None":
    """The memo of the call being packed (None outside one: every stage then computes afresh)."""
    return _MEMO.get()


@contextmanager
def memo_scope(memo: "PackCache | None") -> Iterator["PackCache | None"]:
    """Make `memo` the call's memo inside the block (None: no memo)."""
    token = _MEMO.set(memo)
    try:
        yield memo
    finally:
        _MEMO.reset(token)

T = TypeVar("T")
DEFAULT_MAX_ENTRIES = 400_000  # about 40 live 10,000-event sessions' worth of turns, messages and lines
_MISSING = object()


class PackCache:
    """A bounded, thread-safe LRU of pure results, by kind and key."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, Hashable], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._hits: dict[str, int] = {}
        self._misses: dict[str, int] = {}

    def lookup(self, kind: str, key: Hashable) -> Any:
        """The value kept for (kind, key), or None; counts a hit or a miss."""
        _registered(kind)
        with self._lock:
            value = self._entries.get((kind, key), _MISSING)
            if value is _MISSING:
                self._misses[kind] = self._misses.get(kind, 0) + 1
                return None
            self._entries.move_to_end((kind, key))
            self._hits[kind] = self._hits.get(kind, 0) + 1
            return value

    def put(self, kind: str, key: Hashable, value: Any) -> None:
        _registered(kind)
        with self._lock:
            self._entries[(kind, key)] = value
            self._entries.move_to_end((kind, key))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def get(self, kind: str, key: Hashable, compute: Callable[[], T]) -> T:
        """The value for (kind, key), computed (outside the lock) and kept on a miss. `compute` must
        be a pure function of what `key` names, so a hit and a miss give the same value."""
        value = self.lookup(kind, key)
        if value is None:
            value = compute()
            if value is not None:
                self.put(kind, key, value)
        return value

    def stats(self) -> dict[str, Any]:
        """Entries held, hits and misses in all and per kind (for benchmarks and health checks)."""
        with self._lock:
            kinds = sorted(set(self._hits) | set(self._misses))
            return {"entries": len(self._entries), "max_entries": self.max_entries,
                    "hits": sum(self._hits.values()), "misses": sum(self._misses.values()),
                    "by_kind": {k: {"hits": self._hits.get(k, 0), "misses": self._misses.get(k, 0)} for k in kinds}}

    def clear(self) -> None:
        """Drop every entry and reset the counts (results stay the same, only slower until refilled)."""
        with self._lock:
            self._entries.clear()
            self._hits.clear()
            self._misses.clear()


def _registered(kind: str) -> None:
    if kind not in KINDS:
        raise KeyError(f"memo kind {kind!r} is not registered: add a Kind to pipeline.cache.KINDS "
                       "(its key, owner, bound and why)")


def counter_key(counter: object) -> Hashable:
    """A token counter's part of a cache key: its kind and encoding when it names one (two counters
    of one encoding count alike), else the object itself (kept alive by the key)."""
    encoding = getattr(counter, "encoding_name", None)
    return (type(counter).__qualname__, encoding) if isinstance(encoding, str) else counter
