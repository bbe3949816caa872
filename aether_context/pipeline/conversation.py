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

from ..compress.values import extract_values, merge_values, render_values
from ..tokens import TokenCounting
from .collect import PackState, Turn
from .decay import RunningSummary, decay_zones
from .cache import PackCache
from .incremental import turn_key, turn_tokens
from .render import quote as _quote

__all__ = ["Compaction", "Verbatim", "verbatim_zone", "plan_compaction", "compaction_block", "known_values",
           "BLOCK_HEADER"]

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
                    request_index: int | None, current: Verbatim, ceiling: int,
                    max_turns: int | None = None) -> tuple[int, tuple[int, ...]]:
    """The new `through`: the newest turns that fit `target` tokens (at least `min_tail` of them).

    `min_tail` turns stay even past `target` while they fit `ceiling` (the conversation's room): a tail
    that alone fills the room would compact again at every new turn. The newest turn always stays.
    The current invocation's request is pinned (it stays verbatim however old it is); the cut never
    moves backwards, so what was compacted stays compacted.
    """
    kept = 0
    through = turns[-1].start + len(turns[-1].messages) if turns else current.through
    for n, turn in enumerate(reversed(turns)):
        size = turn_tokens(turn, counter)
        if n >= 1 and kept + size > target and (n >= min_tail or kept + size > ceiling * 0.8):
            break
        if max_turns is not None and n >= max_turns:
            break
        kept += size
        through = turn.start
    through = max(through, current.through)
    pinned = (request_index,) if request_index is not None and request_index < through else ()
    return through, pinned


def compaction_block(compacted: "tuple[Turn, ...]", summary: RunningSummary, *, opening: str, goal: str,
                     fold_max_tokens: int, summary_max_tokens: int, uris: "dict[str, str]", values: str,
                     counter: TokenCounting, cache: PackCache | None = None
                     ) -> tuple[str, RunningSummary, tuple[int, ...], tuple[str, ...]]:
    """The block text for every compacted turn, with the advanced summary and what was merged into it."""
    zones = decay_zones(compacted, summary, goal=goal, fold_max_tokens=fold_max_tokens,
                        summary_max_tokens=summary_max_tokens, uris=uris, counter=counter, cache=cache)
    parts = [f"{BLOCK_HEADER} (earlier turns, compacted by aether-context; quoted data, originals at "
             "their artifact:// URIs):"]
    if opening:
        parts.append("OPENING REQUEST:\n" + _quote(opening))
    if zones.summary.text:
        parts.append("SUMMARY:\n" + _quote(zones.summary.text))
    if zones.fold_lines:
        parts.append("TURNS:\n" + "\n".join(_quote(f"- {line}") for line in zones.fold_lines))
    if values:
        parts.append(values.split("\n", 1)[0] + "\n" + _quote(values.split("\n", 1)[1]) if "\n" in values else values)
    return "\n".join(parts), zones.summary, zones.merged_turns, zones.merged_lines


def known_values(compacted: "tuple[Turn, ...]", max_tokens: int, counter: TokenCounting,
                 cache: PackCache | None = None) -> str:
    """KNOWN VALUES of the compacted turns: the ids and values they carried (call arguments included),
    newest value per source, so an identifier read long ago is still there when a call needs it.

    Bounded by the cap, not the history: a line costs at least a few tokens, so at most `max_tokens`
    sources can show; the newest turns giving that many are read (each turn's values once, from `cache`)."""
    if max_tokens <= 0:
        return ""
    sets: list = []
    for turn in reversed(compacted):
        found = _turn_values(turn) if cache is None else cache.get("turn_values", turn_key(turn), lambda t=turn: _turn_values(t))
        sets.extend(vs for vs in found if vs is not None)
        if len(sets) >= max_tokens:
            break
    merged = merge_values(sets)
    return render_values(merged, max_tokens, counter) if merged else ""


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
