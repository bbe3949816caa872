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

from bisect import bisect_right
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Callable, Iterator, Sequence

from ...compress.middle_out import middle_out
from ...compress.values import parameter_names
from ...content import Message
from ...profile import BudgetProfile
from ...tokens import TokenCounting, lines_count
from ..allocate import conversation_tokens
from ..inputs import PackInputs, PackState, Turn, turn_start
from ..decay import RunningSummary, decay_zones
from ..fit import TruncationEvent
from ..cache import counter_key, current_memo
from ..incremental import turn_tokens
from .known_values import known_values, turn_text
from ..prepare import Prepared
from ..render import quote as _quote, turn_masker
from ..select import query_text
from ..types import Verbatim

__all__ = ["Compaction", "CompactionBlock", "Verbatim", "verbatim_zone", "plan_compaction", "compaction_block",
           "BLOCK_HEADER", "compact", "compaction_events", "CompactedReader", "compacted_reader", "plan_values",
           "compaction_boundaries"]

BLOCK_HEADER = "CONVERSATION SO FAR"


@dataclass(frozen=True)
class CompactionBlock:
    """The CONVERSATION SO FAR text, the running summary it shows, and the fold lines newly merged into it."""

    text: str
    summary: RunningSummary
    merged_lines: tuple[str, ...]  # what an LLM summarizer is given to refine the summary


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


def verbatim_zone(previous: PackState | None, messages: "Sequence[Message]") -> Verbatim:
    """The previous call's zone, if the history it was cut from is still the same (the message at its
    boundary has the digest it had); else none."""
    if previous is None or previous.compacted_through <= 0:
        return Verbatim()
    through = previous.compacted_through
    if through > len(messages) or (through < len(messages) and messages[through].digest != previous.boundary_digest):
        return Verbatim()  # ADK's history changed under us (its own compaction, a rewind): start again
    return Verbatim(through, previous.pinned, previous.block_text, previous.compactions, previous.pins_opening,
                    previous.values_tokens)


def plan_compaction(turns: "tuple[Turn, ...]", *, target: int, min_tail: int, counter: TokenCounting,
                    request_index: int | None, current: Verbatim, ceiling: int, growth_turns: int = 2,
                    max_turns: int | None = None) -> tuple[int, tuple[int, ...]]:
    """The new `through`: the newest turns that fit `target` tokens (at least `min_tail` of them).

    `min_tail` turns stay even past `target` while they leave room under `ceiling` (the conversation's
    room) for `growth_turns` more turns of their mean size: a tail that nearly fills the room would
    compact again within a turn or two, each compaction a cache break that re-processes the tail.
    The newest turn always stays.
    The current invocation's request is pinned (it stays verbatim however old it is); the cut never
    moves backwards, so what was compacted stays compacted.
    """
    kept = 0
    through = turns[-1].start + len(turns[-1].messages) if turns else current.through
    for n, turn in enumerate(reversed(turns)):
        size = turn_tokens(turn, counter)
        grown = kept + size
        if n >= 1 and grown > target and (n >= min_tail or grown * (1 + growth_turns / (n + 1)) > ceiling):
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
                     counter: TokenCounting) -> CompactionBlock:
    """The block text for every compacted turn, with the advanced summary and what was merged into it."""
    zones = decay_zones(compacted, summary, goal=goal, fold_max_tokens=fold_max_tokens,
                        summary_max_tokens=summary_max_tokens, uris=uris, counter=counter)
    cited = "; quoted data, originals at their artifact:// URIs" if uris else "; quoted data"
    parts = [f"{BLOCK_HEADER} (earlier turns, compacted by aether-context{cited}):"]
    if opening:
        parts.append("OPENING REQUEST:\n" + _quote(opening))
    if zones.summary.text:
        parts.append("SUMMARY:\n" + _quote(zones.summary.text))
    if zones.fold_lines:
        parts.append("TURNS:\n" + "\n".join(_quote(f"- {line}") for line in zones.fold_lines))
    if values:
        parts.append(values.split("\n", 1)[0] + "\n" + _quote(values.split("\n", 1)[1]) if "\n" in values else values)
    return CompactionBlock("\n".join(parts), zones.summary, zones.merged_lines)


BLOCK_SHARE = 0.6  # of the compaction target: the most the block may take (the verbatim tail keeps the rest)
_FLOOR_SHARES = {"fold": 0.2, "summary": 0.1}  # of the block's room, for fold lines and the summary ...
_FOLD_KEEPS = 0.1  # ... of which values that need more room take all but this share (the summary's floor first)
_OPENING_SHARE = 0.3  # of the block's room, at most, for the pinned opening request
_VALUES_CLAIM = 0.25  # of the compaction target: what values that need more than the block may take from the tail


