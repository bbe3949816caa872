"""Progressive history decay: full → fold → summary, without losing the way back.

Turns that leave the verbatim zone become one fold line each (`[turn N] tool(args) → outcome ·
artifact://…`); when the fold lines outgrow their cap, the oldest are merged into one running
summary (incremental: the previous summary plus the new lines gives the next one) under a hard
cap. Fold lines and the summary carry the URIs of the originals, so compaction is reversible.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import compress
from typing import Any, Sequence

from ..compress import ExtractiveSummarizer, fold_message, fold_tool_pair
from ..content import Blob, FunctionCall, FunctionResponse, Message, TextPart, sha256_hex
from ..tokens import TokenCounting
from .cache import counter_key, current_memo
from .inputs import Turn, turn_start
from .incremental import extended, mapped, running_totals, shared_prefix, turn_key

__all__ = ["RunningSummary", "fold_turn", "decay_zones", "Zones", "decay_images", "blob_key", "prune_tool_outputs",
           "clearable", "cleared_turn", "summarizer"]


@dataclass(frozen=True)
class RunningSummary:
    """The summary zone: text covering every turn up to `covered_until` (a turn's first message index)."""

    text: str = ""
    covered_until: int = -1

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "covered_until": self.covered_until}

    @classmethod
    def from_json(cls, d: "dict[str, Any] | None") -> "RunningSummary":
        if not d:
            return cls()
        return cls(text=str(d.get("text", "")), covered_until=int(d.get("covered_until", -1)))


def blob_key(data: bytes) -> str:
    return "blob-" + sha256_hex(data)[:20]


def fold_turn(turn: Turn, uris: "dict[str, str]", counter: TokenCounting, max_tokens: int = 72) -> str:
    """One line for a turn: each call with its response's outcome and URI, or the text in brief.

    Memoised in the call's memo by the turn's content and URIs: a long session folds the same turns on every call.
    """
    cache = current_memo()
    if cache is None:
        return _fold_turn(turn, uris, counter, max_tokens)
    key = (turn_key(turn), tuple(uris.get(r.key, "") for m in turn.messages for r in m.responses),
           max_tokens, counter_key(counter))
    return cache.get("fold_line", key, lambda: _fold_turn(turn, uris, counter, max_tokens))


def _fold_turn(turn: Turn, uris: "dict[str, str]", counter: TokenCounting, max_tokens: int) -> str:
    calls: list[FunctionCall] = [c for m in turn.messages for c in m.calls]
    responses: list[FunctionResponse] = [r for m in turn.messages for r in m.responses]
    if calls:
        pieces = []
        pending = list(responses)
        for c in calls:
            match = next((r for r in pending if r.name == c.name), None)
            if match is not None:
                pending.remove(match)
                pieces.append(fold_tool_pair(turn.start, c, match, uri=uris.get(match.key),
                                             counter=counter, max_tokens=max_tokens))
            else:
                pieces.append(fold_tool_pair(turn.start, c, FunctionResponse(c.name, {"result": "(no response)"}),
                                             uri=None, counter=counter, max_tokens=max_tokens))
        head = turn.messages[0].text.strip()
        line = " | ".join(pieces)
        if not head:
            return line
        said = fold_message(turn.start, Message("model", (TextPart(head),)), counter, 28).split("] ", 1)[-1]
        return line.replace(f"[turn {turn.start}] ", f"[turn {turn.start}] {said} → ", 1)
    return fold_message(turn.start, turn.messages[0], counter, max_tokens)


def summarizer(counter: TokenCounting) -> ExtractiveSummarizer:
    """The summarizer a compaction folds its overflow with, its readings of lines kept in the call's memo."""
    cache = current_memo()
    if cache is None:
        return ExtractiveSummarizer(counter)
    key = counter_key(counter)
    return ExtractiveSummarizer(counter, memo=lambda k, compute: cache.get("summary_reading", (k, key), compute))


@dataclass(frozen=True)
class Zones:
    summary: RunningSummary
    fold_lines: tuple[str, ...]
    merged_lines: tuple[str, ...] = ()  # fold lines newly merged into the summary (what an LLM summarizer is given)


def decay_zones(folded: Sequence[Turn], previous: RunningSummary, *, goal: str, fold_max_tokens: int,
                summary_max_tokens: int, uris: "dict[str, str]", counter: TokenCounting) -> Zones:
    """Fold lines for folded turns the summary does not cover; the overflow goes into the summary."""
    uncovered = [t for t in folded if t.start > previous.covered_until]
    lines = [fold_turn(t, uris, counter) for t in uncovered]
    sizes = [counter.count_text(ln) + 2 for ln in lines]
    cut, tail = 0, sum(sizes)
    while cut < len(lines) and tail > fold_max_tokens:
        tail -= sizes[cut]
        cut += 1
    if not cut:
        return Zones(previous, tuple(lines))
    text = summarizer(counter).summarize(previous.text or None, lines[:cut], goal=goal,
                                                max_tokens=summary_max_tokens)
    summary = RunningSummary(text=text, covered_until=uncovered[cut - 1].start)
    return Zones(summary, tuple(lines[cut:]), tuple(lines[:cut]))


