"""The whole pipeline for one model call: collect → select → allocate → compress → render → record.

`build_pack` is pure: the same `PackInputs` and profile give the same request, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..compress.middle_out import middle_out
from ..content import Message, ModelRequest, canonical_json, sha256_hex
from ..errors import BudgetError
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from ..windows import context_window
from .allocate import Allocation, allocate
from .collect import PackInputs, PackState, Turn
from .compress import Fitted, TruncationEvent, bounded_turns, cut_turn, fit_conversation, fit_lines, repair_orphans, turn_id
from .record import LayerUsage, Manifest
from .render import PAYLOAD_HEADER, payload_message, render_payload, render_request, system_text
from .decay import RunningSummary, decay_images, prune_tool_outputs
from .incremental import turns_tokens
from .retrieve import Retriever, default_retriever
from .select import Candidates, Line, query_text, select
from .status import failure_count, failures_section, recitation_message, recitation_reserve

__all__ = ["ContextPack", "build_pack", "request_tokens"]


@dataclass(frozen=True)
class ContextPack:
    """The result of one pack: what to send, the receipt, and the state for the next call."""

    request: ModelRequest
    manifest: Manifest
    state: PackState
    inputs: PackInputs


def request_tokens(request: ModelRequest, counter: TokenCounting) -> int:
    """Tokens of a whole request: system instruction, tool declarations and messages."""
    memo = request.__dict__.get("_tokens")  # a pack measures the same request several times
    if memo is not None and memo[0] is counter:
        return memo[1]
    total = _head_tokens(request, counter) + sum(counter.count_message(m) for m in request.messages)
    request.__dict__["_tokens"] = (counter, total)
    return total


def _head_tokens(request: ModelRequest, counter: TokenCounting) -> int:
    tools = sum(counter.count_text(canonical_json(t.declaration)) for t in request.tools)
    other = sum(counter.count_text(canonical_json(t)) for t in request.other_tools)
    return counter.count_text(request.system_instruction) + tools + other


def _head_digest(request: ModelRequest) -> str:
    return sha256_hex(canonical_json([request.system_instruction, [t.to_json() for t in request.tools], list(request.other_tools)]))


def _section_tokens(text: str, counter: TokenCounting) -> int:
    return counter.count_text(text) + 1 if text else 0  # +1: the joining newline


def build_pack(inputs: PackInputs, profile: BudgetProfile, *, counter: TokenCounting, window: int | None = None,
               retriever: Retriever | None = None) -> ContextPack:
    """Build the Context Pack for one call. Raises `BudgetError` when the fixed layers cannot fit.

    `retriever` keeps retrieval indexes and embeddings across calls (the plugin passes its own);
    without one, a fresh one gives the same result, only slower.
    """
    req = inputs.request
    model_window = context_window(req.model, window if window is not None else profile.window_tokens)
    # Calibrated: if the model counts 20 % more than our tokenizer, pack for a window 20 % smaller.
    window = int(model_window / max(0.5, inputs.calibration))

    # select: ranked candidates and signals
    cands = select(inputs, profile, counter=counter, retriever=retriever or default_retriever(profile))
    conv = cands.conversation
    max_turn = profile.conversation.max_turn_tokens
    history, orphan_h = repair_orphans(conv.history)
    loop, orphan_l = repair_orphans(conv.loop)
    events: list[TruncationEvent] = [*orphan_h, *orphan_l]
    for layer, ids in cands.unselected.items():  # retrieval's choice is a drop too, and says so
        if ids:
            events.append(TruncationEvent(layer, "drop", "not selected: below top-k, a near-duplicate, or already in the conversation", ids))
    prev = inputs.previous
    same_invocation = bool(profile.cache.stable_prefix and prev is not None and prev.payload_text
                           and prev.invocation_id == inputs.invocation_id and prev.agent == inputs.agent)
    raw_history, raw_loop = history, loop

    def prepare(consider_new_pruning: bool):
        h, lp, pruned, more = _decay(inputs, raw_history, raw_loop, profile, counter, consider_new_pruning)
        originals = {t.start: t for t in h + lp}
        h, cut_h = bounded_turns(h, max_turn, counter)
        lp, cut_l = bounded_turns(lp, max_turn, counter)
        return h, lp, pruned, originals, [*more, *cut_h, *cut_l]

    # A frozen pack (same invocation) only re-applies earlier pruning; a full build may prune anew.
    history, loop, pruned, originals, more = prepare(consider_new_pruning=not same_invocation)

    # fixed layers, measured (the Task layer includes failures so far and room for the recitation)
    failures = failures_section(inputs, profile, int(inputs.failures.get("current_turn", 0)), counter)
    reserve = recitation_reserve(profile)
    opening = _opening(inputs, conv.request, profile, window, counter)
    empty = render_payload(inputs.task, conv.request, (), (), failures=failures, opening=opening)
    fixed_used = {
        "system": counter.count_text(system_text(req.system_instruction)) + sum(counter.count_message(m) for m in conv.instructions),
        "tools": sum(counter.count_text(canonical_json(t.declaration)) for t in cands.tools)
        + sum(counter.count_text(canonical_json(t)) for t in req.other_tools),
        "task": counter.count_message(payload_message(empty.text(), conv.request)) + reserve,
    }

    reused = None
    if same_invocation:
        reused = _try_reuse(inputs, prev, cands, history, loop, fixed_used, window, profile, counter, reserve)
    overflowed = same_invocation and reused is None

    if reused is not None:
        request, fitted, ev_lines, mem_lines, sections_text, alloc = reused
        events += more
    else:
        if overflowed:
            history, loop, pruned, originals, more = prepare(consider_new_pruning=True)
        events += more
        request, fitted, ev_lines, mem_lines, sections_text, alloc, more = _full_build(
            inputs, cands, history, loop, fixed_used, window, profile, counter, force_compact=overflowed,
            originals=originals, failures=failures, reserve=reserve, opening=opening)
        events.extend(more)

    events = _in_overflow_order(events)
    # the goal recitation goes last, after everything that may be cached
    stable = request
    # a frozen payload's FAILURES SO FAR covers the failures logged when it was built
    logged = failure_count(inputs)
    shown = prev.failures_shown if reused is not None and prev is not None else logged
    recital, call_index, last_recited = recitation_message(
        inputs, profile, fitted.history + fitted.loop, request_tokens(request, counter), counter,
        failures_stale=logged > shown)
    if recital is not None:
        request = replace(request, messages=request.messages + (recital,))
    total = request_tokens(request, counter)
    if total > alloc.pack_limit:
        raise BudgetError(f"pack needs {total} tokens but only {alloc.pack_limit} fit (window {window} less "
                          f"{alloc.slack} output reserve): split the step or use a larger window")

    # record
    state = PackState(
        invocation_id=inputs.invocation_id, agent=inputs.agent, payload_text=sections_text,
        folded_loop_turns=fitted.folded_loop_turns, kept_history_turns=len(fitted.history),
        fold_lines=fitted.fold_lines, summary=fitted.summary.to_json(),
        message_digests=tuple(m.digest for m in stable.messages),  # the recitation is not part of the prefix
        message_tokens=tuple(counter.count_message(m) for m in stable.messages),
        head_digest=_head_digest(request), head_tokens=_head_tokens(request, counter), pruned=tuple(sorted(pruned)),
        call_index=call_index, last_recited=last_recited, failures_shown=shown,
        merged_lines=fitted.merged_lines,
        pack_id="pk_" + sha256_hex(f"{inputs.digest}/{model_window}/{profile.model_dump_json()}")[:24],
        system_digest=sha256_hex(request.system_instruction),
        tools_digest=sha256_hex(canonical_json([[t.to_json() for t in request.tools], list(request.other_tools)])),
        payload_index=len([m for t in fitted.history for m in t.messages]),
    )
    manifest = _manifest(inputs, profile, model_window, alloc, request, fitted, ev_lines, mem_lines, cands, events,
                         state, counter, reused is not None, failures, recital)
    return ContextPack(request=request, manifest=manifest, state=state, inputs=inputs)


def _opening(inputs: PackInputs, request: Message | None, profile: BudgetProfile, window: int,
             counter: TokenCounting) -> str:
    """The opening request to pin in the Task layer, capped; "" when a goal is set or it is the request itself."""
    text = inputs.task.opening_request
    if not profile.task.pin_opening_request or inputs.task.goal or not text.strip():
        return ""
    if request is not None and request.text == text:
        return ""
    return middle_out(text, min(profile.task.opening_max_tokens, int(window * profile.task.opening_max_share)), counter)


def _holds_verbatim(history: "tuple[Turn, ...]", text: str) -> bool:
    return any(m.role == "user" and m.text == text for t in history for m in t.messages)


def _decay(inputs: PackInputs, history, loop, profile: BudgetProfile, counter: TokenCounting, consider_new_pruning: bool):
    """Image decay and pruning of old tool outputs, before the conversation is fitted."""
    events: list[TruncationEvent] = []
    n_hist = len(history)
    turns, images = decay_images(history + loop, profile.decay.image_keep_turns, inputs.uris)
    if images:
        events.append(TruncationEvent("conversation", "compress", "old inline images replaced by a description + URI", images))
    already = frozenset(inputs.previous.pruned) if inputs.previous else frozenset()
    pruned: frozenset[int] = already
    if profile.pruning.enabled:
        turns, pruned, fresh = prune_tool_outputs(turns, protect_tokens=profile.pruning.protect_tokens,
                                                  minimum_tokens=profile.pruning.minimum_tokens, uris=inputs.uris,
                                                  already=already, counter=counter, consider_new=consider_new_pruning)
        if fresh:
            events.append(TruncationEvent("conversation", "compress", "old tool outputs cleared to their URI (pruning)",
                                          tuple(f"turn-{k}" for k in fresh)))
    return turns[:n_hist], turns[n_hist:], pruned, events


def _try_reuse(inputs, prev: PackState, cands: Candidates, history, loop, fixed_used, window, profile, counter, reserve: int):
    """Keep the previous call's payload and folding point if the grown request still fits."""
    if prev.folded_loop_turns > len(loop) or prev.kept_history_turns > len(history):
        return None
    kept_hist = history[len(history) - prev.kept_history_turns:] if prev.kept_history_turns else ()
    kept_loop = loop[prev.folded_loop_turns:]
    conv = cands.conversation
    request = render_request(model=inputs.request.model, system_instruction=inputs.request.system_instruction,
                             tools=cands.tools, other_tools=inputs.request.other_tools, history=kept_hist,
                             payload=payload_message(prev.payload_text, conv.request), loop=kept_loop,
                             instructions=conv.instructions)
    ev = tuple(ln for ln in cands.evidence if ln.text in prev.payload_text)
    mem = tuple(ln for ln in cands.memory if ln.text in prev.payload_text)
    # Budgets of a reused pack are what its frozen layers hold; the conversation gets the rest.
    demands = {"evidence": _lines_tokens(ev, "EVIDENCE:", counter), "memory": _lines_tokens(mem, "MEMORY:", counter),
               "conversation": 0}
    alloc = allocate(profile, window, cands.signals, fixed_used, demands)
    if request_tokens(request, counter) + reserve > alloc.pack_limit:
        return None
    fitted = Fitted(history=kept_hist, summary=RunningSummary.from_json(prev.summary), fold_lines=prev.fold_lines, loop=kept_loop,
                    folded_loop_turns=prev.folded_loop_turns)
    return request, fitted, ev, mem, prev.payload_text, alloc


