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

from ..pipeline.incremental import shared_prefix
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
        # The messages timed last call, their times and the digests no event had: a call times its new messages.
        self._times: "tuple[tuple, tuple[float | None, ...], set[str]] | None" = None

    def only_grew(self, events: Sequence[Any]) -> bool:
        """Whether the session's events only grew since the last call read them: the same events, then
        new ones none of which rewrites the past (a rewind, an EventsCompaction). Reads the new events only."""
        if self._read is None:
            return False
        n, last, _ = self._read
        if not (0 < n <= len(events) and _event_key(events[n - 1]) == last):
            return False
        new = events[n:]
        if any(e.actions is not None and (e.actions.compaction is not None or e.actions.rewind_before_invocation_id)
               for e in new):
            return False
        return not _answers_older_calls(new)

    def message_times(self, events: Sequence[Any], request: ModelRequest) -> tuple[float | None, ...]:
        """Each request message's time; the call's memo (the packer's) knows which messages the last request had."""
        by_digest: dict[str, float] = {}
        start = 0
        if self._read is not None:
            n, last, known = self._read
            if 0 < n <= len(events) and _event_key(events[n - 1]) == last:
                by_digest, start = known, n  # only ever added to
        added: set[str] = set()
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
            if hit[0] not in by_digest:
                by_digest[hit[0]] = hit[1]
                added.add(hit[0])
        if events:
            self._read = (len(events), _event_key(events[-1]), by_digest)
        return self._times_of(request.messages, by_digest, added, start > 0)

    def _times_of(self, messages: tuple, by_digest: "dict[str, float]", added: "set[str]",
                  incremental: bool) -> tuple[float | None, ...]:
        """Each message's time, or the one before it. The last call's times stand for its unchanged
        leading messages unless a new event gave a time to a digest they had none for."""
        same, times, missing = 0, (), set()
        if incremental and self._times is not None and not (self._times[2] & added):
            same = shared_prefix(self._times[0], messages)
            times, missing = self._times[1][:same], self._times[2]  # all of them: the tuple itself
        out: list[float | None] = []
        last: float | None = times[-1] if times else None
        for message in messages[same:]:
            ts = by_digest.get(message.digest)
            if ts is None:
                missing.add(message.digest)
                ts = last
            out.append(ts)
            last = ts
        self._times = (messages, times + tuple(out), missing)
        return self._times[1]


def _answers_older_calls(new: Sequence[Any]) -> bool:
    """Whether a new event answers a function call made before them (a long-running tool's late
    response): ADK moves such a response back beside its call, which changes the middle of the
    history, not its end."""
    called: set[str] = set()
    for event in new:
        for part in (event.content.parts or ()) if event.content is not None else ():
            if part.function_call is not None and part.function_call.id:
                called.add(part.function_call.id)
            elif part.function_response is not None and part.function_response.id not in called:
                return True
    return False


def _event_key(event: Any) -> str:
    """An event's identity that survives the session service's copies: its id (else invocation and time)."""
    return event.id or f"{event.invocation_id}/{event.timestamp}"


def session_now(events: Sequence[Any]) -> float:
    """The session's latest event time: what freshness and dates are measured against."""
    return max((float(e.timestamp or 0.0) for e in events[-8:]), default=0.0)
