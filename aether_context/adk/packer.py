"""The engine shared by the plugin and the agent callback: pack one ADK request, fail open.

One class, in the order of a call: `before_model` (`pack`), the model's answer and errors
(`after_model`, `recover`), tool results (`after_tool`, `on_tool_error`). The per-session slots are
in `slots`, every session-state key in `session_state`.

Holds what lives across calls of a process: the profile, the token counter (its cache), the store,
and per (app, user, session, agent) a slot with this call's pack and memos. Everything that changes
the next request (the previous call's `PackState`, the calibration, the failure log, the running
summary) is read from and written to session state (`session_state`): a replica that never saw the
session packs the same request, and an empty slot gives the same result.

The event loop stays free: the pure build (selection, embedding, fitting) runs on the process's
one pack thread, so builds of concurrent sessions (and of several packers, which share retrievers)
run one at a time in call order and share the retriever's indexes and caches without races; each
slot's calls are serialised by its own lock. A large tool result's CPU work runs beside the packs,
on a worker thread (`worker.beside_packs`). An LLM summary has `decay.summary_timeout_seconds`:
past it the extractive summary stays.
"""

from __future__ import annotations

import asyncio
import collections
from itertools import repeat
import logging
import numbers
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.genai import types
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ..compress import SummarizeFn, Summarizer, render_payload, validate_summary
from ..compress.compact_json import compact_json
from ..errors import PackTimeout
from ..content import Message, response_digest, sha256_hex, within_chars
from ..loop.failures import FailureLog, FailureRecord, error_text, is_error_result
from ..pipeline.build import ContextPack, StageTimes, build_pack, request_tokens
from ..pipeline.cache import PackCache, memo_scope
from ..pipeline.incremental import extended
from ..pipeline.inputs import MemoryItem, PackInputs, PackState
from ..pipeline.decay import RunningSummary, blob_key
from ..pipeline.record import CallRecord, Manifest
from ..pipeline.render import masked_count
from ..pipeline.retrieve import Retriever, agent_namespace, default_retriever
from ..retrieval.embeddings import Embedder
from ..profile import BudgetProfile, load_profile
from ..providers import EvidenceProvider
from ..redact import redact
from ..store import DEFAULT_STORE_URL, PackStore
from ..tokens import TokenCounter, TokenCounting
from ..windows import context_window, window_flag
from .acceptance import AcceptanceGate
from .collect import collect_inputs, with_earlier_hits
from .recovery import ReportedLimits
from .event_times import EventTimes, session_now
from .convert import agent_model, answer_text, apply_request, final_response, request_from_llm
from .fail_open import fails_open
from .offload import RECALL_TOOL_NAME, ArtifactGateway, run_inline, make_recall_tool, offload_tool_result
from .recovery import is_token_limit_error, recovery_pack
from .session_state import (CALIBRATION_STATE_KEY, HYDE_STATE_PREFIX, MEMORY_HITS_PREFIX, COMPACT_STATE_KEY, FAILURES_STATE_KEY, SAVED_STATE_KEY,
                            SUMMARY_STATE_KEY, URIS_STATE_KEY, StateRecords, StoredPack, carried_state, flag_next_call,
                            own_state, read_calibration, read_pack, write_calibration, write_pack, write_summary)
from .slots import MAX_SESSIONS, SessionSlot, SessionSlots, slot_key
from .summarizer import LlmSummarizer
from .task import StateKeys
from .telemetry import pack_metadata
from .worker import beside_packs, off_loop, repair_unicode, summarize

logger = logging.getLogger("aether_context")

__all__ = ["ContextPacker", "CallRecord", "PACK_TIMEOUT"]

# Seconds a call waits for its pack before it fails open; AETHER_CONTEXT_PACK_TIMEOUT sets the default (tests on a
# loaded machine set it high, so a slow pack is not a different request).
_TIMEOUT_ENV = "AETHER_CONTEXT_PACK_TIMEOUT"
PACK_TIMEOUT = float(os.environ.get(_TIMEOUT_ENV, "10"))
CALIBRATION_ALPHA = 0.5  # weight of the newest observation in the smoothed correction


