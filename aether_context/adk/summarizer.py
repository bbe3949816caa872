"""An LLM summarizer for the running summary, through an ADK model, with a handoff prompt.

It refines the extractive summary after a model call: the pack already holds a deterministic
extractive summary, so a failed, empty or garbled LLM answer changes nothing but a flag in the
next manifest. The summarizer's call goes straight to the model (it bypasses plugins), like ADK's
own `LlmEventSummarizer`.
"""

from __future__ import annotations

from typing import Sequence

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.registry import LLMRegistry
from google.genai import types

from ..compress import HANDOFF_PROMPT, build_handoff_request
from ..compress.jsonparse import parse_json_loose
from .convert import answer_text, final_response

__all__ = ["LlmSummarizer"]


class LlmSummarizer:
    """`Summarizer` backed by an ADK model (an instance or a model name the registry resolves)."""

    def __init__(self, model: "BaseLlm | str"):
        self.model = LLMRegistry.new_llm(model) if isinstance(model, str) else model

    async def summarize(self, previous_summary: str | None, new_items: Sequence[str], *, goal: str, max_tokens: int) -> str:
        request = LlmRequest(
            model=self.model.model,
            contents=[types.Content(role="user", parts=[types.Part(text=build_handoff_request(previous_summary, list(new_items), goal, max_tokens))])],
            config=types.GenerateContentConfig(system_instruction=HANDOFF_PROMPT, max_output_tokens=max_tokens * 2),
        )
        return _unwrap(answer_text(await final_response(self.model, request)) or "")


def _unwrap(text: str) -> str:
    """Models sometimes answer `{"summary": "..."}` (often fenced) instead of plain text."""
    stripped = text.strip()
    if not stripped.startswith(("{", "```")):
        return text
    try:
        value = parse_json_loose(stripped)
    except ValueError:
        return text
    if isinstance(value, dict):
        for key in ("summary", "text", "handoff"):
            if isinstance(value.get(key), str):
                return value[key]
    return text
