"""The engine shared by the plugin and the agent callback: pack one ADK request, fail open.

Holds what lives across calls of a process: the profile, the token counter (its cache), the store,
and per (app, user, session, agent) a slot with this call's pack and memos. Everything that changes
the next request (the previous call's `PackState`, the calibration, the failure log, the running
summary) is read from and written to session state (`session_state`): a replica that never saw the
session packs the same request, and an empty slot gives the same result.

The event loop stays free: the pure build (selection, embedding, fitting) runs on the process's
one pack thread, so builds of concurrent sessions (and of several packers, which share retrievers)
run one at a time in call order and share the retriever's indexes and caches without races; each
slot's calls are serialised by its own lock. An LLM summary has `decay.summary_timeout_seconds`:
past it the extractive summary stays.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ..compress import SummarizeFn, Summarizer, render_payload, validate_summary
from ..content import response_digest, sha256_hex
from ..loop.failures import FailureLog, FailureRecord, error_text, is_error_result
from ..pipeline.build import ContextPack, StageTimes, build_pack, request_tokens
from ..pipeline.cache import PackCache
from ..pipeline.collect import PackInputs, PackState
from ..pipeline.decay import RunningSummary, blob_key
from ..pipeline.record import Manifest
from ..pipeline.render import masked_count
from ..pipeline.retrieve import Retriever, default_retriever
from ..retrieval.embeddings import Embedder
from ..profile import BudgetProfile, load_profile
from ..redact import redact
from ..providers import EvidenceProvider
from ..store import DEFAULT_STORE_URL, PackStore
from ..tokens import TokenCounter, TokenCounting
from ..compress.compact_json import compact_json
from ..windows import context_window, window_flag
from .collect import collect_inputs
from .event_times import EventTimes, session_now
from .convert import apply_request, request_from_llm
from .offload import RECALL_TOOL_NAME, ArtifactGateway, make_recall_tool, offload_tool_result
from .recovery import is_token_limit_error, recovery_pack
from .session_state import (CALIBRATION_STATE_KEY, COMPACT_STATE_KEY, FAILURES_STATE_KEY, SAVED_STATE_KEY, SUMMARY_STATE_KEY,  # noqa: F401
                            URIS_STATE_KEY, add_note, carried_state, read_calibration, read_pack, write_calibration,
                            write_pack)
from .summarizer import LlmSummarizer
from .task import StateKeys
from .worker import off_loop, repair_unicode, summarize

logger = logging.getLogger("aether_context")

CALIBRATION_ALPHA = 0.5  # weight of the newest observation in the smoothed correction

__all__ = ["ContextPacker", "CallRecord"]


MAX_SESSIONS = 4096  # session slots kept in memory; the least recently used is released first


@dataclass
class SessionSlot:
    """What the packer keeps in process for one (app, user, session, agent): this call's pack and memos.

    Nothing here changes a request: the previous call's state is read from the session each call.
    """

    last: ContextPack | None = None  # this call's pack, until the model answers (usage, summary refresh)
    replaced: list | None = None  # ADK's contents the pack replaced, released when the model answers
    times: EventTimes | None = None  # memo of event digests (derived from the session)
    artifacts: dict = field(default_factory=dict)  # artifact descriptions by (session, file), with their version
    shown: dict | None = None  # the last pack's metadata, shown on the model's response (plugin.py)
    locks: dict = field(default_factory=dict)  # event loop -> the asyncio.Lock serialising this slot's packs

    def lock(self) -> asyncio.Lock:
        """This slot's lock on the running loop (an asyncio.Lock belongs to one loop)."""
        loop = asyncio.get_running_loop()
        found = self.locks.get(loop)
        if found is None:
            self.locks.clear()  # a slot lives on one loop at a time; an old loop's lock is dead
            found = self.locks[loop] = asyncio.Lock()
        return found


def slot_key(app: str, user: str, session: str, agent: str) -> tuple[str, str, str, str]:
    return (app, user, session, agent)


