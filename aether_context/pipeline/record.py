"""record: the state for the next call and the manifest, the audit receipt of one model call.

A manifest says what was sent and why: budgets and the signals behind them, what each layer
used, every truncation, the artifact URIs cited, and the checksum of the exact request. It
points (by content hash) to the stored request and the pre-pack inputs, so the call can be
rebuilt byte for byte and re-packed under another profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ..content import ModelRequest, canonical_json, sha256_hex
from ..profile import BudgetProfile
from ..tokens import TokenCounting
from .allocate import lines_demand
from .as_sent import sent_requests
from .inputs import PackInputs, PackState
from .incremental import turns_tokens
from .evidence_change import evidence_marks
from .render import head_digest, head_tokens, masked_count, request_tokens
from .status import failure_count, pressure_share

if TYPE_CHECKING:
    from .allocate import Allocation
    from .compaction import Compaction
    from .fit import Fit, TruncationEvent
    from .recite import Recital
    from .select import Candidates, Line

__all__ = ["Manifest", "LayerUsage", "SCHEMA_VERSION", "Decisions", "Record", "record", "CallRecord"]

SCHEMA_VERSION = 2


class LayerUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    demand: int = Field(0, description="Tokens the layer would use uncut (flexible layers).")
    budget: int = Field(description="Tokens the allocator granted (fixed layers: what they need).")
    used: int = Field(description="Tokens the layer takes in the sent request.")
    items: int = Field(0, description="Items (lines, turns, tools) kept.")
    dropped: int = Field(0, description="Items dropped or folded away.")


class Manifest(BaseModel):
    """One model call. `checksum` is `sha256:` of the canonical request JSON."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    pack_id: str
    model: str
    window: int
    profile: str
    profile_digest: str
    app_name: str = ""
    user_id: str = ""
    session_id: str = ""
    invocation_id: str = ""
    agent: str = ""
    created_at: float = 0.0
    layer_budgets: dict[str, LayerUsage]
    allocation: dict[str, Any] = Field(default_factory=dict, description="Floors, weights, signals, nominal shares.")
    truncation_events: list[dict[str, Any]] = Field(default_factory=list)
    artifact_uris: list[str] = Field(default_factory=list)
    selected: dict[str, list[dict[str, Any]]] = Field(default_factory=dict, description="Per layer: kept item ids and scores.")
    flags: list[str] = Field(default_factory=list, description="Task problems (missing goal/acceptance, unknown tools...).")
    evidence_needed: list[str] = Field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    prefix_tokens: int = Field(0, description="Leading tokens equal to the previous call's request.")
    previous_tokens: int = 0
    previous_pack_id: str = ""
    reused_payload: bool = Field(False, description="The payload was kept from the previous call of this invocation.")
    block_hashes: dict[str, str] = Field(default_factory=dict, description="sha256 of each stable block: system, tools, payload.")
    cache_break: dict[str, Any] | None = Field(None, description=(
        "When the request is not the previous one plus appended messages: the first block that changed "
        "(system_instruction, tools, or messages[i] with its kind) and the tokens to re-process."))
    compaction: dict[str, Any] | None = Field(None, description=(
        "Set when this call compacted the conversation: why, where the verbatim zone now starts, how many turns "
        "left it, tokens before and after."))
    tokens_without_plugin: int = Field(0, description=(
        "What ADK would have sent without the plugin: its request with offloaded tool results at full size."))
    calibration: float = Field(1.0, description="Correction applied to our token estimates (model count / estimate).")
    packed_for: int = Field(0, description="The window in our tokenizer's units after calibration.")
    recited: bool = Field(False, description="A goal recitation block closes this request.")
    failures: int = Field(0, description="Tool failures the session had recorded when this call was packed.")
    tools: list[str] = Field(default_factory=list)
    tools_left_out: dict[str, str] = Field(default_factory=dict, description=(
        "Tools the per-step ranking did not declare (profile `tools`), with why; they stay callable."))
    checksum: str
    request_ref: str = Field("", description="Content hash of the stored request.")
    inputs_ref: str = Field("", description="Content hash of the stored pre-pack inputs.")
    redacted_in_pack: int = Field(0, description=(
        "Masked secrets in the text the pack wrote into this request (compaction block, Evidence, Memory, "
        "failures, status); ADK's own verbatim turns are not rewritten."))
    error: str | None = Field(None, description="Set when packing failed and the original request was sent (fail-open).")


@dataclass(frozen=True)
class CallRecord:
    """One packed (or failed) model call: its manifest, where the store keeps it, and how long each
    stage took (milliseconds, `StageTimes.to_json`: the edge's `inputs` and `apply`, the pipeline's
    stages; kept beside the manifest, which must not vary from run to run)."""

    manifest: Manifest
    uri: str
    timings: "dict[str, float]" = field(default_factory=dict)


