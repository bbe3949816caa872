"""Every session-state key the plugin writes, and the records they point at.

Whatever changes the next request is reachable from ADK session state, so a replica that never saw
the session packs exactly what the one that did would (a `DatabaseSessionService` shared by
replicas, `adk api_server` behind a load balancer). Writes made in `before_model` / `after_model`
land in the model response event's `state_delta`, so they persist with the call that made them.

Session state holds pointers, never content (a `DatabaseSessionService` stores each event's delta,
so a growing value would make storage grow with its square). What grows (the previous `PackState`,
offload URIs and savings, the failure log, the running summaries) is a content-addressed record in
the pack store (`PackStore.put_record`); state keeps `{"v": 2, "ref": <sha256>}` and small counters.
`StateRecords` is their one reader and writer.

A record that cannot be read (an unknown schema, a missing or corrupt blob, a store that is down)
is ignored: the call packs as a first call would and its manifest says why; nothing is raised.
The token calibration is per session (`aether:calibration`, per model: a float each).

The task, evidence and notes keys an app sets itself are configurable: `aether_context.adk.task.StateKeys`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Mapping, MutableMapping

from ..pipeline.inputs import PackState
from ..redact import RedactionSettings, redact, redact_value
from ..store import PackStore
from ..store.io import Lru

logger = logging.getLogger(__name__)

__all__ = ["HYDE_STATE_PREFIX", "MEMORY_HITS_PREFIX", "write_summary", "URIS_STATE_KEY", "SUMMARY_STATE_KEY", "FAILURES_STATE_KEY", "COMPACT_STATE_KEY",
           "SAVED_STATE_KEY", "CALIBRATION_STATE_KEY", "STATE_SCHEMA", "pack_state_key", "carried_state",
           "StoredPack", "StateRecords", "read_pack", "write_pack", "flag_next_call", "read_calibration",
           "write_calibration", "own_state"]

URIS_STATE_KEY = "aether:uris"  # -> record: response digest -> artifact URI of the saved original
SUMMARY_STATE_KEY = "aether:summary"  # -> record: the running summary of folded history, per agent
FAILURES_STATE_KEY = "aether:failures"  # -> record: the session's FailureLog
COMPACT_STATE_KEY = "aether:compact"  # set (by `ContextPacker.compact` or the CLI) to compact at the next call
SAVED_STATE_KEY = "aether:saved_tokens"  # -> record: response digest -> tokens an offload saved
CALIBRATION_STATE_KEY = "aether:calibration"  # per model: reported prompt tokens / our estimate, smoothed
PACK_STATE_PREFIX = "aether:pack:"  # + agent: -> record: the previous call's PackState, with its texts
HYDE_STATE_PREFIX = "aether:hyde:"  # + agent: -> record: this invocation's HyDE passage (`retrieval.hyde`)
MEMORY_HITS_PREFIX = "aether:memory_hits:"  # + agent: -> record: the memory service's hits so far, first seen first

STATE_SCHEMA = 2
DIGEST_CHARS = 16  # message digests kept per call: enough to find the first changed message
MAX_FLAGS = 4  # flags kept for the next manifest (e.g. a failed LLM summary)
FLAG_CHARS = 160


def pack_state_key(agent: str) -> str:
    return PACK_STATE_PREFIX + agent


def carried_state(state: PackState) -> PackState:
    """What the next call reads of this call's state: the same whether kept in memory or in the store.

    The running summary is kept under its own key; merged lines only serve this call's summary
    refresh; per-message digests are shortened (the request's tokens are one total, `sent_tokens`).
    """
    return replace(state, summary={}, merged_lines=(),
                   message_digests=tuple(d[:DIGEST_CHARS] for d in state.message_digests))


@dataclass(frozen=True)
class StoredPack:
    """The previous call's state as read through the session, and what it left for this call."""

    state: PackState | None = None
    free_conversation: int | None = None  # conversation room the previous pack left (offload threshold)
    flags: tuple[str, ...] = ()  # for this call's manifest: left by `flag_next_call`, or why a record was ignored


def own_state(ctx: Any) -> "Mapping[str, Any]":
    """The session state the packer reads its own keys from (these constants; always written through
    `ctx.state`, which updates this dict too). A read of `ctx.state` deep-copies what it hands out; the
    packer's own values are small pointers, never written into in place."""
    return ctx.session.state


def _ref(pointer: Any) -> str | None:
    """The record reference of a state value: None when absent; ValueError for another schema."""
    if pointer is None:
        return None
    if not isinstance(pointer, dict) or pointer.get("v") != STATE_SCHEMA or not isinstance(pointer.get("ref"), str):
        version = pointer.get("v") if isinstance(pointer, dict) else type(pointer).__name__
        raise ValueError(f"schema {version!r}, expected {STATE_SCHEMA}")
    return pointer["ref"]


class StateRecords:
    """Reads and writes what session state points at, in the pack store.

    A reference names its content, so decoded records are kept by reference (`size` of them) and
    shared by every session of the process: a record is read from the store once per process. Store
    I/O runs on a worker thread (`asyncio.to_thread`): a bucket's latency never stalls the event loop.
    A record is written, content-addressed and masked, before its pointer enters session state.
    """

    def __init__(self, store: PackStore, *, size: int = 1024):
        self.store = store
        self._values = Lru(size)

    async def get(self, state: Mapping[str, Any], key: str, default: Any = None) -> Any:
        """The record `state[key]` points at (`default` when none); raises when it cannot be read."""
        ref = _ref(state.get(key))
        if ref is None:
            return default
        return await self.get_ref(ref)

    async def get_ref(self, ref: str) -> Any:
        value = self._values.get(ref)
        if value is None:
            value = await asyncio.to_thread(self.store.get_record, ref)
            self._values.put(ref, value)
        return value

    async def put(self, value: Any) -> str:
        """Store `value` (JSON, masked by the store); returns its reference. What is kept here is what the
        store holds, so this process reads what a replica reads."""
        ref, stored = await asyncio.to_thread(self.store.put_record, value)
        self._values.put(ref, stored)
        return ref

    async def set(self, state: MutableMapping[str, Any], key: str, value: Any, **small: Any) -> None:
        """Point `state[key]` at `value` (with `small` counters beside the reference), if it changed."""
        pointer = {"v": STATE_SCHEMA, "ref": await self.put(value), **small}
        if state.get(key) != pointer:
            state[key] = pointer

    async def get_or_empty(self, state: Mapping[str, Any], key: str, default: Any, what: str) -> Any:
        """`get`, or `default` with a logged warning when the record cannot be read (fail open)."""
        try:
            return await self.get(state, key, default)
        except Exception as e:
            logger.warning("aether-context: could not read the session's %s (%s); going on without it", what, e,
                           exc_info=True)
            return default


async def read_pack(records: StateRecords, state: Mapping[str, Any] | Any, agent: str) -> StoredPack:
    """The agent's stored pack; an unknown schema or an unreadable record is ignored with a flag."""
    pointer = state.get(pack_state_key(agent))
    if pointer is None:
        return StoredPack()
    try:
        if not isinstance(pointer, dict) or pointer.get("v") != STATE_SCHEMA:
            version = pointer.get("v") if isinstance(pointer, dict) else type(pointer).__name__
            return StoredPack(flags=(f"pack_state_ignored: schema {version!r}, expected {STATE_SCHEMA}",))
        flags = tuple(str(n) for n in pointer.get("flags", ()))[:MAX_FLAGS]
        if "ref" not in pointer:  # flags left before any pack (`flag_next_call`): this call reports them
            return StoredPack(flags=flags)
        body = await records.get_ref(str(pointer["ref"]))
        pack = PackState.from_json(body)
        free = pointer.get("free_conversation")
        return StoredPack(pack, int(free) if free is not None else None, flags)
    except Exception as e:  # a corrupt or unreadable record: pack as a first call would, and say so
        logger.warning("aether-context: ignoring the stored pack state of agent %s (%s)", agent, e, exc_info=True)
        return StoredPack(flags=(f"pack_state_ignored: {type(e).__name__}: {e}"[:300],))


async def write_pack(records: StateRecords, state: MutableMapping[str, Any] | Any, agent: str, pack: PackState,
                     free_conversation: int | None) -> None:
    """Keep `pack` (already `carried_state`) for the agent's next call: its record in the store, a pointer here."""
    body = pack.to_json()
    for unused in ("summary", "merged_lines"):
        body.pop(unused, None)
    await records.set(state, pack_state_key(agent), body, free_conversation=free_conversation)


def flag_next_call(state: MutableMapping[str, Any] | Any, agent: str, flag: str,
                   redaction: RedactionSettings | None = None) -> None:
    """A short flag for the agent's next manifest (kept beside its pack pointer, so any replica reports it,
    and dropped by the next pack). Before the agent's first pack the pointer holds the flags alone.
    Its secrets are masked first (`redaction`; default: the default settings): an error text can hold one."""
    flag = redact(flag[:4 * FLAG_CHARS], redaction)[0][:FLAG_CHARS]
    pointer = state.get(pack_state_key(agent))
    if pointer is None:
        pointer = {"v": STATE_SCHEMA}
    if isinstance(pointer, dict) and pointer.get("v") == STATE_SCHEMA:
        flags = [*pointer.get("flags", ()), flag][-MAX_FLAGS:]
        state[pack_state_key(agent)] = {**pointer, "flags": flags}


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


async def write_summary(records: StateRecords, state: MutableMapping[str, Any] | Any, agent: str, before: dict,
                        after: dict, redaction: RedactionSettings | None = None) -> None:
    """Keep the agent's running summary (it must outlive this request and this process), when it changed;
    its secrets masked (`redaction`; default: the default settings): fold lines quote the conversation."""
    if after and after != before:
        after = redact_value(after, redaction)[0]
        if after == before:
            return
        summaries = dict(await records.get_or_empty(state, SUMMARY_STATE_KEY, {}, "running summaries"))
        summaries[agent] = after
        await records.set(state, SUMMARY_STATE_KEY, summaries)
