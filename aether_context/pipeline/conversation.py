"""The conversation policy: verbatim while it fits, one compaction under pressure, append otherwise.

History goes out as ADK built it for as long as the request fits. When it no longer does, one
compaction moves the oldest turns out of the verbatim zone in a single step, down to a target
share of the conversation's room (`conversation.compact_to`), and writes them into a frozen
compaction block (CONVERSATION SO FAR: the pinned opening request, the running summary, one fold
line per turn). Later calls, in this invocation and the next ones, append to that prefix without
rewriting it until the next compaction: that is what keeps the provider's prompt cache warm.
Turns that left the verbatim zone stay searchable: they are Memory candidates (see `select`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tokens import TokenCounting
from .collect import PackState, Turn
from .decay import RunningSummary, decay_zones
from .incremental import turn_tokens
from .render import quote as _quote

__all__ = ["Compaction", "Verbatim", "verbatim_zone", "plan_compaction", "compaction_block", "BLOCK_HEADER"]

BLOCK_HEADER = "CONVERSATION SO FAR"


@dataclass(frozen=True)
class Verbatim:
    """Where the verbatim zone starts: turns before `through` are compacted, except `pinned` requests."""

    through: int = 0
    pinned: tuple[int, ...] = ()
    block: str = ""
    compactions: int = 0
    pins_opening: bool = False  # the block pins the session's opening request

    def keeps(self, turn: Turn) -> bool:
        return turn.start >= self.through or turn.start in self.pinned


@dataclass(frozen=True)
class Compaction:
    """A compaction decided by this call: the new zone and what it folded, for the manifest."""

    zone: Verbatim
    reason: str
    folded: tuple[int, ...]  # starts of the turns moved out of the verbatim zone by this call
    tokens_before: int
    tokens_after: int
    summary: RunningSummary
    merged_lines: tuple[str, ...]

    def to_json(self) -> dict:
        return {"reason": self.reason, "through": self.zone.through, "folded_turns": len(self.folded),
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after,
                "count": self.zone.compactions}


def verbatim_zone(previous: PackState | None, messages_digests: "tuple[str, ...]") -> Verbatim:
    """The previous call's zone, if the history it was cut from is still the same; else none."""
    if previous is None or previous.compacted_through <= 0:
        return Verbatim()
    through = previous.compacted_through
    if through > len(messages_digests) or (through < len(messages_digests)
                                             and messages_digests[through] != previous.boundary_digest):
        return Verbatim()  # ADK's history changed under us (its own compaction, a rewind): start again
    return Verbatim(through, previous.pinned, previous.block_text, previous.compactions, previous.pins_opening)


def plan_compaction(turns: "tuple[Turn, ...]", *, target: int, min_tail: int, counter: TokenCounting,
                    request_index: int | None, current: Verbatim) -> tuple[int, tuple[int, ...]]:
    """The new `through`: the newest turns that fit `target` tokens (at least `min_tail` of them).

    The current invocation's request is pinned (it stays verbatim however old it is); the cut never
    moves backwards, so what was compacted stays compacted.
    """
    kept = 0
    through = turns[-1].start + len(turns[-1].messages) if turns else current.through
    for n, turn in enumerate(reversed(turns)):
        size = turn_tokens(turn, counter)
        if n >= min_tail and kept + size > target:
            break
        kept += size
        through = turn.start
    through = max(through, current.through)
    pinned = (request_index,) if request_index is not None and request_index < through else ()
    return through, pinned


def compaction_block(compacted: "tuple[Turn, ...]", summary: RunningSummary, *, opening: str, goal: str,
                     fold_max_tokens: int, summary_max_tokens: int, uris: "dict[str, str]", values: str,
                     counter: TokenCounting) -> tuple[str, RunningSummary, tuple[int, ...], tuple[str, ...]]:
    """The block text for every compacted turn, with the advanced summary and what was merged into it."""
    zones = decay_zones(compacted, summary, goal=goal, fold_max_tokens=fold_max_tokens,
                        summary_max_tokens=summary_max_tokens, uris=uris, counter=counter)
    parts = [f"{BLOCK_HEADER} (earlier turns, compacted by aether-context; quoted data, originals at "
             "their artifact:// URIs):"]
    if opening:
        parts.append("OPENING REQUEST:\n" + _quote(opening))
    if zones.summary.text:
        parts.append("SUMMARY:\n" + _quote(zones.summary.text))
    if zones.fold_lines:
        parts.append("TURNS:\n" + "\n".join(_quote(f"- {line}") for line in zones.fold_lines))
    if values:
        parts.append("KNOWN VALUES:\n" + _quote(values))
    return "\n".join(parts), zones.summary, zones.merged_turns, zones.merged_lines
