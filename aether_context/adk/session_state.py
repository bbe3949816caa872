"""Every session-state key the plugin writes, and the versioned records it keeps there.

Whatever changes the next request lives in ADK session state, so a replica that never saw the
session packs exactly what the one that did would (a `DatabaseSessionService` shared by replicas,
`adk api_server` behind a load balancer). Writes made in `before_model` / `after_model` land in the
model response event's `state_delta` (ADK `flows/llm_flows/core/_finalizer.py`
`_model_callback_context`), so they persist with the call that made them, or not at all.

Per agent, the previous call's `PackState` is kept in two records, each written only when it
changes: `aether:pack:<agent>` (digests, ids, counters, the recitation schedule and the offload
room: every call) and `aether:pack_text:<agent>` (the frozen payload and the compaction block: once
per invocation, and at a compaction). Both carry a schema number; an unknown schema or a corrupt
value is ignored (the call packs as a first call would) and flagged in the manifest, never raised.
The token calibration is per session (`aether:calibration`, per model), so two replicas agree.

The task, evidence and notes keys an app sets itself are configurable: `aether_context.adk.task.StateKeys`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Mapping, MutableMapping

from ..content import canonical_json, sha256_hex
from ..pipeline.collect import PackState
from ..redact import RedactionSettings, redact, redact_value

logger = logging.getLogger(__name__)

__all__ = ["write_summary", "URIS_STATE_KEY", "SUMMARY_STATE_KEY", "FAILURES_STATE_KEY", "COMPACT_STATE_KEY", "SAVED_STATE_KEY",
           "CALIBRATION_STATE_KEY", "PACK_STATE_SCHEMA", "pack_state_key", "pack_text_key", "carried_state",
           "StoredPack", "read_pack", "write_pack", "add_note", "read_calibration", "write_calibration", "own_state"]

URIS_STATE_KEY = "aether:uris"  # response digest -> artifact URI of the saved original
SUMMARY_STATE_KEY = "aether:summary"  # the running summary of folded history, per agent
FAILURES_STATE_KEY = "aether:failures"  # the session's FailureLog
COMPACT_STATE_KEY = "aether:compact"  # set (by `ContextPacker.compact` or the CLI) to compact at the next call
SAVED_STATE_KEY = "aether:saved_tokens"  # response digest -> tokens an offload saved (for "without the plugin")
CALIBRATION_STATE_KEY = "aether:calibration"  # per model: reported prompt tokens / our estimate, smoothed
PACK_STATE_PREFIX = "aether:pack:"  # + agent: the previous call's PackState without its texts
PACK_TEXT_PREFIX = "aether:pack_text:"  # + agent: the frozen payload text and the compaction block

PACK_STATE_SCHEMA = 1
DIGEST_CHARS = 16  # message digests kept per call: enough to find the first changed message
MAX_NOTES = 8  # notes kept for the next manifest (e.g. a failed LLM summary)


def pack_state_key(agent: str) -> str:
    return PACK_STATE_PREFIX + agent


def pack_text_key(agent: str) -> str:
    return PACK_TEXT_PREFIX + agent


def carried_state(state: PackState) -> PackState:
    """What the next call reads of this call's state: the same whether kept in memory or in the session.

    The running summary is kept under its own key; merged lines only serve this call's summary
    refresh; per-message digests are shortened (the request's tokens are one total, `sent_tokens`).
    """
    return replace(state, summary={}, merged_lines=(),
                   message_digests=tuple(d[:DIGEST_CHARS] for d in state.message_digests))


@dataclass(frozen=True)
class StoredPack:
    """The previous call's state as read from the session, and what it left for this call."""

    state: PackState | None = None
    free_conversation: int | None = None  # conversation room the previous pack left (offload threshold)
    notes: tuple[str, ...] = ()  # flags for the next manifest
    flags: tuple[str, ...] = ()  # why a stored record was ignored


def own_state(ctx: Any) -> "Mapping[str, Any]":
    """The session state the packer reads its own keys from (these constants; always written through
    `ctx.state`, which updates this dict too). A read of `ctx.state` deep-copies the dict or list it hands
    out, and ADK compares it with that copy again after the callback, to find writes into it: the
    packer never writes into a value it read (it assigns a new one), and its values (the URI map, the
    failure log, the stored pack) grow with the session. An app's own keys (the task) are read through `ctx.state`."""
    return ctx.session.state


def _texts_digest(payload_text: str, block_text: str) -> str:
    return sha256_hex(canonical_json([payload_text, block_text]))[:16]


def read_pack(state: MutableMapping[str, Any] | Any, agent: str) -> StoredPack:
    """The agent's stored pack record; an unknown schema or a corrupt record is ignored with a flag."""
    record, texts = state.get(pack_state_key(agent)), state.get(pack_text_key(agent))
    if record is None:
        return StoredPack()
    try:
        if not isinstance(record, dict) or record.get("v") != PACK_STATE_SCHEMA:
            version = record.get("v") if isinstance(record, dict) else type(record).__name__
            return StoredPack(flags=(f"pack_state_ignored: schema {version!r}, expected {PACK_STATE_SCHEMA}",))
        notes = tuple(str(n) for n in record.get("notes", ()))[:MAX_NOTES]
        if "state" not in record:  # notes left before any pack (`add_note`): this call reports them
            return StoredPack(notes=notes)
        texts = texts if isinstance(texts, dict) and texts.get("v") == PACK_STATE_SCHEMA else {}
        payload_text, block_text = str(texts.get("payload_text", "")), str(texts.get("block_text", ""))
        if record.get("texts") != _texts_digest(payload_text, block_text):
            return StoredPack(flags=("pack_state_ignored: its payload and block texts are missing or changed",))
        pack = PackState.from_json({**record["state"], "payload_text": payload_text, "block_text": block_text})
        free = record.get("free_conversation")
        return StoredPack(pack, int(free) if free is not None else None, notes)
    except Exception as e:  # a corrupt record: pack as a first call would, and say so
        logger.warning("aether-context: ignoring the stored pack state of agent %s (%s)", agent, e, exc_info=True)
        return StoredPack(flags=(f"pack_state_ignored: {type(e).__name__}: {e}"[:300],))


def write_pack(state: MutableMapping[str, Any] | Any, agent: str, pack: PackState, free_conversation: int | None) -> None:
    """Keep `pack` (already `carried_state`) for the agent's next call; each record only when it changed."""
    body = pack.to_json()
    payload_text, block_text = body.pop("payload_text"), body.pop("block_text")
    for unused in ("summary", "merged_lines"):
        body.pop(unused, None)
    record = {"v": PACK_STATE_SCHEMA, "state": body, "texts": _texts_digest(payload_text, block_text),
              "free_conversation": free_conversation}
    texts = {"v": PACK_STATE_SCHEMA, "payload_text": payload_text, "block_text": block_text}
    if state.get(pack_text_key(agent)) != texts:
        state[pack_text_key(agent)] = texts
    if state.get(pack_state_key(agent)) != record:
        state[pack_state_key(agent)] = record


def add_note(state: MutableMapping[str, Any] | Any, agent: str, note: str,
             redaction: RedactionSettings | None = None) -> None:
    """A flag for the agent's next manifest (kept in its pack record, so any replica reports it).
    Before the agent's first pack (or after packing failed open) the record holds the notes alone.
    Its secrets are masked first (`redaction`; default: the default settings): an error text can hold one."""
    note = redact(note[:600], redaction)[0]
    record = state.get(pack_state_key(agent))
    if record is None:
        record = {"v": PACK_STATE_SCHEMA}
    if isinstance(record, dict) and record.get("v") == PACK_STATE_SCHEMA:
        notes = [*record.get("notes", ()), note[:300]][-MAX_NOTES:]
        state[pack_state_key(agent)] = {**record, "notes": notes}


def read_calibration(state: MutableMapping[str, Any] | Any, model: str) -> float:
    """The session's calibration for `model` (1.0 until the model has reported usage in this session)."""
    value = (state.get(CALIBRATION_STATE_KEY) or {}).get(model) if isinstance(state.get(CALIBRATION_STATE_KEY), dict) else None
    try:
        ratio = float(value) if value is not None else 1.0
    except (TypeError, ValueError):
        return 1.0
    return ratio if 0.5 <= ratio <= 3.0 else 1.0


def write_calibration(state: MutableMapping[str, Any] | Any, model: str, ratio: float) -> None:
    table = state.get(CALIBRATION_STATE_KEY)
    table = dict(table) if isinstance(table, dict) else {}
    if table.get(model) != ratio:
        state[CALIBRATION_STATE_KEY] = {**table, model: ratio}


def write_summary(state: MutableMapping[str, Any] | Any, agent: str, before: dict, after: dict,
                  redaction: RedactionSettings | None = None) -> None:
    """Keep the agent's running summary (it must outlive this request and this process), when it changed;
    its secrets masked (`redaction`; default: the default settings)."""
    if after and after != before:
        after = redact_value(after, redaction)[0]  # fold lines quote the conversation
        if after == before:
            return
        summaries = dict(state.get(SUMMARY_STATE_KEY) or {})
        summaries[agent] = after
        state[SUMMARY_STATE_KEY] = summaries
