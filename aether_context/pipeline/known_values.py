"""KNOWN VALUES of a compaction, at the cost of what its new turns add.

A compaction shows the values its newest compacted turns carried (`compress.values`): the turns are
read newest first until they give as many sources as the cap has tokens (a line costs at least one,
so no older source could show), their value sets are merged (`compress.value_merge`) and rendered
within the cap. From one compaction of a conversation to the next, most of those turns, and most of
what their sources keep, are the same: each compaction leaves in the packer's `PackCache` the value
sets it read per turn and its merges, and the next one reads only the turns it has not read and
merges again only the sources a change touches (`merged_values(since=)`). The text is the same as
when every turn is read and merged afresh (`build_pack` without a cache does that).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Hashable, Iterator

from ..compress.value_merge import MergedValues, merged_values, visible_part
from ..compress.values import ValueSet, extract_values, render_values
from ..content import canonical_json
from ..tokens import TokenCounting
from .cache import PackCache, counter_key
from .collect import Turn
from .incremental import turn_key
from .render import masking_now

__all__ = ["known_values", "known_values_of", "turn_text", "visible_words"]

_MAX_FIELD_RANKS = 20_000  # fields ranked by name and values, carried until they number this many (then afresh)


_MAX_MERGES = 4  # full merges a carry keeps: the last compaction's and the work ahead's plans for the next one


@dataclass(frozen=True, eq=False)
class _Merge:
    """A full merge, what it is of (the value sets and the visible parts), and its text by what it is rendered from."""

    of: tuple
    full: MergedValues
    rendered: "tuple[Hashable, str]"


@dataclass(frozen=True, eq=False)
class _Carry:
    """What the last compaction of a conversation left: the turns it read (by the id of each turn before
    any cut and before masking: the turn is held, so the id stays its own) with their value sets, its full
    merges (the newest first: its own, or the plans the work ahead made for the next compaction, one per cut
    guessed) and its merge under a smaller cap."""

    first: Turn  # the conversation's first compacted turn: the carry's key holds its id
    read: "dict[int, tuple[Turn, tuple[ValueSet, ...]]]"
    merges: "tuple[_Merge, ...]"
    capped: MergedValues | None
    memo: "tuple[tuple, dict[int, tuple], dict[tuple, int]]" = ((), {}, {})  # by params and counter: the
    # renders' ranked fields and lines tried by source, and each field's rank by its name and values


def known_values(compacted: "tuple[Turn, ...]", originals: "Callable[[tuple[Turn, ...]], Iterator[Turn]]",
                 mask: Callable[[Turn], Turn], *,
                 limit: int, cap: int, counter: TokenCounting, visible: "str | tuple[str, ...]" = "",
                 params: frozenset[str] = frozenset(), cache: PackCache | None = None,
                 cut: bool = True) -> tuple[str, int]:
    """KNOWN VALUES of the `compacted` turns (in order; `originals` gives them before any cut, newest
    first, `mask` a turn with its secrets masked) within `cap` tokens, and the tokens they take within `limit`
    (`decay.values_max_tokens`): more than `cap` when the cap cut them. The ids and values the turns
    carried (call arguments included), newest value per source, so an identifier read long ago is
    still there when a call needs it; a value the `visible` text (its parts, joined by line breaks:
    the pinned opening request, the verbatim turns) holds is not repeated. With `cut` False, values
    that need more than `cap` are not cut to it (the text is then "": the caller plans again with
    more room)."""
    if limit <= 0 or not compacted:
        return "", 0
    key = ("known_values", id(compacted[0]), masking_now())
    carry = cache.lookup("carried", key) if cache is not None else None
    read = _read(compacted, originals, mask, limit, cache, carry.read if carry is not None else {})
    words = partial(visible_words, cache=cache)
    of = (tuple(vs for _, found in read for vs in found), visible)
    merges = carry.merges if carry is not None else ()
    planned = next((m for m in merges if m.of == of), None)  # the work ahead planned this very merge
    full = planned.full if planned is not None else merged_values(
        of[0], visible=visible, since=merges[0].full if merges else None, read=words)
    source = (full.sets, limit, params, counter_key(counter))  # what the full text is rendered from
    same = carry is not None and carry.memo[0] == (params, counter_key(counter))
    memo = dict(carry.memo[1]) if same else {}
    fields = dict(carry.memo[2]) if same and len(carry.memo[2]) < _MAX_FIELD_RANKS else {}
    text = next((m.rendered[1] for m in ((planned,) if planned is not None else merges) if m.rendered[0] == source),
                None)
    if text is None:
        text = render_values(full.sets, limit, counter, params=params, memo=memo, fields=fields) if full.sets else ""
    need = counter.count_text(text) if text else 0
    capped = carry.capped if carry is not None else None
    merge = _Merge(of, full, (source, text))
    if need > cap:
        text = ""
        if cap > 0 and cut:
            capped = merged_values(_newest_sets(read, cap), visible=visible, since=capped, read=words)
            text = (render_values(capped.sets, cap, counter, params=params, memo=memo, fields=fields)
                    if capped.sets else "")
    if cache is not None:
        merges = (merge, *(m for m in merges if m is not planned))[:_MAX_MERGES]
        shown = {id(vs) for m in merges for vs in m.full.sets} | {id(vs) for vs in (capped.sets if capped else ())}
        if len(memo) > 2 * len(shown):  # the sources no merge shows any more, dropped once they are half
            memo = {k: memo[k] for k in shown if k in memo}
        cache.put("carried", key, _Carry(compacted[0], {id(pair[0]): pair for pair in read}, merges, capped,
                                         ((params, counter_key(counter)), memo, fields)))
    return text, need


def _read(compacted: "tuple[Turn, ...]", originals: "Callable[[tuple[Turn, ...]], Iterator[Turn]]",
          mask: Callable[[Turn], Turn], limit: int,
          cache: PackCache | None, carried: "dict[int, tuple[Turn, tuple[ValueSet, ...]]]"
          ) -> "list[tuple[Turn, tuple[ValueSet, ...]]]":
    """The newest turns (newest first) with their value sets, until they give `limit` sources; a turn the
    last compaction read (the same object) is not masked or looked up again."""
    out: list[tuple[Turn, tuple[ValueSet, ...]]] = []
    n = 0
    for turn in originals(compacted):
        read = carried.get(id(turn))
        if read is None or read[0] is not turn:
            read = (turn, tuple(vs for vs in known_values_of(mask(turn), cache) if vs is not None))
        out.append(read)
        n += len(read[1])
        if n >= limit:
            break
    return out


def _newest_sets(read: "list[tuple[Turn, tuple[ValueSet, ...]]]", limit: int) -> list[ValueSet]:
    """The sets of the newest turns read that give `limit` sources (as `_read` with that limit would)."""
    sets: list[ValueSet] = []
    for _, found in read:
        sets.extend(found)
        if len(sets) >= limit:
            break
    return sets


def visible_words(part: str, cache: PackCache | None = None) -> tuple:
    """What a merge reads of one part of the visible text (`visible_part`), once per text with a `cache`:
    the work ahead reads the verbatim turns' (`turn_text`) before a compaction needs them."""
    return visible_part(part) if cache is None else cache.get("visible_part", part, lambda: visible_part(part))


def known_values_of(turn: Turn, cache: PackCache | None = None) -> tuple:
    """The value sets one (masked) turn carried, computed once per content with a `cache`."""
    return _turn_values(turn) if cache is None else cache.get("turn_values", turn_key(turn), lambda: _turn_values(turn))


def _turn_values(turn: Turn) -> tuple:
    """The value sets of one turn: its texts, and each call with its matching response."""
    sets = []
    responses = [r for m in turn.messages for r in m.responses]
    for m in turn.messages:
        if m.text:
            sets.append(extract_values(text=m.text, role=m.role, turn=turn.start))
        for c in m.calls:
            match = next((r for r in responses if (c.id and r.id == c.id) or r.name == c.name), None)
            if match is not None:
                responses.remove(match)
            sets.append(extract_values(tool=c.name, args=c.args, result=match.response if match else None,
                                       turn=turn.start))
    return tuple(sets)


def turn_text(turn: Turn) -> str:
    """What a verbatim turn shows: its texts, calls' arguments and responses."""
    return "\n".join(m.text + "".join(canonical_json(c.args) for c in m.calls)
                     + "".join(canonical_json(r.response) for r in m.responses) for m in turn.messages)
