"""The whole pipeline for one model call, read top to bottom:

collect (the ADK edge gives `PackInputs`) → prepare turns → select → allocate → compact if needed
→ fit → render → recite → record.

`build_pack` is pure: the same `PackInputs` and profile give the same request, byte for byte.
When the request fits and the pack has nothing to add, it is ADK's request unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..compress.middle_out import middle_out
from ..content import Message, ModelRequest, canonical_json, sha256_hex
from ..errors import BudgetError
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from ..windows import context_window
from .cache import PackCache
from .allocate import Allocation, allocate_around_conversation, flex_weights
from .collect import PackInputs, PackState, Turn
from .compress import TruncationEvent, bounded_turns, cut_turn, fit_lines, repair_orphans, turn_id
from .conversation import Compaction, Verbatim, compaction_block, known_values, plan_compaction, verbatim_zone
from .decay import RunningSummary, decay_images, prune_tool_outputs
from .incremental import turns_tokens
from .record import LayerUsage, Manifest
from .render import payload_message, render_payload, render_request
from .retrieve import Retriever, default_retriever
from .select import Candidates, Conversation, Line, query_text, select, split_conversation
from .status import failure_count, failures_section, recitation_message, recitation_reserve

__all__ = ["ContextPack", "build_pack", "request_tokens"]


@dataclass(frozen=True)
class ContextPack:
    """The result of one pack: what to send, the receipt, and the state for the next call."""

    request: ModelRequest
    manifest: Manifest
    state: PackState
    inputs: PackInputs


@dataclass(frozen=True)
class Prepared:
    """The conversation as turns, after the repairs and caps every call applies."""

    conversation: Conversation
    history: tuple[Turn, ...]
    loop: tuple[Turn, ...]
    pruned: frozenset[int]
    originals: dict[int, Turn]  # turn start -> the turn before any cut (fold lines name what was cut)
    events: tuple[TruncationEvent, ...]

    @property
    def turns(self) -> tuple[Turn, ...]:
        return self.history + self.loop


@dataclass(frozen=True)
class Room:
    """The token room of one call: what the pack may spend beside ADK's own head and the frame."""

    limit: int  # window less the output reserve
    head: int  # system instruction, tools, dynamic instructions
    frame: int  # the payload without Evidence and Memory (or the user's message as it is)
    reserve: int  # kept free for the closing status
    conversation_cap: int  # the most the conversation may take before it is compacted

    @property
    def flexible(self) -> int:
        return max(0, self.limit - self.head - self.frame - self.reserve)


@dataclass(frozen=True)
class Fit:
    """What goes in: the verbatim zone, its turns, and the retrieved lines."""

    zone: Verbatim
    history: tuple[Turn, ...]
    loop: tuple[Turn, ...]
    evidence: tuple[Line, ...]
    memory: tuple[Line, ...]
    payload_text: str  # "" when the user's message goes out as it is


def request_tokens(request: ModelRequest, counter: TokenCounting) -> int:
    """Tokens of a whole request: system instruction, tool declarations and messages."""
    return _head_tokens(request, counter) + sum(counter.count_message(m) for m in request.messages)


def _head_tokens(request: ModelRequest, counter: TokenCounting) -> int:
    tools = sum(counter.count_text(canonical_json(t.declaration)) for t in request.tools)
    other = sum(counter.count_text(canonical_json(t)) for t in request.other_tools)
    return counter.count_text(request.system_instruction) + tools + other


def _head_digest(request: ModelRequest) -> str:
    return sha256_hex(canonical_json([request.system_instruction, [t.to_json() for t in request.tools], list(request.other_tools)]))


