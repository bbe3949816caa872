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
from dataclasses import dataclass
from typing import Iterable

from ._value_forms import short_fields
from .values import _IDLIKE, _WORD, ValueSet

__all__ = ["MergedValues", "merge_values", "merged_values"]


@dataclass(frozen=True, eq=False)
class _Read:
    """What merging reads of one source, whatever came before it: its values (all, those with a space,
    the identifiers), its fields under their short names, and the values its label already shows."""

    values: frozenset[str]
    spaced: frozenset[str]
    ids: frozenset[str]
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    own: frozenset[str]


@dataclass(frozen=True, eq=False)
class MergedValues:
    """One merge: `sets`, in the order room goes to them, and per source merged (in merge order) what a
    later merge reuses: the source, what was read of it, which of its values the visible text held and
    which the sources before it kept, what it kept then (None: nothing), and the values it kept (all,
    and the identifiers)."""

    sets: tuple[ValueSet, ...]
    sources: tuple[ValueSet, ...] = ()
    reads: tuple[_Read, ...] = ()
    met: tuple[frozenset[str], ...] = ()
    kept: tuple[ValueSet | None, ...] = ()
    fresh: "tuple[tuple[frozenset[str], frozenset[str]], ...]" = ()


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
    then, keeps what it kept (the result is the same without `since`)."""
    latest: dict[str, ValueSet] = {}
    for vs in sets:
        if vs is not None and (vs.source not in latest or vs.turn >= latest[vs.source].turn):
            latest[vs.source] = vs
    order = tuple(sorted(latest.values(), key=lambda v: (v.derived, -v.turn, v.source)))
    before = {id(s): k for k, s in enumerate(since.sources)} if since is not None else {}  # live objects: ids unique
    words = set(_WORD.findall(visible))  # a word never holds a space: a value with one is looked up in the text
    phrases: dict[str, bool] = {}
    shown: set[str] = set()  # identifiers kept
    every: set[str] = set()  # every value kept
    reads, met, kept, fresh = [], [], [], []
    for s in order:
        k = before.get(id(s))
        read = since.reads[k] if k is not None else _read(s)  # type: ignore[union-attr]
        # all a source keeps depends on which of its values are not its to show: those the visible text
        # holds, and those kept before it (its label's own values are never shown)
        now = (_visible(read, visible, words, phrases) | (read.values & (every if s.derived else shown))) - read.own
        if k is not None and since.met[k] == now:  # type: ignore[union-attr]
            out, new = since.kept[k], since.fresh[k]  # type: ignore[union-attr]
        else:
            out, new = _merge_source(s, read, now)
        every.update(new[0])
        shown.update(new[1])
        reads.append(read)
        met.append(now)
        kept.append(out)
        fresh.append(new)
    return MergedValues(tuple(vs for vs in kept if vs is not None), order, tuple(reads), tuple(met), tuple(kept),
                        tuple(fresh))


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
    return _Read(values, frozenset(v for v in values if " " in v), frozenset(v for v in values if _IDLIKE.match(v)),
                 tuple(short_fields(vs.fields)), _label_values(vs.source) if vs.call else frozenset())


def _visible(read: _Read, text: str, words: set[str], phrases: dict[str, bool]) -> frozenset[str]:
    """Those of a source's values that `text` holds as a whole token (`words`), or with a space as a whole
    phrase (looked up once per merge: `phrases`)."""
    if not read.spaced:
        return read.values & words
    for v in read.spaced:
        if v not in phrases:
            phrases[v] = v in text and re.search(rf"(?<!\w){re.escape(v)}(?!\w)", text) is not None
    return (read.values & words) | frozenset(v for v in read.spaced if phrases[v])


def _label_values(label: str) -> frozenset[str]:
    """The argument values a call's label shows (`get(id=7)` → 7)."""
    inner = label[label.find("(") + 1: label.rfind(")")]
    return frozenset(part.split("=", 1)[1] for part in inner.split(", ") if "=" in part)
