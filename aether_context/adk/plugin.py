"""ADK integration: a plugin for `App(plugins=[...])` and a callback for `LlmAgent(before_model_callback=...)`.

Both drive the same `ContextPacker`, so an app can use either (not both on one agent).

Usage::

    app = App(name="app", root_agent=agent, plugins=[ContextPackPlugin(profile="research")])
    # or, for a single agent:
    agent = LlmAgent(..., before_model_callback=context_pack_callback(profile="default"))
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext

from .packer import ContextPacker

__all__ = ["ContextPackPlugin", "context_pack_callback"]


class ContextPackPlugin(BasePlugin):
    """Rewrites every model request of the app into a budgeted, recorded Context Pack."""

    def __init__(self, *, name: str = "aether_context", packer: ContextPacker | None = None, **settings: Any):
        super().__init__(name)
        self.packer = packer or ContextPacker(**settings)

    async def before_model_callback(self, *, callback_context: CallbackContext, llm_request: LlmRequest) -> Optional[LlmResponse]:
        await self.packer.pack(callback_context, llm_request)
        return None

    async def after_model_callback(self, *, callback_context: CallbackContext, llm_response: LlmResponse) -> Optional[LlmResponse]:
        await self.packer.after_model(callback_context, llm_response)
        return None

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
                                  result: dict) -> Optional[dict]:
        return await self.packer.after_tool(tool, tool_args, tool_context, result)

    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
                                     error: Exception) -> Optional[dict]:
        return self.packer.on_tool_error(tool, tool_args, tool_context, error)

    async def on_model_error_callback(self, *, callback_context: CallbackContext, llm_request: LlmRequest,
                                      error: Exception) -> Optional[LlmResponse]:
        return await self.packer.recover(callback_context, llm_request, error)

    async def close(self) -> None:
        self.packer.store.flush()


def context_pack_callback(*, packer: ContextPacker | None = None, **settings: Any
                          ) -> Callable[..., Awaitable[Optional[LlmResponse]]]:
    """A `before_model_callback` for one `LlmAgent`, with the same engine as the plugin.

    Tool-result offload needs the tool hook too: pass `cb.after_tool` as `after_tool_callback`::

        cb = context_pack_callback(profile="default")
        agent = LlmAgent(..., before_model_callback=cb, after_model_callback=cb.after_model,
                         after_tool_callback=cb.after_tool, on_model_error_callback=cb.on_model_error,
                         on_tool_error_callback=cb.on_tool_error)
    """
    engine = packer or ContextPacker(**settings)

    async def before_model(*, callback_context: CallbackContext, llm_request: LlmRequest) -> Optional[LlmResponse]:
        await engine.pack(callback_context, llm_request)
        return None

    async def after_tool(*, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any) -> Optional[dict]:
        return await engine.after_tool(tool, args, tool_context, tool_response)

    async def after_model(*, callback_context: CallbackContext, llm_response: LlmResponse) -> Optional[LlmResponse]:
        await engine.after_model(callback_context, llm_response)
        return None

    async def on_model_error(*, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception) -> Optional[LlmResponse]:
        return await engine.recover(callback_context, llm_request, error)

    async def on_tool_error(*, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception) -> Optional[dict]:
        return engine.on_tool_error(tool, args, tool_context, error)

    before_model.packer = engine  # type: ignore[attr-defined]
    before_model.on_model_error = on_model_error  # type: ignore[attr-defined]
    before_model.after_model = after_model  # type: ignore[attr-defined]
    before_model.after_tool = after_tool  # type: ignore[attr-defined]
    before_model.on_tool_error = on_tool_error  # type: ignore[attr-defined]
    return before_model