def build_pack(inputs: PackInputs, profile: BudgetProfile, *, counter: TokenCounting, window: int | None = None,
               retriever: Retriever | None = None, cache: PackCache | None = None) -> ContextPack:
    """Build the Context Pack for one call. Raises `BudgetError` when the fixed layers cannot fit.

    `retriever` keeps retrieval indexes and embeddings across calls, and `cache` what was computed
    from unchanged history (the plugin passes its own); without them, fresh ones give the same
    result, only slower.
    """
    retriever = retriever or default_retriever(profile)
    cache = cache if cache is not None else PackCache()
    model_window = context_window(inputs.request.model, window if window is not None else profile.window_tokens)
    # Calibrated: if the model counts 20 % more than our tokenizer, pack for a window 20 % smaller.
    packed_for = int(model_window / max(0.5, inputs.calibration))
    prepared = _prepare(inputs, profile, counter, cache)
    prev = inputs.previous
    zone = verbatim_zone(prev, tuple(m.digest for m in inputs.request.messages))
    failures = failures_section(inputs, profile, int(inputs.failures.get("current_turn", 0)), counter)
    frozen = _frozen_payload(inputs, profile, zone)

    cands = _select(inputs, profile, counter, retriever, prepared, zone, cache)
    room = _room(inputs, profile, packed_for, cands, prepared, zone, frozen, failures, counter)
    kept_tokens = _conversation_tokens(prepared, zone, counter)
    compaction = None
    max_turns = profile.conversation.max_verbatim_turns
    too_many = max_turns is not None and sum(1 for t in prepared.turns if zone.keeps(t)) > max_turns
    if inputs.compact or kept_tokens > room.conversation_cap or too_many:
        reason = "asked for (packer.compact)" if inputs.compact else "conversation over its room"
        # compacted turns become Memory candidates: the target leaves Memory its share of the room
        cap = _room(inputs, profile, packed_for, cands, prepared, zone, frozen, failures, counter,
                    memory_wanted=True).conversation_cap
        compaction = _compact(inputs, profile, prepared, zone, int(cap * profile.conversation.compact_to), cap,
                              reason, kept_tokens, packed_for, counter, cache)
    if compaction is not None and not compaction.folded and not inputs.compact:
        compaction = None  # nothing could leave the verbatim zone: the final fit cuts the largest turn instead
    if compaction is not None:
        zone, frozen = compaction.zone, None
        cands = _select(inputs, profile, counter, retriever, prepared, zone, cache)
        room = _room(inputs, profile, packed_for, cands, prepared, zone, frozen, failures, counter)

    alloc = _allocate(profile, packed_for, room, cands, prepared, zone, counter)
    fit, events = _fit(inputs, profile, cands, prepared, zone, frozen, failures, alloc, counter)
    request = _render(inputs, cands, fit)
    request, fit, more = _ensure_fits(inputs, profile, cands, prepared, fit, failures, alloc, request, counter)
    events += more

    # the closing status goes last, after everything that may be cached
    logged = failure_count(inputs)
    shown = prev.failures_shown if frozen is not None and prev is not None else logged
    stable = request
    recital, call_index, last_recited = recitation_message(
        inputs, profile, fit.history + fit.loop, request_tokens(request, counter), counter,
        failures_stale=logged > shown, compacted=fit.zone.through > 0)
    if recital is not None and request_tokens(_with_closing_status(request, recital), counter) <= alloc.pack_limit:
        request = _with_closing_status(request, recital)
    elif recital is not None:  # no room left for it this call: the next one recites
        recital, last_recited = None, (prev.last_recited if prev is not None else -1)
    total = request_tokens(request, counter)
    if total > alloc.pack_limit:
        raise BudgetError(f"pack needs {total} tokens but only {alloc.pack_limit} fit (window {packed_for} less "
                          f"{alloc.slack} output reserve): split the step or use a larger window")

    events = [*prepared.events, *(_compaction_events(compaction) if compaction else ()), *_selection_events(cands), *events]
    state = _state(inputs, profile, model_window, stable, fit, prepared, compaction, call_index, last_recited,
                   shown, counter)
    manifest = _manifest(inputs, profile, model_window, alloc, request, fit, cands, events, state, compaction,
                         frozen is not None, recital, counter)
    return ContextPack(request=request, manifest=manifest, state=state, inputs=inputs)


