"""The packer's tool hooks: a tool result is classified (a failure is logged with its cause), made
compact (compact JSON, offload of a large result to a recallable original) and masked, off the loop.
"""

from __future__ import annotations

import logging
import time

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from ..compress import render_payload
from ..content import response_digest
from ..loop.failures import FailureLog, FailureRecord, error_text, is_error_result
from ..pipeline.render import masked_count
from ..redact import redact
from ..compress.compact_json import compact_json
from .fail_open import fails_open
from .offload import RECALL_TOOL_NAME, offload_tool_result
from .session_state import FAILURES_STATE_KEY, SAVED_STATE_KEY, URIS_STATE_KEY, add_note, read_pack
from .worker import repair_unicode

logger = logging.getLogger("aether_context")


class ToolHooks:
    """Mixed into `ContextPacker`: uses its profile, counter, gateway, slots and the pack thread."""

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
        result, repaired = await self._off_loop(repair_unicode, result)
        if repaired:
            add_note(tool_context.state, tool_context.agent_name, f"unicode_repaired: {tool.name}: {repaired}",
                     self.profile.redaction)
        failed, compacted = await self._off_loop(self._classify, tool.name, result, own)
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
                    records=self.records, redaction=self.profile.redaction, run=self._off_loop)
                if offloaded is not None:
                    await self._note_saving(tool_context, sent, offloaded)
                    self._note_masked(tool_context, tool.name, offloaded["summary"])
            except Exception as e:  # fail open: the result goes on whole, with no URI; the next manifest says why
                logger.error("aether-context: offloading the result of %s failed; keeping it inline", tool.name, exc_info=True)
                add_note(tool_context.state, tool_context.agent_name, f"offload_failed: {tool.name}: {type(e).__name__}: {e}",
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
            add_note(ctx.state, ctx.agent_name, f"redacted_in_offload: {tool_name}: {n}", self.profile.redaction)

    async def _note_saving(self, ctx: ToolContext, original: object, compact: object) -> None:
        """Remember what an offload saved, so manifests can say what ADK would have sent without us."""
        saved, key = await self._off_loop(self._saving, original, compact)
        if saved > 0:
            known = await self.records.get_or_empty(ctx.state, SAVED_STATE_KEY, {}, "offload savings")
            await self.records.set(ctx.state, SAVED_STATE_KEY, {**known, key: saved})

    def _saving(self, original: object, compact: object) -> tuple[int, str]:
        saved = self.counter.count_text(render_payload(original)) - self.counter.count_text(render_payload(compact))
        return saved, response_digest(compact)