def compact(inputs: PackInputs, profile: BudgetProfile, prepared: Prepared, zone: Verbatim, *, target: int,
            ceiling: int, reason: str, tokens_before: int, window: int, counter: TokenCounting,
            pinned_only: bool = False,
            follows: Callable[[Verbatim], str] | None = None) -> Compaction | None:
    """One compaction: the oldest turns leave the verbatim zone, in one step, down to `target`; with
    `pinned_only`, None (no block is built) when the cut does not pin this invocation's request.
    `follows` gives what the block ends with in the new zone ("" or "\n" and a section): it is counted once.

    The block takes its parts by need, in the order a later call needs them: the pinned opening
    request, then KNOWN VALUES (an id read long ago is what a later call types back: values are
    the densest part), then fold lines and the summary. Those two have floors, so the block still
    says what happened; values that need more take the summary's floor and part of the fold lines'
    (`_FOLD_KEEPS` stays), then up to `_VALUES_CLAIM` of the target from the verbatim tail (the zone
    is planned again for the larger block, only when they need it); what they leave goes to fold lines.
    """
    turns, room = prepared.turns, int(target * BLOCK_SHARE)  # block and tail come down to the target together
    cut_at = compaction_boundaries(inputs, profile, zone, turns, counter, target, ceiling)
    if pinned_only and inputs.request_index not in cut_at(room + int(target * _VALUES_CLAIM))[1]:
        return None  # the cut moves on as the block grows: not pinned at the most the block may take, never
    reader = compacted_reader(inputs, prepared)
    new, compacted, opening, opening_tokens, values, extra = plan_values(
        inputs, profile, prepared, zone, reader, target=target, window=window, counter=counter,
        cut_at=cut_at)
    if pinned_only and inputs.request_index not in new.pinned:
        return None
    summary = RunningSummary.from_json(inputs.summary)
    used = counter.count_text(values) if values else 0
    caps = _block_caps(profile, room, opening_tokens, values=max(0, used - extra))
    block = compaction_block(
        tuple(map(reader.read, compacted[bisect_right(compacted, summary.covered_until, key=turn_start):])),
        summary, opening=opening, uris=reader.uris, values=values, counter=counter,
        goal=inputs.task.goal or query_text(inputs)[:300], fold_max_tokens=caps.fold, summary_max_tokens=caps.summary)
    new = replace(new, block=block.text + (follows(new) if follows is not None else ""), pins_opening=bool(opening),
                  values_tokens=used)
    folded = tuple(t.start for t in zone.kept(turns) if not new.keeps(t))
    return Compaction(new, reason, folded, tokens_before, conversation_tokens(prepared, new, counter), block.summary,
                      block.merged_lines)


def plan_values(inputs: PackInputs, profile: BudgetProfile, prepared: Prepared, zone: Verbatim,
                reader: "CompactedReader", *, target: int, window: int, counter: TokenCounting,
                cut_at: "Callable[[int], tuple[int, tuple[int, ...]]]"
                ) -> "tuple[Verbatim, tuple[Turn, ...], str, int, str, int]":
    """A compaction's new zone, its compacted turns, opening request (and its tokens), KNOWN VALUES and the
    tokens the values claimed from the tail (`extra`), as `compact` plans them (`cut_at` gives the cut
    for a block room)."""
    cache = current_memo()
    turns, room = prepared.turns, int(target * BLOCK_SHARE)
    tools = inputs.request.tools
    params = (parameter_names(t.declaration for t in tools) if cache is None else  # the same tools on every call
              cache.get("parameter_names", tuple(t.declaration_json for t in tools),
                        lambda: parameter_names(t.declaration for t in tools)))

    def plan(block_room: int, extra: int, cut: bool) -> tuple:
        """The zone when the block may take `block_room`, and its opening and values (`extra` tokens over
        their share; not cut to their cap unless `cut`: values that need more are planned again)."""
        new = Verbatim(*cut_at(block_room), "", zone.compactions + 1)
        # secrets masked before the block derives from them (a value pulled out of its label's context too);
        # the compacted turns' originals are read lazily: newest first for the values (which stop at their
        # cap), and only those the summary does not cover yet for the block
        compacted, kept = new.split(turns)
        opening = _opening(inputs, prepared, new, profile, window, int(room * _OPENING_SHARE), counter)
        opening_tokens = counter.count_text(opening) if opening else 0
        visible = (opening, *map(turn_text, kept))  # joined by line breaks: what the block does not repeat
        cap = _block_caps(profile, room, opening_tokens, extra=extra).values
        values, need = known_values(compacted, reader.newest_first, reader.mask, limit=profile.decay.values_max_tokens,
                                    cap=cap, counter=counter, visible=visible, params=params, cut=cut)
        return (new, compacted, opening, opening_tokens, values, extra), need - cap

    planned, short = plan(room, 0, False)
    if short > 0:  # the values need more: the block takes room from the verbatim tail, up to _VALUES_CLAIM
        extra = min(short, int(target * _VALUES_CLAIM))
        planned, _ = plan(room + extra, extra, True)
    return planned


