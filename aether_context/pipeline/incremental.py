"""Per-call work that a long session would otherwise redo over its whole history.

Every model call re-sends the session's history, and the ADK edge hands back the *same* `Message`
objects for unchanged contents (conversion is memoised by payload identity in the packer's
`PackCache`). So what depends only on those messages is reused across calls: the turn grouping of
an unchanged leading run, and each turn's token total (from the counter's own per-message counts). Grouping memoises a pure function in
the call's memo (`cache.current_memo`); results equal a fresh computation (and are one, without a memo).
"""

from __future__ import annotations

import hashlib
from itertools import accumulate
from operator import is_
from typing import Any, Callable, Hashable, Sequence

from ..content import Message, ModelRequest, canonical_json
from ..tokens import TokenCounting
from .cache import current_memo
from .inputs import PackInputs, Turn, group_turns

__all__ = ["grouped_turns", "turn_tokens", "turns_tokens", "turn_key", "mapped", "running_totals", "shared_prefix",
           "note_prefix", "extended", "request_checksum", "inputs_digest"]


def turn_key(turn: Turn) -> tuple:
    """What a turn is made of: its start and its messages' digests (a content key for the cache)."""
    return (turn.start, *(m.digest for m in turn.messages))


def grouped_turns(messages: Sequence[Message], offset: int = 0,
                  span: "tuple[int, int] | None" = None) -> tuple[Turn, ...]:
    """`group_turns(messages[lo:hi], offset + lo)` for `span` = (lo, hi) (default: all of them), reusing the
    turns of the last call whose span began with the same message.

    A turn is decided by its own messages and the one after it, so a previous turn whose messages and
    successor are unchanged is unchanged; grouping resumes after it. The entry holds the messages it
    grouped, so an id in its key cannot be reused while it lives.
    """
    cache = current_memo()
    messages = tuple(messages)
    lo, hi = span if span is not None else (0, len(messages))
    if lo >= hi:
        return ()
    if cache is None:
        return tuple(group_turns(messages[lo:hi], offset=offset + lo))
    key = (offset, lo, id(messages[lo]))
    hit = cache.lookup("grouping", key)
    reused: tuple[Turn, ...] = ()
    if hit is not None:
        old_msgs, old_hi, old_turns = hit
        same = min(shared_prefix(old_msgs, messages), old_hi, hi)  # C-level, never a Python loop
        # keep turns that end strictly before the first changed (or missing) message
        k = len(old_turns)
        while k and old_turns[k - 1].start - offset + len(old_turns[k - 1].messages) >= same:
            k -= 1
        reused = old_turns[:k]
    resume = reused[-1].start - offset + len(reused[-1].messages) if reused else lo
    turns = reused + tuple(group_turns(messages[resume:hi], offset=offset + resume))
    cache.put("grouping", key, (messages, hi, turns))
    if reused:  # the turns regrouped may equal the last call's: the exact shared prefix, from the few at the end
        k = len(reused)
        note_prefix(old_turns, turns, k + _shared_prefix(old_turns[k:], turns[k:]))
    return turns


def turn_tokens(turn: Turn, counter: TokenCounting) -> int:
    """Tokens of a turn's messages (the counter keeps each message's count by digest)."""
    return sum(counter.count_message(m) for m in turn.messages)


def turns_tokens(turns: Sequence[Turn], counter: TokenCounting) -> int:
    return sum(turn_tokens(t, counter) for t in turns)


def shared_prefix(old: tuple, new: tuple) -> int:
    """How many leading items of `new` are the items of `old` (by identity, or equal values: the
    functions memoised below are pure, so an equal item gives an equal result). With the call's memo, the
    answer for the same two objects is kept: the passes of one call over the same history compare it once."""
    cache = current_memo()
    if old is new:
        return len(new)
    if cache is None or not new:
        return _shared_prefix(old, new)
    for was, now, same in cache.lookup("prefix", id(new[0])) or ():
        if was is old and now is new:
            return same
    same = _shared_prefix(old, new)
    note_prefix(old, new, same)
    return same


PREFIX_PAIRS = 8  # answers kept per first item: a call's passes compare a few sequences that start alike


def note_prefix(old: tuple, new: tuple, same: int) -> None:
    """Record that `new` begins with the first `same` items of `old` and no more. A producer that built `new`
    from `old`'s leading items notes it, so no pass compares them. One entry per first item, holding its
    newest `PREFIX_PAIRS` answers (later calls' pairs push the older out: the entries do not pile up) and
    their sequences (their ids stay theirs)."""
    cache = current_memo()
    if new:
        kept = cache.lookup("prefix", id(new[0])) or ()
        cache.put("prefix", id(new[0]), ((old, new, same), *kept[:PREFIX_PAIRS - 1]))


