"""Stage 4 — compress: fit each layer into its budget, compressing before dropping.

Order (from the design): memory → shorter summaries, older evidence → shorter summaries,
conversation → folded into the summary (older turns first), then deterministic drops
(memory → older evidence → oldest summary lines). System, Task and Tools are never touched.
Every action is a `TruncationEvent` naming what it touched, so nothing disappears silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..content import FunctionResponse, Message, TextPart, canonical_json
from ..tokens import TokenCounting
from .collect import Turn
from .decay import RunningSummary, decay_zones
from .incremental import turn_tokens
from ..compress import describe_outcome
from .select import Line

__all__ = ["TruncationEvent", "Fitted", "fit_lines", "fit_conversation", "cut_turn", "middle_out", "turn_id"]

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
class Fitted:
    """A conversation that fits: verbatim history, the summary and fold zones, verbatim loop turns."""

    history: tuple[Turn, ...]
    summary: RunningSummary
    fold_lines: tuple[str, ...]
    loop: tuple[Turn, ...]
    folded_loop_turns: int
    events: tuple[TruncationEvent, ...] = field(default=())
    merged_lines: tuple[str, ...] = ()  # fold lines merged into the summary by this pack


def turn_id(turn: Turn) -> str:
    return f"turn-{turn.start}:{turn.messages[0].digest[:8]}"


def middle_out(text: str, max_tokens: int, counter: TokenCounting, note: str = "") -> str:
    """Head + marker + tail within `max_tokens`, cut on line boundaries where possible."""
    if counter.count_text(text) <= max_tokens:
        return text
    marker = f"\n…[middle cut by aether-context{': ' + note if note else ''}]…\n"
    room = max(0, max_tokens - counter.count_text(marker))
    lo, hi = 0, len(text) // 2
    best = ""
    while lo <= hi:  # largest symmetric keep that fits
        mid = (lo + hi) // 2
        head, tail = text[:mid], text[len(text) - mid:] if mid else ""
        if "\n" in head[mid // 2:]:
            head = head[: head.rfind("\n") + 1]
        if "\n" in tail[: len(tail) // 2]:
            tail = tail[tail.find("\n") + 1:]
        candidate = head + marker + tail
        if counter.count_text(candidate) <= max_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best or counter.truncate_text(marker.strip(), max_tokens)


def _cut_response(resp: FunctionResponse, max_tokens: int, counter: TokenCounting) -> FunctionResponse:
    text = canonical_json(resp.response)
    if counter.count_text(text) <= max_tokens:
        return resp
    return FunctionResponse(resp.name, {"result_cut": middle_out(text, max_tokens, counter, "oversized tool result")}, resp.id)


def cut_turn(turn: Turn, max_tokens: int, counter: TokenCounting) -> Turn:
    """Cut oversized text and tool results of a turn middle-out; pairing and roles are unchanged."""
    per_part = max(32, max_tokens // max(1, sum(len(m.parts) for m in turn.messages)))
    msgs = []
    for m in turn.messages:
        parts = []
        for p in m.parts:
            if isinstance(p, TextPart):
                p = TextPart(middle_out(p.text, per_part, counter, "oversized message"))
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
                  layer: str = "conversation") -> tuple[tuple[Turn, ...], tuple[TruncationEvent, ...]]:
    """Apply the per-turn cap; each cut is an event."""
    out, events = [], []
    for t in turns:
        before = turn_tokens(t, counter)
        if before > max_turn_tokens:
            memo = t.__dict__.get("_cut")  # the same turn is cut again on every later call: reuse
            if memo is not None and memo[0] is counter and memo[1] == max_turn_tokens:
                t2 = memo[2]
            else:
                t2 = cut_turn(t, max_turn_tokens, counter)
                t.__dict__["_cut"] = (counter, max_turn_tokens, t2)
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


def fit_conversation(history: "tuple[Turn, ...]", loop: "tuple[Turn, ...]", *, budget: int, tail_turns: int,
                     summary: RunningSummary, goal: str, fold_max_tokens: int, summary_max_tokens: int,
                     uris: "dict[str, str]", counter: TokenCounting, max_verbatim_turns: int | None = None,
                     originals: "dict[int, Turn] | None" = None) -> Fitted:
    """Keep the last `tail_turns` history turns and the whole loop verbatim if they fit `budget`;
    otherwise fold the oldest turns (history first, then loop) until they do.

    Folded turns decay into the fold zone (one line each) and, past `fold_max_tokens`, into the
    running summary (hard cap `summary_max_tokens`). The newest turn is never folded. Fold lines
    are written from `originals` (turns before any middle-out cut) where given, so an error at the
    end of a long output is still named.
    """
    events: list[TruncationEvent] = []
    older, kept_hist = (history[:-tail_turns], history[-tail_turns:]) if tail_turns else (history, ())
    if older:
        events.append(TruncationEvent("conversation", "fold", "older than the verbatim tail",
                                      tuple(turn_id(t) for t in older), sum(turn_tokens(t, counter) for t in older)))
    kept = list(kept_hist) + list(loop)
    n_hist = len(kept_hist)
    sizes = [turn_tokens(t, counter) for t in kept]
    zone_bound = fold_max_tokens + summary_max_tokens + 16 if (older or summary.text) else 0
    folded: list[Turn] = []
    while len(kept) > 1 and (sum(sizes) + zone_bound > budget or len(kept) > (max_verbatim_turns or len(kept))):
        folded.append(kept.pop(0))
        sizes.pop(0)
        zone_bound = fold_max_tokens + summary_max_tokens + 16
        if n_hist:
            n_hist -= 1
    if folded:
        events.append(TruncationEvent("conversation", "fold", "overflow: conversation over its budget",
                                      tuple(turn_id(t) for t in folded), sum(turn_tokens(t, counter) for t in folded)))
    source = originals or {}
    zones = decay_zones([source.get(t.start, t) for t in list(older) + folded], summary, goal=goal, fold_max_tokens=fold_max_tokens,
                        summary_max_tokens=summary_max_tokens, uris=uris, counter=counter)
    if zones.merged_turns:
        events.append(TruncationEvent("conversation", "compress", "fold zone over its cap: merged into the running summary",
                                      tuple(f"turn-{k}" for k in zones.merged_turns)))
    folded_loop = len(loop) - len(kept[n_hist:])
    return Fitted(history=tuple(kept[:n_hist]), summary=zones.summary, fold_lines=zones.fold_lines,
                  loop=tuple(kept[n_hist:]), folded_loop_turns=folded_loop, events=tuple(events),
                  merged_lines=zones.merged_lines)