def decay_images(turns: Sequence[Turn], keep_turns: int, uris: "dict[str, str]") -> tuple[tuple[Turn, ...], tuple[str, ...]]:
    """Inline images older than `keep_turns` turns become a one-line description with their URI.
    Which turns carry an image is carried from the last call for its unchanged turns (the call's memo)."""
    turns = tuple(turns)
    with_images = set(compress(range(len(turns)), mapped("image_turns", turns, _has_images)))
    if not with_images:
        return turns, ()
    out: list[Turn] = []
    changed: list[str] = []
    last = len(turns) - keep_turns
    for i, t in enumerate(turns):
        if i >= last or i not in with_images:
            out.append(t)
            continue
        msgs = []
        for m in t.messages:
            parts = []
            for p in m.parts:
                if isinstance(p, Blob):
                    key = blob_key(p.data)
                    uri = uris.get(key, "")
                    parts.append(TextPart(f"[{p.mime_type} attachment from turn {t.start}, {len(p.data)} bytes"
                                          + (f": {uri}]" if uri else "; original in the session history]")))
                    changed.append(key)
                else:
                    parts.append(p)
            msgs.append(Message(m.role, tuple(parts)))
        out.append(Turn(t.start, tuple(msgs)))
    return tuple(out), tuple(changed)


def _has_images(turn: Turn) -> bool:
    return any(m.blobs for m in turn.messages)


def _response_tokens(turn: Turn, counter: TokenCounting) -> int:
    # message counts are cached by digest; re-serialising every response on every call is not
    return sum(counter.count_message(m) for m in turn.messages if m.responses)


def _response_keys(turn: Turn) -> tuple[str, ...]:
    return tuple(r.key for m in turn.messages for r in m.responses)


def prune_tool_outputs(turns: Sequence[Turn], *, protect_tokens: int, minimum_tokens: int, uris: "dict[str, str]",
                       already: "frozenset[int]", counter: TokenCounting,
                       consider_new: bool = True
                       ) -> tuple[tuple[Turn, ...], frozenset[int], tuple[int, ...]]:
    """Clear old tool outputs to a placeholder with their URI, beyond the newest `protect_tokens` of outputs.

    Only outputs saved in the artifact store (with a URI) are cleared, and only when the clearing
    reclaims at least `minimum_tokens` at once (so the prefix changes rarely); turns cleared before
    stay cleared. Returns the turns, every cleared turn start, and the newly cleared ones. With
    `consider_new` False only the turns cleared before are cleared again (a frozen pack). A cleared
    turn is built once (the call's memo, by its content and URIs): later calls get the same object back, and
    the turns' output sizes, keys and outcome are carried from the last call (`_pruned`).
    """
    turns, already = tuple(turns), frozenset(already)
    keys = mapped("response_keys", turns, _response_keys)
    fresh = clearable(turns, protect_tokens=protect_tokens, minimum_tokens=minimum_tokens, uris=uris,
                      already=already, counter=counter) if consider_new else ()
    cleared = already | {t.start for t in fresh}
    if not cleared:
        return turns, frozenset(), ()
    return _pruned(turns, keys, cleared, uris), cleared, tuple(t.start for t in fresh)


def clearable(turns: "tuple[Turn, ...]", *, protect_tokens: int, minimum_tokens: int, uris: "dict[str, str]",
              already: "frozenset[int]", counter: TokenCounting) -> tuple[Turn, ...]:
    """The turns (newest first) whose outputs a prune of `turns` clears now, besides those cleared `already`:
    none unless together they reclaim `minimum_tokens`."""
    keys = mapped("response_keys", turns, _response_keys)
    totals = running_totals(("response_tokens", counter_key(counter)), turns, lambda t: _response_tokens(t, counter))
    total = totals[-1] if totals else 0
    if not (already or total >= protect_tokens + minimum_tokens):
        return ()
    # turn i has `total - totals[i]` tokens of outputs after it: past the protected ones for i < older
    older = bisect_right(totals, total - protect_tokens)
    fresh = tuple(turns[i] for i in reversed(_saved(turns, keys, uris, already)) if i < older)
    return fresh if sum(_response_tokens(t, counter) for t in fresh) >= minimum_tokens else ()


