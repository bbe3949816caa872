"""fit: the chosen layers into their budgets, and the request into the window.

Retrieved lines fill their budget by score (shortened, then dropped); the final exact count drops
Memory, then Evidence, then cuts the largest kept turn. The per-turn cut and the orphan repair that
`prepare` applies live here too (`bounded_turns`, `repair_orphans`). Every action is a `TruncationEvent` naming what it touched, so
nothing disappears silently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import itemgetter
from os.path import commonprefix

from ..compress import describe_outcome
from ..compress._fit import safe_end
from ..compress.middle_out import middle_out
from ..content import FunctionResponse, Message, ModelRequest, TextPart, canonical_json
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .allocate import LAYER_OVERHEAD, Allocation
from .inputs import PackInputs, PackState, Turn
from .cache import counter_key, current_memo
from .incremental import mapped, turn_key, turn_tokens
from .render import block_follows, render_pack, render_payload, request_tokens
from .types import Candidates, Fit, Line, Prepared, TruncationEvent, Verbatim

__all__ = ["TruncationEvent", "Fit", "Fitted", "fit_layers", "fit_to_window", "fit_lines", "cut_turn", "turn_id",
           "repair_orphans", "bounded_turn", "bounded_turns", "selection_events"]

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


def repair_orphans(turns: "tuple[Turn, ...]"
                   ) -> tuple[tuple[Turn, ...], tuple[TruncationEvent, ...]]:
    """Rewrite function responses whose call is gone (cut by an earlier compaction) as user text.

    Gemini rejects a response without its call; as text the result stays visible and in place.
    Each turn's repair depends on the turn alone: with the call's memo, the unchanged leading turns of the
    last call keep theirs (`incremental.mapped`).
    """
    turns = tuple(turns)
    repaired = mapped("repair_orphan", turns, _repaired)
    ids = () if repaired == turns else tuple(turn_id(t) for t, r in zip(turns, repaired) if r != t)
    events = (TruncationEvent("conversation", "compress", "orphaned function response rewritten as text", ids),) if ids else ()
    return repaired, events


def _repaired(t: Turn) -> Turn:
    if not t.is_orphan_response:
        return t
    brief = "; ".join(f"{r.name} → {describe_outcome(r.name, r.response)}" for m in t.messages for r in m.responses)
    return Turn(t.start, (Message("user", (TextPart(f"[turn {t.start}] tool result whose call is no longer in the history: {brief}"),)),))


def bounded_turn(turn: Turn, max_turn_tokens: int, counter: TokenCounting) -> Turn:
    """`turn` itself when it fits `max_turn_tokens`, else cut to it (the same turn is cut again on every later
    call: with the call's memo, by its content, the same cut)."""
    cache = current_memo()
    if turn_tokens(turn, counter) <= max_turn_tokens:
        return turn
    if cache is None:
        return cut_turn(turn, max_turn_tokens, counter)
    return cache.get("cut_turn", (turn_key(turn), max_turn_tokens, counter_key(counter)),
                     lambda: cut_turn(turn, max_turn_tokens, counter))


def bounded_turns(turns: "tuple[Turn, ...]", max_turn_tokens: int, counter: TokenCounting,
                  layer: str = "conversation"
                  ) -> tuple[tuple[Turn, ...], tuple[TruncationEvent, ...]]:
    """Apply the per-turn cap; each cut is an event. With the call's memo, the unchanged leading turns of
    the last call keep their outcome (`incremental.mapped`), and a turn cut once is cut again from it."""
    cache = current_memo()
    def bound(t: Turn) -> "tuple[Turn, TruncationEvent | None]":
        t2 = bounded_turn(t, max_turn_tokens, counter)
        if t2 is t:
            return t, None
        return t2, TruncationEvent(layer, "cut", "turn over max_turn_tokens", (turn_id(t),), turn_tokens(t, counter),
                                   turn_tokens(t2, counter))

    if cache is None:
        outcomes = [bound(t) for t in turns]
        return tuple(map(itemgetter(0), outcomes)), tuple(filter(None, map(itemgetter(1), outcomes)))
    kind = ("bounded_turn", layer, max_turn_tokens, counter_key(counter))
    # the turns (the same tuple when none is cut) and the cuts' events are carried from the last call: a call
    # bounds its new turns only (a cut turn's cut is kept by content)
    out = mapped(kind, turns, lambda t: bound(t)[0])
    return out, tuple(filter(None, mapped((*kind, "events"), turns, lambda t: bound(t)[1])))


def fit_lines(layer: str, lines: "tuple[Line, ...]", budget: int, item_max_tokens: int, counter: TokenCounting,
              *, older_first: bool = False) -> tuple[tuple[Line, ...], tuple[TruncationEvent, ...]]:
    """Fit ranked lines into `budget`: first shorten to `item_max_tokens`, then halve, then drop.

    Drops go lowest rank first, or oldest first when `older_first` (evidence).
    """
    events: list[TruncationEvent] = []
    size = lambda ln: ln.tokens + 1  # noqa: E731 (each line ends with its newline, as `lines_demand` counts it)
    total = sum(map(size, lines))
    if total <= budget:
        return lines, ()
    for cap in shorten_caps(item_max_tokens):
        long = [ln for ln in lines if ln.tokens > cap]
        if not long or total <= budget:
            continue
        before = total
        lines = tuple(_shorten(ln, cap, counter) if ln.tokens > cap else ln for ln in lines)
        total = sum(map(size, lines))
        events.append(TruncationEvent(layer, "compress", f"overflow: items summarised to {cap} tokens",
                                      tuple(ln.id for ln in long), before, total))
    if total > budget:
        order = sorted(range(len(lines)), key=lambda i: ((lines[i].timestamp or 0.0) if older_first else -i, i))
        drop: set[int] = set()
        for i in order:
            if total <= budget:
                break
            drop.add(i)
            total -= size(lines[i])
        before = sum(map(size, lines))
        dropped = tuple(lines[i].id for i in sorted(drop))
        lines = tuple(ln for i, ln in enumerate(lines) if i not in drop)
        events.append(TruncationEvent(layer, "drop", "overflow", dropped, before, total))
    return lines, tuple(events)


def shorten_caps(item_max_tokens: int) -> tuple[int, int]:
    """The caps a line over its layer's budget is shortened to, in turn: the item cap, then half of it."""
    return item_max_tokens, max(16, item_max_tokens // 2)


def _shorten(line: Line, cap: int, counter: TokenCounting) -> Line:
    text = shortened(line.text, line.uri, cap, counter)
    return replace(line, text=text, tokens=counter.count_text(text), compressed=True)


def shortened(text: str, uri: str, cap: int, counter: TokenCounting) -> str:
    """A line's `text` cut to about `cap` tokens, its `uri` kept whole (the counter keeps the cut by content)."""
    cut = counter.truncate_text(text, max(1, cap - 2))
    # never half a URI: the cut moves back to the start of an artifact URI it would split
    shared = len(cut) if text.startswith(cut) else len(commonprefix([cut, text]))  # a prefix, mostly
    out = text[:safe_end(text, shared)].rstrip() + "…"
    return out + f" ({uri})" if uri and uri not in out else out


def selection_events(cands: "Candidates") -> tuple[TruncationEvent, ...]:
    """Retrieval's choice is a drop too, and says so (near-duplicates, below the relevance floor, the cap)."""
    return tuple(TruncationEvent(layer, "drop", "not selected: a near-duplicate, not relevant to the request, already "
                                 "in the conversation, or past top_k", ids)
                 for layer, ids in sorted(cands.unselected.items()) if ids)


# --- the layers of one call ------------------------------------------------------------------------

@dataclass(frozen=True)
class Fitted:
    """A layout that fits the window, its rendered request, and what fitting it cut."""

    fit: Fit
    request: ModelRequest
    events: tuple[TruncationEvent, ...]


def fit_layers(inputs: PackInputs, profile: BudgetProfile, cands: "Candidates", prepared: "Prepared", zone: "Verbatim",
               frozen: PackState | None, failures: str, alloc: Allocation, counter: TokenCounting) -> Fitted:
    """The kept turns, and Evidence and Memory filled to their budgets by score, rendered once.

    A frozen payload (same invocation, same zone) is sent as it was: its lines are not refitted.
    """
    history, loop = zone.kept(prepared.history), zone.kept(prepared.loop)
    late = block_follows(inputs, zone)
    events: tuple[TruncationEvent, ...] = ()
    if frozen is not None:
        ev = tuple(ln for ln in cands.evidence if ln.id in frozen.evidence_ids)
        mem = tuple(ln for ln in cands.memory if ln.id in frozen.memory_ids)
        fit = Fit(zone, history, loop, ev, mem, frozen.payload_text, late)
    else:
        ev, e1 = fit_lines("evidence", cands.evidence, max(0, alloc.budgets["evidence"] - LAYER_OVERHEAD),
                           profile.evidence.item_max_tokens, counter, older_first=True)
        mem, e2 = fit_lines("memory", cands.memory, max(0, alloc.budgets["memory"] - LAYER_OVERHEAD),
                            profile.memory.item_max_tokens, counter)
        text = render_payload(inputs.task, cands.conversation.request, ev, mem, failures).sent_text()
        fit, events = Fit(zone, history, loop, ev, mem, text, late), (*e1, *e2)
    return Fitted(fit, render_pack(inputs, cands, fit), events)


def _drop_lines(fit: Fit, over: int) -> tuple[Fit, TruncationEvent]:
    """Memory's lowest-ranked lines go first, then Evidence's, until `over` tokens are freed."""
    layer = "memory" if fit.memory else "evidence"
    kept = list(fit.memory if fit.memory else fit.evidence)
    dropped, freed = [], 0
    while kept and freed < over:
        gone = kept.pop()
        dropped.append(gone.id)
        freed += gone.tokens + 1
    return replace(fit, **{layer: tuple(kept)}), TruncationEvent(layer, "drop", "window still exceeded", tuple(dropped))


def _cut_largest(fit: Fit, over: int, counter: TokenCounting) -> tuple[Fit, TruncationEvent]:
    turns = fit.history + fit.loop
    biggest = max(turns, key=lambda t: (sum(counter.count_message(m) for m in t.messages), -t.start))
    size = sum(counter.count_message(m) for m in biggest.messages)
    cut = cut_turn(biggest, max(16, size - over - 16), counter)
    fit = replace(fit, history=tuple(cut if t is biggest else t for t in fit.history),
                  loop=tuple(cut if t is biggest else t for t in fit.loop))
    return fit, TruncationEvent("conversation", "cut", "window still exceeded: largest kept turn cut", (turn_id(biggest),))


def fit_to_window(inputs: PackInputs, cands: "Candidates", fitted: Fitted, failures: str, limit: int,
                  counter: TokenCounting) -> Fitted:
    """The final count is exact: drop Memory, then Evidence, then cut the largest kept turn, until
    the request fits `limit` (the pack limit less the status reserve). Each new layout renders once."""
    fit, request, events = fitted.fit, fitted.request, list(fitted.events)
    for _ in range(8):
        over = request_tokens(request, counter) - limit
        if over <= 0:
            break
        if fit.memory or fit.evidence:
            fit, event = _drop_lines(fit, over)
            fit = replace(fit, payload_text=render_payload(inputs.task, cands.conversation.request, fit.evidence,
                                                           fit.memory, failures).sent_text())
        elif fit.history or fit.loop:
            fit, event = _cut_largest(fit, over, counter)
        else:
            break
        events.append(event)
        request = render_pack(inputs, cands, fit)
    return Fitted(fit, request, tuple(events))