# --- prepare -----------------------------------------------------------------------------------

def _prepare(inputs: PackInputs, profile: BudgetProfile, counter: TokenCounting, cache: PackCache) -> Prepared:
    """Orphan repair, image decay, pruning of old tool outputs and the per-turn cap."""
    conv = split_conversation(inputs, cache)
    history, orphan_h = repair_orphans(conv.history)
    loop, orphan_l = repair_orphans(conv.loop)
    events: list[TruncationEvent] = [*orphan_h, *orphan_l]
    n_hist = len(history)
    turns, images = decay_images(history + loop, profile.decay.image_keep_turns, inputs.uris)
    if images:
        events.append(TruncationEvent("conversation", "compress", "old inline images replaced by a description + URI", images))
    already = frozenset(inputs.previous.pruned) if inputs.previous else frozenset()
    pruned: frozenset[int] = already
    if profile.pruning.enabled:
        same_invocation = inputs.previous is not None and inputs.previous.invocation_id == inputs.invocation_id
        turns, pruned, fresh = prune_tool_outputs(turns, protect_tokens=profile.pruning.protect_tokens,
                                                  minimum_tokens=profile.pruning.minimum_tokens, uris=inputs.uris,
                                                  already=already, counter=counter, consider_new=not same_invocation,
                                                  cache=cache)
        if fresh:
            events.append(TruncationEvent("conversation", "compress", "old tool outputs cleared to their URI (pruning)",
                                          tuple(f"turn-{k}" for k in fresh)))
    originals = {t.start: t for t in turns}
    turns, cuts = bounded_turns(tuple(turns), profile.conversation.max_turn_tokens, counter, cache=cache)
    events.extend(cuts)
    return Prepared(conv, turns[:n_hist], turns[n_hist:], pruned, originals, tuple(events))


def _frozen_payload(inputs: PackInputs, profile: BudgetProfile, zone: Verbatim) -> PackState | None:
    """The previous call's state when its payload is kept as sent (same invocation, same zone)."""
    prev = inputs.previous
    if (prev is None or not profile.cache.stable_prefix or prev.invocation_id != inputs.invocation_id
            or prev.agent != inputs.agent or prev.compacted_through != zone.through or inputs.compact):
        return None
    return prev


def _conversation_tokens(prepared: Prepared, zone: Verbatim, counter: TokenCounting) -> int:
    block = counter.count_text(zone.block) + 4 if zone.block else 0
    return block + turns_tokens(tuple(t for t in prepared.turns if zone.keeps(t)), counter)


# --- select ------------------------------------------------------------------------------------

def _select(inputs: PackInputs, profile: BudgetProfile, counter: TokenCounting, retriever: Retriever,
            prepared: Prepared, zone: Verbatim, cache: PackCache) -> Candidates:
    compacted = tuple(t for t in prepared.turns if not zone.keeps(t))
    kept = tuple(t for t in prepared.turns if zone.keeps(t))
    return select(inputs, profile, counter=counter, retriever=retriever, conversation=prepared.conversation,
                  compacted=compacted, kept=kept, cache=cache)


# --- allocate ----------------------------------------------------------------------------------

def _frame_tokens(inputs: PackInputs, cands: Candidates, frozen: PackState | None, failures: str,
                  counter: TokenCounting) -> int:
    """The payload without Evidence and Memory: what the call sends whatever the budgets."""
    if frozen is not None:
        return frozen.payload_tokens
    request = cands.conversation.request
    message = payload_message(render_payload(inputs.task, request, (), (), failures).sent_text(), request)
    return counter.count_message(message) if message is not None else 0


