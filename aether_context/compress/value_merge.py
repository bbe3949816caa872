"""Known values merged across sources, and merged again when only a few sources changed.

Why: a compaction merges the value sets of the newest compacted turns (hundreds of sources,
thousands of values) and the next compaction merges nearly the same ones: a few new turns, a few
old ones gone, another verbatim text. What one source keeps depends only on its own values, on
which of them the visible text holds, and on which of them the sources before it (in merge order)
kept: two set intersections, where merging the source reads every value. `merged_values(since=)`
reuses what a source kept last time when those are as they were, and merges the others: the same
result as a merge from scratch.

Usage::

    first = merged_values(sets, visible=verbatim_text)
    block = render_values(first.sets, max_tokens=300, counter=counter)
    later = merged_values(sets_now, visible=verbatim_now, since=first)  # equals merged_values(sets_now, visible=...)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from ._value_forms import short_fields
from .values import _IDLIKE, _WORD, ValueSet

_RUN = re.compile(r"\w+")  # a run of word characters

__all__ = ["MergedValues", "merge_values", "merged_values"]


@dataclass(frozen=True, eq=False)
class _Read:
    """What merging reads of one source, whatever came before it: its values (all, those with a space,
    the identifiers), its fields under their short names, and the values its label already shows."""

    values: frozenset[str]
    spaced: "dict[str, frozenset[str]]"  # the values with a space, with their runs of word characters
    ids: frozenset[str]
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    own: frozenset[str]


@dataclass(frozen=True, eq=False)
class MergedValues:
    """One merge: `sets`, in the order room goes to them, and per source merged (in merge order) what a
    later merge reuses: the source, what was read of it, which of its values the visible text held and
    which the sources before it kept, what it kept then (None: nothing), and the values it kept (all,
    and the identifiers); and the visible text with what of it was looked up."""

    sets: tuple[ValueSet, ...]
    sources: tuple[ValueSet, ...] = ()
    reads: tuple[_Read, ...] = ()
    met: tuple[frozenset[str], ...] = ()
    kept: tuple[ValueSet | None, ...] = ()
    fresh: "tuple[tuple[frozenset[str], frozenset[str]], ...]" = ()
    visible: str = ""
    words: frozenset[str] = frozenset()  # the visible text's whole tokens
    phrases: "dict[str, bool]" = field(default_factory=dict)  # whether it holds each source's values with a space
    runs: frozenset[str] | None = None  # its runs of word characters, once read


def merge_values(sets: Iterable[ValueSet | None], *, visible: str = "") -> list[ValueSet]:
    """One set per source, in the order room goes to them: where values come from (tool results, the
    user's texts) newest first, then the model's own texts, which mostly repeat what it read. The newest
    result of the same call replaces the older one; field paths are shortened to the names that say
    something (`flights.flight_number` → `flight_number`, same names merged). A value is shown once: an
    identifier an earlier source shows is dropped from later ones (numbers and dates keep their
    context), a model text keeps only values no other source shows, and nothing the `visible` text (the
    verbatim turns) already holds is repeated. Sources left without fields go, unless they are calls."""
    return list(merged_values(sets, visible=visible).sets)


def merged_values(sets: Iterable[ValueSet | None], *, visible: str = "",
                  since: MergedValues | None = None) -> MergedValues:
    """`merge_values` with what a later merge reuses; given `since` (an earlier merge), a source that is
    the same object here, and whose values the visible text and the sources before it hold as they did
    then, keeps what it kept (the result is the same without `since`): it is not even read again when
    none of its values changed standing (`_Changes`)."""
    latest: dict[str, ValueSet] = {}
    for vs in sets:
        if vs is not None and (vs.source not in latest or vs.turn >= latest[vs.source].turn):
            latest[vs.source] = vs
    order = tuple(sorted(latest.values(), key=_order))
    seen = _Seen(visible, since)
    changes = _Changes(since, order, seen) if since is not None else None
    shown: set[str] = set()  # identifiers kept
    every: set[str] = set()  # every value kept
    reads, met, kept, fresh = [], [], [], []
    for s in order:
        k = changes.match(s) if changes is not None else None
        if k is not None and changes.same(k, s.derived):  # type: ignore[union-attr]
            read, now, out, new = since.reads[k], since.met[k], since.kept[k], since.fresh[k]  # type: ignore[union-attr]
        else:
            read = since.reads[k] if k is not None else _read(s)  # type: ignore[union-attr]
            # all a source keeps depends on which of its values are not its to show: those the visible text
            # holds, and those kept before it (its label's own values are never shown)
            now = (seen.held(read) | (read.values & (every if s.derived else shown))) - read.own
            if k is not None and since.met[k] == now:  # type: ignore[union-attr]
                out, new = since.kept[k], since.fresh[k]  # type: ignore[union-attr]
            else:
                out, new = _merge_source(s, read, now)
            if changes is not None:
                changes.kept(k, new)
        every.update(new[0])
        shown.update(new[1])
        reads.append(read)
        met.append(now)
        kept.append(out)
        fresh.append(new)
    return MergedValues(tuple(vs for vs in kept if vs is not None), order, tuple(reads), tuple(met), tuple(kept),
                        tuple(fresh), visible, seen.words, seen.phrases, seen._runs)


def _order(vs: ValueSet) -> tuple[bool, int, str]:
    """Where a source goes in a merge: tool results and the user's texts, newest first, then the model's."""
    return vs.derived, -vs.turn, vs.source


class _Seen:
    """Which values one merge's visible text holds: the text's whole tokens, and the phrases (values with
    a space) looked up once per merge, or taken from the earlier merge of the same text."""

    def __init__(self, text: str, since: MergedValues | None) -> None:
        self.text = text
        same = since is not None and since.visible == text
        self.words = since.words if same else frozenset(_WORD.findall(text))  # type: ignore[union-attr]
        self.phrases: dict[str, bool] = dict(since.phrases) if same else {}  # type: ignore[union-attr]
        self._runs: frozenset[str] | None = since.runs if same else None  # type: ignore[union-attr]

    @property
    def runs(self) -> frozenset[str]:
        """The text's runs of word characters: a phrase it holds as a whole has each of its own among them
        (word characters do not touch it), so most phrases are ruled out without a search."""
        if self._runs is None:
            self._runs = frozenset(_RUN.findall(self.text))
        return self._runs

    def phrase(self, v: str, runs: frozenset[str]) -> bool:
        """Whether the text holds `v` (a value with a space, `runs` its runs of word characters) as a whole."""
        held = self.phrases.get(v)
        if held is None:
            held = self.phrases[v] = runs <= self.runs and _holds(self.text, v)
        return held

    def held(self, read: _Read) -> frozenset[str]:
        """Those of a source's values the text holds as a whole token, or with a space as a whole phrase."""
        if not read.spaced:
            return read.values & self.words
        return (read.values & self.words) | frozenset(v for v, runs in read.spaced.items() if self.phrase(v, runs))


class _Changes:
    """What changed since an earlier merge, walked in merge order: the values whose standing changed for
    the source at hand, i.e. whether the visible text holds them (`moved_words`, and its phrases looked
    up again), or whether a source before it kept them (a source new, gone, or keeping other values
    adds what it keeps and kept). A source none of whose values is among them keeps what it kept
    without being read: what a compaction merges again is what its new turns touch."""

    def __init__(self, since: MergedValues, order: "tuple[ValueSet, ...]", seen: _Seen) -> None:
        self.since, self.seen = since, seen
        self.at = {id(s): k for k, s in enumerate(since.sources)}  # live objects: ids unique
        self.now = {id(s) for s in order}
        self.moved_words = seen.words ^ since.words
        self.moved_every: set[str] = set()  # values whose being kept before the source at hand changed
        self.moved_ids: set[str] = set()  # identifiers among them
        self.next = 0  # the earlier merge's next source not yet walked past

    def match(self, s: ValueSet) -> int | None:
        """`s`'s place in the earlier merge (None: new); the earlier sources before it that are gone
        count as changed."""
        k = self.at.get(id(s))
        old = self.since.sources
        while self.next < len(old) and (self.next < k if k is not None else _order(old[self.next]) <= _order(s)):
            if id(old[self.next]) not in self.now:
                self._moved(self.since.fresh[self.next])
            self.next += 1
        if k is not None:
            self.next = k + 1
        return k

    def same(self, k: int, derived: bool) -> bool:
        """Whether no value of the earlier merge's `k`th source changed standing."""
        read, phrases = self.since.reads[k], self.since.phrases
        return (read.values.isdisjoint(self.moved_words)
                and read.values.isdisjoint(self.moved_every if derived else self.moved_ids)
                and all(self.seen.phrase(v, runs) == phrases.get(v) for v, runs in read.spaced.items()))

    def kept(self, k: int | None, new: "tuple[frozenset[str], frozenset[str]]") -> None:
        """A source read again (`k` its place before, None: new) kept `new`."""
        if k is None:
            self._moved(new)
        elif new != self.since.fresh[k]:
            self._moved(new)
            self._moved(self.since.fresh[k])

    def _moved(self, fresh: "tuple[frozenset[str], frozenset[str]]") -> None:
        self.moved_every.update(fresh[0])
        self.moved_ids.update(fresh[1])


def _merge_source(vs: ValueSet, read: _Read, met: frozenset[str]
                  ) -> tuple[ValueSet | None, tuple[frozenset[str], frozenset[str]]]:
    """What one source keeps when `met` of its values are not its to show (the visible text holds them, or
    a source before it kept them: identifiers for a tool result or a user's text, any value for a model's
    text), and the values it kept (all, and the identifiers)."""
    fields = []
    blocked = set(met)  # grows with what this source keeps, field by field
    all_new: list[str] = []
    for name, values in read.fields:
        new = tuple(v for v in values if v not in read.own and v not in blocked)
        if new:
            fields.append((name, new))
            blocked.update(new if vs.derived else read.ids.intersection(new))
            all_new += new
    out = ValueSet(vs.source, vs.turn, tuple(fields), vs.call) if fields or vs.call else None
    kept = frozenset(all_new)
    return out, (kept, kept & read.ids)


def _read(vs: ValueSet) -> _Read:
    values = frozenset(v for _, vals in vs.fields for v in vals)
    return _Read(values, {v: frozenset(_RUN.findall(v)) for v in values if " " in v}, frozenset(v for v in values if _IDLIKE.match(v)),
                 tuple(short_fields(vs.fields)), _label_values(vs.source) if vs.call else frozenset())


def _holds(text: str, phrase: str) -> bool:
    """Whether `text` holds `phrase` as a whole (no word character just before or after it: a regex
    `(?<!\\w)phrase(?!\\w)`, without compiling one per phrase)."""
    at = text.find(phrase)
    while at >= 0:
        end = at + len(phrase)
        if not (at and _word_char(text[at - 1])) and not (end < len(text) and _word_char(text[end])):
            return True
        at = text.find(phrase, at + 1)
    return False


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"  # what `\w` matches in a str pattern


def _label_values(label: str) -> frozenset[str]:
    """The argument values a call's label shows (`get(id=7)` → 7)."""
    inner = label[label.find("(") + 1: label.rfind(")")]
    return frozenset(part.split("=", 1)[1] for part in inner.split(", ") if "=" in part)
