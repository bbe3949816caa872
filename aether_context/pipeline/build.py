"""The whole pipeline for one model call, read top to bottom, each step timed under its name:

collect (the ADK edge gives `PackInputs`; `prepare` turns its messages into turns) → select (the
conversation policy compacts within it, timed as the `compact` sub-stage, when the kept turns exceed
their room, then selects again) → allocate → fit (the layers into their budgets; the layout is
rendered once) → fit_window (the exact count: drop or cut until the rendered request fits the
window, rendering each new layout once) → recite → record.

`build_pack` is pure: the same `PackInputs` and profile give the same request, byte for byte.
When the request fits and the pack has nothing to add, it is ADK's request unchanged.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, replace

from ..content import ModelRequest
from ..errors import BudgetError
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from ..windows import context_window
from .cache import PackCache, current_memo, memo_scope
from .allocate import Room, allocate_pack, conversation_tokens, lines_demand, room
from .inputs import PackInputs, PackState
from .compaction import Compaction, compact, compaction_events, compaction_trigger, verbatim_zone
from .types import Verbatim
from .evidence_change import change_cause, changed_evidence
from .incremental import inputs_digest
from .fit import fit_layers, fit_to_window, selection_events
from .as_sent import restore_sent
from .prepare import Prepared, prepare
from .recite import failures_to_show, recite
from .record import Decisions, Manifest, record
from ..retrieval.threads import bounded_threads
from .render import failures_section, masking, request_tokens, verbatim_request
from .retrieve import Retriever, default_retriever
from .select import Candidates, frame_candidates, select, widen_memory
from .status import FailureView, failure_view
from .timing import StageTimes

__all__ = ["ContextPack", "build_pack", "request_tokens", "StageTimes"]


@dataclass(frozen=True)
class ContextPack:
    """The result of one pack: what to send, the receipt, and the state for the next call."""

    request: ModelRequest
    manifest: Manifest
    state: PackState
    inputs: PackInputs


@dataclass(frozen=True)
class Call:
    """What every stage of one call reads: the inputs, the profile, the window packed for, the counter."""

    inputs: PackInputs
    profile: BudgetProfile
    window: int  # the model's window in our tokenizer's units, after calibration
    counter: TokenCounting
    retriever: Retriever
    failures: str  # FAILURES SO FAR for the previous call's verbatim zone ("" when it would add nothing)
    failure_log: FailureView  # the failure log analysed once: a compaction shows it for its new zone


@dataclass(frozen=True)
class Plan:
    """The conversation decided: its verbatim zone, the candidates for it, and the room they share."""

    zone: Verbatim
    frozen: PackState | None  # the previous payload, kept as sent
    cands: Candidates
    space: Room
    compaction: Compaction | None
    failures: str  # FAILURES SO FAR for this zone ("" without failures, or when the kept turns show them all)
    prepared: Prepared  # the turns as this call sends them (earlier requests as sent, or as ADK has them)
    evidence_changed: str = ""  # why a frozen payload was rebuilt: a new version of an item it sent


def build_pack(inputs: PackInputs, profile: BudgetProfile, *, counter: TokenCounting, window: int | None = None,
               retriever: Retriever | None = None, timings: StageTimes | None = None) -> ContextPack:
    """Build the Context Pack for one call. Raises `BudgetError` when the fixed layers cannot fit.

    `retriever` keeps retrieval indexes and embeddings across calls, and the memo of the call's context
    (`cache.memo_scope`: the packer sets its own) what was computed from unchanged history; without them,
    fresh ones give the same result, only slower. `timings`, when given, collects
    seconds per stage; it never enters the request or the manifest. Secrets in the text the pack
    quotes are masked per `profile.redaction` (see `render.masking`).
    """
    # one thread bound for the whole pack: each search would otherwise set and restore BLAS's threads itself
    with masking(profile.redaction), memo_scope(current_memo() or PackCache()), \
            bounded_threads(profile.retrieval.embedding_threads):
        return _build_pack(inputs, profile, counter=counter, window=window, retriever=retriever,
                           timings=timings)


def _build_pack(inputs: PackInputs, profile: BudgetProfile, *, counter: TokenCounting, window: int | None,
                retriever: Retriever | None, timings: StageTimes | None) -> ContextPack:
    def stage(name: str):
        return timings.stage(name) if timings is not None else nullcontext()

    model_window = context_window(inputs.request.model, window if window is not None else profile.window_tokens)
    # Calibrated: if the model counts 20 % more than our tokenizer, pack for a window 20 % smaller.
    with stage("collect"):
        prepared = prepare(inputs, profile, counter)
        zone = verbatim_zone(inputs.previous, inputs.request.messages)
        failure_log = failure_view(inputs, profile, counter)  # analysed once, shown per zone
        failures = failures_to_show(failure_log, zone.kept(prepared.turns))
    call = Call(inputs, profile, int(model_window / max(0.5, inputs.calibration)), counter,
                retriever or default_retriever(profile), failures, failure_log)
    with stage("select"):
        sent = restore_sent(prepared, inputs) if profile.cache.stable_prefix else prepared
        plan = _plan(call, sent, prepared, zone, stage)
        prepared = plan.prepared
        plan = _fill_memory(call, prepared, plan)
    with stage("allocate"):
        alloc = allocate_pack(profile, call.window, plan.space, plan.cands,
                              conversation_tokens(prepared, plan.zone, counter))
    with stage("fit"):
        fitted = fit_layers(inputs, profile, plan.cands, prepared, plan.zone, plan.frozen, plan.failures, alloc, counter)
    with stage("fit_window"):
        limit = alloc.pack_limit - plan.space.reserve
        fitted = fit_to_window(inputs, plan.cands, fitted, plan.failures, limit, counter)
    # the previous payload counts as kept only if the final fit did not have to drop lines from it
    reused = plan.frozen is not None and fitted.fit.payload_text == plan.frozen.payload_text
    with stage("recite"):
        recital = recite(inputs, profile, fitted.request, fitted.fit, reused=reused,
                         rebuilt_at=None if plan.frozen is not None else fitted.fit.payload_at(inputs),
                         limit=alloc.pack_limit, counter=counter, failures=failure_log, window=call.window)
    total = request_tokens(recital.request, counter)
    if total > alloc.pack_limit:
        raise BudgetError(f"pack needs {total} tokens but only {alloc.pack_limit} fit (window {call.window} less "
                          f"{alloc.slack} output reserve): split the step or use a larger window")
    with stage("record"):
        events = (*prepared.events, *compaction_events(plan.compaction), *selection_events(plan.cands), *fitted.events)
        decisions = Decisions(model_window, alloc, plan.cands, fitted.fit, plan.compaction, reused,
                              recital, prepared.pruned, events, plan.evidence_changed,
                              request_tokens(inputs.request, counter), inputs_digest(inputs),
                              prepared.restored, _ranked_at(inputs, plan.frozen))
        out = record(inputs, profile, decisions, counter)
    return ContextPack(request=recital.request, manifest=out.manifest, state=out.state, inputs=inputs)


def _plan(call: Call, sent: Prepared, plain: Prepared, zone: Verbatim, stage) -> Plan:
    """Select for the previous call's zone; when `compaction.trigger` says so, compact once and select again
    for the new zone (compacted turns become Memory candidates).

    `sent` holds earlier invocations' requests as they were sent (the new request appends to the
    last one), `plain` as ADK has them; the turns this call sends start as `sent`.

    With the payload frozen, the room is known before any ranking (Evidence and Memory are inside
    the payload): a call that compacts then ranks once, for the zone it keeps, not the one it leaves."""
    inputs, profile, counter = call.inputs, call.profile, call.counter
    prepared = sent
    frozen = _frozen_payload(inputs, profile, zone)
    refreshed = changed_evidence(frozen, inputs.evidence) if frozen is not None else ()
    if refreshed:  # a new version reaches this very call: the payload is rebuilt (a recorded cache break)
        frozen = None
    changed = change_cause(refreshed) if refreshed else ""
    ranked: dict[float, Candidates] = {}
    now, kept_at = inputs.now, _ranked_at(inputs, frozen)  # a payload kept as sent: ranked at its own clock

    def ranked_here(clock: float) -> Candidates:  # the candidates for the previous call's zone, ranked once if needed
        if clock not in ranked:
            ranked[clock] = _select(call, prepared, zone, clock)
        return ranked[clock]
    cands = frame_candidates(inputs, profile, prepared.conversation) if frozen is not None else ranked_here(now)
    space = room(inputs, profile, call.window, cands, zone, frozen, call.failures, counter)
    trigger = compaction_trigger(profile, counter, asked=inputs.compact, sent=sent, plain=plain, zone=zone,
                                 conversation_cap=space.conversation_cap)
    if trigger.replace_payloads:
        prepared = plain
        ranked.clear()
    if trigger.reason is None:
        return Plan(zone, frozen, ranked_here(kept_at), space, None, call.failures, prepared, changed)
    if prepared is not plain:  # a compaction re-processes the turns it keeps: earlier payloads as sent only take room
        prepared = plain
        ranked.clear()
    kept = conversation_tokens(prepared, zone, counter)
    with stage("compact"):
        reason = trigger.reason
        held = frozen if not inputs.compact else None
        compaction = _compact(call, prepared, zone, cands if held is not None else ranked_here(now), held, reason, kept)
        if compaction is None:  # the cut stays before this invocation: the payload is rebuilt, Memory gets its share
            held, compaction = None, _compact(call, prepared, zone, ranked_here(now), None, reason, kept)
    if not compaction.folded and not inputs.compact:
        # nothing could leave the verbatim zone: the final fit cuts the largest turn instead
        return Plan(zone, frozen, ranked_here(kept_at), space, None, call.failures, prepared, changed)
    zone = compaction.zone
    failures = failures_to_show(call.failure_log, zone.kept(prepared.turns))
    cands = _select(call, prepared, zone, kept_at if held is not None else now)
    space = room(inputs, profile, call.window, cands, zone, held, failures, counter)
    return Plan(zone, held, cands, space, compaction, failures, prepared)


def _compact(call: Call, prepared: Prepared, zone: Verbatim, cands: Candidates, held: PackState | None,
             reason: str, kept: int) -> Compaction | None:
    """One compaction down to `compact_to` of the conversation's room. With the payload `held` as sent (a
    cut inside this invocation's tool loop: the block then follows the payload, which stays cached), its
    Memory is frozen with it and the conversation has the whole room; otherwise compacted turns become
    Memory candidates and the target leaves Memory its share. None when the payload cannot be held (the
    cut does not reach this invocation's request): no block is built for it."""
    inputs, profile, counter = call.inputs, call.profile, call.counter
    cap = room(inputs, profile, call.window, cands, zone, held, call.failures, counter,
               memory_wanted=held is None).conversation_cap
    def follows(new: Verbatim) -> str:  # the held payload shows the failures it was built with: now the block does
        failures = failures_to_show(call.failure_log, new.kept(prepared.turns))
        return "\n" + failures_section(failures) if failures else ""
    return compact(inputs, profile, prepared, zone, target=int(cap * profile.conversation.compact_to),
                   ceiling=cap, reason=reason, tokens_before=kept, window=call.window, counter=counter,
                   pinned_only=held is not None, follows=follows if held is not None else None)


def _select(call: Call, prepared: Prepared, zone: Verbatim, now: float) -> Candidates:
    compacted, kept = zone.split(prepared.turns)
    return select(call.inputs, call.profile, counter=call.counter, retriever=call.retriever,
                  conversation=prepared.conversation, compacted=compacted, kept=kept, now=now)


def _ranked_at(inputs: PackInputs, frozen: PackState | None) -> float:
    """The session clock Evidence and Memory are ranked at: a payload kept as sent keeps the clock it was
    ranked at (its calls then rank as it was built, by the same freshness, and repeat that search at no
    cost: `HybridIndex` keeps its last few searches, `LAST_SEARCHES`), any other call its own."""
    return frozen.ranked_at if frozen is not None and frozen.ranked_at else inputs.now


def _fill_memory(call: Call, prepared: Prepared, plan: Plan) -> Plan:
    """Memory ranked over a wider pool when the budget it would get exceeds what its lines take (a large
    window after a compaction): a folded turn outside the retriever's first pool comes back while there is room."""
    if plan.frozen is not None:  # a frozen payload keeps the lines it was sent with
        return plan
    conversation = conversation_tokens(prepared, plan.zone, call.counter)
    room_for = allocate_pack(call.profile, call.window, plan.space, plan.cands, conversation,
                             memory=plan.space.flexible).budgets["memory"]
    if room_for <= lines_demand(plan.cands.memory):
        return plan
    compacted, kept = plan.zone.split(prepared.turns)
    cands = widen_memory(call.inputs, call.profile, plan.cands, room_for, counter=call.counter,
                         retriever=call.retriever, compacted=compacted, kept=kept)
    return replace(plan, cands=cands)


def _frozen_payload(inputs: PackInputs, profile: BudgetProfile, zone: Verbatim) -> PackState | None:
    """The previous call's state when its payload is kept as sent (same invocation, same zone)."""
    prev = inputs.previous
    if (prev is None or not profile.cache.stable_prefix or prev.invocation_id != inputs.invocation_id
            or prev.agent != inputs.agent or prev.compacted_through != zone.through or inputs.compact):
        return None
    at, messages = inputs.request_index, inputs.request.messages
    request = messages[at] if at is not None and 0 <= at < len(messages) else None
    text = verbatim_request(prev.payload_text, request)  # the record is masked; the user's message went verbatim
    return prev if text == prev.payload_text else replace(prev, payload_text=text)