class ContextPacker:
    """Packs ADK requests. One instance per app; safe to share between agents of the app."""

    def __init__(self, *, profile: "str | Path | BudgetProfile | None" = None, store: "str | PackStore | None" = None,
                 window_tokens: int | None = None, counter: TokenCounting | None = None,
                 state_keys: StateKeys | None = None, use_memory: bool = True, use_artifacts: bool = True,
                 memory_pool: int = 1000, keep_recent: int = 1000, summarizer: "Summarizer | SummarizeFn | None" = None,
                 evidence_providers: "Sequence[EvidenceProvider]" = (), embedder: "Embedder | None" = None,
                 originals: str = "auto", cache: PackCache | None = None, pack_timeout: float = PACK_TIMEOUT):
        _check_settings(window_tokens=window_tokens, pack_timeout=pack_timeout, memory_pool=memory_pool,
                        keep_recent=keep_recent)
        self.profile = load_profile(profile)
        # a store built here masks what the profile says; a given PackStore keeps its own `redaction`
        self.store = store if isinstance(store, PackStore) else PackStore(store or DEFAULT_STORE_URL,
                                                                          redaction=self.profile.redaction)
        self.records = StateRecords(self.store)  # what session state points at, in the store
        self.window_tokens = window_tokens
        # A pack that takes longer fails open: the call goes out as ADK built it, without waiting for the build.
        self.pack_timeout = pack_timeout
        self._failed_before = 0  # store writes seen failed (`_store_flags`)
        self.counter = counter or TokenCounter()
        self.keys = state_keys or StateKeys()
        self.use_memory = use_memory
        self.use_artifacts = use_artifacts
        self.memory_pool = memory_pool
        self.recent: collections.deque[CallRecord] = collections.deque(maxlen=keep_recent)
        # The LLM summarizer (decay.summarizer: llm): given, or the calling agent's own model.
        self.summarizer = summarizer
        self.evidence_providers = tuple(evidence_providers)
        # Hybrid retrieval for Memory and Evidence; `embedder` replaces the profile's model (tests, no torch).
        self.retriever = Retriever(self.profile.retrieval, embedder=embedder) if embedder else default_retriever(self.profile)
        # What was computed from unchanged history (conversions, turns, retrieval documents, fold
        # lines, values): a call then costs what is new since the previous one. The stages reach it
        # from the call's context (`pipeline.cache.memo_scope`), never through a parameter.
        self.cache = cache if cache is not None else PackCache()
        self.usage: collections.deque[dict] = collections.deque(maxlen=keep_recent)
        # One slot per (app, user, session, agent), least recently used released first.
        self.slots = SessionSlots(MAX_SESSIONS, on_release=self._forget)
        # Where offloaded originals go: "auto" (as durable as the session), "adk" or "store" (see adk.offload)
        self.gateway = ArtifactGateway(self.store, originals=originals)
        self.recall_tool = make_recall_tool(self.gateway)
        self.limits = ReportedLimits()  # each model's reported input limit (`adk.recovery`)
        self.gate = AcceptanceGate(self)  # acceptance.gate: the final answer checked, one repair pass

    @property
    def requested_window(self) -> int | None:
        """The window asked for: the packer's `window_tokens`, else the profile's (None: the model's own)."""
        return self.window_tokens if self.window_tokens is not None else self.profile.window_tokens

    async def _off_loop(self, fn, /, *args, **kwargs):
        """`fn(*args, **kwargs)` on the pack thread: CPU work never stalls the event loop."""
        return await off_loop(fn, *args, **kwargs)

    def slot(self, ctx: "CallbackContext | ToolContext") -> SessionSlot:
        """The caller's slot, keyed by app, user, session and agent (never by session id alone)."""
        return self.slots.get(_slot_key_of(ctx))

    def release(self, app: str, user: str, session: str) -> None:
        """Forget everything kept for a session (all its agents): call when a session ends.
        Sessions that are never released age out: the least recently used slot goes first."""
        self.slots.release(app, user, session)

    def _forget(self, key: tuple[str, str, str, str]) -> None:
        """A released slot takes its retrieval indexes with it (the slots own per-session state)."""
        self.retriever.forget(agent_namespace(*key))

    def compact(self, ctx: "CallbackContext | ToolContext") -> None:
        """Compact the conversation at the next model call of this session (recorded as asked for)."""
        ctx.state[COMPACT_STATE_KEY] = True

    # ---------------------------------------------------------------- before the model

    async def pack(self, callback_context: CallbackContext, llm_request: LlmRequest) -> CallRecord:
        """Rewrite `llm_request` into its Context Pack. Never raises: on failure the request is untouched."""
        slot = self.slot(callback_context)
        async with slot.lock():  # one call of a slot at a time: each reads the state the previous one left
            with memo_scope(self.cache):  # the stages' memo, reached from the call's context (also on the pack thread)
                return await self._pack(callback_context, llm_request, slot)

    async def _pack(self, callback_context: CallbackContext, llm_request: LlmRequest, slot: SessionSlot) -> CallRecord:
        slot.last = None  # only this call's pack may be recovered or calibrated
        timings = StageTimes()  # beside the record, never in the request or the manifest
        try:
            stored = await read_pack(self.records, own_state(callback_context), callback_context.agent_name)
            with timings.stage("inputs"):
                inputs = await self._inputs(callback_context, llm_request, slot, stored)
            recall = inputs.cite_originals
            pack = await self._build(inputs, timings)
            saved = await self.records.get_or_empty(own_state(callback_context), SAVED_STATE_KEY, {}, "offload savings")
            scope = _slot_key_of(callback_context)
            without = pack.manifest.tokens_before + (_saved_tokens(saved, inputs.request.messages, scope)
                                                     if saved else 0)
            pack = replace(pack, manifest=pack.manifest.model_copy(update={"tokens_without_plugin": without}))
            with timings.stage("apply"):
                apply_request(llm_request, pack.request, declared=_declared(inputs, pack),
                              added={RECALL_TOOL_NAME: self.recall_tool} if recall else {}, original=inputs.request,
                              scope=scope)
        except Exception as e:  # fail open: the agent keeps working with the request ADK built
            logger.error("aether-context: packing failed for agent %s; sending the original request",
                         callback_context.agent_name, exc_info=True)
            return await self._record_pack_failure(callback_context, llm_request, e)
        logger.debug("aether-context: pack stages for agent %s: %s", callback_context.agent_name, timings)
        slot.last = pack
        uri = ""
        try:  # the request is rewritten; what follows is bookkeeping, and must not end the agent's run
            if inputs.compact:
                callback_context.state[COMPACT_STATE_KEY] = False
            if pack.state.merged_lines:  # this pack advanced the running summary
                await write_summary(self.records, callback_context.state, callback_context.agent_name, inputs.summary,
                                    pack.state.summary, self.profile.redaction)
            conv = pack.manifest.layer_budgets["conversation"]
            await write_pack(self.records, callback_context.state, callback_context.agent_name,
                             carried_state(pack.state), max(0, conv.budget - conv.used))
            await self.store.room()  # a full write queue holds this call, not the loop
            uri = self.store.save(pack)
            _log_pack(pack)
        except Exception:
            logger.error("aether-context: recording pack %s failed; the packed request goes out",
                         pack.manifest.pack_id, exc_info=True)
        record = CallRecord(pack.manifest, uri, timings.to_json())
        self.recent.append(record)
        # The embedding model loads in the background once the process's first request has gone out: its
        # import would hold the interpreter lock against that call. Packs until it is loaded rank by BM25.
        self.retriever.warm_up()
        return record

    async def _build(self, inputs: PackInputs, timings: StageTimes) -> ContextPack:
        """The pack, built on the pack thread; past `pack_timeout` the call stops waiting (`PackTimeout`, failing
        open) and the build, which a thread cannot be made to drop, finishes unseen."""
        try:
            return await asyncio.wait_for(
                self._off_loop(build_pack, inputs, self.profile, counter=self.counter,
                               window=self.limits.window(inputs.request.model, self.window_tokens),
                               retriever=self.retriever, timings=timings), self.pack_timeout)
        except asyncio.TimeoutError:
            raise PackTimeout(f"the pack took over {self.pack_timeout} s; the request went out as ADK built it "
                              f"(raise ContextPacker(pack_timeout=...) if packs this slow are expected)") from None

    async def _inputs(self, callback_context: CallbackContext, llm_request: LlmRequest, slot: SessionSlot,
                      stored: StoredPack) -> PackInputs:
        """This call's `PackInputs`, assembled once: the edge's collection, event times, saved images, calibration;
        `cite_originals` says whether the recall tool is declared."""
        session = callback_context.session
        flags = stored.flags + self._store_flags()
        slot.times = slot.times or EventTimes()
        grown = slot.times.only_grew(session.events)
        request = request_from_llm(llm_request, grown, _slot_key_of(callback_context))
        own = own_state(callback_context)
        uris = await self.records.get_or_empty(own, URIS_STATE_KEY, {}, "offload URIs")
        summaries = await self.records.get_or_empty(own, SUMMARY_STATE_KEY, {}, "running summaries")
        failures = await self.records.get_or_empty(own, FAILURES_STATE_KEY, {}, "failure log")
        recall = self._offers_recall(uris, request.messages, stored.state)
        inputs = await collect_inputs(
            callback_context, llm_request, request, keys=self.keys, previous=stored.state,
            memory_limit=self.memory_pool, artifact_cache=slot.artifacts, now=session_now(session.events),
            use_memory=self.use_memory, use_artifacts=self.use_artifacts, edge_flags=flags + self._window_flags(llm_request),
            providers=self.evidence_providers, extra_tools=(self.recall_tool,) if recall else (),
            uris=uris, summary=summaries.get(callback_context.agent_name) or {}, failures=failures,
            provider_timeout=self.pack_timeout, memory_cache=slot.memory)
        if self.use_memory:
            inputs = await self._with_earlier_hits(callback_context, inputs)
        inputs = replace(inputs, message_times=slot.times.message_times(session.events, inputs.request),
                         compact=bool(own_state(callback_context).get(COMPACT_STATE_KEY)), cite_originals=recall)
        inputs = await self._save_images(callback_context, inputs)
        inputs = replace(inputs, calibration=read_calibration(own_state(callback_context), inputs.request.model))
        return await self._with_hyde(callback_context, inputs) if self.profile.retrieval.hyde else inputs

    async def _with_earlier_hits(self, ctx: CallbackContext, inputs: PackInputs) -> PackInputs:
        """The memory service's hits of the session's earlier invocations stay Memory candidates (a record in
        the store, so every replica ranks the same ones); this invocation's new hits join them. The call ranks
        the list as stored (masked), as later calls read it. A record that cannot be read or written leaves this
        call with its own hits, flagged, and the record as it was."""
        key = MEMORY_HITS_PREFIX + ctx.agent_name

        async def stored() -> tuple[MemoryItem, ...]:
            return tuple(MemoryItem.from_json(d) for d in await self.records.get(own_state(ctx), key, []))
        try:
            earlier = await stored()
            memory, kept = with_earlier_hits(inputs.memory, earlier, self.memory_pool)
            if kept != earlier:
                await self.records.set(ctx.state, key, [m.to_json() for m in kept])
                memory, _ = with_earlier_hits(inputs.memory, await stored(), self.memory_pool)
        except Exception as e:  # fail open: this call ranks its own hits; the record stays as it was
            logger.warning("aether-context: the session's memory hits could not be read or kept (%s); ranking "
                           "this invocation's own", e, exc_info=True)
            flags = (*inputs.extra.get("edge_flags", ()), f"memory_hits_unavailable: {type(e).__name__}")
            return replace(inputs, extra={**inputs.extra, "edge_flags": list(flags)})
        return replace(inputs, memory=memory)

    async def _with_hyde(self, ctx: CallbackContext, inputs: PackInputs) -> PackInputs:
        """HyDE (`retrieval.hyde`): a short passage the agent's model writes as if answering the request, searched
        like a facet. Asked once per invocation and kept as a session record, so every call of the invocation, on
        any replica and in a replay, searches with the same text. A timeout or an error leaves it out (a flag)."""
        question = inputs.request.messages[inputs.request_index].text if inputs.request_index is not None else ""
        if not question.strip():
            return inputs
        key, flags = HYDE_STATE_PREFIX + ctx.agent_name, []
        kept = await self.records.get_or_empty(own_state(ctx), key, {}, "HyDE passage")
        if kept.get("invocation") != ctx.invocation_id:
            settings = self.profile.retrieval
            try:
                passage = await asyncio.wait_for(_hypothetical_answer(ctx, question), settings.hyde_timeout_seconds)
            except asyncio.TimeoutError:
                passage, flags = "", [f"hyde_timeout: no answer within {settings.hyde_timeout_seconds}s"]
            except Exception as e:  # fail open: the pack searches without the passage
                logger.warning("aether-context: the HyDE call failed; searching without it", exc_info=True)
                passage, flags = "", [f"hyde_failed: {type(e).__name__}"]
            await self.records.set(ctx.state, key, {"invocation": ctx.invocation_id, "passage": passage})
            kept = await self.records.get_or_empty(own_state(ctx), key, {}, "HyDE passage")  # as stored: masked
        extra = dict(inputs.extra)
        if kept.get("passage"):
            extra["hyde"] = kept["passage"]
        if flags:
            extra["edge_flags"] = [*extra.get("edge_flags", ()), *flags]
        return replace(inputs, extra=extra)

    def _store_flags(self) -> tuple[str, ...]:
        """Store writes that failed since the last call looked (they run in the background): the next manifest
        and its event metadata say so, with the newest error."""
        stats = self.store.stats()
        failed = stats.get("failed", 0)
        if failed <= self._failed_before:
            return ()
        new, self._failed_before = failed - self._failed_before, failed
        last = (stats.get("recent_failures") or [{}])[-1]
        return (f"store_write_failed: {new} write(s), last {last.get('what', '?')}: {last.get('error', '?')}"[:300],)

    def _window_flags(self, llm_request: LlmRequest) -> tuple[str, ...]:
        """A guessed window (unknown model, Ollama route) is flagged in every manifest it shapes."""
        flag = window_flag(llm_request.model, self.requested_window)
        return (flag,) if flag else ()

    async def _recall_now(self, ctx: CallbackContext, llm_request: LlmRequest) -> bool:
        uris = await self.records.get_or_empty(own_state(ctx), URIS_STATE_KEY, {}, "offload URIs")
        stored = await read_pack(self.records, own_state(ctx), ctx.agent_name)
        with memo_scope(self.cache):
            return self._offers_recall(uris, request_from_llm(llm_request).messages, stored.state)

    def _offers_recall(self, uris: "dict[str, str]", messages: Sequence[Message], previous: PackState | None) -> bool:
        """The recall tool is declared once the request cites an original it can read back (an offloaded
        tool result; a compaction block cites originals only once it is declared, though one an earlier
        release wrote may), and stays declared (no flapping of the tools). Whether a tool result cites one
        is carried from the last call over the same history: a call reads its new messages only."""
        if not self.profile.offload.enabled or not uris:
            return False
        if previous is not None and (RECALL_TOOL_NAME in previous.tool_names or "artifact://" in previous.block_text):
            return True
        return extended("cites_original", tuple(messages), lambda: False,
                        lambda found, more: found or any(map(_cites_original, more)))

    async def _save_images(self, ctx: CallbackContext, inputs: PackInputs) -> PackInputs:
        """Save inline images to the artifact store once, so their decayed form can cite a URI."""
        uris = inputs.uris
        blobs = extended("blobs", inputs.request.messages, tuple, _with_blobs)  # carried from the last call
        for blob in blobs:
            key = blob_key(blob.data)
            if key not in uris:
                ext = blob.mime_type.split("/")[-1].split(";")[0]
                uris = {**uris, key: await self.gateway.save(ctx, f"attachment/{key}.{ext}", blob.data, blob.mime_type)}
        if uris is inputs.uris:
            return inputs
        await self.records.set(ctx.state, URIS_STATE_KEY, uris, n=len(uris))
        return replace(inputs, uris=uris)

    async def _record_pack_failure(self, ctx: CallbackContext, llm_request: LlmRequest, error: Exception) -> CallRecord:
        session = ctx.session
        try:
            original = request_from_llm(llm_request)
            checksum, tokens = original.checksum, request_tokens(original, self.counter)
        except Exception:  # even the request could not be read; record what we know
            logger.debug("aether-context: could not convert the failing request", exc_info=True)
            checksum, tokens = "", 0
        manifest = Manifest(
            pack_id="err_" + sha256_hex(f"{session.id}/{ctx.invocation_id}/{time.time_ns()}")[:24],
            model=llm_request.model or "", window=0, profile=self.profile.name,
            profile_digest="sha256:" + sha256_hex(self.profile.model_dump_json()), app_name=session.app_name,
            user_id=session.user_id, session_id=session.id, invocation_id=ctx.invocation_id, agent=ctx.agent_name,
            created_at=session_now(session.events), layer_budgets={}, checksum=checksum, tokens_before=tokens, tokens_after=tokens,
            error=f"{type(error).__name__}: {error}",
        )
        uri = ""
        try:
            await self.store.room()
            uri = self.store.save_manifest(manifest)
        except Exception:  # the store itself is down; the log line above is the record
            logger.error("aether-context: could not record the failure", exc_info=True)
        record = CallRecord(manifest, uri)
        self.recent.append(record)
        return record

    # ---------------------------------------------------------------- after the model answers or fails

    @fails_open
    async def after_model(self, callback_context: CallbackContext, llm_response: LlmResponse | None = None) -> None:
        """Learn from the model's reported usage, then refresh the running summary if due."""
        if llm_response is not None and getattr(llm_response, "partial", False):
            return  # a streamed chunk: the usage and the summary are the final response's business
        slot = self.slot(callback_context)
        last, slot.last = slot.last, None  # one model response per pack: a second one is not this pack's
        if last is not None and llm_response is not None and llm_response.usage_metadata is not None:
            await self._record_usage(callback_context, last, llm_response.usage_metadata)
        await self._refresh_summary(callback_context, slot, last)

    async def _record_usage(self, ctx: CallbackContext, pack: ContextPack, usage) -> None:
        """Calibrate token estimates per model (bounded, smoothed; kept in session state, so every
        replica packs the session's next call for the same window) and keep the call's usage."""
        reported = usage.prompt_token_count
        estimate = pack.manifest.tokens_after
        model = pack.manifest.model
        calibration = read_calibration(own_state(ctx), model)
        if reported and estimate:
            ratio = min(3.0, max(0.5, reported / estimate))
            seen = own_state(ctx).get(CALIBRATION_STATE_KEY)
            fresh = not isinstance(seen, dict) or model not in seen
            calibration = round(ratio if fresh else calibration + CALIBRATION_ALPHA * (ratio - calibration), 4)
            write_calibration(ctx.state, model, calibration)
        record = {"pack_id": pack.manifest.pack_id, "model": model, "estimate": estimate, "reported": reported,
                  "cached": usage.cached_content_token_count or 0, "calibration": calibration}
        self.usage.append(record)
        await self.store.room()
        self.store.save_usage(pack.manifest, record)

    async def _refresh_summary(self, callback_context: CallbackContext, slot: SessionSlot, last: ContextPack | None) -> None:
        """Refine the running summary with the LLM summarizer when this call merged turns into it."""
        if self.profile.decay.summarizer != "llm" or last is None or not last.state.merged_lines:
            return
        previous = RunningSummary.from_json(last.inputs.summary)
        extractive = RunningSummary.from_json(last.state.summary)
        summarizer = self.summarizer or LlmSummarizer(agent_model(callback_context))
        timeout = self.profile.decay.summary_timeout_seconds
        try:
            text = await asyncio.wait_for(summarize(summarizer, previous.text or None, last.state.merged_lines,
                                                     goal=last.inputs.task.goal,
                                                     max_tokens=self.profile.decay.summary_max_tokens), timeout)
            text = validate_summary(text, self.profile.decay.summary_max_tokens, self.counter)
            if text is None:
                raise ValueError("the summarizer returned an empty or unusable summary")
        except asyncio.TimeoutError:  # the run goes on with the extractive summary
            logger.warning("aether-context: LLM summary gave no answer within %ss; keeping the extractive summary", timeout)
            flag_next_call(callback_context.state, callback_context.agent_name, f"summary_timeout: no answer within {timeout}s",
                     self.profile.redaction)
            return
        except Exception as e:  # the extractive summary stays; the next manifest says why
            logger.warning("aether-context: LLM summary failed (%s); keeping the extractive summary", e, exc_info=True)
            flag_next_call(callback_context.state, callback_context.agent_name, f"summary_failed: {type(e).__name__}: {e}",
                     self.profile.redaction)
            return
        await write_summary(self.records, callback_context.state, callback_context.agent_name, last.state.summary,
                            RunningSummary(text=text, covered_until=extractive.covered_until).to_json(),
                            self.profile.redaction)

    @fails_open
    async def recover(self, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception) -> LlmResponse | None:
        """Retry a request the model rejected as too long, once, after an aggressive repack.

        Only the current call is rebuilt: from its own pack's inputs when it was packed, else (packing
        failed open, so `llm_request` is ADK's own) from this call's inputs assembled as a pack assembles
        them (`_inputs`: the cache, the edge's flags, event times, calibration). The repack becomes the
        call's pack: the model's answer calibrates against what was really sent and shows its metadata.
        Returns the model's response, or None to let the original error surface.
        """
        slot = self.slot(callback_context)
        if not self.profile.recovery.enabled or not is_token_limit_error(error):
            return None
        last, slot.last = slot.last, None
        self.limits.remember(llm_request.model, error)  # later calls pack under it
        try:
            if last is not None and last.inputs.invocation_id == callback_context.invocation_id:
                inputs, window = last.inputs, last.manifest.window
                recall = await self._recall_now(callback_context, llm_request)
            else:  # packing failed open: this call's inputs, assembled as a normal pack assembles them
                stored = await read_pack(self.records, own_state(callback_context), callback_context.agent_name)
                inputs = await self._inputs(callback_context, llm_request, slot, stored)
                recall = inputs.cite_originals
                window = context_window(inputs.request.model, self.requested_window)
            pack = await self._off_loop(recovery_pack, inputs, self.profile, window, error, counter=self.counter)
            apply_request(llm_request, pack.request, declared=_declared(inputs, pack),
                          added={RECALL_TOOL_NAME: self.recall_tool} if recall else {})
        except Exception:
            logger.error("aether-context: recovery repack failed; the model's error stands", exc_info=True)
            return None
        manifest = pack.manifest.model_copy(update={"flags": [*pack.manifest.flags, f"recovery_after: {error}"[:300]]})
        pack = replace(pack, manifest=manifest)
        await self.store.room()
        uri = self.store.save(pack)
        self.recent.append(CallRecord(manifest, uri))
        slot.shown = pack_metadata(manifest, uri)  # the retried request's pack is what its response shows
        logger.warning("aether-context: model rejected the request as too long (%s); retrying once with %d tokens (%s)",
                       str(error)[:200], manifest.tokens_after, uri)
        try:
            final = await final_response(agent_model(callback_context), llm_request)
        except Exception:
            logger.error("aether-context: the retry after recovery failed too; the original error surfaces", exc_info=True)
            return None
        if final is not None:
            slot.last = pack  # what the model answered: after_model calibrates against it
        return final

    # ---------------------------------------------------------------- tool results

    async def record_failure(self, tool: BaseTool, tool_args: dict, tool_context: ToolContext, error_text: str,
                             uri: str | None = None) -> None:
        """Add a tool failure to the session's failure log (kept in state; never raises)."""
        if not self.profile.failures.enabled:
            return
        try:
            data = await self.records.get_or_empty(tool_context.state, FAILURES_STATE_KEY, {}, "failure log")
            records = [FailureRecord.from_json(r) for r in data.get("records", ())]
            log = FailureLog(self.profile.failures.log, records, int(data.get("evicted", 0)))
            turn = len(tool_context.session.events)
            error_text = redact(error_text, self.profile.redaction)[0]  # it is recited in later packs
            record = log.add(turn=turn, tool=tool.name, args=tool_args, error_text=error_text, uri=uri,
                             timestamp=time.time())
            same = [(r.turn, r.tool, r.args_digest, r.message) for r in records[-1:]]
            if same == [(record.turn, record.tool, record.args_digest, record.message)]:
                return  # one failure seen by two hooks (on_tool_error, then after_tool on its error result)
            await self.records.set(tool_context.state, FAILURES_STATE_KEY, log.to_json())
        except Exception:
            logger.error("aether-context: could not record the failure of %s", tool.name, exc_info=True)

    @fails_open
    async def on_tool_error(self, tool: BaseTool, tool_args: dict, tool_context: ToolContext, error: Exception) -> dict | None:
        """Record a raised tool exception; with `failures.errors_as_results` answer the model with it."""
        text = f"{type(error).__name__}: {error}"
        await self.record_failure(tool, tool_args, tool_context, text)
        return {"error": text} if self.profile.failures.errors_as_results else None  # None: ADK re-raises

    @fails_open
    async def after_tool(self, tool: BaseTool, tool_args: dict, tool_context: ToolContext, result: object) -> dict | None:
        """Save a result whole and return its compact form when it is large; record error-shaped
        results as failures, citing the saved original. A result with invalid Unicode (a lone
        surrogate) is repaired first and the repaired one replaces it. Never raises."""
        own = tool.name == RECALL_TOOL_NAME
        # a small result's CPU work costs the loop less than a trip to a thread and back
        run = run_inline if within_chars(result, SMALL_RESULT_CHARS) else beside_packs
        result, repaired = await run(repair_unicode, result)
        if repaired:
            flag_next_call(tool_context.state, tool_context.agent_name, f"unicode_repaired: {tool.name}: {repaired}",
                     self.profile.redaction)
        failed, compacted = await run(self._classify, tool.name, result, own)
        sent = compacted or result  # what the session will hold unless offload compacts it further
        offloaded = None
        if self.profile.offload.enabled and not own:
            try:
                stored = await read_pack(self.records, tool_context.state, tool_context.agent_name)
                # The threshold tightens under pressure only once the recall tool is declared: the first
                # offload declares it, a change of the tools that re-processes the whole request, so only
                # a result over the full threshold pays for that.
                declared = stored.state is not None and RECALL_TOOL_NAME in stored.state.tool_names
                offloaded = await offload_tool_result(
                    tool_name=tool.name, args=tool_args, result=sent, ctx=tool_context,
                    gateway=self.gateway, settings=self.profile.offload, counter=self.counter,
                    free_conversation_tokens=stored.free_conversation if declared else None,
                    records=self.records, redaction=self.profile.redaction, run=run)
                if offloaded is not None:
                    await self._note_saving(tool_context, sent, offloaded, run)
                    self._note_masked(tool_context, tool.name, offloaded["summary"])
            except Exception as e:  # fail open: the result goes on whole, with no URI; the next manifest says why
                logger.error("aether-context: offloading the result of %s failed; keeping it inline", tool.name, exc_info=True)
                flag_next_call(tool_context.state, tool_context.agent_name, f"offload_failed: {tool.name}: {type(e).__name__}: {e}",
                         self.profile.redaction)
        if failed:
            uris = await self.records.get_or_empty(tool_context.state, URIS_STATE_KEY, {}, "offload URIs")
            await self.record_failure(tool, tool_args, tool_context, error_text(result),  # type: ignore[arg-type]
                                uri=uris.get(response_digest(sent)))
        if offloaded or compacted or not repaired:
            return offloaded or compacted
        return result if isinstance(result, dict) else {"result": result}  # the repaired result, as ADK wraps it

    def _classify(self, tool_name: str, result: object, own: bool) -> tuple[bool, dict | None]:
        """Whether `result` is an error (a failure to record) and its compact JSON form when shorter
        (CPU work: inline for a small result, else beside the packs). Never raises."""
        failed = False
        if not own and self.profile.failures.enabled and isinstance(result, (dict, str)):
            try:
                failed = is_error_result(result)
            except Exception:  # fail open: a result we cannot classify is simply not a recorded failure
                logger.error("aether-context: could not classify the result of %s", tool_name, exc_info=True)
        compacted = None
        if self.profile.variation.compact_json and isinstance(result, (dict, list)) and not own:
            compact = compact_json(result, self.counter)
            if self.counter.count_text(compact) < self.counter.count_text(render_payload(result)):
                compacted = {"result_compact_json": compact}  # faithful: aether_context.compress.compact_json.expand_compact_json
        return failed, compacted

    def _note_masked(self, ctx: ToolContext, tool_name: str, compact_text: str) -> None:
        """Secrets masked in an offloaded result's compact form: noted in the next manifest's flags."""
        n = masked_count(compact_text)
        if n:
            flag_next_call(ctx.state, ctx.agent_name, f"redacted_in_offload: {tool_name}: {n}", self.profile.redaction)

    async def _note_saving(self, ctx: ToolContext, original: object, compact: object, run) -> None:
        """Remember what an offload saved, so manifests can say what ADK would have sent without us."""
        saved, key = await run(self._saving, original, compact)
        if saved > 0:
            known = await self.records.get_or_empty(ctx.state, SAVED_STATE_KEY, {}, "offload savings")
            await self.records.set(ctx.state, SAVED_STATE_KEY, {**known, key: saved})

    def _saving(self, original: object, compact: object) -> tuple[int, str]:
        saved = self.counter.count_text(render_payload(original)) - self.counter.count_text(render_payload(compact))
        return saved, response_digest(compact)


