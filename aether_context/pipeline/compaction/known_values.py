"""KNOWN VALUES of a compaction: the values its newest compacted turns carried, not repeated from the visible text.

A compaction shows the values its newest compacted turns carried (`compress.values`): the turns are
read newest first until they give as many sources as the cap has tokens (a line costs at least one,
so no older source could show), their value sets are merged (`compress.value_merge`) and rendered
within the cap. Each turn's value sets and each part of the visible text's words are kept by content.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ...compress.value_merge import merged_values, visible_part
from ...compress.values import ValueSet, extract_values, render_values
from ...content import canonical_json
from ...tokens import TokenCounting
from ..cache import current_memo
from ..inputs import Turn
from ..incremental import turn_key

__all__ = ["known_values", "known_values_of", "turn_text", "visible_words"]


def known_values(compacted: "tuple[Turn, ...]", originals: "Callable[[tuple[Turn, ...]], Iterator[Turn]]",
                 mask: Callable[[Turn], Turn], *,
                 limit: int, cap: int, counter: TokenCounting, visible: "str | tuple[str, ...]" = "",
                 params: frozenset[str] = frozenset(),
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
    read = _read(compacted, originals, mask, limit)
    full = merged_values([vs for _, found in read for vs in found], visible=visible, read=visible_words)
    text = render_values(full.sets, limit, counter, params=params) if full.sets else ""
    need = counter.count_text(text) if text else 0
    if need > cap:
        text = ""
        if cap > 0 and cut:
            capped = merged_values(_newest_sets(read, cap), visible=visible, read=visible_words)
            text = render_values(capped.sets, cap, counter, params=params) if capped.sets else ""
    return text, need


def _read(compacted: "tuple[Turn, ...]", originals: "Callable[[tuple[Turn, ...]], Iterator[Turn]]",
          mask: Callable[[Turn], Turn], limit: int
          ) -> "list[tuple[Turn, tuple[ValueSet, ...]]]":
    """The newest turns (newest first) with their value sets, until they give `limit` sources."""
    out: list[tuple[Turn, tuple[ValueSet, ...]]] = []
    n = 0
    for turn in originals(compacted):
        read = (turn, tuple(vs for vs in known_values_of(mask(turn)) if vs is not None))
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


def visible_words(part: str) -> tuple:
    """What a merge reads of one part of the visible text (`visible_part`), once per text with the call's memo."""
    cache = current_memo()
    return visible_part(part) if cache is None else cache.get("visible_part", part, lambda: visible_part(part))


def known_values_of(turn: Turn) -> tuple:
    """The value sets one (masked) turn carried, computed once per content with the call's memo."""
    cache = current_memo()
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