# --- the writer ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decisions:
    """Everything the stages decided for one call, carried as data to the one writer of the receipt."""

    window: int  # the model's window (before calibration)
    alloc: "Allocation"
    cands: "Candidates"
    fit: "Fit"
    compaction: "Compaction | None"
    reused: bool  # the payload was kept as the previous call of this invocation sent it
    recital: "Recital"  # with the request as sent and as the next call of the payload re-sends it
    pruned: frozenset[int]
    events: "tuple[TruncationEvent, ...]"
    evidence_changed: str = ""  # why a frozen payload was rebuilt (a new version of an item it sent)
    tokens_before: int = 0  # the request as ADK built it (counted where the call's cache is)
    inputs_digest: str = ""  # `inputs.digest` (computed where the call's cache is); "" computes it here
    restored: tuple[int, ...] = ()  # earlier invocations' requests this call sent as they were sent
    ranked_at: float = 0.0  # the session clock Evidence and Memory were ranked at (`PackState.ranked_at`)


@dataclass(frozen=True)
class Record:
    state: PackState
    manifest: Manifest


def record(inputs: PackInputs, profile: BudgetProfile, d: Decisions, counter: TokenCounting) -> Record:
    """The state the next call reads and the manifest, both from the decisions (never from rendered text)."""
    state = _state(inputs, profile, d, counter)
    return Record(state, _manifest(inputs, profile, d, state, counter))


def _state(inputs: PackInputs, profile: BudgetProfile, d: Decisions, counter: TokenCounting) -> PackState:
    fit, stable, compaction = d.fit, d.recital.stable, d.compaction
    boundary = inputs.request.messages[fit.zone.through].digest if 0 < fit.zone.through < len(inputs.request.messages) else ""
    payload_index = fit.payload_index
    # the payload, or the user's message sent as it is: a frozen call counts it in its frame
    sends_payload = fit.payload_at(inputs) is not None and payload_index < len(stable.messages)
    evidence_ids = tuple(ln.id for ln in fit.evidence)
    return PackState(
        invocation_id=inputs.invocation_id, agent=inputs.agent, payload_text=fit.payload_text,
        kept_history_turns=len(fit.history),
        summary=compaction.summary.to_json() if compaction else dict(inputs.summary),
        message_digests=tuple(m.digest for m in stable.messages),
        sent_tokens=request_tokens(stable, counter),
        head_digest=head_digest(stable), head_tokens=head_tokens(stable, counter), pruned=tuple(sorted(d.pruned)),
        call_index=d.recital.call_index, last_recited=d.recital.last_recited, failures_shown=d.recital.failures_shown,
        merged_lines=compaction.merged_lines if compaction else (),
        pack_id="pk_" + sha256_hex(f"{d.inputs_digest or inputs.digest}/{d.window}/{profile.model_dump_json()}")[:24],
        system_digest=sha256_hex(stable.system_instruction),
        tools_digest=sha256_hex(canonical_json([[t.to_json() for t in stable.tools], list(stable.other_tools)])),
        payload_index=payload_index, compacted_through=fit.zone.through, pinned=fit.zone.pinned,
        block_text=fit.zone.block, boundary_digest=boundary, compactions=fit.zone.compactions,
        pins_opening=fit.zone.pins_opening, values_tokens=fit.zone.values_tokens,
        evidence_ids=evidence_ids, memory_ids=tuple(ln.id for ln in fit.memory),
        payload_tokens=counter.count_message(stable.messages[payload_index]) if sends_payload else 0,
        tool_names=tuple(t.name for t in stable.tools), statuses=d.recital.statuses,
        evidence_marks=evidence_marks(inputs.evidence, evidence_ids),
        sent_requests=sent_requests(inputs, fit, stable, profile.cache.stable_prefix, d.restored),
        ranked_at=d.ranked_at,
    )


FINAL_CUT_CAUSE = "the final fit cut a kept turn the previous call had sent (window still exceeded)"


REPLACED_CAUSE = "earlier payloads replaced by their user messages (as sent they would overflow the room)"


def cache_break(state: PackState, prev: PackState | None, prefix_tokens: int,
                compaction: "Compaction | None", evidence_changed: str = "", final_cut: bool = False,
                replaced: bool = False) -> dict | None:
    """The first stable block that differs from the previous call's request, what it costs, and why.

    Appending messages is not a break; changing the system instruction, the tools or any earlier
    message is (the prompt cache must re-process everything after it).
    """
    if prev is None or not prev.message_digests:
        return None
    lost = prev.sent_tokens - prefix_tokens
    if state.system_digest != prev.system_digest:
        return {"block": "system_instruction", "index": None, "tokens": lost, "cause": "system instruction changed"}
    if state.tools_digest != prev.tools_digest:
        return {"block": "tools", "index": None, "tokens": lost, "cause": "tool declarations changed"}
    for i, (old, new) in enumerate(zip(prev.message_digests, state.message_digests)):
        if not new.startswith(old):  # the previous call's digests may be shortened (kept in session state)
            if compaction is not None:
                cause = f"compaction ({compaction.reason})"
            elif evidence_changed:
                cause = evidence_changed
            elif final_cut:  # the last resort when nothing could leave the verbatim zone
                cause = FINAL_CUT_CAUSE
            elif replaced:
                cause = REPLACED_CAUSE
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