def _shared_prefix(old: tuple, new: tuple) -> int:
    n = min(len(old), len(new))
    if old[:n] == new[:n]:  # one C-level pass, each item by identity first
        return n
    # The first difference, found with C-level slice comparisons, never a Python loop over the history
    # (an opening call's difference sits at the end of thousands of turns): ranges of doubling length
    # from the start until one differs, then halving inside it; about 3 item tests per shared item.
    lo, step = 0, 1
    while old[lo:lo + step] == new[lo:lo + step]:  # a difference lies before n: this stops
        lo, step = lo + step, step * 2
    hi = min(lo + step, n)  # old[:lo] equals new[:lo]; [lo, hi) holds a difference
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if old[lo:mid] == new[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _carried(kind: Hashable, items: tuple) -> "tuple[int, Any, tuple]":
    """What the last call of `kind` over a sequence starting with the same item left: how many of
    its items `items` still starts with, and its results."""
    cache = current_memo()
    if cache is None or not items:
        return 0, None, ()
    hit = cache.lookup("carried", (kind, id(items[0])))
    if hit is None:
        return 0, None, ()
    return shared_prefix(hit[0], items), hit[1], hit[0]


def mapped(kind: Hashable, items: Sequence, fn: Callable[[Any], Any]) -> tuple:
    """`tuple(fn(x) for x in items)` for a pure `fn` (`kind` names it and its parameters), reusing the
    results of the last call whose items began with the same object: a call then maps what is new.
    When `fn` gives back every item itself, the result is `items` (equal, and no history-sized copy)."""
    cache = current_memo()
    items, kind = tuple(items), ("mapped", kind)
    same, old, old_items = _carried(kind, items)
    fresh = tuple(fn(x) for x in items[same:])
    if (not same or old is old_items) and all(map(is_, fresh, items[same:])):
        out = items  # the pass left every item as it was (e.g. no orphan to repair): shared, not copied
    else:
        out = (old[:same] if same else ()) + fresh
    if cache is not None and items:
        cache.put("carried", (kind, id(items[0])), (items, out))  # holds the items: their ids stay theirs
        if same and same == len(old):  # a pass over the results need not compare them again
            note_prefix(old, out, same)
    return out


def running_totals(kind: Hashable, items: Sequence, weight: Callable[[Any], int]) -> tuple[int, ...]:
    """The running totals of `weight` over `items` (`totals[i]` = the sum of the first i + 1), the
    unchanged leading part carried from the last call: a range's sum is then one subtraction."""
    cache = current_memo()
    items, kind = tuple(items), ("totals", kind)
    same, old, _ = _carried(kind, items)
    base = old[same - 1] if same else 0
    out = (old[:same] if same else ()) + tuple(accumulate((weight(x) for x in items[same:]), initial=base))[1:]
    if cache is not None and items:
        cache.put("carried", (kind, id(items[0])), (items, out))
    return out


def extended(kind: Hashable, items: tuple, start: Callable[[], Any], feed: Callable[[Any, tuple], Any]) -> Any:
    """A state built by feeding `items` in order (`feed(state, more)` returns the new state), carried
    from the last call when `items` still begins with all of its items; else built from `start()`."""
    cache = current_memo()
    same, old, old_items = _carried(kind, items)
    if old is not None and same == len(old_items):
        state = feed(old, items[same:])
    else:
        state = feed(start(), items)
    if cache is not None and items:
        cache.put("carried", (kind, id(items[0])), (items, state))
    return state


def request_checksum(request: ModelRequest) -> str:
    """`request.checksum`, hashing on from the last call's hash state of the same history: sha256
    reads its input in order, so the canonical JSON's unchanged beginning is not hashed again."""
    cache = current_memo()
    if cache is None or not request.messages:
        return request.checksum
    head = canonical_json({"head": request.head_json()})[:-1]  # '{"head":...' : keys in order, head first

    def feed(state: "tuple[Any, int]", more: tuple) -> "tuple[Any, int]":
        hasher, n = state[0].copy(), state[1]
        for m in more:
            hasher.update(f'{"," if n else ""}"{m.digest}"'.encode())
            n += 1
        return hasher, n

    hasher, _ = extended(("checksum", head), request.messages,
                          lambda: (hashlib.sha256(f'{head},"messages":['.encode()), 0), feed)
    final = hasher.copy()
    final.update(b"]}")
    return "sha256:" + final.hexdigest()


_TIMES = "\x00message_times\x00"  # stands in for the event times in the inputs' JSON, then replaced


def inputs_digest(inputs: PackInputs) -> str:
    """`inputs.digest`, with the request's checksum and the event times' JSON carried from the last
    call (`request_checksum`; the times' JSON extended by the new messages' times only)."""
    cache = current_memo()
    if cache is None or not inputs.message_times:
        return inputs.digest
    data = inputs.to_json_without_request()
    data["message_times"] = _TIMES
    text, marker = canonical_json(data), canonical_json(_TIMES)
    if text.count(marker) != 1:  # the stand-in is in the inputs' own text: no shortcut
        return inputs.digest
    times = extended("times_json", tuple(inputs.message_times), bytearray, _times_json)
    before, after = text.split(marker)
    hasher = hashlib.sha256(f"{request_checksum(inputs.request)}{before}[".encode())
    hasher.update(times)  # hashed in pieces: the history's times are not copied again
    hasher.update(f"]{after}".encode())
    return hasher.hexdigest()


def _times_json(text: bytearray, more: tuple) -> bytearray:
    """The times' JSON items so far, comma-separated, then `more`'s: grown in place, never copied (only
    the entry that carries it holds it)."""
    if more:
        text += ("," if text else "").encode() + ",".join(map(canonical_json, more)).encode()
    return text