@dataclass(frozen=True)
class CallRecord:
    """One packed (or failed) model call, as kept in `ContextPacker.recent`."""

    manifest: Manifest
    uri: str


class ContextPacker:
    """Packs ADK requests. One instance per app; safe to share between agents of the app."""

    def __init__(self, *, profile: "str | Path | BudgetProfile | None" = None, store: "str | PackStore | None" = None,
                 window_tokens: int | None = None, counter: TokenCounting | None = None,
                 state_keys: StateKeys | None = None, use_memory: bool = True, use_artifacts: bool = True,
                 memory_pool: int = 1000, keep_recent: int = 1000, summarizer: "Summarizer | SummarizeFn | None" = None,
                 evidence_providers: "Sequence[EvidenceProvider]" = (), embedder: "Embedder | None" = None,
                 originals: str = "auto", cache: PackCache | None = None):
        self.profile = load_profile(profile)
        # a store built here masks what the profile says; a given PackStore keeps its own `redaction`
        self.store = store if isinstance(store, PackStore) else PackStore(store or DEFAULT_STORE_URL,
                                                                          redaction=self.profile.redaction)
        self.window_tokens = window_tokens
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
        self.retriever.warm_up()  # load the embedding model now, off the first model call's path
        # What was computed from unchanged history (conversions, turns, retrieval documents, fold
        # lines, values): a call then costs what is new since the previous one.
        self.cache = cache if cache is not None else PackCache()
        self.usage: collections.deque[dict] = collections.deque(maxlen=keep_recent)
        # One slot per (app, user, session, agent), least recently used released first.
        self._slots: collections.OrderedDict[tuple[str, str, str, str], SessionSlot] = collections.OrderedDict()
        self.max_sessions = MAX_SESSIONS
        # Where offloaded originals go: "auto" (as durable as the session), "adk" or "store" (see adk.offload)
        self.gateway = ArtifactGateway(self.store, originals=originals)
        self.recall_tool = make_recall_tool(self.gateway)

    async def _off_loop(self, fn, /, *args, **kwargs):
        """`fn(*args, **kwargs)` on the pack thread: CPU work never stalls the event loop."""
        return await off_loop(fn, *args, **kwargs)

    def slot(self, ctx: "CallbackContext | ToolContext") -> SessionSlot:
        """The caller's slot, keyed by app, user, session and agent (never by session id alone)."""
        session = ctx.session
        key = slot_key(session.app_name, session.user_id, session.id, ctx.agent_name)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = SessionSlot()
            while len(self._slots) > self.max_sessions:
                self._forget(self._slots.popitem(last=False)[0])
        self._slots.move_to_end(key)
        return slot

    def release(self, app: str, user: str, session: str) -> None:
        """Forget everything kept for a session (all its agents): call when a session ends.
        Sessions that are never released age out: the least recently used slot goes first."""
        for key in [k for k in self._slots if k[:3] == (app, user, session)]:
            del self._slots[key]
            self._forget(key)

    def _forget(self, key: tuple[str, str, str, str]) -> None:
        """A released slot takes its retrieval indexes with it (the slots own per-session state)."""
        self.retriever.forget("/".join(key))

    def compact(self, ctx: "CallbackContext | ToolContext") -> None:
        """Compact the conversation at the next model call of this session (recorded as asked for)."""
        ctx.state[COMPACT_STATE_KEY] = True

    async def pack(self, callback_context: CallbackContext, llm_request: LlmRequest) -> CallRecord:
        """Rewrite `llm_request` into its Context Pack. Never raises: on failure the request is untouched."""
        slot = self.slot(callback_context)
        async with slot.lock():  # one call of a slot at a time: each reads the state the previous one left
            return await self._pack(callback_context, llm_request, slot)

    async def _pack(self, callback_context: CallbackContext, llm_request: LlmRequest, slot: SessionSlot) -> CallRecord:
        session = callback_context.session
        slot.last = None  # only this call's pack may be recovered or calibrated
        try:
            stored = read_pack(callback_context.state, callback_context.agent_name)
            recall = self._offers_recall(callback_context, llm_request, stored.state)
            flags = stored.notes + stored.flags
            inputs = await collect_inputs(
                callback_context, llm_request, keys=self.keys, previous=stored.state,
                memory_limit=self.memory_pool, artifact_cache=slot.artifacts, now=session_now(session.events),
                use_memory=self.use_memory, use_artifacts=self.use_artifacts, edge_flags=flags + self._window_flags(llm_request),
                providers=self.evidence_providers, extra_tools=(self.recall_tool,) if recall else (), cache=self.cache)
            slot.times = slot.times or EventTimes()
            inputs = replace(inputs, message_times=slot.times.message_times(session.events, inputs.request),
                             compact=bool(callback_context.state.get(COMPACT_STATE_KEY)))
            inputs = await self._save_images(callback_context, inputs)
            inputs = replace(inputs, calibration=read_calibration(callback_context.state, inputs.request.model))
            timings = StageTimes() if logger.isEnabledFor(logging.DEBUG) else None
            pack = await self._off_loop(build_pack, inputs, self.profile, counter=self.counter, window=self.window_tokens,
                                        retriever=self.retriever, cache=self.cache, timings=timings)
            if timings is not None:
                logger.debug("aether-context: pack stages for agent %s: %s", callback_context.agent_name, timings)
            saved = callback_context.state.get(SAVED_STATE_KEY) or {}
            without = pack.manifest.tokens_before + sum(saved.get(r.key, 0) for m in inputs.request.messages
                                                        for r in m.responses)
            pack = replace(pack, manifest=pack.manifest.model_copy(update={"tokens_without_plugin": without}))
            slot.replaced = llm_request.contents
            apply_request(llm_request, pack.request, declared={t.name for t in inputs.request.tools},
                          added={RECALL_TOOL_NAME: self.recall_tool} if recall else {}, original=inputs.request)
        except Exception as e:  # fail open: the agent keeps working with the request ADK built
            logger.error("aether-context: packing failed for agent %s; sending the original request",
                         callback_context.agent_name, exc_info=True)
            return self._record_failure(callback_context, llm_request, e)
        slot.last = pack
        uri = ""
        try:  # the request is rewritten; what follows is bookkeeping, and must not end the agent's run
            if inputs.compact:
                callback_context.state[COMPACT_STATE_KEY] = False
            if pack.state.merged_lines:  # this pack advanced the running summary
                _persist_summary(callback_context, inputs.summary, pack.state.summary)
            conv = pack.manifest.layer_budgets["conversation"]
            write_pack(callback_context.state, callback_context.agent_name, carried_state(pack.state),
                       max(0, conv.budget - conv.used))
            uri = self.store.save(pack)
            _log_pack(pack)
        except Exception:
            logger.error("aether-context: recording pack %s failed; the packed request goes out",
                         pack.manifest.pack_id, exc_info=True)
        record = CallRecord(pack.manifest, uri)
        self.recent.append(record)
        return record

    def _window_flags(self, llm_request: LlmRequest) -> tuple[str, ...]:
        """A guessed window (unknown model, Ollama route) is flagged in every manifest it shapes."""
        flag = window_flag(llm_request.model, self.window_tokens if self.window_tokens is not None else self.profile.window_tokens)
        return (flag,) if flag else ()

    async def after_model(self, callback_context: CallbackContext, llm_response: LlmResponse | None = None) -> None:
        """Learn from the model's reported usage, then refresh the running summary if due."""
        if llm_response is not None and getattr(llm_response, "partial", False):
            return  # a streamed chunk: the usage and the summary are the final response's business
        slot = self.slot(callback_context)
        slot.replaced = None
        last, slot.last = slot.last, None  # one model response per pack: a second one is not this pack's
        if last is not None and llm_response is not None and llm_response.usage_metadata is not None:
            self._record_usage(callback_context, last, llm_response.usage_metadata)
        await self._refresh_summary(callback_context, slot, last)

    def _record_usage(self, ctx: CallbackContext, pack: ContextPack, usage) -> None:
        """Calibrate token estimates per model (bounded, smoothed; kept in session state, so every
        replica packs the session's next call for the same window) and keep the call's usage."""
        reported = usage.prompt_token_count
        estimate = pack.manifest.tokens_after
        model = pack.manifest.model
        calibration = read_calibration(ctx.state, model)
        if reported and estimate:
            ratio = min(3.0, max(0.5, reported / estimate))
            seen = ctx.state.get(CALIBRATION_STATE_KEY)
            fresh = not isinstance(seen, dict) or model not in seen
            calibration = round(ratio if fresh else calibration + CALIBRATION_ALPHA * (ratio - calibration), 4)
            write_calibration(ctx.state, model, calibration)
        record = {"pack_id": pack.manifest.pack_id, "model": model, "estimate": estimate, "reported": reported,
                  "cached": usage.cached_content_token_count or 0, "calibration": calibration}
        self.usage.append(record)
        self.store.save_usage(pack.manifest, record)

    async def _refresh_summary(self, callback_context: CallbackContext, slot: SessionSlot, last: ContextPack | None) -> None:
        """Refine the running summary with the LLM summarizer when this call merged turns into it."""
        if self.profile.decay.summarizer != "llm" or last is None or not last.state.merged_lines:
            return
        previous = RunningSummary.from_json(last.inputs.summary)
        extractive = RunningSummary.from_json(last.state.summary)
        summarizer = self.summarizer or LlmSummarizer(callback_context.get_invocation_context().agent.canonical_model)
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
            add_note(callback_context.state, callback_context.agent_name, f"summary_timeout: no answer within {timeout}s")
            return
        except Exception as e:  # the extractive summary stays; the next manifest says why
            logger.warning("aether-context: LLM summary failed (%s); keeping the extractive summary", e, exc_info=True)
            add_note(callback_context.state, callback_context.agent_name, f"summary_failed: {type(e).__name__}: {e}")
            return
        _persist_summary(callback_context, last.state.summary,
                         RunningSummary(text=text, covered_until=extractive.covered_until).to_json())

    async def recover(self, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception) -> LlmResponse | None:
        """Retry a request the model rejected as too long, once, after an aggressive repack.

        Only the current call is rebuilt: from its own pack's inputs when it was packed, else (packing
        failed open, so `llm_request` is ADK's own) from inputs read from the request now. The repack
        becomes the call's pack, so the model's answer calibrates against what was really sent.
        Returns the model's response, or None to let the original error surface.
        """
        slot = self.slot(callback_context)
        if not self.profile.recovery.enabled or not is_token_limit_error(error):
            return None
        last, slot.last = slot.last, None
        try:
            if last is not None and last.inputs.invocation_id == callback_context.invocation_id:
                inputs, window = last.inputs, last.manifest.window
            else:
                inputs = await self._current_inputs(callback_context, llm_request)
                window = context_window(inputs.request.model, self.window_tokens if self.window_tokens is not None
                                        else self.profile.window_tokens)
            pack = await self._off_loop(recovery_pack, inputs, self.profile, window, error, counter=self.counter)
            apply_request(llm_request, pack.request, declared={t.name for t in inputs.request.tools},
                          added={RECALL_TOOL_NAME: self.recall_tool} if self._recall_now(callback_context, llm_request) else {})
        except Exception:
            logger.error("aether-context: recovery repack failed; the model's error stands", exc_info=True)
            return None
        manifest = pack.manifest.model_copy(update={"flags": [*pack.manifest.flags, f"recovery_after: {error}"[:300]]})
        pack = replace(pack, manifest=manifest)
        uri = self.store.save(pack)
        self.recent.append(CallRecord(manifest, uri))
        logger.warning("aether-context: model rejected the request as too long (%s); retrying once with %d tokens (%s)",
                       str(error)[:200], manifest.tokens_after, uri)
        model = callback_context.get_invocation_context().agent.canonical_model
        try:
            final = None
            async for response in model.generate_content_async(llm_request, stream=False):
                final = response
        except Exception:
            logger.error("aether-context: the retry after recovery failed too; the original error surfaces", exc_info=True)
            return None
        if final is not None:
            slot.last = pack  # what the model answered: after_model calibrates against it
        return final

    async def _current_inputs(self, callback_context: CallbackContext, llm_request: LlmRequest) -> PackInputs:
        """This call's inputs read from ADK's own request (when packing failed open and left it as is)."""
        inputs = await collect_inputs(
            callback_context, llm_request, keys=self.keys, previous=None, memory_limit=self.memory_pool,
            artifact_cache=self.slot(callback_context).artifacts, now=session_now(callback_context.session.events),
            use_memory=self.use_memory, use_artifacts=self.use_artifacts, providers=self.evidence_providers,
            extra_tools=(self.recall_tool,) if self._recall_now(callback_context, llm_request) else ())
        return replace(inputs, calibration=read_calibration(callback_context.state, inputs.request.model))

    def _recall_now(self, ctx: CallbackContext, llm_request: LlmRequest) -> bool:
        return self._offers_recall(ctx, llm_request, read_pack(ctx.state, ctx.agent_name).state)

    def _offers_recall(self, ctx: CallbackContext, llm_request: LlmRequest, previous: PackState | None) -> bool:
        """The recall tool is declared once the request cites an original it can read back (a compacted
        tool result, or a compaction block with URIs), and stays declared (no flapping of the tools)."""
        if not self.profile.offload.enabled or not ctx.state.get(URIS_STATE_KEY):
            return False
        if previous is not None and (RECALL_TOOL_NAME in previous.tool_names or "artifact://" in previous.block_text):
            return True
        return any("artifact_uri" in (part.function_response.response or {})
                   for content in llm_request.contents or () for part in content.parts or ()
                   if part.function_response is not None)

    async def _save_images(self, ctx: CallbackContext, inputs: PackInputs) -> PackInputs:
        """Save inline images to the artifact store once, so their decayed form can cite a URI."""
        uris = inputs.uris
        for message in inputs.request.messages:
            for blob in message.blobs:
                key = blob_key(blob.data)
                if key not in uris:
                    ext = blob.mime_type.split("/")[-1].split(";")[0]
                    uris = {**uris, key: await self.gateway.save(ctx, f"attachment/{key}.{ext}", blob.data, blob.mime_type)}
        if uris is inputs.uris:
            return inputs
        ctx.state[URIS_STATE_KEY] = uris
        return replace(inputs, uris=uris)

    def record_failure(self, tool: BaseTool, tool_args: dict, tool_context: ToolContext, error_text: str,
                       uri: str | None = None) -> None:
        """Add a tool failure to the session's failure log (kept in state; never raises)."""
        if not self.profile.failures.enabled:
            return
        try:
            data = tool_context.state.get(FAILURES_STATE_KEY) or {}
            records = [FailureRecord.from_json(r) for r in data.get("records", ())]
            log = FailureLog(self.profile.failures.log, records, int(data.get("evicted", 0)))
            turn = len(tool_context.session.events)
            error_text = redact(error_text, self.profile.redaction)[0]  # it is recited in later packs
            record = log.add(turn=turn, tool=tool.name, args=tool_args, error_text=error_text, uri=uri,
                             timestamp=time.time())
            same = [(r.turn, r.tool, r.args_digest, r.message) for r in records[-1:]]
            if same == [(record.turn, record.tool, record.args_digest, record.message)]:
                return  # one failure seen by two hooks (on_tool_error, then after_tool on its error result)
            tool_context.state[FAILURES_STATE_KEY] = log.to_json()
        except Exception:
            logger.error("aether-context: could not record the failure of %s", tool.name, exc_info=True)

    def on_tool_error(self, tool: BaseTool, tool_args: dict, tool_context: ToolContext, error: Exception) -> dict | None:
        """Record a raised tool exception; with `failures.errors_as_results` answer the model with it."""
        text = f"{type(error).__name__}: {error}"
        self.record_failure(tool, tool_args, tool_context, text)
        return {"error": text} if self.profile.failures.errors_as_results else None  # None: ADK re-raises

    async def after_tool(self, tool: BaseTool, tool_args: dict, tool_context: ToolContext, result: object) -> dict | None:
        """Save a result whole and return its compact form when it is large; record error-shaped
        results as failures, citing the saved original. A result with invalid Unicode (a lone
        surrogate) is repaired first and the repaired one replaces it. Never raises."""
        own = tool.name == RECALL_TOOL_NAME
        result, repaired = await self._off_loop(repair_unicode, result)
        if repaired:
            add_note(tool_context.state, tool_context.agent_name, f"unicode_repaired: {tool.name}: {repaired}")
        failed, compacted = await self._off_loop(self._classify, tool.name, result, own)
        sent = compacted or result  # what the session will hold unless offload compacts it further
        offloaded = None
        if self.profile.offload.enabled and not own:
            try:
                offloaded = await offload_tool_result(
                    tool_name=tool.name, args=tool_args, result=sent, ctx=tool_context,
                    gateway=self.gateway, settings=self.profile.offload, counter=self.counter,
                    free_conversation_tokens=read_pack(tool_context.state, tool_context.agent_name).free_conversation,
                    redaction=self.profile.redaction, run=self._off_loop)
                if offloaded is not None:
                    await self._note_saving(tool_context, sent, offloaded)
                    self._note_masked(tool_context, tool.name, offloaded["summary"])
            except Exception:  # fail open: the result goes on as it is
                logger.error("aether-context: offloading the result of %s failed; keeping it inline", tool.name, exc_info=True)
        if failed:
            uris = tool_context.state.get(URIS_STATE_KEY) or {}
            self.record_failure(tool, tool_args, tool_context, error_text(result),  # type: ignore[arg-type]
                                uri=uris.get(response_digest(sent)))
        if offloaded or compacted or not repaired:
            return offloaded or compacted
        return result if isinstance(result, dict) else {"result": result}  # the repaired result, as ADK wraps it

    def _classify(self, tool_name: str, result: object, own: bool) -> tuple[bool, dict | None]:
        """Whether `result` is an error (a failure to record) and its compact JSON form when shorter
        (CPU work: run on the worker thread). Never raises."""
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
            add_note(ctx.state, ctx.agent_name, f"redacted_in_offload: {tool_name}: {n}")

    async def _note_saving(self, ctx: ToolContext, original: object, compact: object) -> None:
        """Remember what an offload saved, so manifests can say what ADK would have sent without us."""
        saved, key = await self._off_loop(self._saving, original, compact)
        if saved > 0:
            ctx.state[SAVED_STATE_KEY] = {**(ctx.state.get(SAVED_STATE_KEY) or {}), key: saved}

    def _saving(self, original: object, compact: object) -> tuple[int, str]:
        saved = self.counter.count_text(render_payload(original)) - self.counter.count_text(render_payload(compact))
        return saved, response_digest(compact)

    def _record_failure(self, ctx: CallbackContext, llm_request: LlmRequest, error: Exception) -> CallRecord:
        session = ctx.session
        try:
            original = request_from_llm(llm_request, self.cache)
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
            uri = self.store.save_manifest(manifest)
        except Exception:  # the store itself is down; the log line above is the record
            logger.error("aether-context: could not record the failure", exc_info=True)
        record = CallRecord(manifest, uri)
        self.recent.append(record)
        return record


def _persist_summary(ctx: CallbackContext, before: dict, after: dict) -> None:
    """Keep the running summary in session state (it must outlive this request and this process)."""
    if after and after != before:
        summaries = dict(ctx.state.get(SUMMARY_STATE_KEY) or {})
        summaries[ctx.agent_name] = after
        ctx.state[SUMMARY_STATE_KEY] = summaries


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
