"""Known values merged across sources: each value shown once, nothing the visible text holds repeated.

What one source keeps depends only on its own values, on which of them the visible text holds, and on
which of them the sources before it (in merge order) kept. A value the visible text holds blocks only
itself: what a source keeps is what it keeps when the text is left out, less the values the text holds.

Usage::

    merged = merged_values(sets, visible=verbatim_text)
    block = render_values(merged.sets, max_tokens=300, counter=counter)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ._value_forms import short_fields
from ._visible_text import _RUN, SeenText, _Part, visible_part
from .values import _IDLIKE, ValueSet

__all__ = ["MergedValues", "merge_values", "merged_values", "visible_part"]


@dataclass(frozen=True, eq=False)
class _Read:
    """What merging reads of one source, whatever came before it: its values (all, those with a space,
    the identifiers), its fields under their short names, and the values its label already shows."""

    values: frozenset[str]
    spaced: "dict[str, frozenset[str]]"  # the values with a space, with their runs of word characters
    ids: frozenset[str]
    fields: tuple[tuple[str, tuple[str, ...]], ...]  # less the values its label shows
    own: frozenset[str]


@dataclass(frozen=True, eq=False)
class MergedValues:
    """One merge: `sets`, in the order room goes to them."""

    sets: tuple[ValueSet, ...]


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
                  read: "Callable[[str], _Part] | None" = None) -> MergedValues:
    """`merge_values`; the `visible` text may come as its parts (joined by line breaks), each read by
    `read` (`visible_part`, or what it gave kept by the part).

    Every source is merged in order without the visible text (a source's values kept before it are those an
    earlier source kept: any value before a model's text, identifiers before a tool result or a user's
    text), then what the text holds is taken from each."""
    latest: dict[str, ValueSet] = {}
    for vs in sets:
        if vs is not None and (vs.source not in latest or vs.turn >= latest[vs.source].turn):
            latest[vs.source] = vs
    keyed = sorted((_order(s), s) for s in latest.values())  # places are unique: sources never compared
    reads = [_read(s) for _, s in keyed]
    spaced = {v: runs for r in reads for v, runs in r.spaced.items()}  # every value with a space, its runs
    seen = SeenText(visible, read or visible_part)
    ids_kept: set[str] = set()
    every: set[str] = set()  # every value kept
    out: list[ValueSet] = []
    for (_, s), r in zip(keyed, reads):
        kept, fresh = _merge_source(s, r, (r.values & (every if s.derived else ids_kept)) - r.own)
        every.update(fresh)
        ids_kept.update(fresh & r.ids)
        hidden = frozenset(v for v in fresh if (seen.phrase(v, spaced[v]) if v in spaced else v in seen.words))
        shown = _less(kept, fresh, hidden)[0]
        if shown is not None:
            out.append(shown)
    return MergedValues(tuple(out))


def _order(vs: ValueSet) -> tuple[bool, int, str]:
    """Where a source goes in a merge: tool results and the user's texts, newest first, then the model's."""
    return vs.derived, -vs.turn, vs.source


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
