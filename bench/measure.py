"""How a request looks to the model, measured the same way by every benchmark.

Tokens are counted with aether-context's `TokenCounter` over the core view of the request the
model received (`request_from_llm`), so a plugin's request and ADK's own are scored by one ruler.
The head digest, the token sum and the prefix comparison are written here rather than taken from
the library's pipeline, so the ruler does not move with the code it measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from aether_context import ModelRequest, TokenCounter
from aether_context.content import FunctionCall, FunctionResponse, TextPart, canonical_json, sha256_hex

__all__ = ["RequestShape", "prefix_share", "shared_prefix_tokens", "request_text", "string_leaves"]


@dataclass(frozen=True)
class RequestShape:
    """A request as blocks: the head (system instruction + tools, one block) then each message."""

    head: str  # digest of the head
    head_tokens: int
    messages: tuple[tuple[str, int], ...]  # (message digest, tokens), in order
    total: int

    @classmethod
    def of(cls, req: ModelRequest, counter: TokenCounter) -> "RequestShape":
        msgs = tuple((m.digest, counter.count_message(m)) for m in req.messages)
        head_tokens = (counter.count_text(req.system_instruction)
                       + sum(counter.count_text(canonical_json(t.declaration)) for t in req.tools)
                       + sum(counter.count_text(canonical_json(t)) for t in req.other_tools))
        head = sha256_hex(canonical_json([req.model, req.system_instruction, [t.to_json() for t in req.tools],
                                          list(req.other_tools)]))
        return cls(head, head_tokens, msgs, head_tokens + sum(t for _, t in msgs))

    @property
    def checksum(self) -> str:
        """sha256 of the head and every message digest in order: equal checksums, byte-identical requests."""
        return sha256_hex(canonical_json([self.head, [d for d, _ in self.messages]]))


def shared_prefix_tokens(previous: RequestShape, current: RequestShape) -> int:
    """Leading tokens of `current` identical to `previous`'s (the head counts as one block)."""
    if previous.head != current.head:
        return 0
    same = current.head_tokens
    for (d1, _), (d2, t2) in zip(previous.messages, current.messages):
        if d1 != d2:
            break
        same += t2
    return same


def prefix_share(previous: RequestShape, current: RequestShape) -> float | None:
    """Tokens of `previous` that are an identical prefix of `current`, over `previous`'s tokens."""
    if not previous.total:
        return None
    return shared_prefix_tokens(previous, current) / previous.total


def string_leaves(value: Any) -> Iterable[str]:
    """Every string inside a JSON-like value (dict keys excluded; numbers as text)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        yield str(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from string_leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from string_leaves(v)


def _part_texts(part: Any) -> list[str]:
    if isinstance(part, TextPart):
        return [part.text]
    if isinstance(part, FunctionCall):
        return [part.name, *string_leaves(part.args), canonical_json(part.args)]
    if isinstance(part, FunctionResponse):
        return [part.name, *string_leaves(part.response), canonical_json(part.response)]
    return [canonical_json(part.to_json())]


def request_text(req: ModelRequest) -> str:
    """All text the model sees: system instruction, tool declarations, every part (raw strings and JSON)."""
    chunks = [req.system_instruction, *(canonical_json(t.declaration) for t in req.tools)]
    for m in req.messages:
        for p in m.parts:
            chunks.extend(_part_texts(p))
    return "\n".join(chunks)


class PackCpuClock:
    """CPU seconds of a `pack`: the event-loop thread's (input collection, applying the request) plus
    the pack thread's, where `build_pack` runs (`aether_context.adk.worker.pack_worker`).

    `time.thread_time()` around an awaited `pack` sees only the loop thread, not the build it
    awaits on the other thread, so both threads' CPU clocks are read. The store's background
    writer is not counted: it runs after the call, off the request's path."""

    def __init__(self) -> None:
        import threading
        import time

        from aether_context.adk.worker import pack_worker

        ident = pack_worker().submit(threading.get_ident).result()
        self._pack_clock = time.pthread_getcpuclockid(ident)
        self._time = time

    def now(self) -> float:
        return self._time.thread_time() + self._time.clock_gettime(self._pack_clock)