def _room(inputs: PackInputs, profile: BudgetProfile, window: int, cands: Candidates, prepared: Prepared,
          zone: Verbatim, frozen: PackState | None, failures: str, counter: TokenCounting, *,
          memory_wanted: bool = False) -> Room:
    """Room for the flexible layers, and the conversation's share of it before a compaction.

    The conversation yields to Evidence and Memory only their weighted share of the room, and
    only when they have something to send: a chat that fits goes out whole.
    """
    limit = window - int(window * profile.floors.slack)
    head = counter.count_text(inputs.request.system_instruction) \
        + sum(counter.count_text(canonical_json(t.declaration)) for t in cands.tools) \
        + sum(counter.count_text(canonical_json(t)) for t in inputs.request.other_tools) \
        + sum(counter.count_message(m) for m in cands.conversation.instructions)
    reserve = _reserve(inputs, profile, zone, failures)
    frame = _frame_tokens(inputs, cands, frozen, failures, counter)
    flexible = max(0, limit - head - frame - reserve)
    if frozen is not None:  # Evidence and Memory are frozen inside the payload (counted in the frame)
        return Room(limit, head, frame, reserve, flexible)
    weights = {k: max(1e-6, w) for k, w in flex_weights(profile, cands.signals).items()}
    wanted = {"evidence": sum(ln.tokens + 1 for ln in cands.evidence),
              "memory": flexible if memory_wanted else sum(ln.tokens + 1 for ln in cands.memory)}
    share = sum(w for k, w in weights.items() if k == "conversation" or wanted.get(k, 0) > 0) or 1.0
    yielded = sum(min(wanted[k], int(flexible * weights[k] / share)) for k in wanted)
    return Room(limit, head, frame, reserve, max(0, flexible - yielded))


def _reserve(inputs: PackInputs, profile: BudgetProfile, zone: Verbatim, failures: str) -> int:
    """Room for the closing status, only when one can be due (a goal, a compaction, failures)."""
    due = inputs.task.goal or inputs.task.step or zone.through > 0 or failures
    return recitation_reserve(profile) if due else 0


def _allocate(profile: BudgetProfile, window: int, room: Room, cands: Candidates, prepared: Prepared, zone: Verbatim,
              counter: TokenCounting) -> Allocation:
    """Evidence and Memory get what the conversation leaves, less room for this invocation to grow."""
    conversation = _conversation_tokens(prepared, zone, counter)
    fixed_used = {"system": room.head, "task": room.frame + room.reserve, "tools": 0}
    demands = {"evidence": sum(ln.tokens + 1 for ln in cands.evidence) + 12 if cands.evidence else 0,
               "memory": sum(ln.tokens + 1 for ln in cands.memory) + 12 if cands.memory else 0,
               "conversation": conversation}
    guaranteed = max(0, room.flexible - room.conversation_cap)
    growth = int(room.flexible * profile.conversation.growth_share)
    return allocate_around_conversation(profile, window, cands.signals, fixed_used, demands,
                                        guaranteed=guaranteed, growth=growth)


# --- compact -----------------------------------------------------------------------------------