SMALL_RESULT_CHARS = 8192  # a tool result this small is examined on the loop (well under 1 ms of work)


HYDE_PROMPT = ("Write a short passage (at most 80 words) that would answer the question below, as a document holding "
               "the answer would. Name likely people, places, dates and identifiers. No preamble.")


def _check_settings(*, window_tokens: object, pack_timeout: object, memory_pool: object, keep_recent: object) -> None:
    """Refuse a bad argument at construction, naming it and what it takes: else every call would fail open."""
    def number(value: object, integer: bool) -> bool:
        return isinstance(value, numbers.Integral if integer else numbers.Real) and not isinstance(value, bool)

    problems = []
    if window_tokens is not None and not (number(window_tokens, True) and window_tokens > 0):
        problems.append(f"window_tokens={window_tokens!r}: a whole number of tokens above 0 (e.g. 128000), or None "
                        "for the model's known window")
    if pack_timeout is not None and not (number(pack_timeout, False) and pack_timeout > 0):
        where = " (from AETHER_CONTEXT_PACK_TIMEOUT)" if pack_timeout is PACK_TIMEOUT and _TIMEOUT_ENV in os.environ else ""
        problems.append(f"pack_timeout={pack_timeout!r}{where}: seconds above 0, or None to wait as long as a pack takes")
    if not (number(memory_pool, True) and memory_pool >= 0):
        problems.append(f"memory_pool={memory_pool!r}: a whole number of memory hits, 0 or more")
    if not (number(keep_recent, True) and keep_recent >= 0):
        problems.append(f"keep_recent={keep_recent!r}: a whole number of recent calls kept, 0 or more")
    if problems:
        raise ValueError("; ".join(problems))


