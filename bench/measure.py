"""How a request looks to the model, measured the same way by every benchmark.

Tokens are counted with aether-context's own `TokenCounter` over the core view of the request the
model received (`request_from_llm`), so a plugin's request and ADK's own are scored by one ruler.
The head digest and the prefix comparison are written here rather than taken from the library's
private helpers (`pipeline/build.py`), so the ruler does not move with the code it measures.
"""

from __future__ import annotations

from dataclasses import dataclass

from aether_context import ModelRequest, TokenCounter
from aether_context.content import canonical_json, sha256_hex
from aether_context.pipeline import request_tokens

__all__ = ["RequestShape", "prefix_share"]


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
        total = request_tokens(req, counter)
        head = sha256_hex(canonical_json([req.system_instruction, [t.to_json() for t in req.tools], list(req.other_tools)]))
        return cls(head, total - sum(t for _, t in msgs), msgs, total)


def prefix_share(previous: RequestShape, current: RequestShape) -> float | None:
    """Tokens of `previous` that are an identical prefix of `current`, over `previous`'s tokens.

    The head counts as one block: a changed system instruction or tool list breaks the whole prefix.
    """
    if not previous.total:
        return None
    same = 0
    if previous.head == current.head:
        same = previous.head_tokens
        for (d1, t1), (d2, _) in zip(previous.messages, current.messages):
            if d1 != d2:
                break
            same += t1
    return same / previous.total