def cleared_turn(turn: Turn, uris: "dict[str, str]") -> Turn:
    """`turn` with its outputs that have a URI cleared to a placeholder naming it (built once per content and URIs)."""
    cache = current_memo()
    if cache is None:
        return _cleared_turn(turn, uris)
    key = (turn_key(turn), tuple(uris.get(r.key, "") for m in turn.messages for r in m.responses))
    return cache.get("cleared_turn", key, lambda: _cleared_turn(turn, uris))


def _saved(turns: "tuple[Turn, ...]", keys: "tuple[tuple[str, ...], ...]", uris: "dict[str, str]",
           already: "frozenset[int]") -> list[int]:
    """Indices of the turns not cleared `already` whose outputs all have a URI, ascending. Carried from the
    last call when its turns lead these, its URIs are still here and what it had cleared still is: only
    the turns it left, the new turns and those whose outputs gained a URI (found through where each
    output key is, also carried) are looked at: the history is not walked, its URIs only compared (C level)."""
    cache = current_memo()
    if not uris or not turns:
        return []

    def feed(where: "dict[str, list[int]]", more: tuple) -> "dict[str, list[int]]":
        # grown in place, never copied: an index it gives is only a candidate (past these turns, or fed by a
        # call whose history went another way since), kept only if this turn's own keys all have a URI
        for i in range(len(turns) - len(more), len(turns)):
            for k in keys[i]:
                where.setdefault(k, []).append(i)
        return where

    where = extended("key_index", turns, dict, feed)
    key = ("saved", id(turns[0]))
    hit = cache.lookup("carried", key) if cache is not None else None
    if hit is not None and _still(hit, turns, uris, already):
        old_turns, old_uris, _, left = hit
        added = uris.keys() - old_uris.keys()
        look = {*left, *range(len(old_turns), len(turns)), *(i for k in added for i in where.get(k, ()))}
    else:
        look = {i for k in uris for i in where.get(k, ())}
    n = len(turns)
    out = sorted(i for i in look if i < n and keys[i] and turns[i].start not in already
                 and all(k in uris for k in keys[i]))
    if cache is not None:
        cache.put("carried", key, (turns, dict(uris), already, out))  # holds the turns: their ids stay theirs
    return out


def _still(hit: tuple, turns: "tuple[Turn, ...]", uris: "dict[str, str]", already: "frozenset[int]") -> bool:
    """Whether the last call's saved turns stand for these: its turns lead them, its URIs and cleared
    turns are still here (C-level comparisons)."""
    old_turns, old_uris, old_already, _ = hit
    return (len(old_turns) <= len(turns) and shared_prefix(old_turns, turns) == len(old_turns)
            and old_already <= already and old_uris.items() <= uris.items())


def _pruned(turns: "tuple[Turn, ...]", keys: "tuple[tuple[str, ...], ...]", cleared: "frozenset[int]",
            uris: "dict[str, str]") -> tuple[Turn, ...]:
    """The turns with the `cleared` ones cleared. A turn's outcome depends on the turn, whether it is
    cleared and its outputs' URIs: the last call's outcome stands for its unchanged leading turns
    when turns were only cleared since and URIs only added, but for those the additions touch."""
    cache = current_memo()
    def one(t: Turn) -> Turn:
        return cleared_turn(t, uris) if t.start in cleared else t

    hit = cache.lookup("carried", ("pruned", id(turns[0]))) if cache is not None and turns else None
    same = 0
    if hit is not None and hit[1] <= cleared and hit[2].items() <= uris.items():
        old_turns, old_cleared, old_uris, old_out = hit
        same = shared_prefix(old_turns, turns)
        out = list(old_out[:same])
        added = uris.keys() - old_uris.keys()
        redo = {i for i in range(same) if keys[i] and not added.isdisjoint(keys[i])} if added else set()
        redo |= {i for i in (bisect_left(turns, s, 0, same, key=turn_start) for s in cleared - old_cleared)
                 if i < same and turns[i].start in cleared}
        for i in redo:
            out[i] = one(turns[i])
    else:
        out = []
    out += [one(t) for t in turns[same:]]
    result = tuple(out)
    if cache is not None and turns:
        cache.put("carried", ("pruned", id(turns[0])), (turns, cleared, dict(uris), result))
    return result



def _cleared_turn(t: Turn, uris: "dict[str, str]") -> Turn:
    msgs = []
    for m in t.messages:
        parts = tuple(
            FunctionResponse(p.name, {"cleared": "old tool output cleared to save context",
                                      "artifact_uri": uris.get(p.key, "")}, p.id)
            if isinstance(p, FunctionResponse) and p.key in uris else p
            for p in m.parts)
        msgs.append(Message(m.role, parts))
    return Turn(t.start, tuple(msgs))