def prefix_tokens(request: ModelRequest, prev: PackState | None, counter: TokenCounting) -> int:
    """Leading tokens of `request` equal to the previous call's request (what a prompt cache reuses)."""
    if prev is None or not prev.message_digests or prev.head_digest != head_digest(request):
        return 0
    total = prev.head_tokens
    for digest, m in zip(prev.message_digests, request.messages):
        if not m.digest.startswith(digest):
            break
        total += counter.count_message(m)
    return total


def _not_sent(items, lines: "tuple[Line, ...]") -> int:
    """Input items that are not in the layer (compacted turns recalled into Memory are not inputs)."""
    sent = {ln.id for ln in lines}
    return sum(1 for item in items if item.id not in sent)


def _lines_json(lines: "tuple[Line, ...]") -> list[dict]:
    return [{"id": ln.id, "source": ln.source, "score": ln.score, **ln.scores, "compressed": ln.compressed} for ln in lines]


def _layers(inputs: PackInputs, d: Decisions, state: PackState, counter: TokenCounting) -> dict[str, LayerUsage]:
    """Per layer: demand, budget and what the sent request really uses."""
    fit, conv, request, alloc = d.fit, d.cands.conversation, d.recital.request, d.alloc
    ev_used, mem_used = lines_demand(fit.evidence), lines_demand(fit.memory)
    block_used = counter.count_text(fit.zone.block) + 4 if fit.zone.block else 0
    conv_used = turns_tokens(fit.history, counter) + turns_tokens(fit.loop, counter) + block_used
    payload = state.payload_tokens or (counter.count_message(conv.request) if conv.request is not None else 0)
    status = d.recital.status
    # a status kept on the payload is counted in the payload's own tokens
    status_used = counter.count_message(status) if status is not None and not d.recital.on_payload else 0
    task_used = max(0, payload - ev_used - mem_used) + status_used
    system_used = counter.count_text(request.system_instruction) + sum(counter.count_message(m) for m in conv.instructions)
    tools_used = head_tokens(request, counter) - counter.count_text(request.system_instruction)
    n_conv = len(conv.history) + len(conv.loop)
    budgets, demands = dict(alloc.budgets), alloc.demands
    if d.reused:  # a payload kept as sent holds the lines it was built with: its budget is what they use
        budgets.update(evidence=ev_used, memory=mem_used)
    return {
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


def _manifest(inputs: PackInputs, profile: BudgetProfile, d: Decisions, state: PackState,
              counter: TokenCounting) -> Manifest:
    fit, request, prev, conv = d.fit, d.recital.request, inputs.previous, d.cands.conversation
    prefix = prefix_tokens(request, prev, counter)
    flags = list(d.cands.flags) + (["opening_request_pinned"] if fit.zone.pins_opening else [])
    pressure = pressure_share(request_tokens(request, counter), d.alloc.window, profile)
    flags += [f"context_pressure: {pressure:.2f}"] if pressure is not None else []
    return Manifest(
        pack_id=state.pack_id, model=request.model, window=d.window, profile=profile.name,
        profile_digest="sha256:" + sha256_hex(profile.model_dump_json()), app_name=inputs.app_name,
        user_id=inputs.user_id, session_id=inputs.session_id, invocation_id=inputs.invocation_id, agent=inputs.agent,
        created_at=inputs.now, layer_budgets=_layers(inputs, d, state, counter), allocation=d.alloc.to_json(),
        truncation_events=[e.to_json() for e in d.events], artifact_uris=sorted({ln.uri for ln in fit.evidence if ln.uri}),
        selected={"evidence": _lines_json(fit.evidence), "memory": _lines_json(fit.memory)},
        flags=flags, evidence_needed=list(inputs.task.evidence_needed),
        tokens_before=d.tokens_before, tokens_after=request_tokens(request, counter),
        prefix_tokens=prefix,
        block_hashes={"system": state.system_digest, "tools": state.tools_digest,
                      "payload": sha256_hex(state.payload_text), "compaction": sha256_hex(fit.zone.block)},
        cache_break=cache_break(state, prev, prefix, d.compaction, d.evidence_changed,
                                final_cut=any(e.layer == "conversation" and e.action == "cut"
                                              and e.reason.startswith("window still exceeded") for e in d.events),
                                replaced=prev is not None and any(k[0] not in d.restored and k[0] != inputs.request_index
                                                                  for k in prev.sent_requests)),
        compaction=d.compaction.to_json() if d.compaction else None,
        calibration=round(inputs.calibration, 4), packed_for=d.alloc.window, recited=d.recital.status is not None,
        failures=failure_count(inputs),
        previous_tokens=prev.sent_tokens if prev else 0,
        previous_pack_id=prev.pack_id if prev else "",
        reused_payload=d.reused, tools=[t.name for t in request.tools], checksum=request.checksum,
        tools_left_out=dict(d.cands.tools_left_out),
        redacted_in_pack=masked_count(fit.zone.block, fit.payload_text,
                                      d.recital.status.text if d.recital.status is not None else "",
                                      verbatim=conv.request.text if fit.payload_text and conv.request is not None else ""),
    )
