"""Per-call work that a long session would otherwise redo over its whole history.

Every model call re-sends the session's history, and the ADK edge hands back the *same* `Message`
objects for unchanged contents (conversion is memoised by payload identity in the packer's
`PackCache`). So what depends only on those messages is reused across calls: the turn grouping of
an unchanged leading run, and each turn's token total (from the counter's own per-message counts). Grouping memoises a pure function in
the cache it is given; results equal a fresh computation (and are one, without a cache).
"""

from __future__ import annotations

from typing import Sequence

from ..content import Message
from ..tokens import TokenCounting
from .cache import PackCache
from .collect import Turn, group_turns

__all__ = ["grouped_turns", "turn_tokens", "turns_tokens", "turn_key"]


def turn_key(turn: Turn) -> tuple:
    """What a turn is made of: its start and its messages' digests (a content key for the cache)."""
    return (turn.start, *(m.digest for m in turn.messages))


def grouped_turns(messages: Sequence[Message], offset: int = 0, cache: PackCache | None = None) -> tuple[Turn, ...]:
    """`group_turns(messages, offset)`, reusing the turns of the last call whose run began with the same message.

    A turn is decided by its own messages and the one after it (which stops it), so a previous turn
    whose messages and successor are unchanged (same objects) is unchanged; grouping resumes after it.
    The entry holds the messages it grouped, so an id in its key cannot be reused while it lives.
    """
    messages = tuple(messages)
    if not messages:
        return ()
    if cache is None:
        return tuple(group_turns(messages, offset=offset))
    key = (offset, id(messages[0]))
    hit = cache.lookup("grouping", key)
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
    cache.put("grouping", key, (messages, turns))
    return turns


def turn_tokens(turn: Turn, counter: TokenCounting) -> int:
    """Tokens of a turn's messages (the counter keeps each message's count by digest)."""
    return sum(counter.count_message(m) for m in turn.messages)


def turns_tokens(turns: Sequence[Turn], counter: TokenCounting) -> int:
    return sum(turn_tokens(t, counter) for t in turns)