def _compact(inputs: PackInputs, profile: BudgetProfile, prepared: Prepared, zone: Verbatim, target: int, ceiling: int,
             reason: str, tokens_before: int, window: int, counter: TokenCounting, cache: PackCache) -> Compaction:
    """One compaction: the oldest turns leave the verbatim zone, in one step, down to `target`."""
    decay = profile.decay
    # The block gets at most 60 % of the target, so the verbatim turns keep the rest. Known values
    # first: an id read long ago is what a later call types back; then the pinned opening request,
    # one line per turn, and the summary.
    room = int(target * 0.6)
    values_cap = min(decay.values_max_tokens, int(room * 0.4))
    fold_cap = min(decay.fold_max_tokens, int(room * 0.2))
    summary_cap = min(decay.summary_max_tokens, int(room * 0.1))
    opening_cap = int(room * 0.3)
    turns = prepared.turns
    through, pinned = plan_compaction(turns, target=max(0, target - room), min_tail=profile.conversation.tail_turns,
                                      counter=counter, request_index=inputs.request_index, current=zone, ceiling=ceiling,
                                      max_turns=profile.conversation.max_verbatim_turns)
    new = Verbatim(through, pinned, "", zone.compactions + 1)
    compacted = tuple(prepared.originals.get(t.start, t) for t in turns if not new.keeps(t))
    opening = _opening(inputs, prepared, new, profile, window, opening_cap, counter)
    block, summary, merged, merged_lines = compaction_block(
        compacted, RunningSummary.from_json(inputs.summary), opening=opening, goal=inputs.task.goal or query_text(inputs)[:300],
        fold_max_tokens=fold_cap, summary_max_tokens=summary_cap, uris=inputs.uris,
        values=known_values(compacted, values_cap, counter, cache), counter=counter, cache=cache)
    new = replace(new, block=block, pins_opening=bool(opening))
    folded = tuple(t.start for t in turns if zone.keeps(t) and not new.keeps(t))
    return Compaction(new, reason, folded, tokens_before, _conversation_tokens(prepared, new, counter), summary,
                      merged_lines)


def _opening(inputs: PackInputs, prepared: Prepared, zone: Verbatim, profile: BudgetProfile, window: int,
             cap: int, counter: TokenCounting) -> str:
    """The session's opening request, pinned in the block once it left the verbatim zone (capped)."""
    text = inputs.task.opening_request
    if not profile.task.pin_opening_request or inputs.task.goal or not text.strip():
        return ""
    request = prepared.conversation.request
    if request is not None and request.text == text:
        return ""
    if any(zone.keeps(t) and any(m.role == "user" and m.text == text for m in t.messages) for t in prepared.turns):
        return ""
    return middle_out(text, min(profile.task.opening_max_tokens, int(window * profile.task.opening_max_share), cap), counter)


def _selection_events(cands: Candidates) -> tuple[TruncationEvent, ...]:
    """Retrieval's choice is a drop too, and says so (near-duplicates, below the relevance floor, the cap)."""
    return tuple(TruncationEvent(layer, "drop", "not selected: a near-duplicate, not relevant to the request, already "
                                 "in the conversation, or past top_k", ids)
                 for layer, ids in sorted(cands.unselected.items()) if ids)


def _compaction_events(compaction: Compaction) -> tuple[TruncationEvent, ...]:
    if not compaction.folded:
        return ()
    return (TruncationEvent("conversation", "fold", f"compaction ({compaction.reason}): turns moved to the "
                            "compaction block and Memory", tuple(f"turn-{k}" for k in compaction.folded),
                            compaction.tokens_before, compaction.tokens_after),)


# --- fit ---------------------------------------------------------------------------------------

def _fit(inputs: PackInputs, profile: BudgetProfile, cands: Candidates, prepared: Prepared, zone: Verbatim,
         frozen: PackState | None, failures: str, alloc: Allocation,
         counter: TokenCounting) -> tuple[Fit, list[TruncationEvent]]:
    history = tuple(t for t in prepared.history if zone.keeps(t))
    loop = tuple(t for t in prepared.loop if zone.keeps(t))
    if frozen is not None:
        ev = tuple(ln for ln in cands.evidence if ln.id in frozen.evidence_ids)
        mem = tuple(ln for ln in cands.memory if ln.id in frozen.memory_ids)
        return Fit(zone, history, loop, ev, mem, frozen.payload_text), []
    ev, e1 = fit_lines("evidence", cands.evidence, max(0, alloc.budgets["evidence"] - 12),
                       profile.evidence.item_max_tokens, counter, older_first=True)
    mem, e2 = fit_lines("memory", cands.memory, max(0, alloc.budgets["memory"] - 12),
                        profile.memory.item_max_tokens, counter)
    request = cands.conversation.request
    return Fit(zone, history, loop, ev, mem, render_payload(inputs.task, request, ev, mem, failures).sent_text()), [*e1, *e2]