def compaction_boundaries(inputs: PackInputs, profile: BudgetProfile, zone: Verbatim, turns: "tuple[Turn, ...]",
                    counter: TokenCounting, target: int, ceiling: int
                    ) -> "Callable[[int], tuple[int, tuple[int, ...]]]":
    """`_boundary_for` by the block's room, asked for up to three times (the held try's most room may be the
    values' claim)."""
    return lru_cache(maxsize=4)(partial(_boundary_for, inputs, profile, zone, turns, counter, target, ceiling))


def _boundary_for(inputs: PackInputs, profile: BudgetProfile, zone: Verbatim, turns: "tuple[Turn, ...]",
            counter: TokenCounting, target: int, ceiling: int, block_room: int) -> tuple[int, tuple[int, ...]]:
    """The new zone's `through` and `pinned` when the block may take `block_room`: the tail keeps the rest
    of the target, and what the block may take is not the tail's (so `through` never moves back as the
    block grows)."""
    policy = profile.conversation
    return plan_compaction(turns, target=max(0, target - block_room), min_tail=policy.tail_turns, counter=counter,
                           request_index=inputs.request_index, current=zone, ceiling=max(0, ceiling - block_room),
                           growth_turns=policy.growth_turns, max_turns=policy.max_verbatim_turns)


@dataclass(frozen=True)
class CompactedReader:
    """How a compaction reads a compacted turn: `original` gives it before any cut (`newest_first` those of
    turns in order), `mask` with its
    secrets masked (`render.turn_masker`), `read` both; `uris` are those the block cites (a masked
    response's key included)."""

    original: Callable[[Turn], Turn]
    mask: Callable[[Turn], Turn]
    uris: "dict[str, str]"
    newest_first: "Callable[[tuple[Turn, ...]], Iterator[Turn]]"  # `original` of turns in order, newest first

    def read(self, turn: Turn) -> Turn:
        return self.mask(self.original(turn))


def compacted_reader(inputs: PackInputs, prepared: Prepared) -> CompactedReader:
    """The one reader of compacted turns."""
    mask, uris = turn_masker(inputs.uris if inputs.cite_originals else {})
    return CompactedReader(lambda t: prepared.originals.get(t.start, t), mask, uris, prepared.originals.newest_first)


@dataclass(frozen=True)
class _BlockCaps:
    """The most each part of the CONVERSATION SO FAR block may take, in tokens."""

    values: int
    fold: int
    summary: int


def _block_caps(profile: BudgetProfile, room: int, opening: int, *, extra: int = 0, values: int = 0) -> _BlockCaps:
    """What each part of a block of `room` tokens may take once the opening request took `opening`: the
    values all but `_FOLD_KEEPS` of the rest (plus `extra` claimed from the tail); then, once the values
    took `values` of the block's own room, the fold lines and the summary their floors, less what values
    that needed more took of them (the summary's first), and fold lines what values left of their share."""
    fold, summary = (int(room * _FLOOR_SHARES[k]) for k in ("fold", "summary"))
    values_cap = min(profile.decay.values_max_tokens, max(0, room - opening - int(room * _FOLD_KEEPS)) + extra)
    share = min(profile.decay.values_max_tokens, max(0, room - opening - fold - summary))  # the values' own share
    over = max(0, values - share)
    summary_cap = max(0, summary - over)
    fold_cap = max(0, fold - max(0, over - summary)) + max(0, share - values)
    return _BlockCaps(values_cap, min(profile.decay.fold_max_tokens, fold_cap),
                      min(profile.decay.summary_max_tokens, summary_cap))


def _opening(inputs: PackInputs, prepared: Prepared, zone: Verbatim, profile: BudgetProfile, window: int,
             cap: int, counter: TokenCounting) -> str:
    """The session's opening request, pinned in the block once it left the verbatim zone (capped: the
    cut is kept in the call's memo by text and cap, as every compaction of the session pins the same text;
    a new cap's cut counts by lines)."""
    cache = current_memo()
    text = inputs.task.opening_request
    if not profile.task.pin_opening_request or inputs.task.goal or not text.strip():
        return ""
    request = prepared.conversation.request
    if request is not None and request.text == text:
        return ""
    if any(any(m.role == "user" and m.text == text for m in t.messages) for t in zone.kept(prepared.turns)):
        return ""
    cap = min(profile.task.opening_max_tokens, int(window * profile.task.opening_max_share), cap)
    # its prefixes and suffixes counted by their lines where the counter can (the same counts): a cut at a new
    # cap then encodes the partial lines it tries, not every prefix whole
    count = lines_count(counter, counter.count_text)
    if cache is None:
        return middle_out(text, cap, count)
    return cache.get("opening", (text, cap, counter_key(counter)), lambda: middle_out(text, cap, count))


def compaction_events(compaction: Compaction | None) -> tuple[TruncationEvent, ...]:
    """The compaction as a fold event naming every turn it moved out of the verbatim zone."""
    if compaction is None or not compaction.folded:
        return ()
    return (TruncationEvent("conversation", "fold", f"compaction ({compaction.reason}): turns moved to the "
                            "compaction block and Memory", tuple(f"turn-{k}" for k in compaction.folded),
                            compaction.tokens_before, compaction.tokens_after),)
