"""The pipeline's types: what one stage hands the next, in one module that imports no stage.

`PackInputs`, `PackState` and `Turn` (what a call starts from and leaves) are in `inputs`; the
types here are what the stages decide on the way: the turns prepared (`Prepared`), the candidates
selected (`Candidates`, `Line`, `Signals`), the verbatim zone (`Verbatim`), the layout fitted (`Fit`)
and what each stage cut (`TruncationEvent`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Literal

from ..content import Message, ToolSpec
from .inputs import PackInputs, Turn, turn_start

__all__ = ["Action", "TruncationEvent", "Signals", "Line", "Conversation", "Candidates", "Verbatim", "TurnsByStart",
           "Prepared", "Fit"]

Action = Literal["compress", "drop", "fold", "cut"]


@dataclass(frozen=True)
class TruncationEvent:
    layer: str
    action: Action
    reason: str
    ids: tuple[str, ...] = ()
    tokens_before: int = 0
    tokens_after: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "action": self.action, "reason": self.reason, "ids": list(self.ids),
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after}


@dataclass(frozen=True)
class Signals:
    """Task signals that move the flexible weights (recorded in the manifest for tuning)."""

    checklist_evidence_ratio: float = 0.0
    expected_tool_calls: float = 0.0
    risk_weight: float = 0.0
    retrieval_hit_rate: float = 0.0
    similarity: float = 0.0
    freshness: float = 0.0
    unresolved_questions: float = 0.0
    dialogue_depth: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {k: round(float(v), 6) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Line:
    """One candidate line of a pack section (an evidence item, a memory hit)."""

    id: str
    text: str
    tokens: int
    source: str
    uri: str = ""
    score: float = 0.0
    timestamp: float | None = None
    compressed: bool = False
    scores: dict[str, float] = field(default_factory=dict)  # bm25, dense, fused, freshness, mmr


@dataclass(frozen=True)
class Conversation:
    """History split around the user request: `history` before it, `loop` (this invocation's tool turns) after."""

    history: tuple[Turn, ...]
    loop: tuple[Turn, ...]
    request: Message | None
    instructions: tuple[Message, ...]  # ADK's dynamic instruction (static_instruction mode), never cut


@dataclass(frozen=True)
class Candidates:
    tools: tuple[ToolSpec, ...]
    evidence: tuple[Line, ...]
    memory: tuple[Line, ...]
    conversation: Conversation
    signals: Signals
    flags: tuple[str, ...]
    unselected: dict[str, tuple[str, ...]] = field(default_factory=dict)  # layer -> candidate ids retrieval left out
    tools_left_out: dict[str, str] = field(default_factory=dict)  # tool -> why ranking did not declare it


@dataclass(frozen=True)
class Verbatim:
    """Where the verbatim zone starts: turns before `through` are compacted, except `pinned` requests."""

    through: int = 0
    pinned: tuple[int, ...] = ()
    block: str = ""
    compactions: int = 0
    pins_opening: bool = False  # the block pins the session's opening request
    values_tokens: int = 0  # tokens of the block's KNOWN VALUES: recollections that share Memory's room

    def keeps(self, turn: Turn) -> bool:
        return turn.start >= self.through or turn.start in self.pinned

    def split(self, turns: "tuple[Turn, ...]") -> "tuple[tuple[Turn, ...], tuple[Turn, ...]]":
        """(compacted, kept) of `turns` in order of start (as `prepare` gives them), found by
        bisection: a call then costs the pinned requests, not a test of every turn."""
        k = bisect_left(turns, self.through, key=turn_start)
        at = [i for p, i in ((p, bisect_left(turns, p, 0, k, key=turn_start)) for p in sorted(set(self.pinned)))
              if i < k and turns[i].start == p]
        compacted: tuple[Turn, ...] = ()
        lo = 0
        for i in at:
            compacted += turns[lo:i]
            lo = i + 1
        return compacted + turns[lo:k], tuple(turns[i] for i in at) + turns[k:]

    def kept(self, turns: "tuple[Turn, ...]") -> "tuple[Turn, ...]":
        return self.split(turns)[1]


@dataclass(frozen=True)
class TurnsByStart:
    """Turns (in order of start) looked up by start, by bisection: a call reads the few it needs
    rather than indexing every turn of the history."""

    turns: tuple[Turn, ...]

    def get(self, start: int, default: "Turn | None" = None) -> "Turn | None":
        i = bisect_left(self.turns, start, key=turn_start)
        return self.turns[i] if i < len(self.turns) and self.turns[i].start == start else default

    def newest_first(self, turns: "tuple[Turn, ...]") -> "Iterator[Turn]":
        """`get(t.start, t)` of each of `turns` (in order of start, as `prepare` gives them), newest first:
        one walk down the turns, not a search per turn (a compaction reads a thousand turns this way)."""
        own = self.turns
        j = bisect_right(own, turns[-1].start, key=turn_start) - 1 if turns else -1
        for turn in reversed(turns):
            start = turn.start
            while j >= 0 and own[j].start > start:
                j -= 1
            yield own[j] if j >= 0 and own[j].start == start else turn


@dataclass(frozen=True)
class Prepared:
    """The conversation as turns, after the repairs and caps every call applies."""

    conversation: Conversation
    history: tuple[Turn, ...]
    loop: tuple[Turn, ...]
    pruned: frozenset[int]
    originals: "TurnsByStart"  # turn start -> the turn before any cut (fold lines name what was cut)
    events: tuple[TruncationEvent, ...]
    restored: tuple[int, ...] = ()  # earlier invocations' requests rendered as sent (`as_sent.restore_sent`)

    @cached_property  # read several times a call: joined once
    def turns(self) -> tuple[Turn, ...]:
        return self.history + self.loop


@dataclass(frozen=True)
class Fit:
    """What goes in: the verbatim zone, its turns, and the retrieved lines."""

    zone: "Verbatim"
    history: tuple[Turn, ...]
    loop: tuple[Turn, ...]
    evidence: "tuple[Line, ...]"
    memory: "tuple[Line, ...]"
    payload_text: str  # "" when the user's message goes out as it is
    block_after_payload: bool = False  # the block holds this invocation's own turns (see `render.block_follows`)

    @property
    def payload_index(self) -> int:
        """Where the payload (or the user's message sent as it is) sits: after the block and the history,
        or first when the block follows it."""
        return (1 if self.zone.block and not self.block_after_payload else 0) + sum(len(t.messages) for t in self.history)

    def payload_at(self, inputs: PackInputs) -> int | None:
        """The payload's index when this call sends one (or the user's message as it is), else None."""
        return self.payload_index if self.payload_text or inputs.request_index is not None else None
