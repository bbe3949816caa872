"""The packer's model hooks: after the model answers (usage, calibration, the LLM summary) and when
it rejects a request as too long (recovery from the current invocation's own inputs).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse

from ..compress import validate_summary
from ..pipeline.build import ContextPack
from ..pipeline.record import CallRecord
from ..pipeline.decay import RunningSummary
from ..windows import context_window
from .fail_open import fails_open
from .convert import apply_request
from .offload import RECALL_TOOL_NAME
from .recovery import is_token_limit_error, recovery_pack
from .session_state import (CALIBRATION_STATE_KEY, add_note, own_state, read_calibration, read_pack,
                            write_calibration, write_summary)
from .slots import SessionSlot
from .summarizer import LlmSummarizer
from .telemetry import pack_metadata
from .worker import summarize


CALIBRATION_ALPHA = 0.5  # weight of the newest observation in the smoothed correction

logger = logging.getLogger("aether_context")


class ModelHooks:
    """Mixed into `ContextPacker`: uses its profile, counter, store, slots and the pack thread."""

    @fails_open
    async def after_model(self, callback_context: CallbackContext, llm_response: LlmResponse | None = None) -> None:
        """Learn from the model's reported usage, then refresh the running summary if due."""
        if llm_response is not None and getattr(llm_response, "partial", False):
            return  # a streamed chunk: the usage and the summary are the final response's business
        slot = self.slot(callback_context)
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
            add_note(callback_context.state, callback_context.agent_name, f"summary_timeout: no answer within {timeout}s",
                     self.profile.redaction)
            return
        except Exception as e:  # the extractive summary stays; the next manifest says why
            logger.warning("aether-context: LLM summary failed (%s); keeping the extractive summary", e, exc_info=True)
            add_note(callback_context.state, callback_context.agent_name, f"summary_failed: {type(e).__name__}: {e}",
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
            apply_request(llm_request, pack.request, declared={t.name for t in inputs.request.tools},
                          added={RECALL_TOOL_NAME: self.recall_tool} if recall else {})
        except Exception:
            logger.error("aether-context: recovery repack failed; the model's error stands", exc_info=True)
            return None
        manifest = pack.manifest.model_copy(update={"flags": [*pack.manifest.flags, f"recovery_after: {error}"[:300]]})
        pack = replace(pack, manifest=manifest)
        uri = self.store.save(pack)
        self.recent.append(CallRecord(manifest, uri))
        slot.shown = pack_metadata(manifest, uri)  # the retried request's pack is what its response shows
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
