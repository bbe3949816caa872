"""`PackCache`: the one memo of a packer, so a call costs what is new since the previous call.

Every model call re-sends the whole session history; almost all of it is unchanged. What the
pipeline computes from unchanged content (a message's conversion, a turn's grouping and token
count, a compacted turn's retrieval text, a fold line, the values a turn carried) is kept here,
keyed by the content it was computed from (its digest), so a hit gives the same bytes as a miss.

One object, owned by the `ContextPacker` and passed down like the retriever; no module-level
state. Thread-safe (one lock: ADK's sync `Runner.run` drives each run from its own thread) and
bounded (least recently used entries leave first). A few keys hold the objects they name by
identity (ADK's payload objects, whose digest is the very cost to avoid): such an entry keeps
those objects alive, so their ids cannot be reused while it lives.

Usage::

    cache = PackCache()
    tokens = cache.get("turn_tokens", (turn_digest, id(counter)), lambda: count(turn))
    cache.stats()   # {"entries": ..., "hits": ..., "misses": ..., "by_kind": {...}}
    cache.clear()
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, TypeVar

__all__ = ["PackCache", "DEFAULT_MAX_ENTRIES", "counter_key"]

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
        with self._lock:
            value = self._entries.get((kind, key), _MISSING)
            if value is _MISSING:
                self._misses[kind] = self._misses.get(kind, 0) + 1
                return None
            self._entries.move_to_end((kind, key))
            self._hits[kind] = self._hits.get(kind, 0) + 1
            return value

    def put(self, kind: str, key: Hashable, value: Any) -> None:
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


def counter_key(counter: object) -> Hashable:
    """A token counter's part of a cache key: its kind and encoding when it names one (two counters
    of one encoding count alike), else the object itself (kept alive by the key)."""
    encoding = getattr(counter, "encoding_name", None)
    return (type(counter).__qualname__, encoding) if isinstance(encoding, str) else counter