async def _hypothetical_answer(ctx: CallbackContext, question: str) -> str:
    """The agent's own model, asked directly (no plugins), for a HyDE passage."""
    model = agent_model(ctx)
    request = LlmRequest(model=model.model, contents=[types.Content(role="user", parts=[types.Part(text=question[:2000])])],
                         config=types.GenerateContentConfig(system_instruction=HYDE_PROMPT, max_output_tokens=200))
    return (answer_text(await final_response(model, request)) or "").strip()[:2000]


def _cites_original(message: Message) -> bool:
    """A tool result of `message` points at its offloaded original."""
    return any("artifact_uri" in r.response for r in message.responses)


def _slot_key_of(ctx: "CallbackContext | ToolContext") -> tuple[str, str, str, str]:
    session = ctx.session
    return slot_key(session.app_name, session.user_id, session.id, ctx.agent_name)


def _saved_tokens(saved: "dict[str, int]", messages: "tuple[Message, ...]", scope: Any) -> int:
    """What the offloads of the request's tool results saved (`saved`: response key -> tokens). Carried from
    the last call of the slot `scope` over the same history while `saved` is the same dict (the tool hook
    replaces it, never edits it): a call then reads its new messages' keys only."""
    def feed(state: "tuple[dict | None, list[str], int]", more: tuple) -> "tuple[dict, list[str], int]":
        read, keys, total = state
        new = [r.key for m in more for r in m.responses]
        # summed before the keys grow in place (never copied: only this slot's entry holds them, and a slot
        # packs one call at a time): a failure leaves them as the entry's items say
        total = sum(map(saved.get, keys + new, repeat(0))) if read is not saved else total + sum(
            map(saved.get, new, repeat(0)))
        keys.extend(new)
        return saved, keys, total
    return extended(("saved_tokens", scope), messages, lambda: (None, [], 0), feed)[2]


