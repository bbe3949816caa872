"""When each request message was said: the timestamps of the session events behind it.

ADK builds the request's contents from session events; a message whose content equals an event's
content takes that event's time, and a message with no such event (parallel responses ADK
merged, a rewritten sub-agent turn) takes the time of the message before it. The session's own
clock, never the wall clock, is what a pack reads: the same session packs the same on any day.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from ..content import ModelRequest
from .convert import to_message

__all__ = ["EventTimes", "session_now"]


class EventTimes:
    """Per-session memo of event content digests, so a call converts only the events it has not seen."""

    def __init__(self, max_events: int = 200_000):
        self._digests: OrderedDict[str, tuple[str, float]] = OrderedDict()  # event id -> (digest, timestamp)
        self._max = max_events
        # The events read last call (how many, the last one's key) and the digest -> time map they
        # gave: a session's events only grow, so a call reads only the events after them.
        self._read: tuple[int, Any, dict[str, float]] | None = None

    def only_grew(self, events: Sequence[Any]) -> bool:
        """Whether the session's events only grew since the last call read them: the same events, then
        new ones none of which rewrites the past (a rewind, an EventsCompaction). Reads the new events only."""
        if self._read is None:
            return False
        n, last, _ = self._read
        if not (0 < n <= len(events) and _event_key(events[n - 1]) == last):
            return False
        return not any(e.actions is not None and (e.actions.compaction is not None or e.actions.rewind_before_invocation_id)
                       for e in events[n:])

    def message_times(self, events: Sequence[Any], request: ModelRequest) -> tuple[float | None, ...]:
        by_digest: dict[str, float] = {}
        start = 0
        if self._read is not None:
            n, last, known = self._read
            if 0 < n <= len(events) and _event_key(events[n - 1]) == last:
                by_digest, start = known, n  # only ever added to
        for event in events[start:]:
            if event.content is None or not event.content.parts:
                continue
            key = _event_key(event)
            hit = self._digests.get(key)
            if hit is None:
                hit = (to_message(event.content).digest, float(event.timestamp or 0.0))
                self._digests[key] = hit
                while len(self._digests) > self._max:
                    self._digests.popitem(last=False)
            by_digest.setdefault(hit[0], hit[1])
        if events:
            self._read = (len(events), _event_key(events[-1]), by_digest)
        times: list[float | None] = []
        last: float | None = None
        for message in request.messages:
            ts = by_digest.get(message.digest, last)
            times.append(ts)
            last = ts
        return tuple(times)


def _event_key(event: Any) -> str:
    """An event's identity that survives the session service's copies: its id (else invocation and time)."""
    return event.id or f"{event.invocation_id}/{event.timestamp}"


def session_now(events: Sequence[Any]) -> float:
    """The session's latest event time: what freshness and dates are measured against."""
    return max((float(e.timestamp or 0.0) for e in events[-8:]), default=0.0)
