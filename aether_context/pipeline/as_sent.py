"""Earlier invocations' requests kept as they were sent (the payload, the statuses riding on it).

At a new invocation the previous payload is part of the history. Rendering it back as the user's plain
message rewrites a message the provider has cached, so everything after it is re-processed (about the
payload and every turn since, each new user turn). Kept as sent, the new request appends to the last
one. The cost is the payload's extra tokens in the later calls until a compaction folds its turn:
the room accounting counts them (they are in the prepared turns), so a history that outgrows its room
compacts as before, and fold lines and known values still read the user's own message (`originals`).

A kept request is `(message index, digest of ADK's message there, payload text, trailing texts)`:
the message as sent is rebuilt from ADK's message, so it is restored only while ADK's history still
holds that very message.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace
from typing import TYPE_CHECKING

from ..content import Message, ModelRequest, TextPart
from .cache import current_memo
from .inputs import PackInputs, Turn, turn_start
from .render import payload_message, verbatim_request

if TYPE_CHECKING:
    from .fit import Fit
    from .prepare import Prepared

__all__ = ["SentRequest", "sent_requests", "restore_sent"]

SentRequest = tuple[int, str, str, tuple[str, ...]]  # (index, ADK digest, payload text, texts appended to it)


def _as_sent(original: Message, kept: SentRequest) -> Message:
    base = payload_message(verbatim_request(kept[2], original), original) or original
    return Message(base.role, base.parts + tuple(TextPart(t) for t in kept[3])) if kept[3] else base


def restore_sent(prepared: "Prepared", inputs: PackInputs) -> "Prepared":
    """`prepared` with each earlier invocation's request message as it was sent, where ADK's message at its
    index is still the one it was built from (the invocation's own request is the payload's to render).

    Each restored turn is kept in the call's memo by what it is built from, so every call gets the same object: its
    digest and token count are computed once, and the per-turn passes that compare the turns with the last
    call's by identity reuse what they found for it."""
    cache = current_memo()
    prev = inputs.previous
    if prev is None or not prev.sent_requests:
        return prepared
    out, restored = list(prepared.turns), []
    for kept in prev.sent_requests:
        index, digest = kept[0], kept[1]
        i = bisect_left(out, index, key=turn_start)
        if index == inputs.request_index or i >= len(out) or out[i].start != index or len(out[i].messages) != 1:
            continue
        message = out[i].messages[0]
        if message.role == "user" and message.digest == digest:
            out[i] = cache.get("sent_turn", (message.digest, kept),
                               lambda m=message, k=kept: Turn(k[0], (_as_sent(m, k),)))
            restored.append(index)
    if not restored:
        return prepared
    n = len(prepared.history)
    return replace(prepared, history=tuple(out[:n]), loop=tuple(out[n:]), restored=tuple(restored))


def sent_requests(inputs: PackInputs, fit: "Fit", stable: ModelRequest, keep: bool,
                  restored: "tuple[int, ...]") -> "tuple[SentRequest, ...]":
    """What the next call restores: the earlier ones this call sent as sent and still verbatim, and this
    invocation's request as this call sent it, when that differs from ADK's message (a payload, or a
    status riding on it)."""
    prev, index = inputs.previous, inputs.request_index
    if not keep:
        return ()
    carried = tuple(k for k in (prev.sent_requests if prev is not None else ())
                    if k[0] in restored and fit.zone.keeps(Turn(k[0], ())))
    at = fit.payload_at(inputs)
    if index is None or at is None or at >= len(stable.messages) or index >= len(inputs.request.messages):
        return carried
    original, sent = inputs.request.messages[index], stable.messages[at]
    base = payload_message(fit.payload_text, original) or original
    extra = sent.parts[len(base.parts):]
    if sent.parts[:len(base.parts)] != base.parts or not all(isinstance(p, TextPart) for p in extra):
        return carried
    if not fit.payload_text and not extra:
        return carried  # ADK's message went as it is: nothing to restore
    return carried + ((index, original.digest, fit.payload_text, tuple(p.text for p in extra)),)
