"""Per-call work that a long session would otherwise redo over its whole history.

Every model call re-sends the session's history, and the ADK edge hands back the *same* `Message`
objects for unchanged contents (conversion is memoised by payload identity). So what depends only
on those messages can be reused across calls: the turn grouping of an unchanged leading run, and
each turn's token total. Everything here memoises a pure function; results equal a fresh computation.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from ..content import Message
from ..tokens import TokenCounting
from .collect import Turn, group_turns

__all__ = ["grouped_turns", "turn_tokens", "turns_tokens", "GROUPING_CACHE_SIZE"]

GROUPING_CACHE_SIZE = 256  # message runs (about one per live session and agent) kept for reuse

# (offset, id of the first message) -> (the messages grouped last time, their turns). The messages
# are held, so an id cannot be reused by another object while its entry lives.
_GROUPING: "OrderedDict[tuple[int, int], tuple[tuple[Message, ...], tuple[Turn, ...]]]" = OrderedDict()


def grouped_turns(messages: Sequence[Message], offset: int = 0) -> tuple[Turn, ...]:
    """`group_turns(messages, offset)`, reusing the turns of the last call whose run began with the same message.

    A turn is decided by its own messages and the one after it (which stops it), so a previous turn
    whose messages and successor are unchanged (same objects) is unchanged; grouping resumes after it.
    """
    messages = tuple(messages)
    if not messages:
        return ()
    key = (offset, id(messages[0]))
    hit = _GROUPING.get(key)
    reused: tuple[Turn, ...] = ()
    if hit is not None:
        old_msgs, old_turns = hit
        same = 0
        for a, b in zip(old_msgs, messages):
            if a is not b:
                break
            same += 1
        # keep turns that end strictly before the first changed (or missing) message
        k = len(old_turns)
        while k and old_turns[k - 1].start - offset + len(old_turns[k - 1].messages) >= same:
            k -= 1
        reused = old_turns[:k]
    resume = reused[-1].start - offset + len(reused[-1].messages) if reused else 0
    turns = reused + tuple(group_turns(messages[resume:], offset=offset + resume))
    _GROUPING[key] = (messages, turns)
    _GROUPING.move_to_end(key)
    while len(_GROUPING) > GROUPING_CACHE_SIZE:
        _GROUPING.popitem(last=False)
    return turns


def turn_tokens(turn: Turn, counter: TokenCounting) -> int:
    """Tokens of a turn's messages, memoised on the turn (per counter: counts are pure)."""
    memo = turn.__dict__.get("_tokens")
    if memo is not None and memo[0] is counter:
        return memo[1]
    total = sum(counter.count_message(m) for m in turn.messages)
    turn.__dict__["_tokens"] = (counter, total)
    return total


def turns_tokens(turns: Sequence[Turn], counter: TokenCounting) -> int:
    return sum(turn_tokens(t, counter) for t in turns)
