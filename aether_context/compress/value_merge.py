"""Known values merged across sources, and merged again at the cost of what changed.

Why: a compaction merges the value sets of the newest compacted turns (hundreds of sources,
thousands of values) and the next compaction merges nearly the same ones: a few new turns, a few
old ones gone, another verbatim text. What one source keeps depends only on its own values, on
which of them the visible text holds, and on which of them the sources before it (in merge order)
kept. A value the visible text holds blocks only itself, everywhere: what a source keeps is what it
keeps when the text is left out, less the values the text holds. So a merge is two layers. The
first merges without the visible text, and keeps, beside its result, which sources hold each value
and which kept it: the next merge (`merged_values(since=)`) starts from the sources that came or
went and follows what each one it merges again keeps differently to the later sources holding those
values (the others are not even looked at); with the same sources, it is the earlier one. The
second takes from each source what the visible text holds, looked at again only for the sources
keeping a value whose standing in the text changed (a new verbatim turn's words): no later source
depends on it. The result is the same as a merge from scratch.

Usage::

    first = merged_values(sets, visible=verbatim_text)
    block = render_values(first.sets, max_tokens=300, counter=counter)
    later = merged_values(sets_now, visible=verbatim_now, since=first)  # equals merged_values(sets_now, visible=...)
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ._value_forms import short_fields
from ._visible_text import _RUN, SeenText, _Part, visible_part
from .values import _IDLIKE, ValueSet

__all__ = ["MergedValues", "merge_values", "merged_values", "visible_part"]


class _Last:
    """Sorts after any source: `(key, _LAST)` is past the holder `(key, source)`."""

    def __gt__(self, other: object) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return False


_LAST = _Last()


@dataclass(frozen=True, eq=False)
class _Read:
    """What merging reads of one source, whatever came before it: its values (all, those with a space,
    the identifiers), its fields under their short names, and the values its label already shows."""

    values: frozenset[str]
    spaced: "dict[str, frozenset[str]]"  # the values with a space, with their runs of word characters
    ids: frozenset[str]
    fields: tuple[tuple[str, tuple[str, ...]], ...]  # less the values its label shows
    own: frozenset[str]


# Per source merged without the visible text (by the id of the source, a live object the merge holds): its
# place, what was read of it, which of its values were not its to show (a source before it kept them), what
# it kept then (None: nothing), and the values it kept.
_Entry = "tuple[tuple[bool, int, str], _Read, frozenset[str], ValueSet | None, frozenset[str]]"


@dataclass(frozen=True, eq=False)
class MergedValues:
    """One merge: `sets`, in the order room goes to them, and what a later merge starts from: the sources
    in merge order with their places, each one's entry without the visible text (`_Entry`), the sources
    holding each value and the places of those that kept it (sorted), the phrases (values with a space)
    with their runs of word characters; per source, which of the values it kept the visible text holds
    and what it shows less those; the visible text with what of it was looked up. Never changed once made."""

    sets: tuple[ValueSet, ...]
    sources: tuple[ValueSet, ...] = ()
    keys: tuple = ()
    entries: "dict[int, _Entry]" = field(default_factory=dict)
    holders: "dict[str, tuple[tuple, ...]]" = field(default_factory=dict)  # (place, source) pairs, by place
    keepers: "dict[str, tuple]" = field(default_factory=dict)
    spaced: "dict[str, frozenset[str]]" = field(default_factory=dict)
    shown: "dict[int, tuple[frozenset[str], ValueSet | None]]" = field(default_factory=dict)
    visible: str = ""
    parts: "dict[str, tuple[frozenset[str], frozenset[str]]]" = field(default_factory=dict)  # its parts' words, runs
    words: frozenset[str] = frozenset()  # the visible text's whole tokens
    runs: frozenset[str] = frozenset()  # its runs of word characters
    phrases: "dict[str, bool]" = field(default_factory=dict)  # whether it holds each phrase


def merge_values(sets: Iterable[ValueSet | None], *, visible: str = "") -> list[ValueSet]:
    """One set per source, in the order room goes to them: where values come from (tool results, the
    user's texts) newest first, then the model's own texts, which mostly repeat what it read. The newest
    result of the same call replaces the older one; field paths are shortened to the names that say
    something (`flights.flight_number` → `flight_number`, same names merged). A value is shown once: an
    identifier an earlier source shows is dropped from later ones (numbers and dates keep their
    context), a model text keeps only values no other source shows, and nothing the `visible` text (the
    verbatim turns) already holds is repeated. Sources left without fields go, unless they are calls."""
    return list(merged_values(sets, visible=visible).sets)


def merged_values(sets: Iterable[ValueSet | None], *, visible: "str | tuple[str, ...]" = "",
                  since: MergedValues | None = None, read: "Callable[[str], _Part] | None" = None) -> MergedValues:
    """`merge_values` with what a later merge starts from; given `since` (an earlier merge), only the
    sources a change touches are merged again (`_Again`): the result is the same without `since`. The
    `visible` text may come as its parts (joined by line breaks): a part the earlier merge had is not
    read again, and `read` (`visible_part`, or what it gave kept by the part) reads the others."""
    latest: dict[str, ValueSet] = {}
    for vs in sets:
        if vs is not None and (vs.source not in latest or vs.turn >= latest[vs.source].turn):
            latest[vs.source] = vs
    if since is None or not since.sources:
        return _scratch(latest, visible, read or visible_part)
    return _Again(since, visible, read or visible_part).merge(latest)


def _order(vs: ValueSet) -> tuple[bool, int, str]:
    """Where a source goes in a merge: tool results and the user's texts, newest first, then the model's."""
    return vs.derived, -vs.turn, vs.source


def _scratch(latest: "dict[str, ValueSet]", visible: "str | tuple[str, ...]",
             read: "Callable[[str], _Part]") -> MergedValues:
    """Every source merged in order without the visible text (a source's values kept before it are those an
    earlier source kept: any value before a model's text, identifiers before a tool result or a user's
    text), then what the text holds taken from each."""
    keyed = sorted((_order(s), s) for s in latest.values())  # places are unique: sources never compared
    seen = SeenText(visible, None, read)
    ids_kept: set[str] = set()
    every: set[str] = set()  # every value kept
    entries: dict[int, tuple] = {}
    holders: dict[str, list[tuple]] = {}
    keepers: dict[str, list] = {}
    spaced: dict[str, frozenset[str]] = {}
    for key, s in keyed:
        read = _read(s)
        now = (read.values & (every if s.derived else ids_kept)) - read.own
        out, fresh = _merge_source(s, read, now)
        every.update(fresh)
        ids_kept.update(fresh & read.ids)
        entries[id(s)] = (key, read, now, out, fresh)
        for v in read.values:
            holders.setdefault(v, []).append((key, s))
        for v in fresh:
            keepers.setdefault(v, []).append(key)
        spaced.update(read.spaced)
    for v, runs in spaced.items():
        seen.phrase(v, runs)  # every phrase's standing, which a later merge compares with its own
    held = _held(seen, spaced)
    return _result(tuple(k for k, _ in keyed), tuple(s for _, s in keyed), entries,
                   {v: tuple(h) for v, h in holders.items()}, {v: tuple(k) for v, k in keepers.items()}, spaced,
                   {k: _source_shows(e[3], e[4], held) for k, e in entries.items()}, seen)


def _held(seen: SeenText, spaced: "dict[str, frozenset[str]]") -> "Callable[[str], bool]":
    """Whether the visible text holds a value: as a whole token, or one with a space as a whole phrase."""
    words, phrase = seen.words, seen.phrase
    return lambda v: v in words if v not in spaced else phrase(v, spaced[v])


def _source_shows(kept: ValueSet | None, fresh: frozenset[str], held: "Callable[[str], bool]"
           ) -> "tuple[frozenset[str], ValueSet | None]":
    """Which of the values a source kept the visible text holds, and what it shows less those."""
    hidden = frozenset(v for v in fresh if held(v))
    return hidden, _less(kept, fresh, hidden)[0]


def _result(keys: tuple, sources: "tuple[ValueSet, ...]", entries: "dict[int, tuple]", holders: "dict[str, tuple]",
            keepers: "dict[str, tuple]", spaced: "dict[str, frozenset[str]]",
            shown: "dict[int, tuple[frozenset[str], ValueSet | None]]", seen: SeenText) -> MergedValues:
    sets = tuple(out for out in (shown[id(s)][1] for s in sources) if out is not None)
    return MergedValues(sets, sources, keys, entries, holders, keepers, spaced, shown,
                        seen.text, seen.parts, seen.words, seen.runs, seen.phrases)


class _Again:
    """A merge from an earlier one (`since`, left as it was). Without the visible text: with the same sources,
    the earlier merge's; else its indexes copied, the sources gone taken out of them, and the sources whose
    values changed standing merged again in merge order (a heap of places): new sources, those holding a
    value a gone source kept, and, as each one merged again keeps other values than before, the later
    sources holding those. Then what the visible text holds is taken again from the sources merged again
    and from those keeping a value whose standing in the text changed."""

    def __init__(self, since: MergedValues, visible: "str | tuple[str, ...]", read: "Callable[[str], _Part]") -> None:
        self.since, self.seen = since, SeenText(visible, since, read)
        # the earlier merge's indexes, read only: `merge` copies them before it changes any
        self.entries, self.holders, self.keepers, self.spaced = since.entries, since.holders, since.keepers, since.spaced
        self.reads: dict[int, _Read] = {}  # the new sources' reads
        self.queue: list[tuple] = []
        self.queued: dict[int, set[str]] = {}  # per source queued, the values that changed standing
        self.touched: dict[int, ValueSet] = {}  # the sources merged again (new ones included)
        self.gone: list[int] = []  # the earlier merge's sources not in this one

    def merge(self, latest: "dict[str, ValueSet]") -> MergedValues:
        since = self.since
        if len(latest) == len(since.sources) and all(id(s) in since.entries for s in latest.values()):
            keys, sources = since.keys, since.sources  # the same sources: merged as before
        else:
            self.entries, self.holders = dict(since.entries), dict(since.holders)
            self.keepers, self.spaced = dict(since.keepers), dict(since.spaced)
            keyed = self._keyed(latest)
            while self.queue:
                self._step(*heapq.heappop(self.queue))
            keys, sources = tuple(k for k, _ in keyed), tuple(s for _, s in keyed)
        return _result(keys, sources, self.entries, self.holders, self.keepers, self.spaced, self._shows(), self.seen)

    def _keyed(self, latest: "dict[str, ValueSet]") -> "list[tuple]":
        """The sources in merge order with their places: the earlier merge's still here, the new ones
        read and queued; the gone ones leave the indexes, and the sources holding what they kept are queued."""
        now = {id(s) for s in latest.values()}
        keyed, gone_kept = [], []
        for key, s in zip(self.since.keys, self.since.sources):
            if id(s) in now:
                keyed.append((key, s))
            else:
                _, read, _, _, fresh = self.entries.pop(id(s))
                self.gone.append(id(s))
                for v in read.values:
                    self._unhold(v, key)
                for v in fresh:
                    self._unkeep(v, key)
                gone_kept.append((key, fresh))
        for key, fresh in gone_kept:  # once every gone source is out of the indexes
            for v in fresh:
                self._push_after(v, key)
        new = [(_order(s), s) for s in latest.values() if id(s) not in self.entries]
        for key, s in new:
            read = self.reads[id(s)] = _read(s)
            for v in read.values:
                hs = self.holders.get(v, ())
                at = bisect_left(hs, (key,))
                self.holders[v] = hs[:at] + ((key, s),) + hs[at:]
            self.spaced.update(read.spaced)
            self._push(key, s)
        if new:
            keyed.extend(new)
            keyed.sort()  # places are unique: sources never compared
        return keyed

    def _shows(self) -> "dict[int, tuple[frozenset[str], ValueSet | None]]":
        """What each source shows: the earlier merge's, taken again for the sources merged again and for
        those keeping a value whose standing in the visible text changed (only those values looked up)."""
        seen, since, spaced = self.seen, self.since, self.spaced
        held = _held(seen, spaced)
        again: dict[int, set[str]] = {}  # per source holding a value whose standing changed: those values
        if seen.text != since.visible:
            changed = set(seen.words ^ since.words)
            carried = seen.carried(since)
            for v, runs in spaced.items():
                standing = carried(v, runs)
                if (seen.phrase(v, runs) if standing is None else standing) != since.phrases.get(v):
                    changed.add(v)
            for v in changed:
                for _, h in self.holders.get(v, ()):
                    again.setdefault(id(h), set()).add(v)
        else:  # the new sources' phrases, which the earlier merge did not look up
            for read in self.reads.values():
                for v, runs in read.spaced.items():
                    seen.phrase(v, runs)
        if not again and not self.touched and not self.gone:
            return since.shown
        shown = dict(since.shown)  # less the sources gone (a copy in C, not a pass over every source)
        for k in self.gone:
            del shown[k]
        for k in self.touched:
            _, _, _, kept, fresh = self.entries[k]
            was = shown.get(k)
            now = _source_shows(kept, fresh, held)
            shown[k] = was if was is not None and was[1] == now[1] and was[0] == now[0] else now
        for k, values in again.items():
            if k in self.touched:
                continue
            _, _, _, kept, fresh = self.entries[k]
            hidden = shown[k][0]  # a subset of what it kept (`fresh`)
            looked = fresh.intersection(values)
            if not looked:
                continue
            now_hidden = (hidden - values) | frozenset(v for v in looked if held(v))
            if now_hidden != hidden:
                shown[k] = (now_hidden, _less(kept, fresh, now_hidden)[0])
        return shown

    def _step(self, key: tuple, _: int, s: ValueSet) -> None:
        """Merge `s` again: those of its values that changed standing (`why`) are looked up again (what the
        sources before it now keep); if it keeps other values than it did, the later sources holding them
        are queued."""
        entry = self.entries.get(id(s))  # as the earlier merge left it (None: new)
        why = self.queued.pop(id(s))
        if entry is None:
            read = self.reads[id(s)]
            why = read.values
        else:
            read = entry[1]
            why = why - read.own
        keepers = self.keepers
        ids = read.values if s.derived else read.ids
        now_in = {v for v in why if v in ids and (k := keepers.get(v)) and k[0] < key}
        now = (entry[2] - why) | now_in if entry is not None else frozenset(now_in) - read.own
        if entry is not None and entry[2] == now:
            return
        if entry is not None and entry[2] <= now:  # only more of its values are met: it keeps what it kept, less them
            out, fresh = _less(entry[3], entry[4], now - entry[2])
        else:
            out, fresh = _merge_source(s, read, now)
        if entry is not None and out == entry[3]:
            out = entry[3]  # the same object: a render's memo by source finds it
        self.entries[id(s)] = (key, read, now, out, fresh)
        self.touched[id(s)] = s
        was = entry[4] if entry is not None else frozenset()
        if fresh != was:
            for v in was - fresh:
                self._unkeep(v, key)
            for v in fresh - was:
                self.keepers[v] = _inserted(self.keepers.get(v, ()), key)
            for v in fresh ^ was:
                self._push_after(v, key)

    def _push_after(self, v: str, key: tuple) -> None:
        """The source at `key` started or stopped keeping `v` (or is gone): queue the later sources holding
        it for which that changed whether a source before them keeps it, those up to the next source
        keeping it (none when one before it does)."""
        keys = self.keepers.get(v, ())
        first = keys[1] if keys and keys[0] == key and len(keys) > 1 else (keys[0] if keys and keys[0] != key else None)
        if first is None or first > key:
            self._push_holders(v, key, first)

    def _push_holders(self, v: str, after: tuple | None = None, upto: tuple | None = None) -> None:
        """Queue the sources holding `v` (those placed after `after` and up to `upto`, when given), `v`
        among the values that changed standing for them."""
        holders = self.holders.get(v, ())
        at = 0 if after is None else bisect_right(holders, (after, _LAST))
        for key, h in holders[at:]:
            if upto is not None and key > upto:
                break
            self._push(key, h, v)

    def _push(self, key: tuple, s: ValueSet, v: str | None = None) -> None:
        why = self.queued.get(id(s))
        if why is None:
            why = self.queued[id(s)] = set()
            heapq.heappush(self.queue, (key, id(s), s))
        if v is not None:
            why.add(v)

    def _unhold(self, v: str, key: tuple) -> None:
        holders = self.holders[v]
        at = bisect_left(holders, (key,))
        left = holders[:at] + holders[at + 1:]
        if left:
            self.holders[v] = left
        else:
            del self.holders[v]
            self.spaced.pop(v, None)

    def _unkeep(self, v: str, key: tuple) -> None:
        keys = self.keepers[v]
        at = bisect_left(keys, key)
        left = keys[:at] + keys[at + 1:]
        if left:
            self.keepers[v] = left
        else:
            del self.keepers[v]


def _inserted(keys: tuple, key: tuple) -> tuple:
    """`keys` (sorted) with `key` added in its place."""
    at = bisect_left(keys, key)
    return keys[:at] + (key,) + keys[at:]


def _merge_source(vs: ValueSet, read: _Read, met: frozenset[str]
                  ) -> tuple[ValueSet | None, frozenset[str]]:
    """What one source keeps when `met` of its values are not its to show (a source before it kept them:
    identifiers for a tool result or a user's text, any value for a model's text), and the values it kept."""
    fields = []
    blocked = set(met)  # grows with what this source keeps, field by field
    all_new: list[str] = []
    derived, ids = vs.derived, read.ids
    for name, values in read.fields:
        new = values if blocked.isdisjoint(values) else tuple(v for v in values if v not in blocked)
        if new:
            fields.append((name, new))
            blocked.update(new if derived else ids.intersection(new))
            all_new += new
    out = ValueSet(vs.source, vs.turn, tuple(fields), vs.call) if fields or vs.call else None
    return out, frozenset(all_new)


def _less(kept: ValueSet | None, fresh: frozenset[str], met: frozenset[str]
          ) -> tuple[ValueSet | None, frozenset[str]]:
    """`_merge_source` again once `met` more of a source's values are not its to show (a verbatim turn shows
    them, or a source before it now keeps them): a value met blocks only itself, so the source keeps what it
    kept (`kept`, its values `fresh`) less those, at the cost of its kept fields, not of all it holds (a new
    turn's words touch many sources). A field without them stays the same object."""
    if kept is None or fresh.isdisjoint(met):
        return kept, fresh
    fields = []
    for pair in kept.fields:
        if met.isdisjoint(pair[1]):
            fields.append(pair)
        elif left := tuple(v for v in pair[1] if v not in met):
            fields.append((pair[0], left))
    return (ValueSet(kept.source, kept.turn, tuple(fields), kept.call) if fields or kept.call else None), fresh - met


def _read(vs: ValueSet) -> _Read:
    values = frozenset(v for _, vals in vs.fields for v in vals)
    own = _label_values(vs.source) if vs.call else frozenset()
    fields = short_fields(vs.fields)  # without the values the label shows: never the source's to show
    return _Read(values, {v: frozenset(_RUN.findall(v)) for v in values if " " in v}, frozenset(v for v in values if _IDLIKE.match(v)),
                 tuple((n, tuple(v for v in vals if v not in own)) if own else (n, vals) for n, vals in fields), own)


def _label_values(label: str) -> frozenset[str]:
    """The argument values a call's label shows (`get(id=7)` → 7)."""
    inner = label[label.find("(") + 1: label.rfind(")")]
    return frozenset(part.split("=", 1)[1] for part in inner.split(", ") if "=" in part)