def _with_blobs(found: tuple, more: tuple) -> tuple:
    """The inline blobs of the messages read so far, then of `more`."""
    return found + tuple(b for m in more for b in m.blobs)


def _log_pack(pack: ContextPack) -> None:
    """One line per call: what was sent against what ADK would have sent, the cached share, the layers."""
    m = pack.manifest
    lb = m.layer_budgets
    without = m.tokens_without_plugin or m.tokens_before
    logger.info(
        "aether-context %s agent=%s sent %d tokens, ADK alone %d (%+.0f%%), cached prefix %d (%.0f%%), window %d "
        "(calibration %.2f) evidence=%d/%d memory=%d/%d conversation=%d/%d truncations=%d%s%s",
        m.pack_id, m.agent, m.tokens_after, without, 100.0 * (m.tokens_after - without) / max(1, without),
        m.prefix_tokens, 100.0 * m.prefix_tokens / max(1, m.tokens_after), m.window, m.calibration,
        lb["evidence"].used, lb["evidence"].budget, lb["memory"].used, lb["memory"].budget,
        lb["conversation"].used, lb["conversation"].budget, len(m.truncation_events),
        f" compaction: {m.compaction['reason']}" if m.compaction else "",
        f" cache break: {m.cache_break.get('cause', m.cache_break.get('block'))}" if m.cache_break else "",
    )


def _declared(inputs: PackInputs, pack: ContextPack) -> "set[str]":
    """The declared tools a pack may drop from `tools_dict`: not those ranking left out (they stay callable)."""
    return {t.name for t in inputs.request.tools} - set(pack.manifest.tools_left_out)
