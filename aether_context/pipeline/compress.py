"""Fitting helpers: retrieved lines into their budget, oversized turns cut, orphans repaired.

Every action is a `TruncationEvent` naming what it touched, so nothing disappears silently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ..content import FunctionResponse, Message, TextPart, canonical_json
from ..tokens import TokenCounting
from .collect import Turn
from .cache import PackCache, counter_key
from .incremental import turn_key, turn_tokens
from ..compress import describe_outcome
from ..compress.middle_out import middle_out
from .select import Line

__all__ = ["TruncationEvent", "fit_lines", "cut_turn", "turn_id", "repair_orphans", "bounded_turns"]

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


def turn_id(turn: Turn) -> str:
    return f"turn-{turn.start}:{turn.messages[0].digest[:8]}"


def _cut_response(resp: FunctionResponse, max_tokens: int, counter: TokenCounting) -> FunctionResponse:
    """A response cut middle-out to `max_tokens`; cutting a cut response again cuts its text, never nests."""
    already = set(resp.response) == {"result_cut"} and isinstance(resp.response["result_cut"], str)
    text = resp.response["result_cut"] if already else canonical_json(resp.response)
    if counter.count_text(text) <= max_tokens:
        return resp
    return FunctionResponse(resp.name, {"result_cut": middle_out(text, max_tokens, counter)}, resp.id)


def cut_turn(turn: Turn, max_tokens: int, counter: TokenCounting) -> Turn:
    """Cut oversized text and tool results of a turn middle-out; pairing and roles are unchanged."""
    per_part = max(32, max_tokens // max(1, sum(len(m.parts) for m in turn.messages)))
    msgs = []
    for m in turn.messages:
        parts = []
        for p in m.parts:
            if isinstance(p, TextPart):
                p = TextPart(middle_out(p.text, per_part, counter))
            elif isinstance(p, FunctionResponse):
                p = _cut_response(p, per_part, counter)
            parts.append(p)
        msgs.append(Message(m.role, tuple(parts)))
    return Turn(turn.start, tuple(msgs))


def repair_orphans(turns: "tuple[Turn, ...]") -> tuple[tuple[Turn, ...], tuple[TruncationEvent, ...]]:
    """Rewrite function responses whose call is gone (cut by an earlier compaction) as user text.

    Gemini rejects a response without its call; as text the result stays visible and in place.
    """
    out, ids = [], []
    for t in turns:
        if t.is_orphan_response:
            ids.append(turn_id(t))
            brief = "; ".join(f"{r.name} → {describe_outcome(r.name, r.response)}" for m in t.messages for r in m.responses)
            t = Turn(t.start, (Message("user", (TextPart(f"[turn {t.start}] tool result whose call is no longer in the history: {brief}"),)),))
        out.append(t)
    events = (TruncationEvent("conversation", "compress", "orphaned function response rewritten as text", tuple(ids)),) if ids else ()
    return tuple(out), events


def bounded_turns(turns: "tuple[Turn, ...]", max_turn_tokens: int, counter: TokenCounting,
                  layer: str = "conversation", cache: "PackCache | None" = None
                  ) -> tuple[tuple[Turn, ...], tuple[TruncationEvent, ...]]:
    """Apply the per-turn cap; each cut is an event (a turn cut once is cut again from the `cache`)."""
    out, events = [], []
    for t in turns:
        before = turn_tokens(t, counter)
        if before > max_turn_tokens:
            if cache is None:
                t2 = cut_turn(t, max_turn_tokens, counter)
            else:  # the same turn is cut again on every later call: by its content, the same cut
                t2 = cache.get("cut_turn", (turn_key(t), max_turn_tokens, counter_key(counter)),
                               lambda t=t: cut_turn(t, max_turn_tokens, counter))
            after = turn_tokens(t2, counter)
            events.append(TruncationEvent(layer, "cut", "turn over max_turn_tokens", (turn_id(t),), before, after))
            t = t2
        out.append(t)
    return tuple(out), tuple(events)


def fit_lines(layer: str, lines: "tuple[Line, ...]", budget: int, item_max_tokens: int, counter: TokenCounting,
              *, older_first: bool = False) -> tuple[tuple[Line, ...], tuple[TruncationEvent, ...]]:
    """Fit ranked lines into `budget`: first shorten to `item_max_tokens`, then halve, then drop.

    Drops go lowest rank first, or oldest first when `older_first` (evidence).
    """
    events: list[TruncationEvent] = []
    total = sum(ln.tokens for ln in lines)
    if total <= budget:
        return lines, ()
    for cap in (item_max_tokens, max(16, item_max_tokens // 2)):
        long = [ln for ln in lines if ln.tokens > cap]
        if not long or total <= budget:
            continue
        before = total
        lines = tuple(_shorten(ln, cap, counter) if ln.tokens > cap else ln for ln in lines)
        total = sum(ln.tokens for ln in lines)
        events.append(TruncationEvent(layer, "compress", f"overflow: items summarised to {cap} tokens",
                                      tuple(ln.id for ln in long), before, total))
    if total > budget:
        order = sorted(range(len(lines)), key=lambda i: ((lines[i].timestamp or 0.0) if older_first else -i, i))
        drop: set[int] = set()
        for i in order:
            if total <= budget:
                break
            drop.add(i)
            total -= lines[i].tokens
        before = sum(ln.tokens for ln in lines)
        dropped = tuple(lines[i].id for i in sorted(drop))
        lines = tuple(ln for i, ln in enumerate(lines) if i not in drop)
        events.append(TruncationEvent(layer, "drop", "overflow", dropped, before, total))
    return lines, tuple(events)


def _shorten(line: Line, cap: int, counter: TokenCounting) -> Line:
    text = counter.truncate_text(line.text, max(1, cap - 2)).rstrip() + "…"
    if line.uri and line.uri not in text:
        text += f" ({line.uri})"
    return replace(line, text=text, tokens=counter.count_text(text), compressed=True)
