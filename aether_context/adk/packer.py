"""The engine shared by the plugin and the agent callback: pack one ADK request, fail open.

Holds what must live across calls of a process: the profile, the token counter (its cache), the
store, and the previous call's `PackState` per session and agent (for cache-stable packing).
"""

from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ..compress import SummarizeFn, Summarizer, render_payload, run_summarizer, validate_summary
from ..content import response_digest, sha256_hex
from ..failures import FailureLog, FailureRecord, error_text, is_error_result
from ..pipeline.cache import PackCache
from ..pipeline.build import ContextPack, build_pack, request_tokens
from ..pipeline.collect import PackInputs, PackState
from ..pipeline.decay import RunningSummary, blob_key
from ..pipeline.record import Manifest
from ..pipeline.retrieve import Retriever, default_retriever
from ..retrieval.embeddings import Embedder
from ..profile import BudgetProfile, load_profile
from ..providers import EvidenceProvider
from ..store import DEFAULT_STORE_URL, PackStore
from ..tokens import TokenCounter, TokenCounting
from ..compress.compact_json import compact_json
from ..windows import context_window, window_flag
from .collect import FAILURES_STATE_KEY, SUMMARY_STATE_KEY, URIS_STATE_KEY, collect_inputs
from .event_times import EventTimes, session_now
from .convert import apply_request, request_from_llm
from .offload import RECALL_TOOL_NAME, ArtifactGateway, make_recall_tool, offload_tool_result
from .recovery import is_token_limit_error, recovery_pack
from .summarizer import LlmSummarizer
from .task import StateKeys

logger = logging.getLogger("aether_context")

CALIBRATION_ALPHA = 0.5  # weight of the newest observation in the smoothed correction

__all__ = ["ContextPacker", "CallRecord"]


COMPACT_STATE_KEY = "aether:compact"  # set (by `ContextPacker.compact` or the CLI) to compact at the next call
SAVED_STATE_KEY = "aether:saved_tokens"  # response digest -> tokens an offload saved (for "without the plugin")
MAX_SESSIONS = 4096  # session slots kept in memory; the least recently used is released first


