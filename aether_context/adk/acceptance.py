"""Acceptance gating through ADK (`acceptance.gate`, off by default): the model's final answer is
checked against the open acceptance items (`loop.acceptance`); if some are unmet, one repair pass.

Why a repair call from `after_model_callback`: ADK's flow ends the invocation's loop at the first
final response (`base_llm_flow.run_async` breaks on `is_final_response()`) and no hook can make it
step again: `after_agent_callback` can only add one event, and a response rewritten into a function
call would be a turn the model never took. `after_model_callback` may replace the response, so the
gate asks the agent's model once more (as `recover` does for an over-long request) with the packed
request, the answer and a user turn naming the unmet items; that answer replaces the first. If it
calls tools, ADK runs them and the loop goes on. At most one repair per invocation; the check, the
unmet items and the repair are flags of the checked call's manifest and its event's metadata.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from ..loop.acceptance import judge_prompt, read_judge, repair_note, unmet_items
from ..pipeline.record import CallRecord
from .convert import agent_model, answer_text, final_response
from .task import task_from_state

if TYPE_CHECKING:
    from .packer import ContextPacker

logger = logging.getLogger("aether_context")

__all__ = ["AcceptanceGate"]

class AcceptanceGate:
    """Remembers each call's packed request (only with the gate on) and checks its final answer."""

    def __init__(self, packer: "ContextPacker"):
        self._packer = packer

    def remember(self, ctx: CallbackContext, llm_request: LlmRequest) -> None:
        """Keep the packed request of the call in flight in the caller's session slot (with the gate on)."""
        if self._packer.profile.acceptance.gate:
            self._packer.slot(ctx).request = llm_request

    async def check(self, ctx: CallbackContext, response: LlmResponse) -> LlmResponse | None:
        """The repair pass's answer to send instead of `response`, or None. Never raises."""
        if not self._packer.profile.acceptance.gate or response.partial:
            return None
        try:
            return await self._check(ctx, response)
        except Exception:
            logger.error("aether-context: the acceptance check failed; the answer stands", exc_info=True)
            return None

    async def _check(self, ctx: CallbackContext, response: LlmResponse) -> LlmResponse | None:
        settings = self._packer.profile.acceptance
        slot = self._packer.slot(ctx)
        request, slot.request = slot.request, None
        text = answer_text(response)
        task = task_from_state(ctx.state, self._packer.keys)
        items = [a for a in task.acceptance if a not in task.done]
        if request is None or text is None or not items:
            return None
        unmet, by, flags = unmet_items(text, items), "rules", []
        if settings.judge:
            try:
                unmet, by = await asyncio.wait_for(self._judge(ctx, request, text, items),
                                                   settings.judge_timeout_seconds), "judge"
            except Exception as e:  # fail open: the answer stands
                unmet, by = [], "none"
                flags.append(f"acceptance_judge_failed: {type(e).__name__}: {e}"[:300])
        record = {"items": len(items), "unmet": unmet, "by": by, "repair": False}
        flags.insert(0, f"acceptance: {len(items)} items, not checked (the judge failed)" if by == "none" else
                     f"acceptance: {len(items) - len(unmet)} of {len(items)} met ({by})"
                     + (f"; unmet: {' | '.join(unmet)}" if unmet else ""))
        repaired = None
        if unmet and slot.repaired == ctx.invocation_id:
            flags.append("acceptance_repair: none (one per invocation, already used)")
        elif unmet:
            slot.repaired = ctx.invocation_id
            repaired = await self._repair(ctx, request, response, unmet, flags)
            record["repair"] = repaired is not None
        await self._record(ctx, record, flags)
        return repaired

    async def _judge(self, ctx: CallbackContext, request: LlmRequest, text: str, items: list[str]) -> list[str]:
        ask = LlmRequest(model=request.model, contents=[types.Content(role="user", parts=[types.Part(
            text=judge_prompt(text, items))])])
        return read_judge(answer_text(await final_response(agent_model(ctx), ask)) or "", items)

    async def _repair(self, ctx: CallbackContext, request: LlmRequest, response: LlmResponse, unmet: list[str],
                      flags: list[str]) -> LlmResponse | None:
        note = types.Content(role="user", parts=[types.Part(text=repair_note(unmet))])
        again = request.model_copy(update={"contents": [*request.contents, response.content, note]})
        try:
            final = await final_response(agent_model(ctx), again)
        except Exception as e:  # fail open: the first answer stands
            flags.append(f"acceptance_repair_failed: {type(e).__name__}: {e}"[:300])
            return None
        after = answer_text(final)
        left = unmet_items(after, unmet) if after is not None else None
        flags.append("acceptance_repair: 1 pass; " + ("it called tools" if left is None else
                                                     f"{len(unmet) - len(left)} of {len(unmet)} now met"))
        return final

    async def _record(self, ctx: CallbackContext, record: dict, flags: list[str]) -> None:
        """The flags on this call's manifest (saved again), the record on its response event."""
        slot = self._packer.slot(ctx)
        if slot.shown is not None:
            slot.shown = {**slot.shown, "acceptance": record}
        pack = slot.last
        if pack is None:
            return
        manifest = pack.manifest.model_copy(update={"flags": [*pack.manifest.flags, *flags]})
        await self._packer.store.room()
        uri = self._packer.store.save(replace(pack, manifest=manifest))
        recent = self._packer.recent
        for i in range(len(recent) - 1, -1, -1):
            if recent[i].manifest.pack_id == manifest.pack_id:
                recent[i] = CallRecord(manifest, uri, recent[i].timings)
                break