def _render(inputs: PackInputs, cands: Candidates, fit: Fit) -> ModelRequest:
    return render_request(model=inputs.request.model, system_instruction=inputs.request.system_instruction,
                          tools=cands.tools, other_tools=inputs.request.other_tools, block=fit.zone.block,
                          history=fit.history, payload=payload_message(fit.payload_text, cands.conversation.request),
                          loop=fit.loop, instructions=cands.conversation.instructions)


def _ensure_fits(inputs: PackInputs, profile: BudgetProfile, cands: Candidates, prepared: Prepared, fit: Fit,
                 failures: str, alloc: Allocation, request: ModelRequest,
                 counter: TokenCounting) -> tuple[ModelRequest, Fit, list[TruncationEvent]]:
    """The final count is exact: drop Memory, then Evidence, then cut the largest kept turn."""
    events: list[TruncationEvent] = []
    reserve = _reserve(inputs, profile, fit.zone, failures)
    for _ in range(8):
        over = request_tokens(request, counter) + reserve - alloc.pack_limit
        if over <= 0:
            break
        if fit.memory or fit.evidence:
            layer = "memory" if fit.memory else "evidence"
            lines = fit.memory if fit.memory else fit.evidence
            kept, dropped, freed = list(lines), [], 0
            while kept and freed < over:
                gone = kept.pop()
                dropped.append(gone.id)
                freed += gone.tokens + 1
            events.append(TruncationEvent(layer, "drop", "window still exceeded", tuple(dropped)))
            fit = replace(fit, **{layer: tuple(kept)})
            fit = replace(fit, payload_text=render_payload(inputs.task, cands.conversation.request, fit.evidence,
                                                           fit.memory, failures).sent_text())
        else:
            turns = fit.history + fit.loop
            if not turns:
                break
            biggest = max(turns, key=lambda t: (sum(counter.count_message(m) for m in t.messages), -t.start))
            size = sum(counter.count_message(m) for m in biggest.messages)
            cut = cut_turn(biggest, max(16, size - over - 16), counter)
            events.append(TruncationEvent("conversation", "cut", "window still exceeded: largest kept turn cut",
                                          (turn_id(biggest),)))
            fit = replace(fit, history=tuple(cut if t is biggest else t for t in fit.history),
                          loop=tuple(cut if t is biggest else t for t in fit.loop))
        request = _render(inputs, cands, fit)
    return request, fit, events