@dataclass
class SessionSlot:
    """Everything the packer keeps between calls of one (app, user, session, agent)."""

    state: PackState | None = None  # the previous call's pack state (cache-stable packing)
    last: ContextPack | None = None  # the previous pack (usage, summary refresh)
    replaced: list | None = None  # ADK's contents the pack replaced, released when the model answers
    free_conversation: int | None = None  # conversation room left by the last pack (offload threshold)
    edge_flags: list[str] | None = None  # notes for the next manifest (a failed LLM summary)
    times: EventTimes | None = None


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
                 cache: PackCache | None = None):
        self.profile = load_profile(profile)
        self.store = store if isinstance(store, PackStore) else PackStore(store or DEFAULT_STORE_URL)
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
        self.calibration: dict[str, float] = {}  # per model: reported prompt tokens / our estimate, smoothed
        self.usage: collections.deque[dict] = collections.deque(maxlen=keep_recent)
        # One slot per (app, user, session, agent), least recently used released first.
        self._slots: collections.OrderedDict[tuple[str, str, str, str], SessionSlot] = collections.OrderedDict()
        self._artifact_cache: dict = {}
        self.gateway = ArtifactGateway(self.store)
        self.recall_tool = make_recall_tool(self.gateway)

    def slot(self, ctx: "CallbackContext | ToolContext") -> SessionSlot:
        """The caller's slot, keyed by app, user, session and agent (never by session id alone)."""
        session = ctx.session
        key = slot_key(session.app_name, session.user_id, session.id, ctx.agent_name)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = SessionSlot()
            while len(self._slots) > MAX_SESSIONS:
                self._slots.popitem(last=False)
        self._slots.move_to_end(key)
        return slot

    def release(self, app: str, user: str, session: str) -> None:
        """Forget everything kept for a session (all its agents): call when a session ends."""
        for key in [k for k in self._slots if k[:3] == (app, user, session)]:
            del self._slots[key]

    def compact(self, ctx: "CallbackContext | ToolContext") -> None:
        """Compact the conversation at the next model call of this session (recorded as asked for)."""
        ctx.state[COMPACT_STATE_KEY] = True

    async def pack(self, callback_context: CallbackContext, llm_request: LlmRequest) -> CallRecord:
        """Rewrite `llm_request` into its Context Pack. Never raises: on failure the request is untouched."""
        session = callback_context.session
        slot = self.slot(callback_context)
        slot.last = None  # only this call's pack may be recovered or calibrated
        try:
            recall = self._offers_recall(callback_context, llm_request, slot)
            flags, slot.edge_flags = tuple(slot.edge_flags or ()), None
            inputs = await collect_inputs(
                callback_context, llm_request, keys=self.keys, previous=slot.state,
                memory_limit=self.memory_pool, artifact_cache=self._artifact_cache, now=session_now(session.events),
                use_memory=self.use_memory, use_artifacts=self.use_artifacts, edge_flags=flags + self._window_flags(llm_request),
                providers=self.evidence_providers, extra_tools=(self.recall_tool,) if recall else (), cache=self.cache)
            slot.times = slot.times or EventTimes()
            inputs = replace(inputs, message_times=slot.times.message_times(session.events, inputs.request),
                             compact=bool(callback_context.state.get(COMPACT_STATE_KEY)))
            inputs = await self._save_images(callback_context, inputs)
            inputs = replace(inputs, calibration=self.calibration.get(inputs.request.model, 1.0))
            pack = build_pack(inputs, self.profile, counter=self.counter, window=self.window_tokens, retriever=self.retriever,
                              cache=self.cache)
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
        slot.state, slot.last = pack.state, pack
        uri = ""
        try:  # the request is rewritten; what follows is bookkeeping, and must not end the agent's run
            if inputs.compact:
                callback_context.state[COMPACT_STATE_KEY] = False
            if pack.state.merged_lines:  # this pack advanced the running summary
                _persist_summary(callback_context, inputs.summary, pack.state.summary)
            conv = pack.manifest.layer_budgets["conversation"]
            slot.free_conversation = max(0, conv.budget - conv.used)
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
            self._record_usage(last, llm_response.usage_metadata)
        await self._refresh_summary(callback_context, slot, last)

    def _record_usage(self, pack: ContextPack, usage) -> None:
        """Calibrate token estimates per model (bounded, smoothed) and keep the call's usage."""
        reported = usage.prompt_token_count
        estimate = pack.manifest.tokens_after
        model = pack.manifest.model
        if reported and estimate:
            ratio = min(3.0, max(0.5, reported / estimate))
            old = self.calibration.get(model)
            self.calibration[model] = round(ratio if old is None else old + CALIBRATION_ALPHA * (ratio - old), 4)
        record = {"pack_id": pack.manifest.pack_id, "model": model, "estimate": estimate, "reported": reported,
                  "cached": usage.cached_content_token_count or 0, "calibration": self.calibration.get(model, 1.0)}
        self.usage.append(record)
        self.store.save_usage(pack.manifest, record)

    async def _refresh_summary(self, callback_context: CallbackContext, slot: SessionSlot, last: ContextPack | None) -> None:
        """Refine the running summary with the LLM summarizer when this call merged turns into it."""
        if self.profile.decay.summarizer != "llm" or last is None or not last.state.merged_lines:
            return
        previous = RunningSummary.from_json(last.inputs.summary)
        extractive = RunningSummary.from_json(last.state.summary)
        summarizer = self.summarizer or LlmSummarizer(callback_context.get_invocation_context().agent.canonical_model)
        try:
            text = await run_summarizer(summarizer, previous.text or None, last.state.merged_lines,
                                        goal=last.inputs.task.goal, max_tokens=self.profile.decay.summary_max_tokens)
            text = validate_summary(text, self.profile.decay.summary_max_tokens, self.counter)
            if text is None:
                raise ValueError("the summarizer returned an empty or unusable summary")
        except Exception as e:  # the extractive summary stays; the next manifest says why
            logger.warning("aether-context: LLM summary failed (%s); keeping the extractive summary", e, exc_info=True)
            slot.edge_flags = [*(slot.edge_flags or ()), f"summary_failed: {type(e).__name__}: {e}"[:300]]
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
            pack = recovery_pack(inputs, self.profile, window, error, counter=self.counter)
            apply_request(llm_request, pack.request, declared={t.name for t in inputs.request.tools},
                          added={RECALL_TOOL_NAME: self.recall_tool} if self._offers_recall(callback_context, llm_request, self.slot(callback_context)) else {})
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
            artifact_cache=self._artifact_cache, now=session_now(callback_context.session.events),
            use_memory=self.use_memory, use_artifacts=self.use_artifacts, providers=self.evidence_providers,
            extra_tools=(self.recall_tool,) if self._offers_recall(callback_context, llm_request, self.slot(callback_context)) else ())
        return replace(inputs, calibration=self.calibration.get(inputs.request.model, 1.0))

    def _offers_recall(self, ctx: CallbackContext, llm_request: LlmRequest, slot: "SessionSlot | None" = None) -> bool:
        """The recall tool is declared once the request cites an original it can read back (a compacted
        tool result, or a compaction block with URIs), and stays declared (no flapping of the tools)."""
        if not self.profile.offload.enabled or not ctx.state.get(URIS_STATE_KEY):
            return False
        if slot is not None and slot.state is not None and (RECALL_TOOL_NAME in slot.state.tool_names
                                                            or "artifact://" in slot.state.block_text):
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
        results as failures, citing the saved original. Never raises."""
        own = tool.name == RECALL_TOOL_NAME
        failed = False
        if not own and self.profile.failures.enabled and isinstance(result, (dict, str)):
            try:
                failed = is_error_result(result)
            except Exception:  # fail open: a result we cannot classify is simply not a recorded failure
                logger.error("aether-context: could not classify the result of %s", tool.name, exc_info=True)
        compacted = None
        if self.profile.variation.compact_json and isinstance(result, (dict, list)) and not own:
            compact = compact_json(result, self.counter)
            if self.counter.count_text(compact) < self.counter.count_text(render_payload(result)):
                compacted = {"result_compact_json": compact}  # faithful: aether_context.variation.expand_compact_json
        sent = compacted or result  # what the session will hold unless offload compacts it further
        offloaded = None
        if self.profile.offload.enabled and not own:
            try:
                offloaded = await offload_tool_result(
                    tool_name=tool.name, args=tool_args, result=sent, ctx=tool_context,
                    gateway=self.gateway, settings=self.profile.offload, counter=self.counter,
                    free_conversation_tokens=self.slot(tool_context).free_conversation)
                if offloaded is not None:
                    self._note_saving(tool_context, sent, offloaded)
            except Exception:  # fail open: the result goes on as it is
                logger.error("aether-context: offloading the result of %s failed; keeping it inline", tool.name, exc_info=True)
        if failed:
            uris = tool_context.state.get(URIS_STATE_KEY) or {}
            self.record_failure(tool, tool_args, tool_context, error_text(result),  # type: ignore[arg-type]
                                uri=uris.get(response_digest(sent)))
        return offloaded or compacted

    def _note_saving(self, ctx: ToolContext, original: object, compact: object) -> None:
        """Remember what an offload saved, so manifests can say what ADK would have sent without us."""
        saved = self.counter.count_text(render_payload(original)) - self.counter.count_text(render_payload(compact))
        if saved > 0:
            ctx.state[SAVED_STATE_KEY] = {**(ctx.state.get(SAVED_STATE_KEY) or {}), response_digest(compact): saved}

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
