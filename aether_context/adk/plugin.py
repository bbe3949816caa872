"""ADK integration: a plugin for `App(plugins=[...])` and a callback for `LlmAgent(before_model_callback=...)`.

Both drive the same `ContextPacker`, so an app can use either (not both on one agent). Each packed
call is shown on its model response event (`custom_metadata["aether_context"]`) and in traces (an
`aether_context.pack` span, and `aether.*` attributes on the span ADK has open for the call).

Usage::

    app = App(name="app", root_agent=agent, plugins=[ContextPackPlugin(profile="research")])
    # or, as callbacks on an agent and all its sub-agents:
    install_context_pack(agent, profile="default")

An agent on `Gemini(use_interactions_api=True)` keeps its history on the server: its requests are left as ADK
builds them (`interactions.py`).

Without arguments (e.g. `adk web --extra_plugins aether_context.ContextPackPlugin`) the store and the
profile come from AETHER_CONTEXT_STORE and AETHER_CONTEXT_PROFILE.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Awaitable, Callable, Optional

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from opentelemetry import trace

from .interactions import history_on_server
from .packer import CallRecord, ContextPacker
from .telemetry import annotate_response, annotate_span, pack_metadata, pack_span

logger = logging.getLogger("aether_context")

__all__ = ["ContextPackPlugin", "context_pack_callback", "install_context_pack", "STORE_ENV", "PROFILE_ENV"]

STORE_ENV = "AETHER_CONTEXT_STORE"
PROFILE_ENV = "AETHER_CONTEXT_PROFILE"
DURABLE_WAIT = 30.0  # seconds a durable call waits for the store at most, then goes on (fail open)
CLOSE_WAIT = 4.0  # ADK gives a plugin's close 5 s, then fails `Runner.close`; writes left go on, flushed at exit


def _packer(packer: ContextPacker | None, settings: dict[str, Any]) -> ContextPacker:
    """The given packer, or a new one; unset store/profile come from the environment (adk web, api_server)."""
    if packer is not None:
        return packer
    for key, env in (("store", STORE_ENV), ("profile", PROFILE_ENV)):
        if settings.get(key) is None and os.environ.get(env):
            settings[key] = os.environ[env]
    return ContextPacker(**settings)


class _Shown:
    """Shows each call's pack on its span and its response event.

    The latest pack's metadata lives in the caller's session slot (app, user, session, agent): the
    before and after hooks of one model call run in sequence for one agent of one session, so the
    slot pairs them, and it is released with the slot (one owner, one limit).
    """

    def __init__(self, packer: ContextPacker):
        self._packer = packer

    async def pack(self, ctx: CallbackContext, llm_request: LlmRequest) -> None:
        """Pack inside an `aether_context.pack` span, then show the pack (not when the server keeps the history)."""
        if history_on_server(ctx, llm_request):
            return
        outer = trace.get_current_span()
        with pack_span() as span:
            record = await self._packer.pack(ctx, llm_request)
            self._packed(ctx, record, (span, outer))
        self._packer.gate.remember(ctx, llm_request)

    def _packed(self, ctx: CallbackContext, record: CallRecord, spans: tuple) -> None:
        try:
            meta = pack_metadata(record.manifest, record.uri)
            annotate_span(meta, spans[0])
            annotate_span(meta, spans[1], event=True)
            self._packer.slot(ctx).shown = meta
        except Exception:  # showing the pack must never break the call
            logger.error("aether-context: could not annotate the model call", exc_info=True)

    def answered(self, ctx: CallbackContext, llm_response: LlmResponse) -> None:
        try:
            meta = self._packer.slot(ctx).shown
            if meta is not None:
                annotate_response(llm_response, meta)
                annotate_span({"response_annotated": True})
        except Exception:
            logger.error("aether-context: could not annotate the model response", exc_info=True)


class ContextPackPlugin(BasePlugin):
    """Rewrites every model request of the app into a budgeted, recorded Context Pack.

    `durable=True`: each model call waits, off the event loop, until the store holds its records (and
    whatever else was queued) before ADK records the model's answer, so a process killed with SIGKILL
    loses no call whose event is in the session. It costs the store's write time per call (the writes
    are in the background otherwise); a store that does not answer in `DURABLE_WAIT` s is left behind.
    """

    def __init__(self, *, name: str = "aether_context", packer: ContextPacker | None = None, durable: bool = False,
                 **settings: Any):
        super().__init__(name)
        self.packer = _packer(packer, settings)
        self._shown = _Shown(self.packer)
        self.durable = durable

    async def before_model_callback(self, *, callback_context: CallbackContext, llm_request: LlmRequest) -> Optional[LlmResponse]:
        await self._shown.pack(callback_context, llm_request)
        return None

    async def after_model_callback(self, *, callback_context: CallbackContext, llm_response: LlmResponse) -> Optional[LlmResponse]:
        repaired = await self.packer.gate.check(callback_context, llm_response)  # acceptance.gate: a repair pass
        self._shown.answered(callback_context, repaired or llm_response)
        await self.packer.after_model(callback_context, llm_response)
        if self.durable and self.packer.store.stats()["pending"]:
            await asyncio.to_thread(self.packer.store.flush, DURABLE_WAIT)  # a timeout is logged by flush
        return repaired

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
                                  result: dict) -> Optional[dict]:
        if history_on_server(tool_context):
            return None
        return await self.packer.after_tool(tool, tool_args, tool_context, result)

    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
                                     error: Exception) -> Optional[dict]:
        return await self.packer.on_tool_error(tool, tool_args, tool_context, error)

    async def on_model_error_callback(self, *, callback_context: CallbackContext, llm_request: LlmRequest,
                                      error: Exception) -> Optional[LlmResponse]:
        if history_on_server(callback_context, llm_request):
            return None
        return await self.packer.recover(callback_context, llm_request, error)

    async def close(self) -> None:
        """Wait for the store's queued writes, off the loop and within ADK's close timeout. Writes still queued
        then go on in the background and are flushed at interpreter exit (the log says how many)."""
        await asyncio.to_thread(self.packer.store.flush, CLOSE_WAIT)


def context_pack_callback(*, packer: ContextPacker | None = None, **settings: Any
                          ) -> Callable[..., Awaitable[Optional[LlmResponse]]]:
    """A `before_model_callback` for one `LlmAgent`, with the same engine as the plugin.

    `install_context_pack(agent)` sets all five hooks on an agent and its sub-agents. By hand,
    tool-result offload needs the tool hook too: pass `cb.after_tool` as `after_tool_callback`::

        cb = context_pack_callback(profile="default")
        agent = LlmAgent(..., before_model_callback=cb, after_model_callback=cb.after_model,
                         after_tool_callback=cb.after_tool, on_model_error_callback=cb.on_model_error,
                         on_tool_error_callback=cb.on_tool_error)
    """
    engine = _packer(packer, settings)
    shown = _Shown(engine)

    async def before_model(*, callback_context: CallbackContext, llm_request: LlmRequest) -> Optional[LlmResponse]:
        await shown.pack(callback_context, llm_request)
        return None

    async def after_tool(*, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any) -> Optional[dict]:
        if history_on_server(tool_context):
            return None
        return await engine.after_tool(tool, args, tool_context, tool_response)

    async def after_model(*, callback_context: CallbackContext, llm_response: LlmResponse) -> Optional[LlmResponse]:
        repaired = await engine.gate.check(callback_context, llm_response)
        shown.answered(callback_context, repaired or llm_response)
        await engine.after_model(callback_context, llm_response)
        return repaired

    async def on_model_error(*, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception) -> Optional[LlmResponse]:
        if history_on_server(callback_context, llm_request):
            return None
        return await engine.recover(callback_context, llm_request, error)

    async def on_tool_error(*, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception) -> Optional[dict]:
        return await engine.on_tool_error(tool, args, tool_context, error)

    before_model.packer = engine  # type: ignore[attr-defined]
    before_model.on_model_error = on_model_error  # type: ignore[attr-defined]
    before_model.after_model = after_model  # type: ignore[attr-defined]
    before_model.after_tool = after_tool  # type: ignore[attr-defined]
    before_model.on_tool_error = on_tool_error  # type: ignore[attr-defined]
    return before_model


_INSTALLED = "_aether_context_packer"  # set on each agent that has the hooks: the packer they use
_HOOKS = (("before_model_callback", None), ("after_model_callback", "after_model"),
          ("after_tool_callback", "after_tool"), ("on_model_error_callback", "on_model_error"),
          ("on_tool_error_callback", "on_tool_error"))


def install_context_pack(agent: Any, *, packer: ContextPacker | None = None, **settings: Any) -> ContextPacker:
    """Pack every model call of `agent` and its sub-agents (the callback variant in one call).

    Sets the five hooks of `context_pack_callback` on each `LlmAgent` of the tree, ahead of any
    callbacks already there (as a plugin would run). Agents done before keep their hooks, so calling
    it again (e.g. after adding a sub-agent) only adds the new ones, to the same packer. Returns the
    shared `ContextPacker` (e.g. for `packer.store.flush()`)::

        packer = install_context_pack(root_agent, profile="research", store=".aether/packs")
    """
    from google.adk.agents.llm_agent import LlmAgent

    engine = packer or getattr(agent, _INSTALLED, None)
    cb = None
    todo, seen = [agent], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(getattr(node, "sub_agents", None) or ())
        if not isinstance(node, LlmAgent) or getattr(node, _INSTALLED, None) is not None:
            continue
        if cb is None:  # one engine for the tree, built only when an agent needs it
            cb = context_pack_callback(packer=engine, **settings)
            engine = cb.packer  # type: ignore[attr-defined]
        for field, attr in _HOOKS:
            hook = cb if attr is None else getattr(cb, attr)
            existing = getattr(node, field)
            rest = [] if existing is None else list(existing) if isinstance(existing, list) else [existing]
            setattr(node, field, [hook, *rest] if rest else hook)
        object.__setattr__(node, _INSTALLED, engine)
    if engine is None:
        raise TypeError(f"install_context_pack: no LlmAgent in {type(agent).__name__} {getattr(agent, 'name', '')!r} "
                        "or its sub-agents; pass an LlmAgent (or a workflow agent with LlmAgent sub-agents)")
    return engine