def _with_closing_status(request: ModelRequest, status: Message) -> ModelRequest:
    """The status rides on the last message as an extra text part, so the request still ends the
    way ADK ended it (a function response stays the last content) and the prefix stays intact."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user":
        return replace(request, messages=request.messages + (status,))
    return replace(request, messages=request.messages[:-1] + (Message("user", last.parts + status.parts),))


# --- record ------------------------------------------------------------------------------------

def _state(inputs: PackInputs, profile: BudgetProfile, model_window: int, stable: ModelRequest, fit: Fit,
           prepared: Prepared, compaction: Compaction | None, call_index: int, last_recited: int, shown: int,
           counter: TokenCounting) -> PackState:
    boundary = inputs.request.messages[fit.zone.through].digest if 0 < fit.zone.through < len(inputs.request.messages) else ""
    payload_index = (1 if fit.zone.block else 0) + sum(len(t.messages) for t in fit.history)
    # the payload, or the user's message sent as it is: a frozen call counts it in its frame
    sends_payload = bool(fit.payload_text or inputs.request_index is not None) and payload_index < len(stable.messages)
    return PackState(
        invocation_id=inputs.invocation_id, agent=inputs.agent, payload_text=fit.payload_text,
        kept_history_turns=len(fit.history),
        summary=compaction.summary.to_json() if compaction else dict(inputs.summary),
        message_digests=tuple(m.digest for m in stable.messages),
        message_tokens=tuple(counter.count_message(m) for m in stable.messages),
        head_digest=_head_digest(stable), head_tokens=_head_tokens(stable, counter), pruned=tuple(sorted(prepared.pruned)),
        call_index=call_index, last_recited=last_recited, failures_shown=shown,
        merged_lines=compaction.merged_lines if compaction else (),
        pack_id="pk_" + sha256_hex(f"{inputs.digest}/{model_window}/{profile.model_dump_json()}")[:24],
        system_digest=sha256_hex(stable.system_instruction),
        tools_digest=sha256_hex(canonical_json([[t.to_json() for t in stable.tools], list(stable.other_tools)])),
        payload_index=payload_index, compacted_through=fit.zone.through, pinned=fit.zone.pinned,
        block_text=fit.zone.block, boundary_digest=boundary, compactions=fit.zone.compactions,
        pins_opening=fit.zone.pins_opening,
        evidence_ids=tuple(ln.id for ln in fit.evidence), memory_ids=tuple(ln.id for ln in fit.memory),
        payload_tokens=counter.count_message(stable.messages[payload_index]) if sends_payload else 0,
        tool_names=tuple(t.name for t in stable.tools),
    )


def _cache_break(state: PackState, prev: PackState | None, prefix_tokens: int, compaction: Compaction | None) -> dict | None:
    """The first stable block that differs from the previous call's request, what it costs, and why.

    Appending messages is not a break; changing the system instruction, the tools or any earlier
    message is (the prompt cache must re-process everything after it).
    """
    if prev is None or not prev.message_digests:
        return None
    lost = prev.head_tokens + sum(prev.message_tokens) - prefix_tokens
    if state.system_digest != prev.system_digest:
        return {"block": "system_instruction", "index": None, "tokens": lost, "cause": "system instruction changed"}
    if state.tools_digest != prev.tools_digest:
        return {"block": "tools", "index": None, "tokens": lost, "cause": "tool declarations changed"}
    for i, (old, new) in enumerate(zip(prev.message_digests, state.message_digests)):
        if old != new:
            if compaction is not None:
                cause = f"compaction ({compaction.reason})"
            elif i == prev.payload_index and prev.invocation_id != state.invocation_id:
                cause = "new invocation: the previous payload was replaced by its user message"
            elif i == len(prev.message_digests) - 1:
                cause = "the closing status left the last message"
            else:
                cause = "history changed"
            return {"block": f"messages[{i}]", "index": i, "tokens": lost, "cause": cause}
    if len(state.message_digests) < len(prev.message_digests):
        return {"block": f"messages[{len(state.message_digests)}]", "index": len(state.message_digests),
                "tokens": lost, "cause": "messages removed"}
    return None


def _prefix_tokens(request: ModelRequest, prev: PackState | None, counter: TokenCounting) -> int:
    if prev is None or not prev.message_digests or prev.head_digest != _head_digest(request):
        return 0
    total = prev.head_tokens
    for digest, m, tokens in zip(prev.message_digests, request.messages, prev.message_tokens):
        if m.digest != digest:
            break
        total += tokens
    return total


def _not_sent(items, lines: "tuple[Line, ...]") -> int:
    """Input items that are not in the layer (compacted turns recalled into Memory are not inputs)."""
    sent = {ln.id for ln in lines}
    return sum(1 for item in items if item.id not in sent)


def _lines_json(lines: "tuple[Line, ...]") -> list[dict]:
    return [{"id": ln.id, "source": ln.source, "score": ln.score, **ln.scores, "compressed": ln.compressed} for ln in lines]


def _manifest(inputs: PackInputs, profile: BudgetProfile, window: int, alloc: Allocation, request: ModelRequest,
              fit: Fit, cands: Candidates, events: list[TruncationEvent], state: PackState,
              compaction: Compaction | None, reused: bool, recital: Message | None, counter: TokenCounting) -> Manifest:
    """The receipt, from the decisions carried as data (nothing is read back from rendered text)."""
    conv = cands.conversation
    ev_used = sum(ln.tokens + 1 for ln in fit.evidence) + (12 if fit.evidence else 0)
    mem_used = sum(ln.tokens + 1 for ln in fit.memory) + (12 if fit.memory else 0)
    block_used = counter.count_text(fit.zone.block) + 4 if fit.zone.block else 0
    conv_used = turns_tokens(fit.history, counter) + turns_tokens(fit.loop, counter) + block_used
    payload = state.payload_tokens or (counter.count_message(conv.request) if conv.request is not None else 0)
    task_used = max(0, payload - ev_used - mem_used) + (counter.count_message(recital) if recital is not None else 0)
    system_used = counter.count_text(request.system_instruction) + sum(counter.count_message(m) for m in conv.instructions)
    tools_used = _head_tokens(request, counter) - counter.count_text(request.system_instruction)
    n_conv = len(conv.history) + len(conv.loop)
    budgets = alloc.budgets
    demands = alloc.demands
    layers = {
        "system": LayerUsage(budget=system_used, used=system_used, items=1),
        "task": LayerUsage(budget=task_used, used=task_used, items=1),
        "tools": LayerUsage(budget=tools_used, used=tools_used, items=len(request.tools),
                            dropped=len(inputs.request.tools) - len(request.tools)),
        "evidence": LayerUsage(demand=demands.get("evidence", 0), budget=budgets.get("evidence", ev_used), used=ev_used,
                               items=len(fit.evidence), dropped=_not_sent(inputs.evidence, fit.evidence)),
        "memory": LayerUsage(demand=demands.get("memory", 0), budget=budgets.get("memory", mem_used), used=mem_used,
                             items=len(fit.memory), dropped=_not_sent(inputs.memory, fit.memory)),
        "conversation": LayerUsage(demand=demands.get("conversation", 0), budget=budgets.get("conversation", conv_used),
                                   used=conv_used, items=len(fit.history) + len(fit.loop),
                                   dropped=n_conv - len(fit.history) - len(fit.loop)),
        "slack": LayerUsage(budget=alloc.slack, used=0),
    }
    prefix = _prefix_tokens(request, inputs.previous, counter)
    flags = list(cands.flags) + (["opening_request_pinned"] if fit.zone.pins_opening else [])
    return Manifest(
        pack_id=state.pack_id, model=request.model, window=window, profile=profile.name,
        profile_digest="sha256:" + sha256_hex(profile.model_dump_json()), app_name=inputs.app_name,
        user_id=inputs.user_id, session_id=inputs.session_id, invocation_id=inputs.invocation_id, agent=inputs.agent,
        created_at=inputs.now, layer_budgets=layers, allocation=alloc.to_json(),
        truncation_events=[e.to_json() for e in events], artifact_uris=sorted({ln.uri for ln in fit.evidence if ln.uri}),
        selected={"evidence": _lines_json(fit.evidence), "memory": _lines_json(fit.memory)},
        flags=flags, evidence_needed=list(inputs.task.evidence_needed),
        tokens_before=request_tokens(inputs.request, counter), tokens_after=request_tokens(request, counter),
        prefix_tokens=prefix,
        block_hashes={"system": state.system_digest, "tools": state.tools_digest,
                      "payload": sha256_hex(state.payload_text), "compaction": sha256_hex(fit.zone.block)},
        cache_break=_cache_break(state, inputs.previous, prefix, compaction),
        compaction=compaction.to_json() if compaction else None,
        calibration=round(inputs.calibration, 4), packed_for=alloc.window, recited=recital is not None,
        failures=failure_count(inputs),
        previous_tokens=(inputs.previous.head_tokens + sum(inputs.previous.message_tokens)) if inputs.previous else 0,
        previous_pack_id=inputs.previous.pack_id if inputs.previous else "",
        reused_payload=reused, tools=[t.name for t in request.tools], checksum=request.checksum,
    )