def _lines_tokens(lines: "tuple[Line, ...]", header: str, counter: TokenCounting) -> int:
    return sum(ln.tokens + 1 for ln in lines) + _section_tokens(header, counter) if lines else 0


def _full_build(inputs, cands: Candidates, history, loop, fixed_used, window, profile: BudgetProfile, counter,
                *, force_compact: bool, originals: "dict[int, Turn]", failures: str, reserve: int, opening: str):
    conv = cands.conversation
    tail = profile.conversation.tail_turns
    ev_header = _section_tokens("EVIDENCE:", counter)
    mem_header = _section_tokens("MEMORY:", counter)
    demands = {
        "evidence": _lines_tokens(cands.evidence, "EVIDENCE:", counter),
        "memory": _lines_tokens(cands.memory, "MEMORY:", counter),
        "conversation": turns_tokens(history[-tail:], counter) + turns_tokens(loop, counter)
        + (min(profile.decay.fold_max_tokens + profile.decay.summary_max_tokens, 12 * (len(history) - tail))
           if len(history) > tail else 0) + 8,
    }
    alloc = allocate(profile, window, cands.signals, fixed_used, demands)
    events: list[TruncationEvent] = []
    ev_lines, e1 = fit_lines("evidence", cands.evidence, max(0, alloc.budgets["evidence"] - ev_header),
                             profile.evidence.item_max_tokens, counter, older_first=True)
    mem_lines, e2 = fit_lines("memory", cands.memory, max(0, alloc.budgets["memory"] - mem_header),
                              profile.memory.item_max_tokens, counter)
    events += [*e1, *e2]
    # Room the retrieved layers left goes to the conversation.
    used_flex = _lines_tokens(ev_lines, "EVIDENCE:", counter) + _lines_tokens(mem_lines, "MEMORY:", counter)
    conv_budget = alloc.pack_limit - sum(fixed_used.values()) - used_flex
    # Without a forced compaction the conversation folds only down to its budget; after a reuse
    # failure it folds to `compact_to` of it, leaving room for the next calls to append.
    target = int(conv_budget * profile.conversation.compact_to) if force_compact else conv_budget
    # The decay zones scale with the conversation budget, so a small window keeps room for turns.
    fold_cap = min(profile.decay.fold_max_tokens, int(conv_budget * 0.15))
    summary_cap = min(profile.decay.summary_max_tokens, int(conv_budget * 0.10))
    running = RunningSummary.from_json(inputs.summary)
    guard: list[TruncationEvent] = []
    for _ in range(64):  # the final count is exact; tighten until it fits
        fitted = fit_conversation(history, loop, budget=min(target, conv_budget),
                                  tail_turns=tail, summary=running, goal=inputs.task.goal or query_text(inputs)[:300],
                                  fold_max_tokens=fold_cap, summary_max_tokens=summary_cap, uris=inputs.uris,
                                  counter=counter, max_verbatim_turns=profile.conversation.max_verbatim_turns,
                                  originals=originals)
        # The opening request is pinned only once the history no longer holds it verbatim (never twice).
        pin = "" if opening and _holds_verbatim(fitted.history, inputs.task.opening_request) else opening
        text = render_payload(inputs.task, conv.request, ev_lines, mem_lines, fitted.summary.text,
                              fitted.fold_lines, failures, opening=pin).text()
        request = render_request(model=inputs.request.model, system_instruction=inputs.request.system_instruction,
                                 tools=cands.tools, other_tools=inputs.request.other_tools, history=fitted.history,
                                 payload=payload_message(text, conv.request), loop=fitted.loop,
                                 instructions=conv.instructions)
        over = request_tokens(request, counter) + reserve - alloc.pack_limit
        if over <= 0:
            break
        # Still over (rounding at section joins, or a tiny window): summary, then memory, evidence, turns.
        turns_left = len(fitted.history) + len(fitted.loop)
        if fitted.fold_lines and fold_cap > 0:
            fold_cap = max(0, fold_cap - max(over + 8, fold_cap // 4))
            guard.append(TruncationEvent("conversation", "compress", f"window still exceeded: fold zone cut to {fold_cap} tokens",
                                         ("fold-zone",)))
        elif fitted.summary.text and summary_cap > 0:
            summary_cap = max(0, summary_cap - max(over + 8, summary_cap // 4))
            guard.append(TruncationEvent("conversation", "compress", f"window still exceeded: summary cut to {summary_cap} tokens",
                                         ("summary",)))
        elif mem_lines:
            guard.append(TruncationEvent("memory", "drop", "window still exceeded", (mem_lines[-1].id,)))
            mem_lines = mem_lines[:-1]
        elif ev_lines:
            oldest = min(range(len(ev_lines)), key=lambda i: (ev_lines[i].timestamp or 0.0, i))
            guard.append(TruncationEvent("evidence", "drop", "window still exceeded", (ev_lines[oldest].id,)))
            ev_lines = ev_lines[:oldest] + ev_lines[oldest + 1:]
        elif turns_left > 1:
            target = max(0, min(target, conv_budget) - over - 16)
        else:
            last = (fitted.history + fitted.loop)[0]
            room = max(16, sum(counter.count_message(m) for m in last.messages) - over - 16)
            cut = cut_turn(last, room, counter)
            guard.append(TruncationEvent("conversation", "cut", "only turn left over the window", (turn_id(last),)))
            history = tuple(cut if t.start == last.start else t for t in history)
            loop = tuple(cut if t.start == last.start else t for t in loop)
    events.extend(guard)
    events.extend(fitted.events)
    return request, fitted, ev_lines, mem_lines, text, alloc, events


_ACTION_ORDER = {"compress": 0, "cut": 1, "fold": 2, "drop": 3}
_LAYER_ORDER = {"memory": 0, "evidence": 1, "conversation": 2}


def _in_overflow_order(events: "list[TruncationEvent]") -> list[TruncationEvent]:
    """Events listed in the design's order: compress (memory, evidence, conversation) before drops."""
    return sorted(events, key=lambda e: (_ACTION_ORDER[e.action], _LAYER_ORDER.get(e.layer, 9)))


def _cache_break(state: PackState, prev: PackState | None, prefix_tokens: int) -> dict | None:
    """The first stable block that differs from the previous call's request, and what it costs.

    Appending messages is not a break; changing the system instruction, the tools or any earlier
    message is (the prompt cache must re-process everything after it).
    """
    if prev is None or not prev.message_digests:
        return None
    lost = prev.head_tokens + sum(prev.message_tokens) - prefix_tokens
    if state.system_digest != prev.system_digest:
        return {"block": "system_instruction", "index": None, "tokens": lost}
    if state.tools_digest != prev.tools_digest:
        return {"block": "tools", "index": None, "tokens": lost}
    for i, (old, new) in enumerate(zip(prev.message_digests, state.message_digests)):
        if old != new:
            kind = "history" if i < prev.payload_index else "payload" if i == prev.payload_index else "tool turns"
            if prev.invocation_id != state.invocation_id:
                kind += ", new invocation"
            return {"block": f"messages[{i}]", "index": i, "kind": kind, "tokens": lost}
    if len(state.message_digests) < len(prev.message_digests):
        return {"block": f"messages[{len(state.message_digests)}]", "index": len(state.message_digests),
                "kind": "removed", "tokens": lost}
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


def _not_selected(items, lines: "tuple[Line, ...]") -> int:
    """Input items that did not make it into the layer (older turns recalled into Memory are not inputs)."""
    chosen = {ln.id for ln in lines}
    return sum(1 for item in items if item.id not in chosen)


def _manifest(inputs: PackInputs, profile: BudgetProfile, window: int, alloc: Allocation, request: ModelRequest,
              fitted: Fitted, ev_lines: "tuple[Line, ...]", mem_lines: "tuple[Line, ...]", cands: Candidates,
              events: list[TruncationEvent], state: PackState, counter: TokenCounting, reused: bool,
              failures: str, recital: Message | None) -> Manifest:
    conv = cands.conversation
    payload_idx = len([m for t in fitted.history for m in t.messages])
    payload = request.messages[payload_idx]
    sections = render_payload(inputs.task, conv.request, ev_lines, mem_lines, fitted.summary.text, fitted.fold_lines,
                              failures)
    ev_used = _section_tokens(sections.evidence, counter)
    mem_used = _section_tokens(sections.memory, counter)
    sum_used = _section_tokens(sections.summary, counter)
    conv_used = turns_tokens(fitted.history, counter) + turns_tokens(fitted.loop, counter) + sum_used
    task_used = counter.count_message(payload) - ev_used - mem_used - sum_used \
        + (counter.count_message(recital) if recital is not None else 0)
    system_used = counter.count_text(request.system_instruction) + sum(counter.count_message(m) for m in conv.instructions)
    tools_used = _head_tokens(request, counter) - counter.count_text(request.system_instruction)
    n_conv = len(conv.history) + len(conv.loop)
    layers = {
        "system": LayerUsage(budget=max(alloc.floors["system"], system_used), used=system_used, items=1),
        "task": LayerUsage(budget=max(alloc.floors["task"], task_used), used=task_used, items=1),
        "tools": LayerUsage(budget=max(alloc.floors["tools"], tools_used), used=tools_used, items=len(request.tools),
                            dropped=len(inputs.request.tools) - len(request.tools)),
        "evidence": LayerUsage(budget=alloc.budgets.get("evidence", ev_used), used=ev_used, items=len(ev_lines),
                               dropped=_not_selected(inputs.evidence, ev_lines)),
        "memory": LayerUsage(budget=alloc.budgets.get("memory", mem_used), used=mem_used, items=len(mem_lines),
                             dropped=_not_selected(inputs.memory, mem_lines)),
        "conversation": LayerUsage(budget=alloc.budgets.get("conversation", conv_used), used=conv_used,
                                   items=len(fitted.history) + len(fitted.loop),
                                   dropped=n_conv - len(fitted.history) - len(fitted.loop)),
        "slack": LayerUsage(budget=alloc.slack, used=0),
    }
    uris = sorted({ln.uri for ln in ev_lines if ln.uri})
    prefix = _prefix_tokens(request, inputs.previous, counter)
    return Manifest(
        pack_id=state.pack_id, model=request.model, window=window, profile=profile.name,
        profile_digest="sha256:" + sha256_hex(profile.model_dump_json()), app_name=inputs.app_name,
        user_id=inputs.user_id, session_id=inputs.session_id, invocation_id=inputs.invocation_id, agent=inputs.agent,
        created_at=inputs.now, layer_budgets=layers, allocation=alloc.to_json(),
        truncation_events=[e.to_json() for e in events], artifact_uris=uris,
        selected={
            "evidence": [{"id": ln.id, "source": ln.source, "score": ln.score, **ln.scores, "compressed": ln.compressed}
                         for ln in ev_lines],
            "memory": [{"id": ln.id, "source": ln.source, "score": ln.score, **ln.scores, "compressed": ln.compressed}
                       for ln in mem_lines],
        },
        flags=list(cands.flags) + (["opening_request_pinned"] if state.payload_text.startswith(
            f"{PAYLOAD_HEADER}\nOPENING REQUEST:\n") else []), evidence_needed=list(inputs.task.evidence_needed),
        tokens_before=request_tokens(inputs.request, counter), tokens_after=request_tokens(request, counter),
        prefix_tokens=prefix,
        block_hashes={"system": state.system_digest, "tools": state.tools_digest,
                      "payload": sha256_hex(state.payload_text)},
        cache_break=_cache_break(state, inputs.previous, prefix),
        calibration=round(inputs.calibration, 4), packed_for=alloc.window, recited=recital is not None,
        failures=failure_count(inputs),
        previous_tokens=(inputs.previous.head_tokens + sum(inputs.previous.message_tokens)) if inputs.previous else 0,
        previous_pack_id=inputs.previous.pack_id if inputs.previous else "",
        reused_payload=reused, tools=[t.name for t in request.tools], checksum=request.checksum,
    )
